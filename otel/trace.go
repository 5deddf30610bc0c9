package ledgerotel

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/dispatch"
)

// Operation names of the spans (messaging.operation.name).
const (
	OperationEmit   = "emit"
	OperationHandle = "handle"
)

// spanKey names one grant: a claim of an entry or a lease of a delivery,
// by the record's ID and the grant's sequence number.
type spanKey struct {
	worker bool
	id     string
	seq    int64
}

// openSpans follows the grants this Instrumentation saw granted
// (EventClaimed, EventLeased) until the event that settles them, with
// the span a wrapper started for each, if any. Marking the grant first
// lets a wrapper tell whether the same Instrumentation observes its
// loop: when it does not, no event will end the span, and the wrapper
// ends it itself. A list per key, oldest first, covers the rare grant
// seen twice at once (a lease given back uncounted and granted again
// under the same sequence number before the first settlement was
// observed).
type openSpans struct {
	mu   sync.Mutex
	open map[spanKey][]*grantSpan
	n    int
}

// grantSpan is one grant in hand; span is nil until a wrapper starts it.
type grantSpan struct{ span trace.Span }

// maxOpenSpans bounds the grants followed: only grants in hand are, so
// the bound is a guard. Past it, grants are not followed: their spans
// are made when they settle (see settle).
const maxOpenSpans = 1 << 16

// granted starts following the grant k.
func (o *openSpans) granted(k spanKey) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n >= maxOpenSpans {
		return
	}
	o.open[k] = append(o.open[k], &grantSpan{})
	o.n++
}

// attach gives span to the grant k, and reports false when k is not
// followed.
func (o *openSpans) attach(k spanKey, span trace.Span) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, g := range o.open[k] {
		if g.span == nil {
			g.span = span
			return true
		}
	}
	return false
}

// settled stops following the grant k and returns its span, if a
// wrapper started one.
func (o *openSpans) settled(k spanKey) (trace.Span, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	list := o.open[k]
	if len(list) == 0 {
		return nil, false
	}
	g := list[0]
	if len(list) == 1 {
		delete(o.open, k)
	} else {
		o.open[k] = list[1:]
	}
	o.n--
	return g.span, g.span != nil
}

// Emitter returns next wrapped so that each emission runs in a span, a
// child of the producer's span when the entry's metadata carries its
// context: whatever next calls with its ctx (an HTTP client, a
// database) joins the producer's trace. The span ends with the event
// that settles the claim, so it covers the completion too, when this
// Instrumentation observes the Dispatcher (dispatch.WithObserver);
// otherwise it ends when next returns.
func (in *Instrumentation) Emitter(next dispatch.Emitter) dispatch.Emitter {
	return dispatch.EmitterFunc(func(ctx context.Context, e ledger.OutboxEntry) (ledger.EmissionResult, error) {
		ctx, span := in.startSpan(ctx, e.Envelope.Metadata, in.cfg.clock(), emitAttrs(string(e.ID), e.Envelope.Provider, e.Envelope.Kind, e.Attempts))
		held := in.spans.attach(spanKey{id: string(e.ID), seq: e.ClaimSeq}, span)
		res, err := next.Emit(ctx, e)
		if !held {
			in.endUnobserved(span, err)
		}
		return res, err
	})
}

// Handler is Emitter for a Worker's handler: each handling runs in a
// span, a child of the producer's span, that ends with the event that
// settles the lease.
func (in *Instrumentation) Handler(next dispatch.Handler) dispatch.Handler {
	return dispatch.HandlerFunc(func(ctx context.Context, d ledger.Delivery) (dispatch.Decision, error) {
		ctx, span := in.startSpan(ctx, d.Metadata, in.cfg.clock(), handleAttrs(string(d.ID), d.Target, d.Ceremony, d.Attempts))
		held := in.spans.attach(spanKey{worker: true, id: string(d.ID), seq: d.LeaseSeq}, span)
		dec, err := next.Handle(ctx, d)
		if !held {
			in.endUnobserved(span, err)
		}
		return dec, err
	})
}

