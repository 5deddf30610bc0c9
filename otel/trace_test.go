package ledgerotel_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/dispatch"
	"github.com/leaseledger/ledger/memstore"
	ledgerotel "github.com/leaseledger/ledger/otel"
	"github.com/leaseledger/ledger/storekit"
)

// spanAttrs returns a span's attributes as strings, by key.
func spanAttrs(s sdktrace.ReadOnlySpan) map[string]string {
	out := map[string]string{}
	for _, kv := range s.Attributes() {
		out[string(kv.Key)] = kv.Value.Emit()
	}
	return out
}

// requireScenarioSpans checks the spans of a scenario that r ran: one per
// emission and per handling, each a child of the producer's span (so in
// its trace), with the messaging attributes, the attempt and the
// settling event, dated by the test's clock; when wrapped, the emitter and
// handler ran inside them.
func requireScenarioSpans(t *testing.T, h *harness, r ran, wrapped bool) {
	t.Helper()
	byID := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range h.spans.Ended() {
		if s.Name() == "place order" {
			continue
		}
		id := spanAttrs(s)["messaging.message.id"]
		require.NotEmpty(t, id, "span %q names its message", s.Name())
		_, twice := byID[id]
		require.False(t, twice, "one span per emission or handling of %s", id)
		byID[id] = s
	}
	require.Len(t, byID, len(r.entries)+len(r.deliveries))

	common := func(s sdktrace.ReadOnlySpan, id string) map[string]string {
		t.Helper()
		assert.Equal(t, r.producer.TraceID(), s.SpanContext().TraceID(), "%s: the producer's trace", id)
		assert.Equal(t, r.producer.SpanID(), s.Parent().SpanID(), "%s: a child of the producer's span", id)
		assert.True(t, s.Parent().IsRemote(), "%s: the parent came through the metadata", id)
		assert.Equal(t, trace.SpanKindConsumer, s.SpanKind())
		if wrapped {
			assert.Equal(t, s.SpanContext(), r.inside[id], "%s: the wrapped call ran in the span", id)
		} else {
			assert.False(t, r.inside[id].IsValid(), "%s: without the wrapper no span is in the call's context", id)
		}
		a := spanAttrs(s)
		assert.Equal(t, "leaseledger", a["messaging.system"])
		assert.Equal(t, "process", a["messaging.operation.type"])
		assert.Equal(t, "1", a["leaseledger.attempt"])
		assert.Equal(t, "applied", a["leaseledger.outcome"])
		return a
	}
	for _, e := range r.entries {
		s := byID[string(e.ID)]
		require.NotNil(t, s, "a span for %s", e.Envelope.IdempotencyKey)
		a := common(s, string(e.ID))
		assert.Equal(t, "emit "+e.Envelope.Provider, s.Name())
		assert.Equal(t, "emit", a["messaging.operation.name"])
		assert.Equal(t, e.Envelope.Provider, a["messaging.destination.name"])
		assert.Equal(t, e.Envelope.Kind, a["leaseledger.entry.kind"])
		assert.Equal(t, "dispatcher-1", a["leaseledger.worker"])
		assert.Equal(t, emitStep, s.EndTime().Sub(s.StartTime()), "the span lasts the emission, by the test's clock")
		switch e.Status {
		case ledger.OutboxStatusDelivered:
			assert.Equal(t, "delivered", a["leaseledger.event"])
			assert.Equal(t, codes.Unset, s.Status().Code)
		case ledger.OutboxStatusRetryScheduled:
			assert.Equal(t, "retried", a["leaseledger.event"])
			assert.Equal(t, codes.Error, s.Status().Code)
			assert.Equal(t, errBusy.Error(), s.Status().Description)
			require.Len(t, s.Events(), 1, "the error is recorded")
			assert.Equal(t, "exception", s.Events()[0].Name)
		case ledger.OutboxStatusDeadLettered:
			assert.Equal(t, "dead_lettered", a["leaseledger.event"])
			assert.Equal(t, codes.Error, s.Status().Code)
		default:
			t.Errorf("unexpected status %s", e.Status)
		}
	}
	for _, d := range r.deliveries {
		s := byID[string(d.ID)]
		require.NotNil(t, s, "a span for %s", d.ID)
		a := common(s, string(d.ID))
		assert.Equal(t, "handle", s.Name())
		assert.Equal(t, "handle", a["messaging.operation.name"])
		assert.Equal(t, string(d.Target), a["messaging.destination.name"])
		assert.Equal(t, string(d.Ceremony), a["leaseledger.ceremony"])
		assert.Equal(t, "agent-1", a["leaseledger.agent"])
		assert.Equal(t, handleStep, s.EndTime().Sub(s.StartTime()))
		want := map[ledger.DeliveryState]string{ledger.DeliveryStateProcessed: "processed", ledger.DeliveryStateOffered: "retried"}[d.State]
		assert.Equal(t, want, a["leaseledger.event"], "%s", d.ID)
	}
}

