package ledgerotel

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// ObserveStats registers the delivery gauges read from r at each
// collection, through one callback for all of them and one r.Stats call
// for the whole ledger per collection, whatever the number of
// instruments and of targets:
//
//   - depth and lag by target (messaging.destination.name), from
//     DeliveryStats.ByTarget: one point per target with deliveries Lease
//     could hand out, and a point at zero for every target that had one
//     at an earlier collection, so that a series drops to zero when its
//     queue empties instead of vanishing;
//   - records by state for the whole ledger (no target).
//
// With targets, the depth and lag points are those of the given targets
// only, each present at every collection (zero when nothing of it is
// queued), and other targets are left out: a filter on the labels, which
// also bounds them. Targets change neither the number of Stats calls
// (one) nor the records by state, which are always the whole ledger's.
// Register each ledger once. Unregister the returned registration to
// stop.
//
// Targets are operator-chosen names, so the labels stay few; a ledger
// whose targets are open-ended (one per user, say) should pass the few
// to watch.
//
// A Stats call that fails, or outlasts WithStatsTimeout, leaves its
// points out of that collection, and the error goes to the collection's
// error handler.
func (in *Instrumentation) ObserveStats(r ledger.StatsReporter, targets ...ledger.Target) (metric.Registration, error) {
	if r == nil {
		return nil, errors.New("ledgerotel: ObserveStats needs a StatsReporter")
	}
	names := make([]string, 0, len(targets))
	for _, t := range targets {
		if err := storekit.ValidateName("target", string(t)); err != nil {
			return nil, err
		}
		names = append(names, string(t))
	}
	queues := newQueueSeries(names)
	ins := &in.ins
	return in.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		st, err := bounded(ctx, in.cfg.timeout, func(ctx context.Context) (ledger.DeliveryStats, error) {
			return r.Stats(ctx, ledger.StatsFilter{}, in.cfg.clock())
		})
		if err != nil {
			return fmt.Errorf("ledgerotel: stats: %w", err)
		}
		now := make(map[string]queuePoint, len(st.ByTarget))
		for t, q := range st.ByTarget {
			now[string(t)] = queuePoint{depth: q.Depth, lag: q.Lag}
		}
		for _, p := range queues.points(now) {
			set := metric.WithAttributes(semconv.MessagingDestinationNameKey.String(p.name))
			o.ObserveInt64(ins.deliveryDepth, p.depth, set)
			o.ObserveFloat64(ins.deliveryLag, p.lag.Seconds(), set)
		}
		for _, state := range ledger.DeliveryStates() {
			o.ObserveInt64(ins.deliveryRecords, st.ByState[state], metric.WithAttributes(StateKey.String(string(state))))
		}
		return nil
	}, ins.deliveryDepth, ins.deliveryLag, ins.deliveryRecords)
}

// ObserveOutboxStats registers the outbox gauges read from r at each
// collection, with one r.OutboxStats call per collection whatever the
// number of instruments: depth and lag by provider
// (messaging.destination.name), from OutboxStats.ByProvider, and entries
// by status for the whole outbox (no provider). Providers work as the
// targets of ObserveStats: without them, every provider with something
// due, and at zero every provider that had something due at an earlier
// collection; with them, those providers only, at every collection.
// Register each outbox once; errors as for ObserveStats.
func (in *Instrumentation) ObserveOutboxStats(r ledger.OutboxStatsReporter, providers ...string) (metric.Registration, error) {
	if r == nil {
		return nil, errors.New("ledgerotel: ObserveOutboxStats needs an OutboxStatsReporter")
	}
	for _, p := range providers {
		if err := storekit.ValidateName("provider", p); err != nil {
			return nil, err
		}
	}
	queues := newQueueSeries(providers)
	ins := &in.ins
	return in.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		st, err := bounded(ctx, in.cfg.timeout, func(ctx context.Context) (ledger.OutboxStats, error) {
			return r.OutboxStats(ctx, in.cfg.clock())
		})
		if err != nil {
			return fmt.Errorf("ledgerotel: outbox stats: %w", err)
		}
		now := make(map[string]queuePoint, len(st.ByProvider))
		for p, q := range st.ByProvider {
			now[p] = queuePoint{depth: q.Depth, lag: q.Lag}
		}
		for _, p := range queues.points(now) {
			set := metric.WithAttributes(semconv.MessagingDestinationNameKey.String(p.name))
			o.ObserveInt64(ins.outboxDepth, p.depth, set)
			o.ObserveFloat64(ins.outboxLag, p.lag.Seconds(), set)
		}
		for _, status := range ledger.OutboxStatuses() {
			o.ObserveInt64(ins.outboxEntries, st.ByStatus[status],
				metric.WithAttributes(StatusKey.String(string(status))))
		}
		return nil
	}, ins.outboxDepth, ins.outboxLag, ins.outboxEntries)
}

// queuePoint is the depth and lag of one target's or provider's queue.
type queuePoint struct {
	name  string
	depth int64
	lag   time.Duration
}

// queueSeries decides which targets or providers a collection reports
// the queue of: the fixed ones when the caller named them, otherwise
// every one seen so far, so that a queue that empties reads zero.
type queueSeries struct {
	fixed []string
	mu    sync.Mutex // collections may run at once, one per reader
	seen  map[string]bool
}

func newQueueSeries(fixed []string) *queueSeries {
	return &queueSeries{fixed: slices.Compact(slices.Sorted(slices.Values(fixed))), seen: map[string]bool{}}
}

// points returns the points to report given the queues of now, by name,
// in name order.
func (s *queueSeries) points(now map[string]queuePoint) []queuePoint {
	names := s.fixed
	if len(names) == 0 {
		s.mu.Lock()
		for n := range now {
			s.seen[n] = true
		}
		names = slices.Sorted(maps.Keys(s.seen))
		s.mu.Unlock()
	}
	out := make([]queuePoint, 0, len(names))
	for _, n := range names {
		p := now[n]
		p.name = n
		out = append(out, p)
	}
	return out
}

// bounded runs one stats call under the collection's context, for at
// most timeout.
func bounded[T any](ctx context.Context, timeout time.Duration, call func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return call(ctx)
}
