package ledgerotel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/dispatch"
	ledgerotel "github.com/leaseledger/ledger/otel"
)

// The scenario the metric and trace tests run on each store: four outbox
// entries (two delivered, one retried, one dead-lettered) and three
// deliveries (two processed, one retried), enqueued under one producer
// span, left waiting, then dispatched and handled one at a time, each
// emission taking emitStep and each handling handleStep of the test's
// clock.
const (
	waited     = 10 * time.Second
	emitStep   = 250 * time.Millisecond
	handleStep = 100 * time.Millisecond
)

var (
	scenarioEnvelopes = []ledger.Envelope{
		{Provider: "mail", Kind: "welcome", IdempotencyKey: "ok-1"},
		{Provider: "mail", Kind: "welcome", IdempotencyKey: "ok-2"},
		{Provider: "sms", Kind: "code", IdempotencyKey: "busy-3"},
		{Provider: "mail", Kind: "receipt", IdempotencyKey: "gone-4"},
	}
	scenarioRequests = []ledger.EnqueueRequest{
		{ID: "ok-a", Target: "host-1"},
		{ID: "ok-b", Target: "host-1"},
		{ID: "busy-c", Target: "host-2", Ceremony: "cer-1"},
	}
	scenarioPolicy = ledger.Policy{MaxAttempts: 3, BackoffBase: time.Minute, BackoffMax: time.Hour}
)

// ran is what a scenario left: the producer's span, and the records as
// they ended.
type ran struct {
	producer trace.SpanContext
	// inside holds the span context that the emitter (or handler) found
	// in its ctx, by entry or delivery ID.
	inside     map[string]trace.SpanContext
	entries    []ledger.OutboxEntry
	deliveries []ledger.Delivery
}

// runScenario runs the scenario on l and outbox, observed by h, with the
// emitter and handler wrapped by h's Instrumentation when wrap is set.
func runScenario(t *testing.T, h *harness, clk *testClock, l ledger.Ledger, outbox ledger.ClaimStore, wrap bool) ran {
	t.Helper()
	ctx, producer := h.tp.Tracer("producer").Start(t.Context(), "place order")
	var r ran
	r.producer = producer.SpanContext()
	for _, env := range scenarioEnvelopes {
		env.Metadata = ledgerotel.Inject(ctx, ledger.Metadata{"tenant": "acme"})
		res, err := outbox.Enqueue(ctx, env)
		require.NoError(t, err)
		require.True(t, res.Applied())
	}
	for _, req := range scenarioRequests {
		req.Policy = scenarioPolicy
		req.Metadata = ledgerotel.Inject(ctx, nil)
		res, err := l.Enqueue(ctx, req, clk.Now())
		require.NoError(t, err)
		require.True(t, res.Applied())
	}
	producer.End()
	clk.Advance(waited)

	r.inside = map[string]trace.SpanContext{}
	step, stepH := stepEmitter(clk, emitStep), stepHandler(clk, handleStep)
	var emitter dispatch.Emitter = dispatch.EmitterFunc(func(ctx context.Context, e ledger.OutboxEntry) (ledger.EmissionResult, error) {
		r.inside[string(e.ID)] = trace.SpanContextFromContext(ctx)
		return step(ctx, e)
	})
	var handler dispatch.Handler = dispatch.HandlerFunc(func(ctx context.Context, d ledger.Delivery) (dispatch.Decision, error) {
		r.inside[string(d.ID)] = trace.SpanContextFromContext(ctx)
		return stepH(ctx, d)
	})
	if wrap {
		emitter, handler = h.inst.Emitter(emitter), h.inst.Handler(handler)
	}
	d, err := dispatch.NewDispatcher(outbox, emitter, append(dispatcherOptions(clk, h.inst), dispatch.WithWorker("dispatcher-1"))...)
	require.NoError(t, err)
	st, err := d.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, dispatch.Stats{Claimed: 4, Delivered: 2, Retried: 1, DeadLettered: 1}, st)
	w, err := dispatch.NewWorker(l, "agent-1", nil, handler, workerOptions(clk, h.inst)...)
	require.NoError(t, err)
	wst, err := w.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, dispatch.WorkerStats{Leased: 3, Processed: 2, Retried: 1}, wst)

	for _, env := range scenarioEnvelopes {
		e, err := outbox.FindByID(ctx, ledger.OutboxEntryIDFor(env.IdempotencyKey))
		require.NoError(t, err)
		r.entries = append(r.entries, e)
	}
	for _, req := range scenarioRequests {
		dl, err := l.Get(ctx, req.ID)
		require.NoError(t, err)
		r.deliveries = append(r.deliveries, dl)
	}
	return r
}

// lbl returns the encoded attribute set of an event point: messaging
// system and the given pairs.
func lbl(pairs ...string) string {
	kvs := []attribute.KeyValue{attribute.String("messaging.system", "leaseledger")}
	for i := 0; i < len(pairs); i += 2 {
		kvs = append(kvs, attribute.String(pairs[i], pairs[i+1]))
	}
	return labels(attribute.NewSet(kvs...))
}

