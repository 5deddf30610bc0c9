package pgstore

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// This file keeps bounded targets' queues within their bounds (see
// bound.go in the root package for the rule). A store without bounds never
// comes here: Enqueue checks cfg.bounds.Any() first.
//
// How a call that added deliveries to bounded targets bounds them, in its
// own transaction, after its inserts:
//
//  1. For each target, in target order: take the target's transaction
//     advisory lock (queueLockKey), then count the target's queue. The
//     lock serialises the calls that add to one target, so the count of
//     each statement after it sees every delivery the calls before it
//     committed, and its own: two concurrent enqueues can never both
//     count under the bound and both stay. Nothing outlives the
//     transaction, so it works behind PgBouncer in transaction mode. The
//     count reads deliveries_offerable_target_idx, the index of the
//     queues by target, and stops after bound+MaxLimit entries
//     (storekit.QueueOverflow never asks for more): it never reads the
//     target's ended rows, nor a long queue whole.
//  2. For a target over its bound: read its oldest Offered rows from the
//     same index, as many as storekit.QueueOverflow says, locked with SKIP
//     LOCKED (a row a Lease is granting right now is not waited for; the
//     next one is taken instead, at worst the delivery just enqueued,
//     which this transaction holds), and end each with
//     storekit.Delivery.BoundQueue.
//  3. Write them back with their history; the changes of the terminal
//     counts go last, once every advisory lock is held.

// WithQueueBound bounds the queue (the Offered and Leased deliveries) of
// every target to n deliveries: an Enqueue, EnqueueBatch or Redrive that
// takes a target's queue over n abandons its oldest Offered deliveries,
// in the same transaction, with cause ledger.CauseQueueBounded (see
// ledger.QueueBounds). 0, the default, bounds nothing and costs nothing.
// n outside 0..ledger.MaxQueueBound makes New fail with ErrInvalid. Every
// process that enqueues for a target must configure the same bound for it.
// Enqueues of one bounded target take turns for their transaction (see
// bound.go); under WithTx that lasts until the caller's transaction ends,
// so keep such transactions short.
func WithQueueBound(n int) Option {
	return func(c *config) {
		b := ledger.QueueBounds{Default: n, Targets: c.bounds.Targets}
		if err := b.Validate(); err != nil {
			c.fail(err)
			return
		}
		c.bounds = b
	}
}

// WithTargetQueueBound bounds the queue of target t to n deliveries,
// overriding WithQueueBound for it; 0 exempts t from that default. An
// invalid target or bound makes New fail with ErrInvalid.
func WithTargetQueueBound(t ledger.Target, n int) Option {
	return func(c *config) {
		b := c.bounds.With(t, n)
		if err := b.Validate(); err != nil {
			c.fail(err)
			return
		}
		c.bounds = b
	}
}

// queueLockKey is the pg_advisory_xact_lock key that serialises the calls
// adding to target's queue in one schema. Targets whose keys collide only
// wait for each other.
func queueLockKey(schema string, target ledger.Target) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("leaseledger/pgstore queue " + schema + "\x00" + string(target)))
	return int64(h.Sum64())
}

