package ledgerotel

import (
	"context"
	"errors"
	"sync"

	"github.com/leaseledger/ledger"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/leaseledger/ledger/dispatch"
)

// Names of the instruments (see the package documentation for their
// units and attributes). Where OpenTelemetry's messaging semantic
// conventions name an instrument (ProcessDuration, ConsumedMessages),
// this package uses their name, unit and attributes; the others are its
// own, under leaseledger.
const (
	OutboxEvents            = "leaseledger.outbox.events"
	OutboxCompletionLatency = "leaseledger.outbox.completion.latency"
	DeliveryEvents          = "leaseledger.delivery.events"
	DeliveryLatency         = "leaseledger.delivery.completion.latency"
	// ProcessDuration is the time the emitter took for one emission
	// (messaging.operation.name "emit") or the handler for one delivery
	// ("handle"): messaging.process.duration of the conventions.
	ProcessDuration = "messaging.process.duration"
	// ConsumedMessages counts the items handed to the loops: claims
	// (messaging.operation.name "claim") and leases ("lease"), the
	// conventions' messaging.client.consumed.messages.
	ConsumedMessages = "messaging.client.consumed.messages"
	// SweepEvents counts a Sweeper's events (swept, sweep_failed,
	// lead_taken, lead_lost) by job; SweepRecords the records its sweeps
	// changed or deleted, by job.
	SweepEvents     = "leaseledger.sweep.events"
	SweepRecords    = "leaseledger.sweep.records"
	DeliveryDepth   = "leaseledger.delivery.depth"
	DeliveryLag     = "leaseledger.delivery.lag"
	DeliveryRecords = "leaseledger.delivery.records"
	OutboxDepth     = "leaseledger.outbox.depth"
	OutboxLag       = "leaseledger.outbox.lag"
	OutboxEntries   = "leaseledger.outbox.entries"
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
	// process and consumed are shared by both kinds of loop, told apart
	// by messaging.operation.name.
	process                   metric.Float64Histogram
	consumed                  metric.Int64Counter
	sweepEvents, sweepRecords metric.Int64Counter

	deliveryDepth, outboxDepth     metric.Int64ObservableGauge
	deliveryLag, outboxLag         metric.Float64ObservableGauge
	deliveryRecords, outboxEntries metric.Int64ObservableUpDownCounter
}

type eventInstruments struct {
	events  metric.Int64Counter
	latency metric.Float64Histogram
}

func (ins *instruments) create(m metric.Meter) error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		add(err)
		return c
	}
	events := func(name, desc string) metric.Int64Counter { return counter(name, "{event}", desc) }
	histogram := func(name, desc string, bounds []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(bounds...))
		add(err)
		return h
	}
	ins.outbox = eventInstruments{
		events:  events(OutboxEvents, "Events of outbox dispatchers: claims, completions, renewals and errors."),
		latency: histogram(OutboxCompletionLatency, "Time from an entry's enqueue to a completion of it that applied.", latencyBuckets),
	}
	ins.delivery = eventInstruments{
		events:  events(DeliveryEvents, "Events of delivery workers: leases, completions, renewals and errors."),
		latency: histogram(DeliveryLatency, "Time from a delivery's enqueue to a completion of it that applied.", latencyBuckets),
	}
	ins.process = histogram(ProcessDuration, "Time the emitter took for one emission, or the handler for one delivery.", durationBuckets)
	ins.consumed = counter(ConsumedMessages, "{message}", "Outbox entries claimed and deliveries leased by the loops.")
	ins.sweepEvents = events(SweepEvents, "Events of sweepers: sweeps, failed sweeps, leads taken and lost, by job.")
	ins.sweepRecords = counter(SweepRecords, "{record}", "Records the sweeps changed or deleted, by job.")
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

