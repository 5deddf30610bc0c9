package ledgerotel

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/dispatch"
)

// ScopeName is the instrumentation scope of every meter and tracer this
// package makes.
const ScopeName = "github.com/leaseledger/ledger/otel"

// SystemName is the value of messaging.system on every span and on the
// points of the event instruments.
const SystemName = "leaseledger"

// Attribute keys of this package's own attributes; the messaging ones
// come from the OpenTelemetry semantic conventions.
const (
	// EventKey is the dispatch.EventKind of an event.
	EventKey attribute.Key = "leaseledger.event"
	// OutcomeKey is the store's ledger.Outcome, when the event has one.
	OutcomeKey attribute.Key = "leaseledger.outcome"
	// EntryKindKey is the kind of an outbox entry's envelope.
	EntryKindKey attribute.Key = "leaseledger.entry.kind"
	// StateKey is a delivery state (ledger.DeliveryState).
	StateKey attribute.Key = "leaseledger.delivery.state"
	// StatusKey is an outbox status (ledger.OutboxStatus).
	StatusKey attribute.Key = "leaseledger.outbox.status"
	// AttemptKey is the attempt an emission or a handling is (spans only).
	AttemptKey attribute.Key = "leaseledger.attempt"
	// CeremonyKey is a delivery's ceremony (spans only).
	CeremonyKey attribute.Key = "leaseledger.ceremony"
	// AgentKey is the agent of a Worker (spans only).
	AgentKey attribute.Key = "leaseledger.agent"
	// WorkerKey is the worker name of a Dispatcher (spans only).
	WorkerKey attribute.Key = "leaseledger.worker"
	// SweepJobKey is a Sweeper's job (dispatch.SweepJob), the name of its
	// lead: dispatch.sweep.expire, dispatch.sweep.purge_deliveries,
	// dispatch.sweep.purge_entries.
	SweepJobKey attribute.Key = "leaseledger.sweep.job"
)

// Version is this module's version, the instrumentation scope's version
// of every meter and tracer it makes (otel_scope_version in Prometheus).
// A test ties it to the latest release in the changelog.
const Version = "0.1.0"

// Option configures New.
type Option func(*config)

type config struct {
	meters     metric.MeterProvider
	tracers    trace.TracerProvider
	propagator propagation.TextMapPropagator
	clock      func() time.Time
	timeout    time.Duration
}

// WithMeterProvider sets where the metrics go; otel.GetMeterProvider() by
// default. A nil provider is ignored.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) {
		if mp != nil {
			c.meters = mp
		}
	}
}

// WithTracerProvider sets where the spans go; otel.GetTracerProvider() by
// default. A nil provider is ignored.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		if tp != nil {
			c.tracers = tp
		}
	}
}

// WithPropagator sets how a trace context is read from an item's
// metadata (and written by Instrumentation.Inject): the W3C Trace
// Context format by default, which Inject writes. A nil propagator is
// ignored.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *config) {
		if p != nil {
			c.propagator = p
		}
	}
}

// WithClock sets the clock that dates the spans made afterwards (see
// Observe) and gives the stats callbacks their now; time.Now by default.
// A nil clock is ignored.
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		if now != nil {
			c.clock = now
		}
	}
}

// WithStatsTimeout bounds each Stats or OutboxStats call a collection
// makes (5 s by default), so that a database that does not answer
// cannot hold a scrape. A value below 1 ms is ignored.
func WithStatsTimeout(d time.Duration) Option {
	return func(c *config) {
		if d >= time.Millisecond {
			c.timeout = d
		}
	}
}

// Instrumentation turns the events of dispatch's loops into metrics and
// spans. It is a dispatch.Observer: pass it to dispatch.WithObserver of
// every Dispatcher and Worker it should see. Its methods are safe for
// concurrent use.
type Instrumentation struct {
	cfg    config
	meter  metric.Meter
	tracer trace.Tracer
	ins    instruments
	labels labelCache
	spans  openSpans
}

var _ dispatch.Observer = (*Instrumentation)(nil)

// New returns an Instrumentation configured by opts, with its
// instruments created on the meter provider. It fails only when the
// provider refuses an instrument.
func New(opts ...Option) (*Instrumentation, error) {
	cfg := config{
		meters:     otel.GetMeterProvider(),
		tracers:    otel.GetTracerProvider(),
		propagator: propagation.TraceContext{},
		clock:      time.Now,
		timeout:    5 * time.Second,
	}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	in := &Instrumentation{
		cfg:    cfg,
		meter:  cfg.meters.Meter(ScopeName, metric.WithInstrumentationVersion(Version)),
		tracer: cfg.tracers.Tracer(ScopeName, trace.WithInstrumentationVersion(Version)),
		spans:  openSpans{open: map[spanKey][]*grantSpan{}},
	}
	in.labels.m = map[labelKey]metric.MeasurementOption{}
	if err := in.ins.create(in.meter); err != nil {
		return nil, errors.Join(errors.New("ledgerotel: creating the instruments"), err)
	}
	return in, nil
}

// Observe records ev: it counts it, records the durations and the
// latency it carries, and ends (or makes) the span of the emission or
// handling that ev settles. It never blocks on I/O and never keeps or
// changes ev.Metadata.
func (in *Instrumentation) Observe(ev dispatch.Event) {
	ctx := context.Background()
	loop := loopOf(ev)
	in.ins.record(ctx, ev, loop, &in.labels)
	if loop == sweeperLoop {
		return // a sweep has no item, so no span
	}
	worker := loop == workerLoop
	switch {
	case ev.Kind == dispatch.EventClaimed || ev.Kind == dispatch.EventLeased:
		in.spans.granted(spanKey{worker: worker, id: ev.EntryID, seq: ev.Seq})
	case ev.Final:
		in.settle(ctx, ev, worker)
	}
}

// Inject returns md with the trace context of ctx's span added in the
// format of the Instrumentation's propagator, for
// ledger.EnqueueRequest.Metadata or ledger.Envelope.Metadata. md itself
// is not changed; when ctx carries no span, md is returned as it is.
func (in *Instrumentation) Inject(ctx context.Context, md ledger.Metadata) ledger.Metadata {
	return inject(ctx, in.cfg.propagator, md)
}

// Inject returns md with the W3C trace context (traceparent, tracestate)
// of ctx's span added, for ledger.EnqueueRequest.Metadata or
// ledger.Envelope.Metadata:
//
//	env.Metadata = ledgerotel.Inject(ctx, env.Metadata)
//
// md itself is not changed; when ctx carries no span, md is returned as
// it is.
func Inject(ctx context.Context, md ledger.Metadata) ledger.Metadata {
	return inject(ctx, propagation.TraceContext{}, md)
}

func inject(ctx context.Context, p propagation.TextMapPropagator, md ledger.Metadata) ledger.Metadata {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return md
	}
	out := make(ledger.Metadata, len(md)+2)
	for k, v := range md {
		out[k] = v
	}
	p.Inject(ctx, propagation.MapCarrier(out))
	return out
}
