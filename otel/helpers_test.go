package ledgerotel_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/dispatch"
	ledgerotel "github.com/leaseledger/ledger/otel"
)

// t0 is the start of every test's clock.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// testClock is a clock the test moves, shared by stores, loops and the
// Instrumentation.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *testClock { return &testClock{now: t0} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// harness is an Instrumentation on the SDK's in-memory reader and span
// recorder.
type harness struct {
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	inst   *ledgerotel.Instrumentation
}

func newHarness(t *testing.T, clk *testClock, opts ...ledgerotel.Option) *harness {
	t.Helper()
	h := &harness{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.reader))
	h.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(h.spans))
	t.Cleanup(func() {
		ctx := context.WithoutCancel(t.Context())
		_ = mp.Shutdown(ctx)
		_ = h.tp.Shutdown(ctx)
	})
	inst, err := ledgerotel.New(append([]ledgerotel.Option{
		ledgerotel.WithMeterProvider(mp), ledgerotel.WithTracerProvider(h.tp), ledgerotel.WithClock(clk.Now),
	}, opts...)...)
	require.NoError(t, err)
	h.inst = inst
	return h
}

// collect reads every metric once, by name.
func (h *harness) collect(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	ms, err := h.collectErr(t)
	require.NoError(t, err)
	return ms
}

// collectErr is collect for a collection that may fail in part: it
// returns what was collected and the error.
func (h *harness) collectErr(t *testing.T) (map[string]metricdata.Metrics, error) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	err := h.reader.Collect(t.Context(), &rm)
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, ledgerotel.ScopeName, sm.Scope.Name)
		require.Equal(t, ledgerotel.Version, sm.Scope.Version, "the scope's version is the module's")
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out, err
}

// labels prints an attribute set as "k=v,k=v", keys sorted.
func labels(s attribute.Set) string { return s.Encoded(attribute.DefaultEncoder()) }

// sums returns the points of a sum (counter or up-down counter) by label.
func sums(t *testing.T, m metricdata.Metrics) map[string]int64 {
	t.Helper()
	sum, ok := m.Data.(metricdata.Sum[int64])
	require.True(t, ok, "%s is a sum of int64, not %T", m.Name, m.Data)
	out := map[string]int64{}
	for _, p := range sum.DataPoints {
		out[labels(p.Attributes)] = p.Value
	}
	return out
}

// gauges returns the points of a gauge by label.
func gauges[N int64 | float64](t *testing.T, m metricdata.Metrics) map[string]N {
	t.Helper()
	g, ok := m.Data.(metricdata.Gauge[N])
	require.True(t, ok, "%s is a gauge, not %T", m.Name, m.Data)
	out := map[string]N{}
	for _, p := range g.DataPoints {
		out[labels(p.Attributes)] = p.Value
	}
	return out
}

// histogramPoint is what the tests read of one histogram point.
type histogramPoint struct {
	count uint64
	sum   float64
}

func histograms(t *testing.T, m metricdata.Metrics) map[string]histogramPoint {
	t.Helper()
	h, ok := m.Data.(metricdata.Histogram[float64])
	require.True(t, ok, "%s is a histogram of float64, not %T", m.Name, m.Data)
	out := map[string]histogramPoint{}
	for _, p := range h.DataPoints {
		out[labels(p.Attributes)] = histogramPoint{p.Count, p.Sum}
	}
	return out
}

// totals adds up the points of a histogram.
func totals(points map[string]histogramPoint) histogramPoint {
	var t histogramPoint
	for _, p := range points {
		t.count += p.count
		t.sum += p.sum
	}
	return t
}

// attributeValues returns every attribute value of every point of every
// metric, to check that no ID became a label.
func attributeValues(ms map[string]metricdata.Metrics) map[string]bool {
	out := map[string]bool{}
	add := func(s attribute.Set) {
		for _, kv := range s.ToSlice() {
			out[kv.Value.Emit()] = true
		}
	}
	for _, m := range ms {
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, p := range d.DataPoints {
				add(p.Attributes)
			}
		case metricdata.Gauge[int64]:
			for _, p := range d.DataPoints {
				add(p.Attributes)
			}
		case metricdata.Gauge[float64]:
			for _, p := range d.DataPoints {
				add(p.Attributes)
			}
		case metricdata.Histogram[float64]:
			for _, p := range d.DataPoints {
				add(p.Attributes)
			}
		}
	}
	return out
}

var (
	errBusy = errors.New("503 busy")
	errGone = errors.New("550 no such mailbox")
)

// stepEmitter emits one entry per step of the clock: it answers by the
// entry's idempotency key (ok, busy, gone).
func stepEmitter(clk *testClock, step time.Duration) dispatch.EmitterFunc {
	return func(_ context.Context, e ledger.OutboxEntry) (ledger.EmissionResult, error) {
		clk.Advance(step)
		switch e.Envelope.IdempotencyKey[:2] {
		case "bu":
			return ledger.EmissionResult{}, errBusy
		case "go":
			return ledger.EmissionResult{}, dispatch.Permanent(errGone)
		}
		return ledger.EmissionResult{ProviderRef: "ref"}, nil
	}
}

// stepHandler handles one delivery per step of the clock: IDs starting
// with "bu" fail, the others are processed.
func stepHandler(clk *testClock, step time.Duration) dispatch.HandlerFunc {
	return func(_ context.Context, d ledger.Delivery) (dispatch.Decision, error) {
		clk.Advance(step)
		if string(d.ID[:2]) == "bu" {
			return dispatch.Decision{}, errBusy
		}
		return dispatch.Processed("done"), nil
	}
}

// quiet is the logger of every loop and store: the tests read events.
func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// loopOptions are the options of every test loop: the test's clock, one
// item at a time (so that each handling takes exactly one step), and inst.
func loopOptions(clk *testClock, inst dispatch.Observer) []dispatch.LoopOption {
	return []dispatch.LoopOption{
		dispatch.WithClock(clk.Now), dispatch.WithObserver(inst), dispatch.WithConcurrency(1), dispatch.WithBatchSize(10),
		dispatch.WithLogger(quiet()),
	}
}

// dispatcherOptions adds a policy with a long backoff, so that a retried
// entry is not due again within a test.
func dispatcherOptions(clk *testClock, inst dispatch.Observer) []dispatch.DispatcherOption {
	return append(asDispatcherOptions(loopOptions(clk, inst)),
		dispatch.WithPolicy(ledger.Policy{MaxAttempts: 3, BackoffBase: time.Minute, BackoffMax: time.Hour}))
}

// asDispatcherOptions returns opts as DispatcherOptions.
func asDispatcherOptions(opts []dispatch.LoopOption) []dispatch.DispatcherOption {
	out := make([]dispatch.DispatcherOption, len(opts))
	for i, o := range opts {
		out[i] = o
	}
	return out
}

func workerOptions(clk *testClock, inst dispatch.Observer) []dispatch.WorkerOption {
	var out []dispatch.WorkerOption
	for _, o := range loopOptions(clk, inst) {
		out = append(out, o)
	}
	return out
}