// requireScenarioMetrics checks every metric of a scenario that r ran.
func requireScenarioMetrics(t *testing.T, h *harness, r ran) {
	t.Helper()
	ms := h.collect(t)
	const (
		ev, oc, dest, kind = "leaseledger.event", "leaseledger.outcome", "messaging.destination.name", "leaseledger.entry.kind"
	)

	m := ms[ledgerotel.OutboxEvents]
	assert.Equal(t, "{event}", m.Unit)
	assert.Equal(t, map[string]int64{
		lbl(ev, "claimed", dest, "mail", kind, "welcome"):                      2,
		lbl(ev, "claimed", dest, "sms", kind, "code"):                          1,
		lbl(ev, "claimed", dest, "mail", kind, "receipt"):                      1,
		lbl(ev, "delivered", oc, "applied", dest, "mail", kind, "welcome"):     2,
		lbl(ev, "retried", oc, "applied", dest, "sms", kind, "code"):           1,
		lbl(ev, "dead_lettered", oc, "applied", dest, "mail", kind, "receipt"): 1,
	}, sums(t, m))

	m = ms[ledgerotel.DeliveryEvents]
	assert.Equal(t, "{event}", m.Unit)
	assert.Equal(t, map[string]int64{
		lbl(ev, "leased", dest, "host-1"):                   2,
		lbl(ev, "leased", dest, "host-2"):                   1,
		lbl(ev, "processed", oc, "applied", dest, "host-1"): 2,
		lbl(ev, "retried", oc, "applied", dest, "host-2"):   1,
	}, sums(t, m))

	// The items handed to the loops, as the messaging conventions count
	// them: by operation and destination.
	const op, errType = "messaging.operation.name", "error.type"
	m = ms[ledgerotel.ConsumedMessages]
	assert.Equal(t, "{message}", m.Unit)
	assert.Equal(t, map[string]int64{
		lbl(op, "claim", dest, "mail", kind, "welcome"): 2,
		lbl(op, "claim", dest, "sms", kind, "code"):     1,
		lbl(op, "claim", dest, "mail", kind, "receipt"): 1,
		lbl(op, "lease", dest, "host-1"):                2,
		lbl(op, "lease", dest, "host-2"):                1,
	}, sums(t, m))

	// One processing duration per emission or handling, with the
	// conventions' operation name and, for a failure, error.type.
	m = ms[ledgerotel.ProcessDuration]
	assert.Equal(t, "s", m.Unit)
	process := histograms(t, m)
	emits := map[string]histogramPoint{}
	for _, k := range []string{
		lbl(ev, "delivered", oc, "applied", dest, "mail", kind, "welcome", op, "emit"),
		lbl(ev, "retried", oc, "applied", dest, "sms", kind, "code", op, "emit", errType, "_OTHER"),
		lbl(ev, "dead_lettered", oc, "applied", dest, "mail", kind, "receipt", op, "emit", errType, "permanent"),
	} {
		require.Contains(t, process, k)
		emits[k] = process[k]
	}
	assert.Equal(t, histogramPoint{2, 2 * emitStep.Seconds()}, process[lbl(ev, "delivered", oc, "applied", dest, "mail", kind, "welcome", op, "emit")])
	assert.Equal(t, histogramPoint{4, 4 * emitStep.Seconds()}, totals(emits))
	handles := totals(process)
	assert.Equal(t, uint64(7), handles.count, "4 emissions and 3 handlings")
	assert.InDelta(t, 4*emitStep.Seconds()+3*handleStep.Seconds(), handles.sum, 1e-9)

	// The latency of each completion is the time from the record's
	// creation to the completion, as the store stamped them.
	var want float64
	for _, e := range r.entries {
		want += e.UpdatedAt.Sub(e.CreatedAt).Seconds()
	}
	m = ms[ledgerotel.OutboxCompletionLatency]
	assert.Equal(t, "s", m.Unit)
	got := totals(histograms(t, m))
	assert.Equal(t, uint64(4), got.count)
	assert.InDelta(t, want, got.sum, 1e-6)
	assert.Greater(t, got.sum, 4*waited.Seconds(), "the entries waited before they were claimed")
	want = 0
	for _, d := range r.deliveries {
		want += d.UpdatedAt.Sub(d.CreatedAt).Seconds()
	}
	got = totals(histograms(t, ms[ledgerotel.DeliveryLatency]))
	assert.Equal(t, uint64(3), got.count)
	assert.InDelta(t, want, got.sum, 1e-6)

	// IDs never become labels.
	values := attributeValues(ms)
	for _, e := range r.entries {
		assert.False(t, values[string(e.ID)], "entry ID %s is a label", e.ID)
		assert.False(t, values[e.Envelope.IdempotencyKey], "key %s is a label", e.Envelope.IdempotencyKey)
	}
	for _, d := range r.deliveries {
		assert.False(t, values[string(d.ID)], "delivery ID %s is a label", d.ID)
	}
	assert.False(t, values["dispatcher-1"], "the worker name is not a label")
	assert.False(t, values["agent-1"], "the agent is not a label")
	assert.False(t, values["cer-1"], "the ceremony is not a label")
}
