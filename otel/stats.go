package ledgerotel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/leaseledger/ledger"
)

// ObserveStats registers the delivery gauges (depth, lag, records by
// state) read from r at each collection, through one callback for all of
// them: a collection makes one r.Stats call, whatever the number of
// instruments. With targets, it makes one call per target instead,
// filtered to that target, and labels its points with it
// (messaging.destination.name); without, one call for the whole ledger,
// unlabelled. Register each ledger once. Unregister the returned
// registration to stop.
//
// A Stats call that fails, or outlasts WithStatsTimeout, leaves its
// points out of that collection, and the error goes to the collection's
// error handler.
func (in *Instrumentation) ObserveStats(r ledger.StatsReporter, targets ...ledger.Target) (metric.Registration, error) {
	if r == nil {
		return nil, errors.New("ledgerotel: ObserveStats needs a StatsReporter")
	}
	for _, t := range targets {
		if err := ledger.ValidateName("target", string(t)); err != nil {
			return nil, err
		}
	}
	filters := []ledger.StatsFilter{{}}
	if len(targets) > 0 {
		filters = filters[:0]
		for _, t := range targets {
			filters = append(filters, ledger.StatsFilter{Target: t})
		}
	}
	ins := &in.ins
	return in.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		var errs []error
		for _, f := range filters {
			st, err := bounded(ctx, in.cfg.timeout, func(ctx context.Context) (ledger.DeliveryStats, error) {
				return r.Stats(ctx, f, in.cfg.clock())
			})
			if err != nil {
				errs = append(errs, fmt.Errorf("ledgerotel: stats of target %q: %w", f.Target, err))
				continue
			}
			var base []attribute.KeyValue
			if f.Target != "" {
				base = append(base, semconv.MessagingDestinationNameKey.String(string(f.Target)))
			}
			set := metric.WithAttributes(base...)
			o.ObserveInt64(ins.deliveryDepth, st.Depth, set)
			o.ObserveFloat64(ins.deliveryLag, st.Lag.Seconds(), set)
			for _, state := range ledger.DeliveryStates() {
				o.ObserveInt64(ins.deliveryRecords, st.ByState[state],
					metric.WithAttributes(append(base, StateKey.String(string(state)))...))
			}
		}
		return errors.Join(errs...)
	}, ins.deliveryDepth, ins.deliveryLag, ins.deliveryRecords)
}

// ObserveOutboxStats registers the outbox gauges (depth, lag, entries by
// status) read from r at each collection, with one r.OutboxStats call
// per collection whatever the number of instruments. OutboxStats counts
// the whole outbox, so these points have no provider. Register each
// outbox once; errors as for ObserveStats.
func (in *Instrumentation) ObserveOutboxStats(r ledger.OutboxStatsReporter) (metric.Registration, error) {
	if r == nil {
		return nil, errors.New("ledgerotel: ObserveOutboxStats needs an OutboxStatsReporter")
	}
	ins := &in.ins
	return in.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		st, err := bounded(ctx, in.cfg.timeout, func(ctx context.Context) (ledger.OutboxStats, error) {
			return r.OutboxStats(ctx, in.cfg.clock())
		})
		if err != nil {
			return fmt.Errorf("ledgerotel: outbox stats: %w", err)
		}
		o.ObserveInt64(ins.outboxDepth, st.Depth)
		o.ObserveFloat64(ins.outboxLag, st.Lag.Seconds())
		for _, status := range ledger.OutboxStatuses() {
			o.ObserveInt64(ins.outboxEntries, st.ByStatus[status],
				metric.WithAttributes(StatusKey.String(string(status))))
		}
		return nil
	}, ins.outboxDepth, ins.outboxLag, ins.outboxEntries)
}

// bounded runs one stats call under the collection's context, for at
// most timeout.
func bounded[T any](ctx context.Context, timeout time.Duration, call func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return call(ctx)
}
