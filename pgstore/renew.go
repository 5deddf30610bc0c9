package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// Compile-time checks that the stores implement the heartbeat contracts.
var (
	_ ledger.Renewer      = (*Store)(nil)
	_ ledger.ClaimRenewer = (*Outbox)(nil)
)

// RenewLease moves the expiry of the lease in force to now+duration,
// keeping its token and sequence number (see ledger.Renewer and
// storekit.Delivery.Renew). It is one transaction on the locked row, like
// every single-delivery transition; available_at moves with
// lease_expires_at, so Lease does not hand the delivery to anyone else
// before the new expiry and Expire does not sweep it before then.
// Outcomes: Applied, NotFound, Ended, LeaseLost, WrongState, LeaseExpired.
// A call that does not apply writes nothing.
func (s *Store) RenewLease(ctx context.Context, lease ledger.Lease, now time.Time, duration time.Duration) (ledger.DeliveryResult, error) {
	if err := s.check(ctx, storekit.ValidateRenewLease(lease, now, duration)); err != nil {
		return ledger.DeliveryResult{}, err
	}
	now, err := s.decisionTime(ctx, "renew lease", now)
	if err != nil {
		return ledger.DeliveryResult{}, err
	}
	now = ledger.Normalize(now)
	return deliveryOut(s.transition(ctx, "renew lease", how{op: ledger.OpRenewLease, actor: lease.Owner.String()}, lease.DeliveryID, func(_ pgx.Tx, d ledger.Delivery) (ledger.Delivery, ledger.Outcome, error) {
		d, o := storekit.Delivery(d).Renew(lease, now, duration)
		return d, o, nil
	}))
}

// RenewClaim moves the expiry of the claim in force to now+duration,
// keeping its token and sequence number (see ledger.ClaimRenewer and
// storekit.OutboxEntry.RenewClaim). Unlike the claim completions it is
// stamped with the caller's now, not the clock option: the decision (is
// the claim still in force?) is made at that now, and a store never reads
// its clock in a call that carries one. Outcomes: Applied, NotFound,
// Ended, LeaseLost, LeaseExpired. A call that does not apply writes
// nothing.
func (o *Outbox) RenewClaim(ctx context.Context, claim ledger.Claim, now time.Time, duration time.Duration) (ledger.OutboxResult, error) {
	s := o.s
	if err := s.check(ctx, storekit.ValidateRenewClaim(claim, now, duration)); err != nil {
		return ledger.OutboxResult{}, err
	}
	now, err := s.decisionTime(ctx, "renew claim", now)
	if err != nil {
		return ledger.OutboxResult{}, err
	}
	now = ledger.Normalize(now)
	var res ledger.OutboxResult
	err = s.inTx(ctx, "renew claim", func(tx pgx.Tx) (bool, error) {
		res = ledger.OutboxResult{}
		old, err := scanEntry(tx.QueryRow(ctx, s.q.lockEntry, string(claim.EntryID)))
		if noRows(err) {
			res.Outcome = ledger.OutcomeNotFound
			return false, nil
		}
		if err != nil {
			return false, err
		}
		e, outcome := storekit.OutboxEntry(old).RenewClaim(claim, now, duration)
		if outcome != ledger.OutcomeApplied {
			res = ledger.OutboxResult{Outcome: outcome, Entry: old}
			return false, nil
		}
		res = ledger.OutboxResult{Outcome: outcome, Entry: e}
		return true, s.writeEntry(ctx, tx, entryChangeOf(how{op: ledger.OpRenewClaim, actor: claim.Worker}, old, e))
	})
	if err != nil {
		return ledger.OutboxResult{}, err
	}
	return outboxOut(res, nil)
}
