package ledgerotel_test

import (
	"context"
	"fmt"
	"log"
	"slices"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/dispatch"
	"github.com/leaseledger/ledger/memstore"
	ledgerotel "github.com/leaseledger/ledger/otel"
)

// Example observes a Dispatcher: an entry enqueued under the producer's
// span is emitted in a span of the same trace, and counted.
func Example() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader() // in a service: a Prometheus or OTLP exporter
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	inst, err := ledgerotel.New(
		ledgerotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		ledgerotel.WithTracerProvider(tp))
	if err != nil {
		log.Fatal(err)
	}

	outbox := memstore.NewOutbox()
	pctx, producer := tp.Tracer("shop").Start(ctx, "place order")
	env := ledger.Envelope{Provider: "mail", Kind: "welcome", IdempotencyKey: "user-7/welcome"}
	env.Metadata = ledgerotel.Inject(pctx, env.Metadata)
	if _, err := outbox.Enqueue(pctx, env); err != nil {
		log.Fatal(err)
	}
	producer.End()

	emitter := dispatch.EmitterFunc(func(context.Context, ledger.OutboxEntry) (ledger.EmissionResult, error) {
		return ledger.EmissionResult{ProviderRef: "msg-1"}, nil
	})
	d, err := dispatch.NewDispatcher(outbox, inst.Emitter(emitter), dispatch.WithObserver(inst))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := d.RunOnce(ctx); err != nil {
		log.Fatal(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	var lines []string
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == ledgerotel.OutboxEvents {
			for _, p := range sum.DataPoints {
				ev, _ := p.Attributes.Value(ledgerotel.EventKey)
				lines = append(lines, fmt.Sprintf("%s %s: %d", m.Name, ev.AsString(), p.Value))
			}
		}
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	emission := spans.Ended()[1]
	fmt.Println(emission.Name(), "in the producer's trace:", emission.SpanContext().TraceID() == producer.SpanContext().TraceID())
	// Output:
	// leaseledger.outbox.events claimed: 1
	// leaseledger.outbox.events delivered: 1
	// emit mail in the producer's trace: true
}

// ExampleInject carries the caller's trace context in an enqueue
// request's metadata.
func ExampleInject() {
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("shop").Start(context.Background(), "place order")
	defer span.End()

	req := ledger.EnqueueRequest{ID: "order-42", Target: "host-1", Metadata: ledger.Metadata{"tenant": "acme"}}
	req.Metadata = ledgerotel.Inject(ctx, req.Metadata)
	fmt.Println(len(req.Metadata["traceparent"]), req.Metadata["tenant"])
	// Output: 55 acme
}

// ExampleInstrumentation_ObserveStats reads queue depth and lag from a
// store at each collection.
func ExampleInstrumentation_ObserveStats() {
	reader := sdkmetric.NewManualReader()
	inst, err := ledgerotel.New(ledgerotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		log.Fatal(err)
	}
	store := memstore.New()
	if _, err := inst.ObserveStats(store); err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for _, id := range []ledger.DeliveryID{"d1", "d2"} {
		if _, err := store.Enqueue(ctx, ledger.EnqueueRequest{ID: id, Target: "host-1"}, time.Now()); err != nil {
			log.Fatal(err)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if g, ok := m.Data.(metricdata.Gauge[int64]); ok && m.Name == ledgerotel.DeliveryDepth {
			for _, p := range g.DataPoints {
				target, _ := p.Attributes.Value(semconv.MessagingDestinationNameKey)
				fmt.Println(m.Name, target.AsString(), p.Value, m.Unit)
			}
		}
	}
	// Output: leaseledger.delivery.depth host-1 2 {delivery}
}
