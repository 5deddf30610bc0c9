package ledgerotel

import (
	"context"
	"errors"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/leaseledger/ledger/dispatch"
)

// Names of the instruments (see the package documentation for their
// units and attributes).
const (
	OutboxEvents            = "leaseledger.outbox.events"
	OutboxEmitDuration      = "leaseledger.outbox.emit.duration"
	OutboxCompletionLatency = "leaseledger.outbox.completion.latency"
	DeliveryEvents          = "leaseledger.delivery.events"
	DeliveryHandleDuration  = "leaseledger.delivery.handle.duration"
	DeliveryLatency         = "leaseledger.delivery.completion.latency"
	DeliveryDepth           = "leaseledger.delivery.depth"
	DeliveryLag             = "leaseledger.delivery.lag"
	DeliveryRecords         = "leaseledger.delivery.records"
	OutboxDepth             = "leaseledger.outbox.depth"
	OutboxLag               = "leaseledger.outbox.lag"
	OutboxEntries           = "leaseledger.outbox.entries"
)

// durationBuckets are the bounds, in seconds, of the emit and handle
// durations: a provider call, from a few milliseconds to the default
// emit timeout.
var durationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30}

// latencyBuckets are the bounds, in seconds, of the time from enqueue to
// completion, which takes in retries and their backoff: from
// milliseconds to a day.
var latencyBuckets = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 21600, 86400}

// instruments are the synchronous instruments fed by events, per loop
// kind, and the asynchronous ones fed by stats.
type instruments struct {
	outbox, delivery eventInstruments

	deliveryDepth, outboxDepth     metric.Int64ObservableGauge
	deliveryLag, outboxLag         metric.Float64ObservableGauge
	deliveryRecords, outboxEntries metric.Int64ObservableUpDownCounter
}

type eventInstruments struct {
	events   metric.Int64Counter
	duration metric.Float64Histogram
	latency  metric.Float64Histogram
}

func (ins *instruments) create(m metric.Meter) error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	events := func(name, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit("{event}"), metric.WithDescription(desc))
		add(err)
		return c
	}
	histogram := func(name, desc string, bounds []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(bounds...))
		add(err)
		return h
	}
	ins.outbox = eventInstruments{
		events:   events(OutboxEvents, "Events of outbox dispatchers: claims, completions, renewals and errors."),
		duration: histogram(OutboxEmitDuration, "Time the emitter took for one emission.", durationBuckets),
		latency:  histogram(OutboxCompletionLatency, "Time from an entry's enqueue to a completion of it that applied.", latencyBuckets),
	}
	ins.delivery = eventInstruments{
		events:   events(DeliveryEvents, "Events of delivery workers: leases, completions, renewals and errors."),
		duration: histogram(DeliveryHandleDuration, "Time the handler took for one delivery.", durationBuckets),
		latency:  histogram(DeliveryLatency, "Time from a delivery's enqueue to a completion of it that applied.", latencyBuckets),
	}
	var err error
	ins.deliveryDepth, err = m.Int64ObservableGauge(DeliveryDepth, metric.WithUnit("{delivery}"),
		metric.WithDescription("Deliveries a lease could hand out now."))
	add(err)
	ins.deliveryLag, err = m.Float64ObservableGauge(DeliveryLag, metric.WithUnit("s"),
		metric.WithDescription("How long the oldest delivery a lease could hand out has waited."))
	add(err)
	ins.deliveryRecords, err = m.Int64ObservableUpDownCounter(DeliveryRecords, metric.WithUnit("{delivery}"),
		metric.WithDescription("Deliveries held by the ledger, by state."))
	add(err)
	ins.outboxDepth, err = m.Int64ObservableGauge(OutboxDepth, metric.WithUnit("{entry}"),
		metric.WithDescription("Outbox entries a claim could hand out now."))
	add(err)
	ins.outboxLag, err = m.Float64ObservableGauge(OutboxLag, metric.WithUnit("s"),
		metric.WithDescription("How long the oldest outbox entry a claim could hand out has been due."))
	add(err)
	ins.outboxEntries, err = m.Int64ObservableUpDownCounter(OutboxEntries, metric.WithUnit("{entry}"),
		metric.WithDescription("Outbox entries held by the store, by status."))
	add(err)
	return errors.Join(errs...)
}

// completions are the kinds of the events that carry a latency: the
// completions that applied keep their kind (dispatch.Event.Latency).
var completions = map[dispatch.EventKind]bool{
	dispatch.EventDelivered: true, dispatch.EventRetried: true, dispatch.EventDeadLettered: true,
	dispatch.EventDeferred: true, dispatch.EventProcessed: true, dispatch.EventFailed: true,
}

// record counts ev and records its duration and latency.
func (ins *instruments) record(ctx context.Context, ev dispatch.Event, worker bool, opt metric.MeasurementOption) {
	e := &ins.outbox
	if worker {
		e = &ins.delivery
	}
	e.events.Add(ctx, 1, opt)
	if !ev.Final {
		return
	}
	// A release of work that never started (shutdown) follows no
	// emission or handling.
	if ev.Kind != dispatch.EventReleased || ev.Duration > 0 {
		e.duration.Record(ctx, ev.Duration.Seconds(), opt)
	}
	if completions[ev.Kind] {
		e.latency.Record(ctx, ev.Latency.Seconds(), opt)
	}
}

// labelKey is what the attributes of an event's points depend on: all
// of it bounded (no IDs).
type labelKey struct {
	worker      bool
	event       dispatch.EventKind
	outcome     string
	destination string
	entryKind   string
}

func labelKeyOf(ev dispatch.Event, worker bool) labelKey {
	k := labelKey{worker: worker, event: ev.Kind, outcome: ev.Outcome}
	if worker {
		k.destination = string(ev.Target)
	} else {
		k.destination, k.entryKind = ev.Provider, ev.EntryKind
	}
	return k
}

// labelCache keeps the measurement option of each label key, so that an
// event's points cost a map read instead of building and sorting an
// attribute set.
type labelCache struct {
	mu sync.RWMutex
	m  map[labelKey]metric.MeasurementOption
}

// maxLabelSets bounds the cache; past it, options are built per event.
// Label sets are few unless providers, kinds or targets are not.
const maxLabelSets = 4096

func (c *labelCache) get(k labelKey) metric.MeasurementOption {
	c.mu.RLock()
	opt, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return opt
	}
	attrs := []attribute.KeyValue{semconv.MessagingSystemKey.String(SystemName), EventKey.String(string(k.event))}
	if k.outcome != "" {
		attrs = append(attrs, OutcomeKey.String(k.outcome))
	}
	if k.destination != "" {
		attrs = append(attrs, semconv.MessagingDestinationNameKey.String(k.destination))
	}
	if k.entryKind != "" {
		attrs = append(attrs, EntryKindKey.String(k.entryKind))
	}
	opt = metric.WithAttributeSet(attribute.NewSet(attrs...))
	c.mu.Lock()
	if len(c.m) < maxLabelSets {
		c.m[k] = opt
	}
	c.mu.Unlock()
	return opt
}
