package ledgertest_test

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/memstore"
)

// This file holds deliberately broken stores: memstore with one guarantee
// taken away by a wrapper. The suite must fail against each of them (see
// selftest_test.go).

// doubleGrantOutbox hands every claim out twice: a claim call returns its
// own grants and also the grants of the call before it, which are still in
// force and belong to another caller.
type doubleGrantOutbox struct {
	*memstore.Outbox
	mu   sync.Mutex
	last []ledger.ClaimedEntry
}

func (o *doubleGrantOutbox) again(got []ledger.ClaimedEntry, err error) ([]ledger.ClaimedEntry, error) {
	if err != nil {
		return got, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	prev := o.last
	o.last = got
	return append(got, prev...), nil
}

func (o *doubleGrantOutbox) ClaimPending(ctx context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	return o.again(o.Outbox.ClaimPending(ctx, req))
}

func (o *doubleGrantOutbox) ClaimRetryReady(ctx context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	return o.again(o.Outbox.ClaimRetryReady(ctx, req))
}

// forgetAttemptOutbox does not count the attempts of claims: every entry it
// returns from a claim or a read has one attempt less per claim granted.
type forgetAttemptOutbox struct {
	*memstore.Outbox
}

func forgetClaimAttempts(e ledger.OutboxEntry) ledger.OutboxEntry {
	e.Attempts = max(0, e.Attempts-int(e.ClaimSeq))
	return e
}

func (o forgetAttemptOutbox) forget(got []ledger.ClaimedEntry, err error) ([]ledger.ClaimedEntry, error) {
	for i := range got {
		got[i].Entry = forgetClaimAttempts(got[i].Entry)
	}
	return got, err
}

func (o forgetAttemptOutbox) ClaimPending(ctx context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	return o.forget(o.Outbox.ClaimPending(ctx, req))
}

func (o forgetAttemptOutbox) ClaimRetryReady(ctx context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	return o.forget(o.Outbox.ClaimRetryReady(ctx, req))
}

func (o forgetAttemptOutbox) FindByID(ctx context.Context, id ledger.OutboxEntryID) (ledger.OutboxEntry, error) {
	e, err := o.Outbox.FindByID(ctx, id)
	return forgetClaimAttempts(e), err
}

// staleTokenOutbox accepts any claim on an entry: it swaps the caller's
// token and sequence for the ones in force before it completes.
type staleTokenOutbox struct {
	*memstore.Outbox
}

func (o staleTokenOutbox) current(ctx context.Context, c ledger.Claim) ledger.Claim {
	if e, err := o.Outbox.FindByID(ctx, c.EntryID); err == nil && e.Claim != nil {
		c.Token, c.Seq = e.Claim.Token, e.Claim.Seq
	}
	return c
}

func (o staleTokenOutbox) MarkClaimDelivered(ctx context.Context, c ledger.Claim, r ledger.EmissionResult) (ledger.OutboxResult, error) {
	return o.Outbox.MarkClaimDelivered(ctx, o.current(ctx, c), r)
}

func (o staleTokenOutbox) MarkClaimFailed(ctx context.Context, c ledger.Claim, e ledger.EmissionError, next *time.Time) (ledger.OutboxResult, error) {
	return o.Outbox.MarkClaimFailed(ctx, o.current(ctx, c), e, next)
}

func (o staleTokenOutbox) MarkClaimDeadLettered(ctx context.Context, c ledger.Claim, e ledger.EmissionError, reason string) (ledger.OutboxResult, error) {
	return o.Outbox.MarkClaimDeadLettered(ctx, o.current(ctx, c), e, reason)
}

func (o staleTokenOutbox) ReleaseClaim(ctx context.Context, c ledger.Claim, reason string) (ledger.OutboxResult, error) {
	return o.Outbox.ReleaseClaim(ctx, o.current(ctx, c), reason)
}

func (o staleTokenOutbox) SaveClaim(ctx context.Context, c ledger.Claim, e ledger.OutboxEntry) (ledger.OutboxResult, error) {
	return o.Outbox.SaveClaim(ctx, o.current(ctx, c), e)
}

// doubleGrantLedger hands every lease out twice: a Lease call returns its
// own grants and also the grants of the call before it.
type doubleGrantLedger struct {
	*memstore.Store
	mu   sync.Mutex
	last []ledger.LeasedDelivery
}

func (l *doubleGrantLedger) Lease(ctx context.Context, f ledger.LeaseFilter, o ledger.Owner, now time.Time, d time.Duration, limit int) (ledger.LeaseResult, error) {
	res, err := l.Store.Lease(ctx, f, o, now, d, limit)
	if err != nil {
		return res, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	prev := l.last
	l.last = res.Leased
	res.Leased = append(res.Leased, prev...)
	return res, nil
}

// forgetAttemptLedger does not count the attempts of leases: every delivery
// it returns from a lease or a read has one attempt less per grant.
type forgetAttemptLedger struct {
	*memstore.Store
}

func forgetLeaseAttempts(d ledger.Delivery) ledger.Delivery {
	d.Attempts = max(0, d.Attempts-int(d.LeaseSeq))
	return d
}

func (l forgetAttemptLedger) Lease(ctx context.Context, f ledger.LeaseFilter, o ledger.Owner, now time.Time, d time.Duration, limit int) (ledger.LeaseResult, error) {
	res, err := l.Store.Lease(ctx, f, o, now, d, limit)
	for i := range res.Leased {
		res.Leased[i].Delivery = forgetLeaseAttempts(res.Leased[i].Delivery)
	}
	return res, err
}

func (l forgetAttemptLedger) Get(ctx context.Context, id ledger.DeliveryID) (ledger.Delivery, error) {
	d, err := l.Store.Get(ctx, id)
	return forgetLeaseAttempts(d), err
}

// staleTokenLedger accepts any lease on a delivery: it swaps the caller's
// token and sequence for the ones in force before it acts.
type staleTokenLedger struct {
	*memstore.Store
}

func (l staleTokenLedger) current(ctx context.Context, lease ledger.Lease) ledger.Lease {
	if d, err := l.Store.Get(ctx, lease.DeliveryID); err == nil && d.Lease != nil {
		lease.Token, lease.Seq = d.Lease.Token, d.Lease.Seq
	}
	return lease
}

func (l staleTokenLedger) Acknowledge(ctx context.Context, lease ledger.Lease, observation string, now time.Time) (ledger.DeliveryResult, error) {
	return l.Store.Acknowledge(ctx, l.current(ctx, lease), observation, now)
}

func (l staleTokenLedger) MarkFailed(ctx context.Context, lease ledger.Lease, reason ledger.FailureReason, now time.Time) (ledger.DeliveryResult, error) {
	return l.Store.MarkFailed(ctx, l.current(ctx, lease), reason, now)
}

func (l staleTokenLedger) Release(ctx context.Context, lease ledger.Lease, now time.Time) (ledger.DeliveryResult, error) {
	return l.Store.Release(ctx, l.current(ctx, lease), now)
}

// metadataContentLedger takes metadata for enqueue content: an enqueue of
// an existing ID with other metadata answers Conflict.
type metadataContentLedger struct {
	*memstore.Store
}

func (l metadataContentLedger) Enqueue(ctx context.Context, r ledger.EnqueueRequest, now time.Time) (ledger.DeliveryResult, error) {
	res, err := l.Store.Enqueue(ctx, r, now)
	if err == nil && res.Outcome == ledger.OutcomeRepeated && !maps.Equal(res.Delivery.Metadata, r.Metadata) {
		res.Outcome = ledger.OutcomeConflict
	}
	return res, err
}

// forgetMetadataOutbox loses the metadata of the entries its claims
// return.
type forgetMetadataOutbox struct {
	*memstore.Outbox
}

func (o forgetMetadataOutbox) forget(got []ledger.ClaimedEntry, err error) ([]ledger.ClaimedEntry, error) {
	for i := range got {
		got[i].Entry.Envelope.Metadata = nil
	}
	return got, err
}

func (o forgetMetadataOutbox) ClaimPending(ctx context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	return o.forget(o.Outbox.ClaimPending(ctx, req))
}

func (o forgetMetadataOutbox) ClaimRetryReady(ctx context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	return o.forget(o.Outbox.ClaimRetryReady(ctx, req))
}