// boundedTargets returns the bounded targets among targets, sorted and
// without repeats: the order their locks are taken in.
func (s *Store) boundedTargets(targets []ledger.Target) []ledger.Target {
	var out []ledger.Target
	for _, t := range targets {
		if s.cfg.bounds.For(t) > 0 {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// boundQueues bounds the queues of targets (sorted, bounded) as the file
// comment says, adding the count changes to counts for the caller to write
// last, and returns the abandoned records of each target, oldest first.
func (s *Store) boundQueues(ctx context.Context, tx pgx.Tx, targets []ledger.Target, now time.Time, counts deliveryCounts) (map[ledger.Target][]ledger.Delivery, error) {
	if len(targets) == 0 {
		return nil, nil
	}
	b := &pgx.Batch{}
	for _, t := range targets {
		b.Queue(s.q.advisoryXL, queueLockKey(s.cfg.schema, t))
		b.Queue(s.q.queueLength, string(t), s.cfg.bounds.For(t)+ledger.MaxLimit)
	}
	lengths, err := queueLengths(ctx, tx, b, len(targets))
	if err != nil {
		return nil, err
	}
	out := map[ledger.Target][]ledger.Delivery{}
	var changes []deliveryChange
	for i, t := range targets {
		bound := s.cfg.bounds.For(t)
		over := storekit.QueueOverflow(lengths[i], bound)
		if over == 0 {
			continue
		}
		rows, err := tx.Query(ctx, s.q.oldestOffered, string(t), over)
		if err != nil {
			return nil, err
		}
		ds, err := collectDeliveries(rows)
		if err != nil {
			return nil, err
		}
		for _, d := range ds {
			nd, o := storekit.Delivery(d).BoundQueue(bound, now)
			if o != ledger.OutcomeApplied {
				return nil, fmt.Errorf("bound queue of %s: delivery %s is %s: %w", t, d.ID, d.State, errRowChanged)
			}
			changes = append(changes, changeOf(how{op: ledger.OpAbandon}, d, nd))
			out[t] = append(out[t], nd)
		}
	}
	if err := s.writeDeliveries(ctx, tx, changes, counts); err != nil {
		return nil, err
	}
	return out, nil
}

// queueLengths sends b, the lock and count of each of n targets, in one
// round trip and returns the counts in order.
func queueLengths(ctx context.Context, tx pgx.Tx, b *pgx.Batch, n int) (_ []int, err error) {
	br := tx.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}()
	lengths := make([]int, n)
	for i := range lengths {
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
		if err := br.QueryRow().Scan(&lengths[i]); err != nil {
			return nil, err
		}
	}
	return lengths, nil
}

// boundEnqueued bounds the queues of the bounded targets that an enqueue
// inserted records for (ids in ID order, those not in held: records), and
// writes the count changes. The caller has copied the records in.
func (s *Store) boundEnqueued(ctx context.Context, tx pgx.Tx, ids []string, held, records map[ledger.DeliveryID]ledger.Delivery, now time.Time) (map[ledger.Target][]ledger.Delivery, error) {
	var targets []ledger.Target
	for _, id := range ids {
		if _, ok := held[ledger.DeliveryID(id)]; !ok {
			targets = append(targets, records[ledger.DeliveryID(id)].Target)
		}
	}
	counts := deliveryCounts{}
	abandoned, err := s.boundQueues(ctx, tx, s.boundedTargets(targets), now, counts)
	if err != nil {
		return nil, err
	}
	b := &pgx.Batch{}
	counts.queue(b, s.q, false)
	if _, err := execBatch(ctx, tx, b); err != nil {
		return nil, err
	}
	return abandoned, nil
}

// reportAbandoned says on an enqueue's results what its bounds abandoned,
// as memstore does: each target's IDs on the result of the last applied
// request for it, and every result whose record was abandoned carries the
// record as it now stands.
func reportAbandoned(reqs []ledger.EnqueueRequest, results []ledger.DeliveryResult, abandoned map[ledger.Target][]ledger.Delivery) {
	last := map[ledger.Target]int{}
	for i, r := range results {
		if r.Outcome == ledger.OutcomeApplied {
			last[reqs[i].Target] = i
		}
	}
	now := map[ledger.DeliveryID]ledger.Delivery{}
	for t, ds := range abandoned {
		ids := make([]ledger.DeliveryID, len(ds))
		for i, d := range ds {
			ids[i] = d.ID
			now[d.ID] = d
		}
		results[last[t]].Abandoned = ids
	}
	for i := range results {
		if d, ok := now[reqs[i].ID]; ok {
			results[i].Delivery = d.Clone()
		}
	}
}