// record counts ev and records its duration and latency, with the
// label sets of its kind of loop from c.
func (ins *instruments) record(ctx context.Context, ev dispatch.Event, loop loopKind, c *labelCache) {
	if loop == sweeperLoop {
		ins.sweepEvents.Add(ctx, 1, c.get(labelKeyOf(ev, loop, setEvent)))
		// A sweep that changed nothing adds 0, so that the job's series
		// exists from its first sweep on.
		if ev.Kind == dispatch.EventSwept {
			ins.sweepRecords.Add(ctx, int64(ev.Count), c.get(labelKeyOf(ev, loop, setRecords)))
		}
		return
	}
	e := &ins.outbox
	if loop == workerLoop {
		e = &ins.delivery
	}
	opt := c.get(labelKeyOf(ev, loop, setEvent))
	e.events.Add(ctx, 1, opt)
	if ev.Kind == dispatch.EventClaimed || ev.Kind == dispatch.EventLeased {
		ins.consumed.Add(ctx, 1, c.get(labelKeyOf(ev, loop, setConsumed)))
	}
	if !ev.Final {
		return
	}
	// A release of work that never started (shutdown) follows no
	// emission or handling.
	if ev.Kind != dispatch.EventReleased || ev.Duration > 0 {
		ins.process.Record(ctx, ev.Duration.Seconds(), c.get(labelKeyOf(ev, loop, setProcess)))
	}
	if completions[ev.Kind] {
		e.latency.Record(ctx, ev.Latency.Seconds(), opt)
	}
}

// loopKind is the kind of loop an event comes from.
type loopKind uint8

const (
	dispatcherLoop loopKind = iota
	workerLoop
	sweeperLoop
)

// loopOf tells the loops apart by what their events carry: a Worker's
// its Owner, a Sweeper's its Job.
func loopOf(ev dispatch.Event) loopKind {
	switch {
	case ev.Job != "":
		return sweeperLoop
	case ev.Owner != (ledger.Owner{}):
		return workerLoop
	}
	return dispatcherLoop
}

// labelSet says which instrument a label set is for: each has the
// attributes its name calls for.
type labelSet uint8

const (
	setEvent labelSet = iota
	setProcess
	setConsumed
	setRecords
)

// errorType is the conventions' error.type of an event: a low-cardinality
// class of its error, "" when it has none.
func errorType(ev dispatch.Event) string {
	var panicked *dispatch.PanicError
	switch {
	case ev.Kind == dispatch.EventStoreError || ev.Kind == dispatch.EventSweepFailed:
		return "store_error"
	case ev.Err == nil:
		return ""
	case errors.Is(ev.Err, context.DeadlineExceeded):
		return "timeout"
	case errors.As(ev.Err, &panicked), errors.Is(ev.Err, dispatch.ErrPanic):
		return "panic"
	case errors.Is(ev.Err, dispatch.ErrClaimLost), errors.Is(ev.Err, dispatch.ErrLeaseLost):
		return "lease_lost"
	case errors.Is(ev.Err, dispatch.ErrPermanent):
		return "permanent"
	case errors.Is(ev.Err, dispatch.ErrDeferred):
		return "deferred"
	}
	return "_OTHER" // the conventions' value for an error of no known class
}

// labelKey is what the attributes of an event's points depend on: all
// of it bounded (no IDs).
type labelKey struct {
	set         labelSet
	loop        loopKind
	event       dispatch.EventKind
	outcome     string
	destination string
	entryKind   string
	job         dispatch.SweepJob
	errorType   string
}

func labelKeyOf(ev dispatch.Event, loop loopKind, set labelSet) labelKey {
	k := labelKey{set: set, loop: loop}
	if loop == sweeperLoop {
		k.job = ev.Job
		if set == setEvent {
			k.event, k.outcome, k.errorType = ev.Kind, ev.Outcome, errorType(ev)
		}
		return k
	}
	if loop == workerLoop {
		k.destination = string(ev.Target)
	} else {
		k.destination, k.entryKind = ev.Provider, ev.EntryKind
	}
	switch set {
	case setEvent:
		k.event, k.outcome = ev.Kind, ev.Outcome
	case setProcess:
		k.event, k.outcome, k.errorType = ev.Kind, ev.Outcome, errorType(ev)
	}
	return k
}

// operationName is messaging.operation.name of a label set: what the
// loop did with the item.
func (k labelKey) operationName() string {
	switch {
	case k.set == setConsumed && k.loop == workerLoop:
		return "lease"
	case k.set == setConsumed:
		return "claim"
	case k.set == setProcess && k.loop == workerLoop:
		return OperationHandle
	case k.set == setProcess:
		return OperationEmit
	}
	return ""
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
	attrs := []attribute.KeyValue{semconv.MessagingSystemKey.String(SystemName)}
	if k.event != "" {
		attrs = append(attrs, EventKey.String(string(k.event)))
	}
	if op := k.operationName(); op != "" {
		attrs = append(attrs, semconv.MessagingOperationNameKey.String(op))
	}
	if k.job != "" {
		attrs = append(attrs, SweepJobKey.String(string(k.job)))
	}
	if k.errorType != "" {
		attrs = append(attrs, semconv.ErrorTypeKey.String(k.errorType))
	}
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
