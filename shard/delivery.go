package shard

import (
	"context"
	"errors"
	"math"
	"slices"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// Enqueue writes the delivery on the shard its target is placed on. With
// the ID check (the default) it first asks every other shard,
// concurrently, whether it holds the ID (FindDeliveryIDs where the store
// offers it, see DeliveryIDFinder; a Get otherwise), and sends the
// request to the shard that already holds the ID, so that a repeat, a
// conflict, or a producer retrying after a Follow supersession or a Move
// are answered exactly as one store answers them: two round trips of
// latency, and one look-up per other shard. EnqueueBatch asks each shard
// once for all the IDs of the batch. Two concurrent first enqueues of one ID for
// targets on different shards can both apply (nothing spans shards to
// serialise them); a shard that fails the look-up is skipped and
// reported, so an enqueue needs only its own shard to be up.
func (l *Ledger) Enqueue(ctx context.Context, req ledger.EnqueueRequest, now time.Time) (ledger.DeliveryResult, error) {
	st := l.state.Load()
	i, err := l.enqueueShard(ctx, st, req)
	if err != nil {
		return ledger.DeliveryResult{}, err
	}
	res, err := st.shards[i].Enqueue(ctx, req, now)
	return res, wrapShard(i, err)
}

// enqueueShard is where req goes: the shard that has its ID, else its
// target's.
func (l *Ledger) enqueueShard(ctx context.Context, st *ledgerState, req ledger.EnqueueRequest) (int, error) {
	home, err := st.home(req.Target)
	if err != nil {
		return 0, err
	}
	if !l.cfg.idCheck || len(st.shards) == 1 || storekit.ValidateName("id", string(req.ID)) != nil {
		return home, nil
	}
	// The home shard needs no look-up: if it has the ID, the enqueue
	// there answers Repeated or Conflict itself.
	where, failed, err := holders(ctx, len(st.shards), []int{home}, []ledger.DeliveryID{req.ID}, st.heldOn)
	if err != nil {
		return 0, err
	}
	for _, e := range failed {
		l.reportErr(e)
	}
	switch len(where[0]) {
	case 0:
		return home, nil
	case 1:
		return where[0][0], nil
	}
	// More than one other shard has it (a Move leaves the source's copy
	// ended): the open copy decides, as locate picks it.
	i, _, found, err := l.locateIn(ctx, st, where[0], req.ID)
	if err != nil || !found {
		return where[0][0], nil
	}
	return i, nil
}

// heldOn asks shard i which of ids it holds (see holders).
func (st *ledgerState) heldOn(ctx context.Context, i int, ids []ledger.DeliveryID) ([]bool, error) {
	return heldDeliveries(ctx, st.shards[i], ids)
}

func (l *Ledger) reportErr(err error) {
	var se *ShardError
	if l.cfg.report != nil && errors.As(err, &se) {
		l.cfg.report(se)
	}
}

// batchShards is enqueueShard for a batch: one look-up per shard for
// all the IDs it is not home to (the shards concurrently), and a later
// request with an ID seen earlier goes where the first went.
func (l *Ledger) batchShards(ctx context.Context, st *ledgerState, reqs []ledger.EnqueueRequest) ([]int, error) {
	dest := make([]int, len(reqs))
	for k, r := range reqs {
		i, err := st.home(r.Target)
		if err != nil {
			return nil, err
		}
		dest[k] = i
	}
	if l.cfg.idCheck && len(st.shards) > 1 {
		ids := make([]ledger.DeliveryID, len(reqs))
		for k, r := range reqs {
			ids[k] = r.ID
		}
		where, failed, err := holders(ctx, len(st.shards), dest, ids, st.heldOn)
		if err != nil {
			return nil, err
		}
		for _, e := range failed {
			l.reportErr(e) // its IDs unknown: the others decide
		}
		for k := range reqs {
			if len(where[k]) > 0 {
				dest[k] = where[k][0]
			}
		}
	}
	firstAt := make(map[ledger.DeliveryID]int, len(reqs))
	for k, r := range reqs {
		if j, ok := firstAt[r.ID]; ok {
			dest[k] = dest[j]
			continue
		}
		firstAt[r.ID] = k
	}
	return dest, nil
}

// EnqueueBatch groups the requests by the shard each goes to (as Enqueue
// chooses it; a later request with an ID seen earlier in the batch goes
// where the first went) and writes each group in one call, concurrently.
// It is atomic per shard, not across shards: when a shard fails, the
// groups of the others are written and the error is returned.
func (l *Ledger) EnqueueBatch(ctx context.Context, reqs []ledger.EnqueueRequest, now time.Time) ([]ledger.DeliveryResult, error) {
	if err := storekit.ValidateContext(ctx); err != nil {
		return nil, err
	}
	// Placement is asked only of valid target names.
	for _, r := range reqs {
		if storekit.ValidateName("target", string(r.Target)) != nil {
			if err := storekit.ValidateEnqueueBatch(reqs, now, math.MaxInt); err != nil {
				return nil, err
			}
			break
		}
	}
	st := l.state.Load()
	dest, err := l.batchShards(ctx, st, reqs)
	if err != nil {
		return nil, err
	}
	if i, one := oneShard(dest); one {
		// The shard checks the whole batch and writes all or nothing.
		res, err := enqueueOn(ctx, st.shards[i], reqs, now)
		return res, wrapShard(i, err)
	}
	// The payload limit is each shard's own, checked there; the rest is
	// checked here, so that one invalid request writes nothing anywhere.
	if err := storekit.ValidateEnqueueBatch(reqs, now, math.MaxInt); err != nil {
		return nil, err
	}
	return scatter(ctx, dest, reqs, func(ctx context.Context, i int, part []ledger.EnqueueRequest) ([]ledger.DeliveryResult, error) {
		return enqueueOn(ctx, st.shards[i], part, now)
	})
}

// oneShard reports whether every request of a batch goes to one shard,
// and which.
func oneShard(dest []int) (int, bool) {
	if len(dest) == 0 {
		return 0, false
	}
	for _, i := range dest {
		if i != dest[0] {
			return 0, false
		}
	}
	return dest[0], true
}

// enqueueOn writes reqs on the shard s: in one call when it is a
// ledger.BatchEnqueuer, one Enqueue each otherwise.
func enqueueOn(ctx context.Context, s ledger.Ledger, reqs []ledger.EnqueueRequest, now time.Time) ([]ledger.DeliveryResult, error) {
	if b, ok := s.(ledger.BatchEnqueuer); ok {
		return b.EnqueueBatch(ctx, reqs, now)
	}
	res := make([]ledger.DeliveryResult, len(reqs))
	for n, r := range reqs {
		var err error
		if res[n], err = s.Enqueue(ctx, r, now); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// Acknowledge goes to the shard the lease's token names: one call.
func (l *Ledger) Acknowledge(ctx context.Context, lease ledger.Lease, observation string, now time.Time) (res ledger.DeliveryResult, err error) {
	err = l.withLease(ctx, lease, func(s ledger.Ledger, lease ledger.Lease) (ledger.Outcome, error) {
		res, err = s.Acknowledge(ctx, lease, observation, now)
		return res.Outcome, err
	})
	return res, err
}

// MarkFailed goes to the shard the lease's token names: one call.
func (l *Ledger) MarkFailed(ctx context.Context, lease ledger.Lease, reason ledger.FailureReason, now time.Time) (res ledger.DeliveryResult, err error) {
	err = l.withLease(ctx, lease, func(s ledger.Ledger, lease ledger.Lease) (ledger.Outcome, error) {
		res, err = s.MarkFailed(ctx, lease, reason, now)
		return res.Outcome, err
	})
	return res, err
}

// Release goes to the shard the lease's token names: one call.
func (l *Ledger) Release(ctx context.Context, lease ledger.Lease, now time.Time) (res ledger.DeliveryResult, err error) {
	err = l.withLease(ctx, lease, func(s ledger.Ledger, lease ledger.Lease) (ledger.Outcome, error) {
		res, err = s.Release(ctx, lease, now)
		return res.Outcome, err
	})
	return res, err
}

// RenewLease goes to the shard the lease's token names: one call. A shard
// that is not a ledger.Renewer answers ErrInvalid.
func (l *Ledger) RenewLease(ctx context.Context, lease ledger.Lease, now time.Time, duration time.Duration) (res ledger.DeliveryResult, err error) {
	err = l.withLease(ctx, lease, func(s ledger.Ledger, lease ledger.Lease) (ledger.Outcome, error) {
		r, ok := s.(ledger.Renewer)
		if !ok {
			return "", &ledger.InvalidError{Field: "ledger", Reason: "the shard does not renew leases"}
		}
		res, err = r.RenewLease(ctx, lease, now, duration)
		return res.Outcome, err
	})
	return res, err
}

// AcknowledgeProcessed goes to the shard the lease's token names: one
// call, one transaction where the shard has ledger.AckProcessor, else
// Acknowledge then MarkProcessed on that shard.
func (l *Ledger) AcknowledgeProcessed(ctx context.Context, lease ledger.Lease, observation string, fence *ledger.Fence, action ledger.ActionRef, now time.Time) (ack, processed ledger.DeliveryResult, err error) {
	err = l.withLease(ctx, lease, func(s ledger.Ledger, lease ledger.Lease) (ledger.Outcome, error) {
		ack, processed, err = ackProcessed(ctx, s, lease, observation, fence, action, now)
		return ack.Outcome, err
	})
	return ack, processed, err
}

func ackProcessed(ctx context.Context, s ledger.Ledger, lease ledger.Lease, observation string, fence *ledger.Fence, action ledger.ActionRef, now time.Time) (ack, processed ledger.DeliveryResult, err error) {
	if ap, ok := s.(ledger.AckProcessor); ok {
		return ap.AcknowledgeProcessed(ctx, lease, observation, fence, action, now)
	}
	if err := storekit.ValidateAcknowledgeProcessed(lease, observation, fence, action, now); err != nil {
		return ack, processed, err
	}
	if ack, err = s.Acknowledge(ctx, lease, observation, now); err != nil || !ack.Applied() {
		return ack, processed, err
	}
	processed, err = s.MarkProcessed(ctx, lease.DeliveryID, lease.Owner, fence, action, now)
	return ack, processed, err
}

// MarkProcessed carries no lease: it looks the delivery up on every shard
// (one round trip, one read per shard) and then calls its shard.
func (l *Ledger) MarkProcessed(ctx context.Context, id ledger.DeliveryID, owner ledger.Owner, fence *ledger.Fence, action ledger.ActionRef, now time.Time) (ledger.DeliveryResult, error) {
	st, i, err := l.byID(ctx, id)
	if err != nil {
		return ledger.DeliveryResult{}, err
	}
	res, err := st.shards[i].MarkProcessed(ctx, id, owner, fence, action, now)
	return res, wrapShard(i, err)
}

// RecordActivation finds the delivery's shard as MarkProcessed does.
func (l *Ledger) RecordActivation(ctx context.Context, id ledger.DeliveryID, activation ledger.Activation, now time.Time) (ledger.DeliveryResult, error) {
	st, i, err := l.byID(ctx, id)
	if err != nil {
		return ledger.DeliveryResult{}, err
	}
	res, err := st.shards[i].RecordActivation(ctx, id, activation, now)
	return res, wrapShard(i, err)
}

// Abandon finds the delivery's shard as MarkProcessed does.
func (l *Ledger) Abandon(ctx context.Context, id ledger.DeliveryID, cause ledger.Cause, now time.Time) (ledger.DeliveryResult, error) {
	st, i, err := l.byID(ctx, id)
	if err != nil {
		return ledger.DeliveryResult{}, err
	}
	res, err := st.shards[i].Abandon(ctx, id, cause, now)
	return res, wrapShard(i, err)
}

// Get reads the delivery from every shard at once and returns the one
// found (an open copy over an ended one: see Move), or ErrNotFound.
func (l *Ledger) Get(ctx context.Context, id ledger.DeliveryID) (ledger.Delivery, error) {
	st := l.state.Load()
	if len(st.shards) == 1 {
		return st.shards[0].Get(ctx, id)
	}
	_, d, found, err := l.locate(ctx, st, id)
	if err != nil {
		return ledger.Delivery{}, err
	}
	if !found {
		return st.shards[0].Get(ctx, id)
	}
	return d, nil
}

// History reads the delivery's history from the shard that holds it.
func (l *Ledger) History(ctx context.Context, id ledger.DeliveryID) ([]ledger.Transition, error) {
	st, i, err := l.byID(ctx, id)
	if err != nil {
		return nil, err
	}
	h, ok := st.shards[i].(ledger.Historian)
	if !ok {
		return nil, &ledger.InvalidError{Field: "ledger", Reason: "the shard keeps no history"}
	}
	return h.History(ctx, id)
}

// Expire sweeps every shard concurrently and returns the changed IDs of
// all of them, in ID order. A shard that fails is reported and its
// error returned beside the others' IDs (as a store that commits in
// batches may), so a sweeper retries it on its next run.
func (l *Ledger) Expire(ctx context.Context, now time.Time) (ledger.SweepResult, error) {
	st := l.state.Load()
	parts, errs := gather(ctx, st.every(), func(ctx context.Context, i int) (ledger.SweepResult, error) {
		return st.shards[i].Expire(ctx, now)
	})
	var out ledger.SweepResult
	for _, p := range parts {
		out.Changed = append(out.Changed, p.Changed...)
	}
	slices.Sort(out.Changed)
	return out, all(errs)
}

// ExpireCeremony ends the ceremony's open work on every shard: a
// ceremony spans targets, so it spans shards.
func (l *Ledger) ExpireCeremony(ctx context.Context, ceremony ledger.CeremonyID, cause ledger.Cause, now time.Time) (ledger.SweepResult, error) {
	if err := storekit.ValidateExpireCeremony(ceremony, cause, now); err != nil {
		return ledger.SweepResult{}, err
	}
	st := l.state.Load()
	parts, errs := gather(ctx, st.every(), func(ctx context.Context, i int) (ledger.SweepResult, error) {
		return st.shards[i].ExpireCeremony(ctx, ceremony, cause, now)
	})
	var out ledger.SweepResult
	for _, p := range parts {
		out.Changed = append(out.Changed, p.Changed...)
	}
	slices.Sort(out.Changed)
	return out, all(errs)
}

// Supersede runs on the shards that hold the previous target's open
// work. With Follow, the moved deliveries stay on those shards under the
// replacement target; when the replacement is placed elsewhere, this
// Ledger remembers them for Lease, and Move brings them to the
// replacement's shard (other processes' Ledgers do not know until then:
// place both targets on one shard, with Pinned, to avoid the gap).
func (l *Ledger) Supersede(ctx context.Context, previous, replacement ledger.Target, mode ledger.FollowMode, now time.Time) (ledger.SupersedeResult, error) {
	if err := storekit.ValidateSupersede(previous, replacement, mode, now); err != nil {
		return ledger.SupersedeResult{}, err
	}
	st := l.state.Load()
	idx, err := st.holders([]ledger.Target{previous})
	if err != nil {
		return ledger.SupersedeResult{}, err
	}
	parts, errs := gather(ctx, idx, func(ctx context.Context, i int) (ledger.SupersedeResult, error) {
		return st.shards[i].Supersede(ctx, previous, replacement, mode, now)
	})
	if err := all(errs); err != nil {
		return ledger.SupersedeResult{}, err
	}
	var out ledger.SupersedeResult
	for pos, p := range parts {
		out.Moved = append(out.Moved, p.Moved...)
		out.Ended = append(out.Ended, p.Ended...)
		if len(p.Moved) > 0 {
			l.addExtra(replacement, idx[pos])
		}
	}
	slices.Sort(out.Moved)
	slices.Sort(out.Ended)
	return out, nil
}

// addExtra records that shard i holds open work of target beside its
// home.
func (l *Ledger) addExtra(target ledger.Target, i int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.state.Load()
	if home, err := st.home(target); err == nil && home == i {
		return
	}
	if slices.Contains(l.extra[target], i) {
		return
	}
	l.extra[target] = append(l.extra[target], i)
	l.publishExtra()
}

// dropExtra forgets shard i for target.
func (l *Ledger) dropExtra(target ledger.Target, i int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := slices.DeleteFunc(l.extra[target], func(j int) bool { return j == i })
	if len(s) == 0 {
		delete(l.extra, target)
	} else {
		l.extra[target] = s
	}
	l.publishExtra()
}

// PurgeDeliveries purges up to limit ended deliveries, shard by shard in
// index order, each asked for what the earlier ones left of limit.
func (l *Ledger) PurgeDeliveries(ctx context.Context, olderThan time.Time, limit int) (int, error) {
	if err := storekit.ValidateContext(ctx); err != nil {
		return 0, err
	}
	if err := storekit.ValidatePurge(olderThan, limit); err != nil {
		return 0, err
	}
	st := l.state.Load()
	n := 0
	for i, s := range st.shards {
		if n >= limit {
			break
		}
		p, ok := s.(ledger.Purger)
		if !ok {
			continue
		}
		k, err := p.PurgeDeliveries(ctx, olderThan, limit-n)
		n += k
		if err != nil {
			return n, wrapShard(i, err)
		}
	}
	return n, nil
}
