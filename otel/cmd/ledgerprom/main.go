// Command ledgerprom serves leaseledger's metrics to Prometheus through
// the OpenTelemetry Prometheus exporter, at /metrics.
//
// With -dsn it serves a real PostgreSQL ledger's gauges, read at each
// scrape with one Stats and one OutboxStats call: queue depth and lag by
// target and by provider, and records by state and status. The event
// metrics (emissions, handlings, sweeps) come from the processes that run
// the loops, each through its own ledgerotel.Instrumentation.
//
//	go run ./cmd/ledgerprom -dsn "$LEDGER_DATABASE_URL" -schema leaseledger
//
// Without -dsn it is a demonstration: it runs an outbox Dispatcher and a
// delivery Worker (with its sweeper) on in-memory stores, fed by a
// producer that enqueues a few items a second (some of which fail and are
// retried), and serves every metric ledgerotel records.
//
//	go run ./cmd/ledgerprom -addr 127.0.0.1:9464
//	curl -s 127.0.0.1:9464/metrics | grep -E '^(leaseledger|messaging)_'
//
// In a service of your own, keep the lines of newMetrics and serve, and
// give ledgerotel your real stores, dispatchers and workers.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/dispatch"
	"github.com/leaseledger/ledger/memstore"
	ledgerotel "github.com/leaseledger/ledger/otel"
	"github.com/leaseledger/ledger/pgstore"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9464", "address to serve /metrics on")
	every := flag.Duration("every", 200*time.Millisecond, "without -dsn: how often the producer enqueues an item of each kind")
	dsn := flag.String("dsn", "", "serve the gauges of the PostgreSQL ledger at this URL instead of the in-memory demonstration")
	schema := flag.String("schema", pgstore.DefaultSchema, "with -dsn: the schema that holds the ledger's tables")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "serving http://%s/metrics\n", ln.Addr())
	if *dsn != "" {
		err = runDatabase(ctx, ln, *dsn, *schema)
	} else {
		err = run(ctx, ln, *every, os.Stderr)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// newMetrics makes a registry of our own, the OpenTelemetry exporter on
// it, and ledgerotel on a meter provider that reads through the
// exporter. Shut the provider down when done.
func newMetrics() (*prometheus.Registry, *sdkmetric.MeterProvider, *ledgerotel.Instrumentation, error) {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, nil, nil, err
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	inst, err := ledgerotel.New(ledgerotel.WithMeterProvider(provider))
	if err != nil {
		return nil, nil, nil, err
	}
	return reg, provider, inst, nil
}

// runDatabase serves the gauges of the ledger in schema on the database
// at dsn until ctx ends. A database it cannot reach, or a schema that was
// never migrated, fails it at once rather than at every scrape.
func runDatabase(ctx context.Context, ln net.Listener, dsn, schema string) error {
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	pool, err := pgxpool.New(cctx, dsn)
	if err != nil {
		return fmt.Errorf("ledgerprom: %w", err)
	}
	defer pool.Close()
	store, err := pgstore.New(pool, pgstore.WithSchema(schema))
	if err != nil {
		return fmt.Errorf("ledgerprom: %w", err)
	}
	if _, err := store.Stats(cctx, ledger.StatsFilter{}, time.Now()); err != nil {
		return fmt.Errorf("ledgerprom: schema %s: %w", schema, err)
	}
	reg, provider, inst, err := newMetrics()
	if err != nil {
		return err
	}
	defer provider.Shutdown(context.WithoutCancel(ctx)) //nolint:errcheck // nothing is left to flush to
	if _, err := inst.ObserveStats(store); err != nil {
		return err
	}
	if _, err := inst.ObserveOutboxStats(store.Outbox()); err != nil {
		return err
	}
	srv := &http.Server{Handler: mux(reg), ReadHeaderTimeout: 5 * time.Second}
	errs := make(chan error, 1)
	go func() { errs <- ignoreClosed(srv.Serve(ln)) }()
	select {
	case err := <-errs:
		return err
	case <-ctx.Done():
	}
	shutdown, cancelShutdown := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancelShutdown()
	return errors.Join(srv.Shutdown(shutdown), <-errs)
}

// run serves /metrics on ln and drives the loops until ctx ends.
func run(ctx context.Context, ln net.Listener, every time.Duration, logTo io.Writer) error {
	reg, provider, inst, err := newMetrics()
	if err != nil {
		return err
	}
	defer provider.Shutdown(context.WithoutCancel(ctx)) //nolint:errcheck // nothing is left to flush to

	store := memstore.New()
	outbox := store.Outbox()
	// The targets and providers the producer uses: each has its depth and
	// lag series from the first collection on.
	if _, err := inst.ObserveStats(store, "host-0", "host-1", "host-2"); err != nil {
		return err
	}
	if _, err := inst.ObserveOutboxStats(outbox, "mail", "sms"); err != nil {
		return err
	}
	// The loops log errors only: the failures they retry are in the metrics.
	logger := slog.New(slog.NewTextHandler(logTo, &slog.HandlerOptions{Level: slog.LevelError}))
	d, err := dispatch.NewDispatcher(outbox, inst.Emitter(emitter{}),
		dispatch.WithObserver(inst), dispatch.WithPollInterval(100*time.Millisecond), dispatch.WithLogger(logger))
	if err != nil {
		return err
	}
	// The Worker's sweeper sweeps every second here, so that its series
	// fill at once; its default is every 30 s.
	w, err := dispatch.NewWorker(store, "host-agent", nil, inst.Handler(handler{}),
		dispatch.WithObserver(inst), dispatch.WithPollInterval(100*time.Millisecond), dispatch.WithLogger(logger),
		dispatch.WithSweeper(dispatch.WithSweepInterval(time.Second)))
	if err != nil {
		return err
	}

	// serve
	srv := &http.Server{Handler: mux(reg), ReadHeaderTimeout: 5 * time.Second}
	errs := make(chan error, 4)
	go func() { errs <- ignoreClosed(srv.Serve(ln)) }()
	go func() { errs <- d.Run(ctx) }()
	go func() { errs <- w.Run(ctx) }()
	go func() { errs <- produce(ctx, store, outbox, every) }()

	<-ctx.Done()
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(shutdown)
	for range 4 {
		err = errors.Join(err, <-errs)
	}
	if err != nil {
		fmt.Fprintln(logTo, "ledgerprom:", err)
	}
	return err
}

// mux serves the registry's metrics at /metrics.
func mux(reg *prometheus.Registry) http.Handler {
	m := http.NewServeMux()
	m.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return m
}

func ignoreClosed(err error) error {
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// produce enqueues an e-mail, an SMS and a delivery for one of three
// hosts every interval until ctx ends.
func produce(ctx context.Context, l ledger.Ledger, outbox ledger.OutboxStore, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		for _, env := range []ledger.Envelope{
			{Provider: "mail", Kind: "welcome", IdempotencyKey: fmt.Sprintf("mail-%d", n)},
			{Provider: "sms", Kind: "code", IdempotencyKey: fmt.Sprintf("sms-%d", n)},
		} {
			if _, err := outbox.Enqueue(ctx, env); err != nil && ctx.Err() == nil {
				return err
			}
		}
		req := ledger.EnqueueRequest{ID: ledger.DeliveryID(fmt.Sprintf("delivery-%d", n)), Target: ledger.Target(fmt.Sprintf("host-%d", n%3))}
		if _, err := l.Enqueue(ctx, req, time.Now()); err != nil && ctx.Err() == nil {
			return err
		}
	}
}

// emitter stands for a provider: an SMS whose number ends in 7 fails
// once and is retried.
type emitter struct{}

func (emitter) Emit(_ context.Context, e ledger.OutboxEntry) (ledger.EmissionResult, error) {
	if e.Envelope.Provider == "sms" && e.Attempts == 1 && strings.HasSuffix(e.Envelope.IdempotencyKey, "7") {
		return ledger.EmissionResult{}, errors.New("503 from the SMS gateway")
	}
	return ledger.EmissionResult{ProviderRef: "ref-" + e.Envelope.IdempotencyKey}, nil
}

// handler stands for a host's work: it processes every delivery.
type handler struct{}

func (handler) Handle(context.Context, ledger.Delivery) (dispatch.Decision, error) {
	return dispatch.Processed("done"), nil
}
