package memstore

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// Compile-time checks that both stores redrive.
var (
	_ ledger.Redriver       = (*Store)(nil)
	_ ledger.OutboxRedriver = (*Outbox)(nil)
)

// This file is redrive (see redrive.go in the root package for the
// rules). The root package decides; the store looks up the new ID, stores
// both records under one lock and bounds the target's queue. memstore
// keeps no index of ended records, so the filtered forms scan every record
// under the lock, as retention does: O(n + k log k).

// Redrive sends a Failed or Expired delivery again as a new Offered one
// linked to it (see ledger.Redriver). Outcomes: Applied, NotFound,
// Repeated, WrongState, Conflict. Errors: ErrInvalid, ctx.Err().
func (s *Store) Redrive(ctx context.Context, req ledger.RedriveRequest, now time.Time) (ledger.RedriveResult, error) {
	if err := begin(ctx, storekit.ValidateRedrive(req, now)); err != nil {
		return ledger.RedriveResult{}, err
	}
	now = ledger.Normalize(now)
	s.mu.Lock()
	res := []ledger.RedriveResult{s.redriveLocked(req.ID, req.NewID, ledger.Owner{Agent: ledger.ActorFrom(ctx)}, now)}
	s.boundRedriven(res, now)
	s.mu.Unlock()
	return cloneRedrive(res[0]), nil
}

// RedriveMatching redrives up to q.Limit deliveries matching q, oldest
// EndedAt first (see ledger.Redriver). Errors: ErrInvalid, ctx.Err().
func (s *Store) RedriveMatching(ctx context.Context, q ledger.RedriveQuery, now time.Time) (ledger.RedriveBatch, error) {
	after, err := storekit.ValidateRedriveQuery(q, now)
	if err := begin(ctx, err); err != nil {
		return ledger.RedriveBatch{}, err
	}
	now = ledger.Normalize(now)
	var batch ledger.RedriveBatch
	s.mu.Lock()
	var picks []*ledger.Delivery
	for _, p := range s.recs {
		if q.Matches(*p, now) && after.After(p.EndedAt, string(p.ID)) {
			picks = append(picks, p)
		}
	}
	slices.SortFunc(picks, func(a, b *ledger.Delivery) int {
		return cmp.Or(a.EndedAt.Compare(b.EndedAt), cmp.Compare(a.ID, b.ID))
	})
	picks = picks[:min(len(picks), q.Limit)]
	ids := make([]ledger.DeliveryID, len(picks)) // redrives insert records: slots move on
	for i, p := range picks {
		ids[i] = p.ID
	}
	if len(picks) == q.Limit {
		last := picks[len(picks)-1]
		batch.Next = storekit.EncodeRedriveCursor(storekit.RedrivePosition{EndedAt: last.EndedAt, ID: string(last.ID)})
	}
	for _, id := range ids {
		batch.Results = append(batch.Results, s.redriveLocked(id, "", ledger.Owner{Agent: ledger.ActorFrom(ctx)}, now))
	}
	s.boundRedriven(batch.Results, now)
	s.mu.Unlock()
	for i := range batch.Results {
		batch.Results[i] = cloneRedrive(batch.Results[i])
	}
	return batch, nil
}

// redriveLocked redrives delivery id as newID at now, for actor (see
// ledger.WithActor; the zero Owner for nobody). The caller holds
// s.mu and clones the records of the result.
func (s *Store) redriveLocked(id, newID ledger.DeliveryID, actor ledger.Owner, now time.Time) ledger.RedriveResult {
	slot, ok := s.records[id]
	if !ok {
		return ledger.RedriveResult{Outcome: ledger.OutcomeNotFound}
	}
	d := *s.recs[slot]
	existing, taken := s.records[storekit.Delivery(d).RedriveAs(newID)]
	orig, fresh, o := storekit.Delivery(d).Redrive(newID, taken, now)
	res := ledger.RedriveResult{Outcome: o, Original: orig}
	switch o {
	case ledger.OutcomeRepeated:
		if taken {
			res.Redriven = *s.recs[existing]
		}
	case ledger.OutcomeApplied:
		s.replace(slot, &orig, ledger.OpRedrive, actor)
		s.insert(&fresh)
		res.Redriven = fresh
	}
	return res
}

