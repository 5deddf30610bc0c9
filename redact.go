package ledger

// Tokens are capabilities (see Token): a store keeps them to check the
// calls made under a lease or claim, and hands every record out through
// Redacted, so that reading a record never gives anyone the power to act
// as its holder.

// Redacted returns d as a store hands it to a reader: the same record
// without the token of its lease in force or of its ended lease. The
// lease's holder, sequence number and times stay. d itself is unchanged:
// the lease and ended lease are copied before their tokens are cleared,
// so a store may redact a record whose pointers it still keeps. Other
// fields (the payload among them) are shared with d, not copied; use
// Clone for a deep copy.
func (d Delivery) Redacted() Delivery {
	if d.Lease != nil && d.Lease.Token != "" {
		l := *d.Lease
		l.Token = ""
		d.Lease = &l
	}
	d.EndedLease = d.EndedLease.redacted()
	return d
}

// Redacted returns e as a store hands it to a reader: without the token of
// its claim in force or of its ended claim, as Delivery.Redacted.
func (e OutboxEntry) Redacted() OutboxEntry {
	if e.Claim != nil && e.Claim.Token != "" {
		c := *e.Claim
		c.Token = ""
		e.Claim = &c
	}
	e.EndedClaim = e.EndedClaim.redacted()
	return e
}

// redacted returns g without its token, as a copy; nil for nil.
func (g *EndedGrant) redacted() *EndedGrant {
	if g == nil || g.Token == "" {
		return g
	}
	c := *g
	c.Token = ""
	return &c
}
