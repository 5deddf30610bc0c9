package memstore

import (
	"container/heap"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// This file holds the ledger.Ledger methods. Each one validates, takes the
// lock, picks the records the call touches through the indexes, lets the
// root package's transition functions decide what happens to them, and
// stores the results through Store.replace.
//
// Stored records are never written through: a transition builds a new value
// and replace swaps it in. So a copy of a record taken under the lock stays
// intact after the lock is released, and the deep copy handed to the caller
// (Clone) is made outside the lock.

// Enqueue offers a delivery: OutcomeApplied with the new record for a new
// ID; for an existing ID, OutcomeRepeated (same target, ceremony, payload
// and resolved policy, whatever state the record is in) or OutcomeConflict,
// with the existing record and nothing written. Errors: ErrInvalid for a
// malformed request, ctx.Err() for a done context.
func (s *Store) Enqueue(ctx context.Context, req ledger.EnqueueRequest, now time.Time) (ledger.DeliveryResult, error) {
	if err := begin(ctx, storekit.ValidateEnqueue(req, now, s.cfg.maxPayload)); err != nil {
		return ledger.DeliveryResult{}, err
	}
	// Build the record (and its payload copy) before taking the lock.
	now = ledger.Normalize(now)
	d := storekit.NewDelivery(req, s.cfg.policy, now)
	s.mu.Lock()
	r := s.enqueueLocked(req, &d)
	if r.Outcome == ledger.OutcomeApplied && s.cfg.bounds.Any() {
		if r.Abandoned = s.boundQueue(d.Target, now); len(r.Abandoned) > 0 {
			d = *s.recs[s.records[d.ID]] // it may be one of them
		}
	}
	s.mu.Unlock()
	if r.Outcome == ledger.OutcomeApplied {
		r.Delivery = handOut(d) // d is what was stored
	} else {
		r.Delivery = handOut(r.Delivery)
	}
	return r, nil
}

// EnqueueBatch enqueues reqs in order under one lock, answering one result
// per request as Enqueue would; a request whose ID appeared earlier in the
// batch is judged against the earlier one. It is atomic for errors: one
// invalid request (or a batch of 0 or more than ledger.MaxLimit) fails the
// call with ErrInvalid and nothing is written.
func (s *Store) EnqueueBatch(ctx context.Context, reqs []ledger.EnqueueRequest, now time.Time) ([]ledger.DeliveryResult, error) {
	if err := begin(ctx, storekit.ValidateEnqueueBatch(reqs, now, s.cfg.maxPayload)); err != nil {
		return nil, err
	}
	now = ledger.Normalize(now)
	built := make([]ledger.Delivery, len(reqs))
	for i, req := range reqs {
		built[i] = storekit.NewDelivery(req, s.cfg.policy, now)
	}
	out := make([]ledger.DeliveryResult, len(reqs))
	s.mu.Lock()
	for i, req := range reqs {
		// A stored record is copied into its result only when it is not
		// the one just built: built[i] already holds that one.
		if r := s.enqueueLocked(req, &built[i]); r.Outcome != ledger.OutcomeApplied {
			out[i] = r
		} else {
			out[i].Outcome = ledger.OutcomeApplied
		}
	}
	if s.cfg.bounds.Any() {
		s.boundBatch(reqs, out, built, now)
	}
	s.mu.Unlock()
	for i := range out {
		if out[i].Outcome == ledger.OutcomeApplied {
			out[i].Delivery = handOut(built[i])
		} else {
			out[i].Delivery = handOut(out[i].Delivery)
		}
	}
	return out, nil
}

// enqueueLocked stores *d, built from req, unless req.ID is taken: then it
// answers the outcome with the stored record. On OutcomeApplied the result
// carries no record, since the stored one is a copy of *d. The caller
// holds s.mu.
func (s *Store) enqueueLocked(req ledger.EnqueueRequest, d *ledger.Delivery) ledger.DeliveryResult {
	if slot, ok := s.records[req.ID]; ok {
		p := s.recs[slot]
		return ledger.DeliveryResult{Outcome: storekit.Delivery(*p).EnqueueAgain(req, s.cfg.policy), Delivery: *p}
	}
	s.insert(d)
	return ledger.DeliveryResult{Outcome: ledger.OutcomeApplied}
}

// Lease hands out up to limit offerable deliveries matching filter, oldest
// AvailableAt first (then ID), each under a new token until now+duration.
// Before choosing, it takes back every delivery Leased to owner.Agent under
// another incarnation (storekit.Delivery.Reclaim) and lists them, in ID
// order, in Reclaimed; they may be granted again by the same call.
//
// Finding each delivery costs O(log n); a Leased delivery whose lease
// expired with its attempts used up is skipped, not removed (Expire ends
// it). Errors: ErrInvalid, ctx.Err().
func (s *Store) Lease(ctx context.Context, filter ledger.LeaseFilter, owner ledger.Owner, now time.Time, duration time.Duration, limit int) (ledger.LeaseResult, error) {
	if err := begin(ctx, storekit.ValidateLease(filter, owner, now, duration, limit)); err != nil {
		return ledger.LeaseResult{}, err
	}
	now = ledger.Normalize(now)
	var res ledger.LeaseResult
	s.mu.Lock()
	res.Reclaimed = s.reclaim(owner, now)
	var buf [16]uint32 // most calls pick few: no allocation
	picks := buf[:0]
	if limit > len(buf) {
		picks = make([]uint32, 0, limit) // once, not a doubling per 16 picks
	}
	picks = s.pick(filter, now, limit, picks)
	if len(picks) > 0 {
		res.Leased = make([]ledger.LeasedDelivery, 0, len(picks))
	}
	for _, slot := range picks {
		d, lease := storekit.Delivery(*(s.recs[slot])).Grant(owner, storekit.NewToken(), now, duration)
		s.replace(slot, &d, ledger.OpLease, owner)
		res.Leased = append(res.Leased, ledger.LeasedDelivery{Lease: lease, Delivery: d})
	}
	s.mu.Unlock()
	for i := range res.Leased {
		res.Leased[i].Delivery = handOut(res.Leased[i].Delivery)
	}
	return res, nil
}

// reclaim applies the incarnation rule for owner and returns the IDs taken
// back, in ID order. It costs O(1) when the agent holds leases under one
// incarnation only, and one step per delivery taken back otherwise. The
// caller holds s.mu.
func (s *Store) reclaim(owner ledger.Owner, now time.Time) []ledger.DeliveryID {
	slots := s.holders.others(owner)
	if len(slots) == 0 {
		return nil
	}
	slices.SortFunc(slots, func(a, b uint32) int { return strings.Compare(string(s.recs[a].ID), string(s.recs[b].ID)) })
	ids := make([]ledger.DeliveryID, len(slots))
	for i, slot := range slots {
		d := storekit.Delivery(*(s.recs[slot])).Reclaim(owner, now)
		// The actor is the caller, the incarnation that took the lease back.
		s.replace(slot, &d, ledger.OpReclaim, owner)
		ids[i] = d.ID
	}
	return ids
}

// pick appends to picks the slots of up to limit deliveries Lease may
// grant, in grant order, without changing anything. The caller holds s.mu.
func (s *Store) pick(filter ledger.LeaseFilter, now time.Time, limit int, picks []uint32) []uint32 {
	switch {
	case filter.Ceremony != "":
		// The ceremony's index is usually the smaller one; the target
		// filter is checked per candidate.
		var match func(ledger.Target) bool
		if len(filter.Targets) > 0 {
			match = targetMatcher(filter.Targets)
		}
		return s.scan(s.byCeremony.get(filter.Ceremony), match, now, limit, picks)
	case len(filter.Targets) == 0:
		return s.scan(&s.offers, nil, now, limit, picks)
	case len(filter.Targets) == 1:
		return s.scan(s.byTarget.get(filter.Targets[0]), nil, now, limit, picks)
	}
	return s.pickMerged(filter.Targets, now, limit, picks)
}

// scan appends to picks the offerable deliveries of offer index t (nil:
// none) whose target match accepts (nil: any), in order, up to limit in
// all, stopping at the first one not yet available.
func (s *Store) scan(t *btree[slotKey], match func(ledger.Target) bool, now time.Time, limit int, picks []uint32) []uint32 {
	if t == nil {
		return picks
	}
	end := now.UnixMicro()
	c := t.first()
	for k, ok := c.next(); ok && k.at <= end && len(picks) < limit; k, ok = c.next() {
		if p := s.recs[k.slot]; (match == nil || match(p.Target)) && storekit.Delivery(*p).Offerable(now) {
			picks = append(picks, k.slot)
		}
	}
	return picks
}

// pickMerged walks the offer indexes of several targets together, taking
// the smallest head each time, so that the grant order is the same as one
// index holding all of them would give.
func (s *Store) pickMerged(targets []ledger.Target, now time.Time, limit int, picks []uint32) []uint32 {
	end := now.UnixMicro()
	h := mergeHeap{cmp: s.offerOrder}
	seen := make(map[ledger.Target]struct{}, len(targets))
	for _, tg := range targets {
		if _, dup := seen[tg]; dup {
			continue
		}
		seen[tg] = struct{}{}
		if t := s.byTarget.get(tg); t != nil {
			c := t.first()
			if k, ok := c.next(); ok && k.at <= end {
				h.heads = append(h.heads, mergeHead{k: k, c: c})
			}
		}
	}
	heap.Init(&h)
	for len(h.heads) > 0 && len(picks) < limit {
		head := &h.heads[0]
		if head.k.at > end {
			break // the smallest head is in the future, so is every other
		}
		if storekit.Delivery(*(s.recs[head.k.slot])).Offerable(now) {
			picks = append(picks, head.k.slot)
		}
		if k, ok := head.c.next(); ok {
			head.k = k
			heap.Fix(&h, 0)
		} else {
			heap.Pop(&h)
		}
	}
	return picks
}

// mergeHead is one target's cursor and the key it stands on.
type mergeHead struct {
	k slotKey
	c cursor[slotKey]
}

// mergeHeap is a min-heap of cursors by their current key, in offer order.
type mergeHeap struct {
	heads []mergeHead
	cmp   func(a, b slotKey) int
}

func (h *mergeHeap) Len() int           { return len(h.heads) }
func (h *mergeHeap) Less(i, j int) bool { return h.cmp(h.heads[i].k, h.heads[j].k) < 0 }
func (h *mergeHeap) Swap(i, j int)      { h.heads[i], h.heads[j] = h.heads[j], h.heads[i] }
func (h *mergeHeap) Push(x any)         { h.heads = append(h.heads, x.(mergeHead)) }
func (h *mergeHeap) Pop() any {
	x := h.heads[len(h.heads)-1]
	h.heads = h.heads[:len(h.heads)-1]
	return x
}

// targetMatcher returns a membership test for a target filter; an empty
// filter matches every target.
func targetMatcher(targets []ledger.Target) func(ledger.Target) bool {
	switch {
	case len(targets) == 0:
		return func(ledger.Target) bool { return true }
	case len(targets) <= 8:
		return func(t ledger.Target) bool { return slices.Contains(targets, t) }
	}
	set := make(map[ledger.Target]struct{}, len(targets))
	for _, t := range targets {
		set[t] = struct{}{}
	}
	return func(t ledger.Target) bool { _, ok := set[t]; return ok }
}

// Acknowledge records that the holder of lease received the delivery (see
// ledger.Ledger). Outcomes: Applied, NotFound, Ended, LeaseLost, Repeated,
// LeaseExpired. Errors: ErrInvalid, ctx.Err().
func (s *Store) Acknowledge(ctx context.Context, lease ledger.Lease, observation string, now time.Time) (ledger.DeliveryResult, error) {
	if err := begin(ctx, storekit.ValidateAcknowledge(lease, observation, now)); err != nil {
		return ledger.DeliveryResult{}, err
	}
	now = ledger.Normalize(now)
	return s.apply(lease.DeliveryID, ledger.OpAcknowledge, func(d ledger.Delivery) (ledger.Delivery, ledger.Outcome) {
		return storekit.Delivery(d).Acknowledge(lease, observation, now)
	}), nil
}

// MarkProcessed closes an acknowledged delivery (see ledger.Ledger). The
// fence is checked against the highest fence accepted for the delivery's
// target; on OutcomeApplied that high-water mark is raised, and a call that
// does not apply leaves it as it was. Outcomes, first match wins: Repeated,
// Ended, WrongState, WrongOwner, FenceRejected, Applied; NotFound for an
// unknown ID. Errors: ErrInvalid, ctx.Err().
func (s *Store) MarkProcessed(ctx context.Context, id ledger.DeliveryID, owner ledger.Owner, fence *ledger.Fence, action ledger.ActionRef, now time.Time) (ledger.DeliveryResult, error) {
	if err := begin(ctx, storekit.ValidateMarkProcessed(id, owner, fence, action, now)); err != nil {
		return ledger.DeliveryResult{}, err
	}
	now = ledger.Normalize(now)
	return s.apply(id, ledger.OpMarkProcessed, func(d ledger.Delivery) (ledger.Delivery, ledger.Outcome) {
		highest := s.fences[d.Target]
		nd, o := storekit.Delivery(d).MarkProcessed(owner, fence, highest, action, now)
		if o == ledger.OutcomeApplied {
			if raised := storekit.RaiseFence(highest, fence); raised != highest {
				s.fences[d.Target] = raised
			}
		}
		return nd, o
	}), nil
}

// AcknowledgeProcessed acknowledges under lease and, when that applied,
// marks the delivery processed by the owner that acknowledged it, under
// one lock (see ledger.AckProcessor). Errors: ErrInvalid, ctx.Err().
func (s *Store) AcknowledgeProcessed(ctx context.Context, lease ledger.Lease, observation string, fence *ledger.Fence, action ledger.ActionRef, now time.Time) (ack, processed ledger.DeliveryResult, err error) {
	if err := begin(ctx, storekit.ValidateAcknowledgeProcessed(lease, observation, fence, action, now)); err != nil {
		return ledger.DeliveryResult{}, ledger.DeliveryResult{}, err
	}
	now = ledger.Normalize(now)
	s.mu.Lock()
	defer s.mu.Unlock()
	slot, ok := s.records[lease.DeliveryID]
	if !ok {
		return ledger.DeliveryResult{Outcome: ledger.OutcomeNotFound}, ledger.DeliveryResult{}, nil
	}
	before := *s.recs[slot]
	highest := s.fences[before.Target]
	acked, ackOutcome, done, doneOutcome := storekit.Delivery(before).AcknowledgeProcessed(lease, observation, fence, highest, action, now)
	if ackOutcome != ledger.OutcomeApplied {
		return ledger.DeliveryResult{Outcome: ackOutcome, Delivery: handOut(before)}, ledger.DeliveryResult{}, nil
	}
	s.replace(slot, &acked, ledger.OpAcknowledge, actorOf(ledger.OpAcknowledge, &before))
	ack = ledger.DeliveryResult{Outcome: ackOutcome, Delivery: handOut(acked)}
	if doneOutcome != ledger.OutcomeApplied {
		return ack, ledger.DeliveryResult{Outcome: doneOutcome, Delivery: handOut(acked)}, nil
	}
	if raised := storekit.RaiseFence(highest, fence); raised != highest {
		s.fences[before.Target] = raised
	}
	s.replace(slot, &done, ledger.OpMarkProcessed, actorOf(ledger.OpMarkProcessed, &acked))
	return ack, ledger.DeliveryResult{Outcome: doneOutcome, Delivery: handOut(done)}, nil
}

// RecordActivation writes down what a push or wake-up did; the state does
// not change. Outcomes: Applied, NotFound, Ended. Errors: ErrInvalid,
// ctx.Err().
func (s *Store) RecordActivation(ctx context.Context, id ledger.DeliveryID, activation ledger.Activation, now time.Time) (ledger.DeliveryResult, error) {
	if err := begin(ctx, storekit.ValidateRecordActivation(id, activation, now)); err != nil {
		return ledger.DeliveryResult{}, err
	}
	now = ledger.Normalize(now)
	return s.apply(id, ledger.OpRecordActivation, func(d ledger.Delivery) (ledger.Delivery, ledger.Outcome) {
		return storekit.Delivery(d).RecordActivation(activation, now)
	}), nil
}

// MarkFailed gives up the attempt held under lease: Offered again after the
// policy's backoff, or Failed. Outcomes: Applied, NotFound, Ended,
// LeaseLost, Repeated, WrongState. Errors: ErrInvalid, ctx.Err().
func (s *Store) MarkFailed(ctx context.Context, lease ledger.Lease, reason ledger.FailureReason, now time.Time) (ledger.DeliveryResult, error) {
	if err := begin(ctx, storekit.ValidateMarkFailed(lease, reason, now)); err != nil {
		return ledger.DeliveryResult{}, err
	}
	now = ledger.Normalize(now)
	return s.apply(lease.DeliveryID, ledger.OpMarkFailed, func(d ledger.Delivery) (ledger.Delivery, ledger.Outcome) {
		return storekit.Delivery(d).MarkFailed(lease, reason, now)
	}), nil
}

// Release gives the lease back without counting the attempt; the delivery
// is offerable again at now. Outcomes as MarkFailed. Errors: ErrInvalid,
// ctx.Err().
func (s *Store) Release(ctx context.Context, lease ledger.Lease, now time.Time) (ledger.DeliveryResult, error) {
	if err := begin(ctx, storekit.ValidateRelease(lease, now)); err != nil {
		return ledger.DeliveryResult{}, err
	}
	now = ledger.Normalize(now)
	return s.apply(lease.DeliveryID, ledger.OpRelease, func(d ledger.Delivery) (ledger.Delivery, ledger.Outcome) {
		return storekit.Delivery(d).Release(lease, now)
	}), nil
}

// Abandon ends one open delivery as Expired with cause. Outcomes: Applied,
// NotFound, Ended. Errors: ErrInvalid, ctx.Err().
func (s *Store) Abandon(ctx context.Context, id ledger.DeliveryID, cause ledger.Cause, now time.Time) (ledger.DeliveryResult, error) {
	if err := begin(ctx, storekit.ValidateAbandon(id, cause, now)); err != nil {
		return ledger.DeliveryResult{}, err
	}
	now = ledger.Normalize(now)
	return s.applyBy(id, ledger.OpAbandon, ledger.Owner{Agent: ledger.ActorFrom(ctx)}, func(d ledger.Delivery) (ledger.Delivery, ledger.Outcome) {
		return storekit.Delivery(d).Abandon(cause, now)
	}), nil
}

// apply runs one transition, op, on the record with ID id and stores the
// result when it applied (see actorOf for who it is recorded as made by).
// The result carries a deep copy of the record as it now stands;
// OutcomeNotFound with a zero record for an unknown ID.
func (s *Store) apply(id ledger.DeliveryID, op ledger.Operation, step func(ledger.Delivery) (ledger.Delivery, ledger.Outcome)) ledger.DeliveryResult {
	return s.applyBy(id, op, ledger.Owner{}, step)
}

// applyBy is apply recorded as made by actor when it is not the zero
// Owner (a person, through ledger.WithActor), else as actorOf says.
func (s *Store) applyBy(id ledger.DeliveryID, op ledger.Operation, actor ledger.Owner, step func(ledger.Delivery) (ledger.Delivery, ledger.Outcome)) ledger.DeliveryResult {
	s.mu.Lock()
	slot, ok := s.records[id]
	if !ok {
		s.mu.Unlock()
		return ledger.DeliveryResult{Outcome: ledger.OutcomeNotFound}
	}
	before := s.recs[slot]
	d, o := step(*before)
	if o == ledger.OutcomeApplied {
		if actor == (ledger.Owner{}) {
			actor = actorOf(op, before)
		}
		s.replace(slot, &d, op, actor)
	} else {
		d = *s.recs[slot] // a call that does not apply writes, and changes, nothing
	}
	s.mu.Unlock()
	return ledger.DeliveryResult{Outcome: o, Delivery: handOut(d)}
}

// Expire sweeps what has run out at now: Leased deliveries whose lease
// expired go back to Offered (or end as Failed), Acknowledged ones past
// their deadline end as Expired. It returns the IDs it changed, in ID
// order, at O(k log n) for k changed. Errors: ErrInvalid, ctx.Err().
func (s *Store) Expire(ctx context.Context, now time.Time) (ledger.SweepResult, error) {
	if err := begin(ctx, storekit.ValidateExpire(now)); err != nil {
		return ledger.SweepResult{}, err
	}
	now = ledger.Normalize(now)
	end := now.UnixMicro()
	var res ledger.SweepResult
	s.mu.Lock()
	var due []uint32
	for _, t := range []*btree[slotKey]{&s.leases, &s.acks} {
		c := t.first()
		for k, ok := c.next(); ok && k.at <= end; k, ok = c.next() {
			due = append(due, k.slot)
		}
	}
	for _, slot := range due {
		if d, changed := storekit.Delivery(*(s.recs[slot])).Expire(now); changed {
			s.replace(slot, &d, ledger.OpExpire, ledger.Owner{})
			res.Changed = append(res.Changed, d.ID)
		}
	}
	s.mu.Unlock()
	slices.Sort(res.Changed)
	return res, nil
}

// ExpireCeremony ends every open delivery of ceremony as Expired with cause
// (storekit.Delivery.Abandon) and returns their IDs in ID order. Terminal
// records are untouched. Errors: ErrInvalid, ctx.Err().
func (s *Store) ExpireCeremony(ctx context.Context, ceremony ledger.CeremonyID, cause ledger.Cause, now time.Time) (ledger.SweepResult, error) {
	if err := begin(ctx, storekit.ValidateExpireCeremony(ceremony, cause, now)); err != nil {
		return ledger.SweepResult{}, err
	}
	now = ledger.Normalize(now)
	var res ledger.SweepResult
	s.mu.Lock()
	if t := s.open.get(ceremony); t != nil {
		ids := make([]ledger.DeliveryID, 0, t.Len())
		c := t.first()
		for k, ok := c.next(); ok; k, ok = c.next() {
			ids = append(ids, ledger.DeliveryID(k))
		}
		for _, id := range ids {
			slot := s.records[id]
			if d, o := storekit.Delivery(*(s.recs[slot])).Abandon(cause, now); o == ledger.OutcomeApplied {
				s.replace(slot, &d, ledger.OpExpireCeremony, ledger.Owner{Agent: ledger.ActorFrom(ctx)})
				res.Changed = append(res.Changed, id)
			}
		}
	}
	s.mu.Unlock()
	return res, nil
}

// Supersede moves the previous target's Offered and Leased deliveries to
// replacement (Follow; leases revoked, attempts given back) or ends them
// as Expired with CauseSuperseded (LeaveBehind). Acknowledged deliveries
// stay. The IDs come back in ID order. The previous target's offer index
// holds exactly its Offered and Leased deliveries, so the call costs
// O(k log n) for k of them. Errors: ErrInvalid, ctx.Err().
func (s *Store) Supersede(ctx context.Context, previous, replacement ledger.Target, mode ledger.FollowMode, now time.Time) (ledger.SupersedeResult, error) {
	if err := begin(ctx, storekit.ValidateSupersede(previous, replacement, mode, now)); err != nil {
		return ledger.SupersedeResult{}, err
	}
	now = ledger.Normalize(now)
	var changed []ledger.DeliveryID
	s.mu.Lock()
	if t := s.byTarget.get(previous); t != nil {
		slots := make([]uint32, 0, t.Len())
		c := t.first()
		for k, ok := c.next(); ok; k, ok = c.next() {
			slots = append(slots, k.slot)
		}
		for _, slot := range slots {
			if d, ok := storekit.Delivery(*(s.recs[slot])).Supersede(replacement, mode, now); ok {
				s.replace(slot, &d, ledger.OpSupersede, ledger.Owner{})
				changed = append(changed, d.ID)
			}
		}
	}
	s.mu.Unlock()
	slices.Sort(changed)
	if mode == ledger.Follow {
		return ledger.SupersedeResult{Moved: changed}, nil
	}
	return ledger.SupersedeResult{Ended: changed}, nil
}

// Get returns a deep copy of one delivery in any state. Errors:
// ErrNotFound for an unknown ID, ErrInvalid, ctx.Err().
func (s *Store) Get(ctx context.Context, id ledger.DeliveryID) (ledger.Delivery, error) {
	if err := begin(ctx, storekit.ValidateGet(string(id))); err != nil {
		return ledger.Delivery{}, err
	}
	s.mu.Lock()
	slot, ok := s.records[id]
	var d ledger.Delivery
	if ok {
		d = *s.recs[slot]
	}
	s.mu.Unlock()
	if !ok {
		return ledger.Delivery{}, fmt.Errorf("memstore: get delivery %q: %w", id, ledger.ErrNotFound)
	}
	return handOut(d), nil
}

// List returns up to q.Limit deliveries matching q's targets, ceremony and
// states, in ID order after q.Cursor. Page.Next is set only when more
// matching records follow. It walks the ID index from the cursor, so it
// costs O(log n) plus one step per record examined. Errors: ErrInvalid
// (also for a cursor not made by this package), ctx.Err().
func (s *Store) List(ctx context.Context, q ledger.ListQuery) (ledger.Page, error) {
	after, err := storekit.ValidateList(q)
	if err := begin(ctx, err); err != nil {
		return ledger.Page{}, err
	}
	matchTarget := targetMatcher(q.Targets)
	match := func(d *ledger.Delivery) bool {
		return (q.Ceremony == "" || d.Ceremony == q.Ceremony) && matchTarget(d.Target) &&
			(len(q.States) == 0 || slices.Contains(q.States, d.State))
	}
	var page ledger.Page
	more := false
	s.mu.Lock()
	c := s.ids.seek(idKey(after))
	for k, ok := c.next(); ok; k, ok = c.next() {
		if after != "" && ledger.DeliveryID(k) == after {
			continue
		}
		p := s.recs[s.records[ledger.DeliveryID(k)]]
		if !match(p) {
			continue
		}
		if len(page.Deliveries) == q.Limit {
			more = true
			break
		}
		page.Deliveries = append(page.Deliveries, *p)
	}
	s.mu.Unlock()
	for i := range page.Deliveries {
		page.Deliveries[i] = handOut(page.Deliveries[i])
	}
	if more {
		page.Next = storekit.EncodeCursor(page.Deliveries[len(page.Deliveries)-1].ID)
	}
	return page, nil
}

// EndFenceRejected ends the acknowledged delivery id whose processing by
// owner was refused for fence (see ledger.FenceRejecter), recorded as an
// abandon by owner. Errors: ErrInvalid, ctx.Err().
func (s *Store) EndFenceRejected(ctx context.Context, id ledger.DeliveryID, owner ledger.Owner, fence ledger.Fence, now time.Time) (ledger.DeliveryResult, error) {
	if err := begin(ctx, storekit.ValidateEndFenceRejected(id, owner, fence, now)); err != nil {
		return ledger.DeliveryResult{}, err
	}
	now = ledger.Normalize(now)
	return s.applyBy(id, ledger.OpAbandon, owner, func(d ledger.Delivery) (ledger.Delivery, ledger.Outcome) {
		return storekit.Delivery(d).EndFenceRejected(owner, fence, s.fences[d.Target], now)
	}), nil
}
