package pgstore_test

import (
	"errors"

	"github.com/leaseledger/ledger"
)

// This file holds what the differential tests (the scripted one and the
// random one) share: turning the two stores' answers into values that
// compare equal when the stores agree. Tokens are random per store, so
// they are replaced: by "" (mask) or by a label naming the grant they
// belong to (maskWith), which also catches a record holding the wrong
// grant's token.

// mask blanks the random tokens in a result, so that the two stores'
// answers compare equal when everything else is.
func mask(v any) any { return maskWith(v, func(ledger.Token) ledger.Token { return "" }) }

// maskWith replaces every token in a result by tok(token). Types without
// tokens come back as they are.
func maskWith(v any, tok func(ledger.Token) ledger.Token) any {
	switch r := v.(type) {
	case ledger.DeliveryResult:
		r.Delivery = maskDelivery(r.Delivery, tok)
		return r
	case []ledger.DeliveryResult:
		out := make([]ledger.DeliveryResult, len(r))
		for i := range r {
			out[i] = maskWith(r[i], tok).(ledger.DeliveryResult)
		}
		return out
	case ledger.Delivery:
		return maskDelivery(r, tok)
	case ledger.LeaseResult:
		var out []ledger.LeasedDelivery
		for _, ld := range r.Leased {
			ld.Lease.Token = tok(ld.Lease.Token)
			out = append(out, ledger.LeasedDelivery{Lease: ld.Lease, Delivery: maskDelivery(ld.Delivery, tok)})
		}
		r.Leased = out
		return r
	case []ledger.Page:
		out := make([]ledger.Page, len(r))
		for i, p := range r {
			out[i].Next = p.Next
			for _, d := range p.Deliveries {
				out[i].Deliveries = append(out[i].Deliveries, maskDelivery(d, tok))
			}
		}
		return out
	case ledger.OutboxResult:
		r.Entry = maskEntry(r.Entry, tok)
		return r
	case []ledger.OutboxResult:
		out := make([]ledger.OutboxResult, len(r))
		for i := range r {
			out[i] = maskWith(r[i], tok).(ledger.OutboxResult)
		}
		return out
	case ledger.OutboxEntry:
		return maskEntry(r, tok)
	case []ledger.OutboxEntry:
		var out []ledger.OutboxEntry
		for _, e := range r {
			out = append(out, maskEntry(e, tok))
		}
		return out
	case ledger.RedriveResult:
		r.Original, r.Redriven = maskDelivery(r.Original, tok), maskDelivery(r.Redriven, tok)
		return r
	case ledger.RedriveBatch:
		out := make([]ledger.RedriveResult, len(r.Results))
		for i := range r.Results {
			out[i] = maskWith(r.Results[i], tok).(ledger.RedriveResult)
		}
		r.Results = out
		return r
	case ledger.RedriveEntryResult:
		r.Original, r.Redriven = maskEntry(r.Original, tok), maskEntry(r.Redriven, tok)
		return r
	case ledger.RedriveEntryBatch:
		out := make([]ledger.RedriveEntryResult, len(r.Results))
		for i := range r.Results {
			out[i] = maskWith(r.Results[i], tok).(ledger.RedriveEntryResult)
		}
		r.Results = out
		return r
	case []ledger.ClaimedEntry:
		var out []ledger.ClaimedEntry
		for _, c := range r {
			c.Claim.Token = tok(c.Claim.Token)
			out = append(out, ledger.ClaimedEntry{Claim: c.Claim, Entry: maskEntry(c.Entry, tok)})
		}
		return out
	}
	return v
}

func maskDelivery(d ledger.Delivery, tok func(ledger.Token) ledger.Token) ledger.Delivery {
	d = d.Clone()
	if d.Lease != nil {
		d.Lease.Token = tok(d.Lease.Token)
	}
	if d.EndedLease != nil {
		d.EndedLease.Token = tok(d.EndedLease.Token)
	}
	return d
}

func maskEntry(e ledger.OutboxEntry, tok func(ledger.Token) ledger.Token) ledger.OutboxEntry {
	e = e.Clone()
	if e.Claim != nil {
		e.Claim.Token = tok(e.Claim.Token)
	}
	if e.EndedClaim != nil {
		e.EndedClaim.Token = tok(e.EndedClaim.Token)
	}
	return e
}

// errClass names what kind of error err is, for comparing the two stores'
// errors: "" for nil, the sentinel (with the field, for ErrInvalid) for a
// broken call, and "store failure: ..." for anything else, which the
// differential tests never expect.
func errClass(err error) string {
	var inv *ledger.InvalidError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &inv):
		return "ErrInvalid(" + inv.Field + ")"
	case errors.Is(err, ledger.ErrInvalid):
		return "ErrInvalid"
	case errors.Is(err, ledger.ErrNotFound):
		return "ErrNotFound"
	case errors.Is(err, ledger.ErrConflict):
		return "ErrConflict"
	}
	return "store failure: " + err.Error()
}
