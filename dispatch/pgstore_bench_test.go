package dispatch_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/dispatch"
	"github.com/leaseledger/ledger/internal/pgtest"
	"github.com/leaseledger/ledger/pgstore"
)

// BenchmarkDispatcherDrain drains b.N outbox entries from pgstore with
// four Dispatchers running poll cycles side by side and an emitter that
// answers at once: the library's own cost per entry. An op is one entry;
// the enqueue is not timed. Beside ns/op it reports the client's CPU per
// entry. OneByOne hides the store's CompleteClaims, so its completions
// are single calls (joined by group commit), as by default; Batched
// completes each cycle's emissions together (WithBatchCompletion). Run with a fixed -benchtime, e.g. 20000x.
func BenchmarkDispatcherDrain(b *testing.B) {
	b.Run("Batched", func(b *testing.B) { benchDispatcherDrain(b, false) })
	b.Run("OneByOne", func(b *testing.B) { benchDispatcherDrain(b, true) })
}

// singleCompletions hides everything of a claim store but the ClaimStore
// calls, claiming both kinds in one call and renewing.
type singleCompletions struct {
	ledger.ClaimStore
	ledger.DueClaimer
	ledger.ClaimRenewer
}

func benchDispatcherDrain(b *testing.B, oneByOne bool) {
	pool := pgtest.Pool(b)
	schema := pgtest.Schema(b, pool)
	s, err := pgstore.New(pool, pgstore.WithSchema(schema), pgstore.WithGroupCommit(true))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	for from := 0; from < b.N; from += ledger.MaxLimit {
		envs := make([]ledger.Envelope, min(ledger.MaxLimit, b.N-from))
		for i := range envs {
			envs[i] = ledger.Envelope{Provider: "mail", Kind: "welcome", Payload: []byte("{}"), IdempotencyKey: fmt.Sprintf("key-%09d", from+i)}
		}
		if _, err := s.Outbox().EnqueueBatch(ctx, envs); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, "ANALYZE "+pgx.Identifier{schema, "outbox_entries"}.Sanitize()); err != nil {
		b.Fatal(err)
	}
	var store ledger.ClaimStore = s.Outbox()
	opts := []dispatch.DispatcherOption{dispatch.WithBatchSize(100), dispatch.WithConcurrency(25), dispatch.WithLogger(discardLogger())}
	if oneByOne {
		store = singleCompletions{s.Outbox(), s.Outbox(), s.Outbox()}
	} else {
		opts = append(opts, dispatch.WithBatchCompletion())
	}
	emitter := dispatch.EmitterFunc(func(context.Context, ledger.OutboxEntry) (ledger.EmissionResult, error) {
		return ledger.EmissionResult{ProviderRef: "ref"}, nil
	})
	const dispatchers = 4
	ds := make([]*dispatch.Dispatcher, dispatchers)
	for i := range ds {
		ds[i], err = dispatch.NewDispatcher(store, emitter, append(opts, dispatch.WithWorker(fmt.Sprintf("bench-%d", i)))...)
		if err != nil {
			b.Fatal(err)
		}
	}
	loops := make([]func(context.Context) (int, error), len(ds))
	for i, d := range ds {
		loops[i] = func(ctx context.Context) (int, error) {
			st, err := d.RunOnce(ctx)
			return st.Claimed, err
		}
	}
	drainLoops(b, ctx, loops)
	st, err := s.Outbox().OutboxStats(ctx, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	if n := st.ByStatus[ledger.OutboxStatusDelivered]; n != int64(b.N) {
		b.Fatalf("%d of %d entries delivered", n, b.N)
	}
}

// BenchmarkWorkerDrain drains b.N deliveries from pgstore with four
// Workers (one agent each) running poll cycles side by side and a
// handler that processes at once: the library's own cost per delivery,
// as BenchmarkDispatcherDrain measures it for the outbox. An op is one
// delivery; the enqueue is not timed. Beside ns/op it reports the
// client's CPU per delivery. Run with a fixed -benchtime, e.g. 20000x.
func BenchmarkWorkerDrain(b *testing.B) {
	pool := pgtest.Pool(b)
	schema := pgtest.Schema(b, pool)
	s, err := pgstore.New(pool, pgstore.WithSchema(schema), pgstore.WithGroupCommit(true))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	for from := 0; from < b.N; from += ledger.MaxLimit {
		reqs := make([]ledger.EnqueueRequest, min(ledger.MaxLimit, b.N-from))
		for i := range reqs {
			reqs[i] = ledger.EnqueueRequest{
				ID:      ledger.DeliveryID(fmt.Sprintf("d-%09d", from+i)),
				Target:  ledger.Target(fmt.Sprintf("host-%d", (from+i)%10)),
				Payload: []byte("{}"),
			}
		}
		if _, err := s.EnqueueBatch(ctx, reqs, t0); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, "ANALYZE "+pgx.Identifier{schema, "deliveries"}.Sanitize()); err != nil {
		b.Fatal(err)
	}
	handler := dispatch.HandlerFunc(func(context.Context, ledger.Delivery) (dispatch.Decision, error) {
		return dispatch.Decision{}, nil
	})
	const workers = 4
	ws := make([]*dispatch.Worker, workers)
	for i := range ws {
		ws[i], err = dispatch.NewWorker(s, fmt.Sprintf("bench-%d", i), nil, handler,
			dispatch.WithBatchSize(100), dispatch.WithConcurrency(25), dispatch.WithLogger(discardLogger()))
		if err != nil {
			b.Fatal(err)
		}
	}
	loops := make([]func(context.Context) (int, error), len(ws))
	for i, w := range ws {
		loops[i] = func(ctx context.Context) (int, error) {
			st, err := w.RunOnce(ctx)
			return st.Leased, err
		}
	}
	drainLoops(b, ctx, loops)
	st, err := s.Stats(ctx, ledger.StatsFilter{}, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	if n := st.ByState[ledger.DeliveryStateProcessed]; n != int64(b.N) {
		b.Fatalf("%d of %d deliveries processed", n, b.N)
	}
}

// drainLoops runs every loop's cycles concurrently until each finds
// nothing to take, timing them and reporting the process's CPU per op:
// the client's, since the server is a process of its own.
func drainLoops(b *testing.B, ctx context.Context, loops []func(context.Context) (int, error)) {
	b.Helper()
	cpu := pgtest.ProcessCPU()
	b.ReportAllocs()
	b.ResetTimer()
	errs := make(chan error, len(loops))
	for _, cycle := range loops {
		go func() {
			for {
				n, err := cycle(ctx)
				if err != nil || n == 0 {
					errs <- err
					return
				}
			}
		}()
	}
	for range loops {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(pgtest.ProcessCPU()-cpu)/float64(b.N), "client-cpu-ns/op")
}
