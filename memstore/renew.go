package memstore

import (
	"context"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// Compile-time checks that the stores implement the heartbeat contracts.
var (
	_ ledger.Renewer      = (*Store)(nil)
	_ ledger.AckProcessor = (*Store)(nil)
	_ ledger.ClaimRenewer = (*Outbox)(nil)
)

// RenewLease moves the expiry of the lease in force to now+duration,
// keeping its token and sequence number (storekit.Delivery.Renew). The
// delivery's AvailableAt moves with the expiry, and Store.replace moves it
// in the offer and lease-expiry indexes, so Lease does not hand it to
// anyone else before the new expiry and Expire does not sweep it before
// then. Outcomes: Applied, NotFound, Ended, LeaseLost, WrongState (not
// Leased, e.g. acknowledged), LeaseExpired (now at or after the expiry: a
// lease that ran out is not revived). A call that does not apply writes
// nothing. Errors: ErrInvalid, ctx.Err().
func (s *Store) RenewLease(ctx context.Context, lease ledger.Lease, now time.Time, duration time.Duration) (ledger.DeliveryResult, error) {
	if err := begin(ctx, storekit.ValidateRenewLease(lease, now, duration)); err != nil {
		return ledger.DeliveryResult{}, err
	}
	now = ledger.Normalize(now)
	return s.apply(lease.DeliveryID, ledger.OpRenewLease, func(d ledger.Delivery) (ledger.Delivery, ledger.Outcome) {
		return storekit.Delivery(d).Renew(lease, now, duration)
	}), nil
}

// RenewClaim moves the expiry of the claim in force to now+duration,
// keeping its token and sequence number (storekit.OutboxEntry.RenewClaim).
// Unlike the completions it is stamped with the caller's now, not the
// clock option, because the decision (is the claim still in force?) is
// made at that now. Outcomes: Applied, NotFound, Ended, LeaseLost,
// LeaseExpired. A call that does not apply writes nothing. Errors:
// ErrInvalid, ctx.Err().
func (o *Outbox) RenewClaim(ctx context.Context, claim ledger.Claim, now time.Time, duration time.Duration) (ledger.OutboxResult, error) {
	if err := begin(ctx, storekit.ValidateRenewClaim(claim, now, duration)); err != nil {
		return ledger.OutboxResult{}, err
	}
	now = ledger.Normalize(now)
	o.mu.Lock()
	p, ok := o.entries[claim.EntryID]
	if !ok {
		o.mu.Unlock()
		return ledger.OutboxResult{Outcome: ledger.OutcomeNotFound}, nil
	}
	e, out := storekit.OutboxEntry(p.OutboxEntry).RenewClaim(claim, now, duration)
	if out == ledger.OutcomeApplied {
		// The claim's expiry keys the index of claims (for OutboxStats);
		// replace moves the entry in it.
		o.replace(p, e, change{op: ledger.OpRenewClaim, worker: p.Claim.Worker})
	} else {
		e = p.OutboxEntry // a call that does not apply writes, and changes, nothing
	}
	o.mu.Unlock()
	return ledger.OutboxResult{Outcome: out, Entry: handOutEntry(e)}, nil
}
