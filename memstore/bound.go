package memstore

import (
	"slices"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// This file keeps bounded targets' queues within their bounds (see
// bound.go in the root package for the rule). A target's offer index
// holds exactly its queue, its Offered and Leased deliveries, so counting
// it costs nothing, and its oldest Offered deliveries are the first ones
// of that index in offer order.

// WithQueueBound bounds the queue (the Offered and Leased deliveries) of
// every target to n deliveries: an Enqueue, EnqueueBatch or Redrive that
// takes a target's queue over n abandons its oldest Offered deliveries
// with cause ledger.CauseQueueBounded (see ledger.QueueBounds). 0, the
// default, bounds nothing; a value outside 0..ledger.MaxQueueBound is
// ignored, as memstore's options never fail.
func WithQueueBound(n int) Option {
	return func(c *config) {
		if b := (ledger.QueueBounds{Default: n, Targets: c.bounds.Targets}); b.Validate() == nil {
			c.bounds = b
		}
	}
}

// WithTargetQueueBound bounds the queue of target t to n deliveries,
// overriding WithQueueBound for it; 0 exempts t from that default. An
// invalid target or bound is ignored.
func WithTargetQueueBound(t ledger.Target, n int) Option {
	return func(c *config) {
		if b := c.bounds.With(t, n); b.Validate() == nil {
			c.bounds = b
		}
	}
}

// boundQueue abandons the oldest Offered deliveries of target as far as
// its bound asks (storekit.QueueOverflow), oldest first, and returns their
// IDs in that order; nil when target is unbounded or within its bound.
// The caller holds s.mu.
func (s *Store) boundQueue(target ledger.Target, now time.Time) []ledger.DeliveryID {
	bound := s.cfg.bounds.For(target)
	t := s.byTarget.get(target)
	if bound == 0 || t == nil {
		return nil
	}
	over := storekit.QueueOverflow(t.Len(), bound)
	if over == 0 {
		return nil
	}
	victims := make([]uint32, 0, over)
	c := t.first()
	for k, ok := c.next(); ok && len(victims) < over; k, ok = c.next() {
		if s.recs[k.slot].State == ledger.DeliveryStateOffered {
			victims = append(victims, k.slot)
		}
	}
	ids := make([]ledger.DeliveryID, 0, len(victims))
	for _, slot := range victims {
		if d, o := storekit.Delivery(*(s.recs[slot])).BoundQueue(bound, now); o == ledger.OutcomeApplied {
			s.replace(slot, &d, ledger.OpAbandon, ledger.Owner{})
			ids = append(ids, d.ID)
		}
	}
	return ids
}

// boundBatch bounds the queues of the targets an EnqueueBatch added to,
// in target order, and says so on out: each target's abandoned IDs on the
// result of the batch's last applied request for it, and every result
// whose record was abandoned carries the record as it now stands (built,
// the records the batch stored, is updated too). The caller holds s.mu.
func (s *Store) boundBatch(reqs []ledger.EnqueueRequest, out []ledger.DeliveryResult, built []ledger.Delivery, now time.Time) {
	last := map[ledger.Target]int{}
	for i, r := range out {
		if r.Outcome == ledger.OutcomeApplied {
			last[reqs[i].Target] = i
		}
	}
	targets := make([]ledger.Target, 0, len(last))
	for t := range last {
		targets = append(targets, t)
	}
	slices.Sort(targets)
	abandoned := map[ledger.DeliveryID]bool{}
	for _, t := range targets {
		ids := s.boundQueue(t, now)
		out[last[t]].Abandoned = ids
		for _, id := range ids {
			abandoned[id] = true
		}
	}
	if len(abandoned) == 0 {
		return
	}
	for i := range out {
		id := reqs[i].ID
		if !abandoned[id] {
			continue
		}
		d := *s.recs[s.records[id]]
		if out[i].Outcome == ledger.OutcomeApplied {
			built[i] = d
		} else {
			out[i].Delivery = d
		}
	}
}