// startSpan starts a consumer span at start, under the trace context
// that md carries (or under ctx's span when it carries none). Spans are
// dated by the Instrumentation's clock, at both ends.
func (in *Instrumentation) startSpan(ctx context.Context, md ledger.Metadata, start time.Time, a spanAttrs) (context.Context, trace.Span) {
	if len(md) > 0 {
		ctx = in.cfg.propagator.Extract(ctx, propagation.MapCarrier(md))
	}
	return in.tracer.Start(ctx, a.name, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(a.attrs...), trace.WithTimestamp(start))
}

// settle ends the span of the grant ev settles: the one a wrapper
// started, or, when none did, one made now that starts ev.Duration ago.
// A release of work that never started makes no span.
func (in *Instrumentation) settle(ctx context.Context, ev dispatch.Event, worker bool) {
	if ev.EntryID == "" {
		return
	}
	span, ok := in.spans.settled(spanKey{worker: worker, id: ev.EntryID, seq: ev.Seq})
	end := in.cfg.clock()
	if !ok {
		if ev.Kind == dispatch.EventReleased && ev.Duration == 0 {
			return
		}
		var a spanAttrs
		if worker {
			a = handleAttrs(ev.EntryID, ev.Target, ev.Ceremony, ev.Attempt)
		} else {
			a = emitAttrs(ev.EntryID, ev.Provider, ev.EntryKind, ev.Attempt)
		}
		_, span = in.startSpan(ctx, ev.Metadata, end.Add(-ev.Duration), a)
	}
	span.SetAttributes(EventKey.String(string(ev.Kind)))
	if ev.Outcome != "" {
		span.SetAttributes(OutcomeKey.String(ev.Outcome))
	}
	if worker {
		span.SetAttributes(AgentKey.String(ev.Owner.Agent))
	} else if ev.Worker != "" {
		span.SetAttributes(WorkerKey.String(ev.Worker))
	}
	if ev.Err != nil {
		span.RecordError(ev.Err)
	}
	switch ev.Kind {
	case dispatch.EventDelivered, dispatch.EventProcessed, dispatch.EventDeferred, dispatch.EventReleased:
	default:
		msg := string(ev.Kind)
		if ev.Err != nil {
			msg = ev.Err.Error()
		}
		span.SetStatus(codes.Error, msg)
	}
	span.End(trace.WithTimestamp(end))
}

// endUnobserved ends a span that no event will end, with what the
// wrapped call answered.
func (in *Instrumentation) endUnobserved(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End(trace.WithTimestamp(in.cfg.clock()))
}

// spanAttrs are a span's name and its attributes at start.
type spanAttrs struct {
	name  string
	attrs []attribute.KeyValue
}

func emitAttrs(id, provider, kind string, attempt int) spanAttrs {
	return spanAttrs{
		name: OperationEmit + " " + provider,
		attrs: []attribute.KeyValue{
			semconv.MessagingSystemKey.String(SystemName),
			semconv.MessagingOperationTypeProcess,
			semconv.MessagingOperationNameKey.String(OperationEmit),
			semconv.MessagingDestinationNameKey.String(provider),
			semconv.MessagingMessageIDKey.String(id),
			EntryKindKey.String(kind),
			AttemptKey.Int(attempt),
		},
	}
}

func handleAttrs(id string, target ledger.Target, ceremony ledger.CeremonyID, attempt int) spanAttrs {
	a := spanAttrs{
		// Targets may be many (one per host), so the name leaves them out.
		name: OperationHandle,
		attrs: []attribute.KeyValue{
			semconv.MessagingSystemKey.String(SystemName),
			semconv.MessagingOperationTypeProcess,
			semconv.MessagingOperationNameKey.String(OperationHandle),
			semconv.MessagingDestinationNameKey.String(string(target)),
			semconv.MessagingMessageIDKey.String(id),
			AttemptKey.Int(attempt),
		},
	}
	if ceremony != "" {
		a.attrs = append(a.attrs, CeremonyKey.String(string(ceremony)))
	}
	return a
}
