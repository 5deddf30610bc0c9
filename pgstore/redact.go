package pgstore

import "github.com/leaseledger/ledger"

// Tokens stay in the database: the state machine compares them there
// (and in Go, on the rows read under their locks), but a record leaves
// the store only without them (ledger.Delivery.Redacted), so that anyone
// who can read the ledger cannot act as a holder. Only the Lease or Claim
// a grant returns to its grantee carries a token. Every exported method
// that returns records passes them through one of these functions (or
// Redacted) at its return, or at the return of the helper it ends in
// (base, find and claim in claim.go).

func deliveryOut(r ledger.DeliveryResult, err error) (ledger.DeliveryResult, error) {
	r.Delivery = r.Delivery.Redacted()
	return r, err
}

func deliveriesOut(rs []ledger.DeliveryResult, err error) ([]ledger.DeliveryResult, error) {
	for i := range rs {
		rs[i].Delivery = rs[i].Delivery.Redacted()
	}
	return rs, err
}

func leaseOut(r ledger.LeaseResult, err error) (ledger.LeaseResult, error) {
	for i := range r.Leased {
		r.Leased[i].Delivery = r.Leased[i].Delivery.Redacted() // Leased[i].Lease keeps its token
	}
	return r, err
}

func entryOut(e ledger.OutboxEntry, err error) (ledger.OutboxEntry, error) {
	return e.Redacted(), err
}

func entriesOut(es []ledger.OutboxEntry, err error) ([]ledger.OutboxEntry, error) {
	for i := range es {
		es[i] = es[i].Redacted()
	}
	return es, err
}

func outboxOut(r ledger.OutboxResult, err error) (ledger.OutboxResult, error) {
	r.Entry = r.Entry.Redacted()
	return r, err
}

func outboxResultsOut(rs []ledger.OutboxResult, err error) ([]ledger.OutboxResult, error) {
	for i := range rs {
		rs[i].Entry = rs[i].Entry.Redacted()
	}
	return rs, err
}

func claimedOut(cs []ledger.ClaimedEntry, err error) ([]ledger.ClaimedEntry, error) {
	for i := range cs {
		cs[i].Entry = cs[i].Entry.Redacted() // cs[i].Claim keeps its token
	}
	return cs, err
}
