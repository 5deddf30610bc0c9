package chaos

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaseledger/ledger"
)

// This file records the calls the dispatch loops make, in the history
// format of the workers (log_test.go), so that the checker reads a run of
// real Dispatchers and Workers as it reads one of the test's own workers.
// The wrappers show the loops only the base contracts: without
// ledger.AckProcessor, ledger.DueClaimer, the renewers or ledger.Elector
// every call the loops make is one the checker knows (acknowledge, then
// process; claim retry-ready, then pending; sweep with Expire).

// recorder logs the calls of one loop (its Proc) to the run's sink.
type recorder struct {
	proc     string
	n        atomic.Int64
	sink     sink
	targets  *targetBook
	problems *problemLog
	// completed, when set, is told of every call that returned.
	completed func(c *call)
}

// targetBook remembers each leased delivery's target, which the checker
// needs for a MarkProcessed (whose arguments do not name it) to check
// fences per target.
type targetBook struct {
	mu sync.Mutex
	m  map[string]string
}

func (b *targetBook) set(id ledger.DeliveryID, t ledger.Target) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.m[string(id)] = string(t)
}

func (b *targetBook) get(id ledger.DeliveryID) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.m[string(id)]
}

// do logs c around run, classifying its end as worker.do does.
func (rc *recorder) do(c *call, run func() error) error {
	c.Proc, c.N, c.Status = rc.proc, rc.n.Add(1), statusInvoke
	c.Invoked = time.Now().UnixNano()
	err := run()
	c.Returned = time.Now().UnixNano()
	switch {
	case err != nil:
		c.Err, c.Status = err.Error(), classify(err)
		if errors.Is(err, ledger.ErrInvalid) {
			rc.problems.add("%s: %s %s: %v", rc.proc, c.Kind, c.Fn, err)
		}
	case c.Outcome == "" || c.Outcome == ledger.OutcomeApplied:
		c.Status = statusOK
	default:
		c.Status = statusFail
	}
	if err := rc.sink.complete(c); err != nil {
		rc.problems.add("%s: log: %v", rc.proc, err)
	}
	if rc.completed != nil {
		rc.completed(c)
	}
	return err
}

// unexpected reports a write the checker cannot account for: the loops
// must not make one.
func (rc *recorder) unexpected(method string) {
	rc.problems.add("%s called %s, which the history cannot record", rc.proc, method)
}

// recordedDeliveries is the delivery ledger as one loop sees it.
type recordedDeliveries struct {
	deliveryStore
	rc *recorder
}

func (s *recordedDeliveries) EnqueueBatch(ctx context.Context, reqs []ledger.EnqueueRequest, now time.Time) ([]ledger.DeliveryResult, error) {
	c := &call{Fn: fnEnqueue, Kind: kindDelivery, Now: now}
	for _, r := range reqs {
		c.IDs = append(c.IDs, string(r.ID))
	}
	var rs []ledger.DeliveryResult
	err := s.rc.do(c, func() error {
		var err error
		rs, err = s.deliveryStore.EnqueueBatch(ctx, reqs, now)
		for _, r := range rs {
			c.Outcomes = append(c.Outcomes, r.Outcome)
		}
		return err
	})
	return rs, err
}

func (s *recordedDeliveries) Lease(ctx context.Context, filter ledger.LeaseFilter, owner ledger.Owner, now time.Time, d time.Duration, limit int) (ledger.LeaseResult, error) {
	c := &call{Fn: fnGrant, Kind: kindDelivery, Owner: owner, Now: now}
	var res ledger.LeaseResult
	err := s.rc.do(c, func() error {
		var err error
		res, err = s.deliveryStore.Lease(ctx, filter, owner, now, d, limit)
		for _, ld := range res.Leased {
			s.rc.targets.set(ld.Delivery.ID, ld.Delivery.Target)
			c.Grants = append(c.Grants, grantOfLease(ld.Lease, ld.Delivery.Version))
		}
		for _, id := range res.Reclaimed {
			c.Reclaimed = append(c.Reclaimed, string(id))
		}
		return err
	})
	return res, err
}

// under makes a call under lease and fills in its result.
func (s *recordedDeliveries) under(f fn, l ledger.Lease, now time.Time, permanent bool, run func() (ledger.DeliveryResult, error)) (ledger.DeliveryResult, error) {
	g := grantOfLease(l, 0)
	c := &call{Fn: f, Kind: kindDelivery, Owner: l.Owner, Now: now, Under: &g, Permanent: permanent}
	var res ledger.DeliveryResult
	err := s.rc.do(c, func() error {
		var err error
		res, err = run()
		c.Outcome, c.Version = res.Outcome, res.Delivery.Version
		if res.Applied() && f != fnAck {
			c.EndAt = endStamp(res.Delivery)
		}
		return err
	})
	return res, err
}