func TestInject(t *testing.T) {
	t.Parallel()
	md := ledger.Metadata{"tenant": "acme"}
	got := ledgerotel.Inject(context.Background(), md)
	assert.Equal(t, ledger.Metadata{"tenant": "acme"}, got, "no span: nothing to add")
	assert.Nil(t, ledgerotel.Inject(context.Background(), nil))

	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.WithoutCancel(t.Context())) })
	ctx, span := tp.Tracer("test").Start(t.Context(), "producer")
	defer span.End()
	got = ledgerotel.Inject(ctx, md)
	sc := span.SpanContext()
	assert.Equal(t, "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-01", got["traceparent"])
	assert.Equal(t, "acme", got["tenant"])
	assert.Equal(t, ledger.Metadata{"tenant": "acme"}, md, "the caller's map is not changed")
	assert.NoError(t, storekit.ValidateMetadata("metadata", got), "what Inject makes is valid metadata")
	fresh := ledgerotel.Inject(ctx, nil)
	assert.Len(t, fresh, 1)
}

// TestItemWithoutTraceContextStartsATrace: an entry enqueued without a
// trace context is emitted in a span of a trace of its own.
func TestItemWithoutTraceContextStartsATrace(t *testing.T) {
	t.Parallel()
	clk := newClock()
	h := newHarness(t, clk)
	outbox := memstore.NewOutbox(memstore.WithClock(clk.Now))
	_, err := outbox.Enqueue(t.Context(), ledger.Envelope{Provider: "mail", Kind: "welcome", IdempotencyKey: "ok-1"})
	require.NoError(t, err)
	d, err := dispatch.NewDispatcher(outbox, h.inst.Emitter(stepEmitter(clk, emitStep)), asDispatcherOptions(loopOptions(clk, h.inst))...)
	require.NoError(t, err)
	_, err = d.RunOnce(context.Background())
	require.NoError(t, err)
	spans := h.spans.Ended()
	require.Len(t, spans, 1)
	assert.False(t, spans[0].Parent().IsValid(), "no producer context: the emission starts a trace")
	assert.True(t, spans[0].SpanContext().IsValid())
}

// TestReleasedWithoutEmissionMakesNoSpan: an entry claimed but released
// at shutdown before its emission started was never emitted.
func TestReleasedWithoutEmissionMakesNoSpan(t *testing.T) {
	t.Parallel()
	clk := newClock()
	h := newHarness(t, clk)
	h.inst.Observe(dispatch.Event{Kind: dispatch.EventReleased, EntryID: "e1", Provider: "mail", Final: true, Seq: 1})
	assert.Empty(t, h.spans.Ended())
	h.inst.Observe(dispatch.Event{Kind: dispatch.EventLost, EntryID: "e2", Provider: "mail", Final: true, Seq: 1,
		Outcome: string(ledger.OutcomeLeaseLost), Duration: emitStep})
	require.Len(t, h.spans.Ended(), 1, "an emission whose completion was lost still made a span")
	s := h.spans.Ended()[0]
	assert.Equal(t, codes.Error, s.Status().Code)
	assert.Contains(t, s.Attributes(), attribute.String("leaseledger.outcome", "lease_lost"))
}

// TestWrapperOfAnUnobservedLoopEndsItsSpans: when the loop reports to
// another observer, no event will end the wrapper's span, so the wrapper
// ends it when the wrapped call returns.
func TestWrapperOfAnUnobservedLoopEndsItsSpans(t *testing.T) {
	t.Parallel()
	clk := newClock()
	h := newHarness(t, clk)
	outbox := memstore.NewOutbox(memstore.WithClock(clk.Now))
	for _, key := range []string{"ok-1", "busy-2"} {
		_, err := outbox.Enqueue(t.Context(), ledger.Envelope{Provider: "mail", Kind: "welcome", IdempotencyKey: key})
		require.NoError(t, err)
	}
	other := dispatch.ObserverFunc(func(dispatch.Event) {})
	d, err := dispatch.NewDispatcher(outbox, h.inst.Emitter(stepEmitter(clk, emitStep)), dispatcherOptions(clk, other)...)
	require.NoError(t, err)
	_, err = d.RunOnce(context.Background())
	require.NoError(t, err)
	spans := h.spans.Ended()
	require.Len(t, spans, 2, "both spans ended")
	codesByName := map[codes.Code]int{}
	for _, s := range spans {
		codesByName[s.Status().Code]++
		assert.Equal(t, emitStep, s.EndTime().Sub(s.StartTime()))
	}
	assert.Equal(t, map[codes.Code]int{codes.Unset: 1, codes.Error: 1}, codesByName, "the emitter's error marks its span")
}