// boundRedriven bounds the queues of the targets the redrives of results
// added to, after all of them, as EnqueueBatch does (boundBatch): in
// target order, each target's abandoned IDs listed on its last applied
// result, and every new record abandoned shown as it now stands. The
// caller holds s.mu.
func (s *Store) boundRedriven(results []ledger.RedriveResult, now time.Time) {
	if !s.cfg.bounds.Any() {
		return
	}
	last := map[ledger.Target]int{}
	for i, r := range results {
		if r.Applied() {
			last[r.Redriven.Target] = i
		}
	}
	targets := make([]ledger.Target, 0, len(last))
	for t := range last {
		targets = append(targets, t)
	}
	slices.Sort(targets)
	gone := map[ledger.DeliveryID]bool{}
	for _, t := range targets {
		ids := s.boundQueue(t, now)
		results[last[t]].Abandoned = ids
		for _, id := range ids {
			gone[id] = true
		}
	}
	for i, r := range results {
		if r.Applied() && gone[r.Redriven.ID] {
			results[i].Redriven = *s.recs[s.records[r.Redriven.ID]]
		}
	}
}

// cloneRedrive returns r as the store hands it out: copies without
// tokens.
func cloneRedrive(r ledger.RedriveResult) ledger.RedriveResult {
	r.Original = handOut(r.Original)
	r.Redriven = handOut(r.Redriven)
	return r
}

// RedriveEntry sends a Failed or DeadLettered entry again as a new
// Pending one linked to it (see ledger.OutboxRedriver), stamped with the
// clock. Outcomes: Applied, NotFound, Repeated, WrongState, Conflict.
// Errors: ErrInvalid, ctx.Err().
func (o *Outbox) RedriveEntry(ctx context.Context, req ledger.RedriveEntryRequest) (ledger.RedriveEntryResult, error) {
	if err := begin(ctx, storekit.ValidateRedriveEntry(req)); err != nil {
		return ledger.RedriveEntryResult{}, err
	}
	now := ledger.Normalize(o.cfg.clock())
	o.mu.Lock()
	res := o.redriveLocked(req.ID, req.IdempotencyKey, ledger.ActorFrom(ctx), now)
	o.mu.Unlock()
	return cloneEntryRedrive(res), nil
}

// RedriveEntriesMatching redrives up to q.Limit entries matching q,
// oldest EndedAt first (see ledger.OutboxRedriver). Errors: ErrInvalid,
// ctx.Err().
func (o *Outbox) RedriveEntriesMatching(ctx context.Context, q ledger.RedriveEntryQuery) (ledger.RedriveEntryBatch, error) {
	after, err := storekit.ValidateRedriveEntryQuery(q)
	if err := begin(ctx, err); err != nil {
		return ledger.RedriveEntryBatch{}, err
	}
	now := ledger.Normalize(o.cfg.clock())
	var batch ledger.RedriveEntryBatch
	o.mu.Lock()
	var picks []*entry
	for _, p := range o.entries {
		if q.Matches(p.OutboxEntry) && after.After(p.EndedAt, string(p.ID)) {
			picks = append(picks, p)
		}
	}
	slices.SortFunc(picks, func(a, b *entry) int {
		return cmp.Or(a.EndedAt.Compare(b.EndedAt), cmp.Compare(a.ID, b.ID))
	})
	picks = picks[:min(len(picks), q.Limit)]
	if len(picks) == q.Limit {
		last := picks[len(picks)-1]
		batch.Next = storekit.EncodeRedriveCursor(storekit.RedrivePosition{EndedAt: last.EndedAt, ID: string(last.ID)})
	}
	for _, p := range picks {
		batch.Results = append(batch.Results, o.redriveLocked(p.ID, "", ledger.ActorFrom(ctx), now))
	}
	o.mu.Unlock()
	for i := range batch.Results {
		batch.Results[i] = cloneEntryRedrive(batch.Results[i])
	}
	return batch, nil
}

// redriveLocked redrives entry id under key at now, for actor ("" for
// nobody). The caller holds o.mu
// and clones the entries of the result.
func (o *Outbox) redriveLocked(id ledger.OutboxEntryID, key, actor string, now time.Time) ledger.RedriveEntryResult {
	p, ok := o.entries[id]
	if !ok {
		return ledger.RedriveEntryResult{Outcome: ledger.OutcomeNotFound}
	}
	existing, taken := o.entries[storekit.OutboxEntry(p.OutboxEntry).RedriveAs(key)]
	orig, fresh, out := storekit.OutboxEntry(p.OutboxEntry).Redrive(key, taken, now)
	res := ledger.RedriveEntryResult{Outcome: out, Original: orig}
	switch out {
	case ledger.OutcomeRepeated:
		if taken {
			res.Redriven = existing.OutboxEntry
		}
	case ledger.OutcomeApplied:
		o.replace(p, orig, change{op: ledger.OpRedrive, worker: actor})
		o.insert(fresh)
		res.Redriven = fresh
	}
	return res
}

// cloneEntryRedrive returns r as the store hands it out: copies without
// tokens.
func cloneEntryRedrive(r ledger.RedriveEntryResult) ledger.RedriveEntryResult {
	r.Original = handOutEntry(r.Original)
	r.Redriven = handOutEntry(r.Redriven)
	return r
}