func (s *recordedDeliveries) Acknowledge(ctx context.Context, l ledger.Lease, observation string, now time.Time) (ledger.DeliveryResult, error) {
	return s.under(fnAck, l, now, false, func() (ledger.DeliveryResult, error) {
		return s.deliveryStore.Acknowledge(ctx, l, observation, now)
	})
}

func (s *recordedDeliveries) MarkFailed(ctx context.Context, l ledger.Lease, reason ledger.FailureReason, now time.Time) (ledger.DeliveryResult, error) {
	return s.under(fnFail, l, now, reason.Permanent, func() (ledger.DeliveryResult, error) {
		return s.deliveryStore.MarkFailed(ctx, l, reason, now)
	})
}

func (s *recordedDeliveries) Release(ctx context.Context, l ledger.Lease, now time.Time) (ledger.DeliveryResult, error) {
	return s.under(fnRelease, l, now, false, func() (ledger.DeliveryResult, error) {
		return s.deliveryStore.Release(ctx, l, now)
	})
}

func (s *recordedDeliveries) MarkProcessed(ctx context.Context, id ledger.DeliveryID, owner ledger.Owner, fence *ledger.Fence, action ledger.ActionRef, now time.Time) (ledger.DeliveryResult, error) {
	c := &call{Fn: fnProcess, Kind: kindDelivery, Owner: owner, Now: now, Item: string(id), Target: s.rc.targets.get(id), Action: string(action)}
	if fence != nil {
		f := int64(*fence)
		c.Fence = &f
	}
	var res ledger.DeliveryResult
	err := s.rc.do(c, func() error {
		var err error
		res, err = s.deliveryStore.MarkProcessed(ctx, id, owner, fence, action, now)
		c.Outcome, c.Version = res.Outcome, res.Delivery.Version
		if res.Applied() {
			c.EndAt = endStamp(res.Delivery)
		}
		return err
	})
	return res, err
}

func (s *recordedDeliveries) Expire(ctx context.Context, now time.Time) (ledger.SweepResult, error) {
	c := &call{Fn: fnExpire, Kind: kindDelivery, Now: now}
	var res ledger.SweepResult
	err := s.rc.do(c, func() error {
		var err error
		res, err = s.deliveryStore.Expire(ctx, now)
		for _, id := range res.Changed {
			c.Changed = append(c.Changed, string(id))
		}
		return err
	})
	return res, err
}

func (s *recordedDeliveries) Enqueue(ctx context.Context, req ledger.EnqueueRequest, now time.Time) (ledger.DeliveryResult, error) {
	s.rc.unexpected("Enqueue")
	return s.deliveryStore.Enqueue(ctx, req, now)
}

func (s *recordedDeliveries) RecordActivation(ctx context.Context, id ledger.DeliveryID, a ledger.Activation, now time.Time) (ledger.DeliveryResult, error) {
	s.rc.unexpected("RecordActivation")
	return s.deliveryStore.RecordActivation(ctx, id, a, now)
}

func (s *recordedDeliveries) Abandon(ctx context.Context, id ledger.DeliveryID, cause ledger.Cause, now time.Time) (ledger.DeliveryResult, error) {
	s.rc.unexpected("Abandon")
	return s.deliveryStore.Abandon(ctx, id, cause, now)
}

func (s *recordedDeliveries) ExpireCeremony(ctx context.Context, id ledger.CeremonyID, cause ledger.Cause, now time.Time) (ledger.SweepResult, error) {
	s.rc.unexpected("ExpireCeremony")
	return s.deliveryStore.ExpireCeremony(ctx, id, cause, now)
}

func (s *recordedDeliveries) Supersede(ctx context.Context, previous, replacement ledger.Target, mode ledger.FollowMode, now time.Time) (ledger.SupersedeResult, error) {
	s.rc.unexpected("Supersede")
	return s.deliveryStore.Supersede(ctx, previous, replacement, mode, now)
}

// recordedEntries is the outbox as one loop sees it.
type recordedEntries struct {
	entryStore
	rc *recorder
}

func (s *recordedEntries) EnqueueBatch(ctx context.Context, envs []ledger.Envelope) ([]ledger.OutboxResult, error) {
	c := &call{Fn: fnEnqueue, Kind: kindEntry}
	for _, e := range envs {
		c.IDs = append(c.IDs, string(ledger.OutboxEntryIDFor(e.IdempotencyKey)))
	}
	var rs []ledger.OutboxResult
	err := s.rc.do(c, func() error {
		var err error
		rs, err = s.entryStore.EnqueueBatch(ctx, envs)
		for _, r := range rs {
			c.Outcomes = append(c.Outcomes, r.Outcome)
		}
		return err
	})
	return rs, err
}

func (s *recordedEntries) claim(req ledger.ClaimRequest, run func() ([]ledger.ClaimedEntry, error)) ([]ledger.ClaimedEntry, error) {
	c := &call{Fn: fnGrant, Kind: kindEntry, Owner: ledger.Owner{Agent: req.Worker}, Now: req.Now}
	var got []ledger.ClaimedEntry
	err := s.rc.do(c, func() error {
		var err error
		got, err = run()
		for _, ce := range got {
			c.Grants = append(c.Grants, grantOfClaim(ce.Claim, ce.Entry.Version))
		}
		return err
	})
	return got, err
}

func (s *recordedEntries) ClaimPending(ctx context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	return s.claim(req, func() ([]ledger.ClaimedEntry, error) { return s.entryStore.ClaimPending(ctx, req) })
}

func (s *recordedEntries) ClaimRetryReady(ctx context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	return s.claim(req, func() ([]ledger.ClaimedEntry, error) { return s.entryStore.ClaimRetryReady(ctx, req) })
}

// complete makes a completion under cl; action is what the checker
// matches the entry's end with (the provider reference or the error).
func (s *recordedEntries) complete(f fn, cl ledger.Claim, action string, permanent bool, run func() (ledger.OutboxResult, error)) (ledger.OutboxResult, error) {
	g := grantOfClaim(cl, 0)
	c := &call{Fn: f, Kind: kindEntry, Owner: ledger.Owner{Agent: cl.Worker}, Under: &g, Action: action, Permanent: permanent}
	var res ledger.OutboxResult
	err := s.rc.do(c, func() error {
		var err error
		res, err = run()
		c.Outcome, c.Version = res.Outcome, res.Entry.Version
		return err
	})
	return res, err
}

func (s *recordedEntries) MarkClaimDelivered(ctx context.Context, cl ledger.Claim, result ledger.EmissionResult) (ledger.OutboxResult, error) {
	return s.complete(fnDeliver, cl, result.ProviderRef, false, func() (ledger.OutboxResult, error) {
		return s.entryStore.MarkClaimDelivered(ctx, cl, result)
	})
}

func (s *recordedEntries) MarkClaimFailed(ctx context.Context, cl ledger.Claim, e ledger.EmissionError, next *time.Time) (ledger.OutboxResult, error) {
	return s.complete(fnFail, cl, e.Message, next == nil, func() (ledger.OutboxResult, error) {
		return s.entryStore.MarkClaimFailed(ctx, cl, e, next)
	})
}

func (s *recordedEntries) MarkClaimDeadLettered(ctx context.Context, cl ledger.Claim, e ledger.EmissionError, reason string) (ledger.OutboxResult, error) {
	return s.complete(fnDeadLetter, cl, e.Message, false, func() (ledger.OutboxResult, error) {
		return s.entryStore.MarkClaimDeadLettered(ctx, cl, e, reason)
	})
}

func (s *recordedEntries) ReleaseClaim(ctx context.Context, cl ledger.Claim, reason string) (ledger.OutboxResult, error) {
	return s.complete(fnRelease, cl, "", false, func() (ledger.OutboxResult, error) {
		return s.entryStore.ReleaseClaim(ctx, cl, reason)
	})
}

func (s *recordedEntries) SaveClaim(ctx context.Context, cl ledger.Claim, e ledger.OutboxEntry) (ledger.OutboxResult, error) {
	s.rc.unexpected("SaveClaim")
	return s.entryStore.SaveClaim(ctx, cl, e)
}

func (s *recordedEntries) Enqueue(ctx context.Context, env ledger.Envelope) (ledger.OutboxResult, error) {
	s.rc.unexpected("Enqueue")
	return s.entryStore.Enqueue(ctx, env)
}

func (s *recordedEntries) Save(ctx context.Context, e ledger.OutboxEntry) (ledger.OutboxEntry, error) {
	s.rc.unexpected("Save")
	return s.entryStore.Save(ctx, e)
}

func (s *recordedEntries) MarkDelivered(ctx context.Context, id ledger.OutboxEntryID, r ledger.EmissionResult) (ledger.OutboxEntry, error) {
	s.rc.unexpected("MarkDelivered")
	return s.entryStore.MarkDelivered(ctx, id, r)
}

func (s *recordedEntries) MarkFailed(ctx context.Context, id ledger.OutboxEntryID, e ledger.EmissionError, next *time.Time) (ledger.OutboxEntry, error) {
	s.rc.unexpected("MarkFailed")
	return s.entryStore.MarkFailed(ctx, id, e, next)
}

func (s *recordedEntries) MarkDeadLettered(ctx context.Context, id ledger.OutboxEntryID, e ledger.EmissionError, reason string) (ledger.OutboxEntry, error) {
	s.rc.unexpected("MarkDeadLettered")
	return s.entryStore.MarkDeadLettered(ctx, id, e, reason)
}
