package dispatch_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/dispatch"
	"github.com/leaseledger/ledger/internal/pgtest"
	"github.com/leaseledger/ledger/pgstore"
)

// benchPollInterval is the poll interval of BenchmarkEnqueueToEmission.
const benchPollInterval = 200 * time.Millisecond

// BenchmarkEnqueueToEmission measures how long an entry waits between the
// start of its Enqueue and its emission, on PostgreSQL with real time and
// one Dispatcher running Run: /poll with the poll interval alone, /notify
// with WithWake on Store.Listen. It reports the p50 and p99 in ms (ns/op
// is meaningless here: an operation is mostly waiting). Each iteration
// enqueues one entry at a random point of the poll interval, as traffic
// would, and waits for it to be emitted. Run it with -benchtime 50x or
// more; the target is a notify p50 under a quarter of the interval.
func BenchmarkEnqueueToEmission(b *testing.B) {
	for _, notify := range []bool{false, true} {
		name := "poll"
		if notify {
			name = "notify"
		}
		b.Run(name, func(b *testing.B) { benchEnqueueToEmission(b, notify) })
	}
}

type emitted struct {
	id ledger.OutboxEntryID
	at time.Time
}

func benchEnqueueToEmission(b *testing.B, notify bool) {
	pool := pgtest.Pool(b)
	schema := pgtest.Schema(b, pool)
	store, err := pgstore.New(pool, pgstore.WithSchema(schema), pgstore.WithNotify(true))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	if err := store.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	outbox := store.Outbox()

	emissions := make(chan emitted, 16)
	emitter := dispatch.EmitterFunc(func(_ context.Context, e ledger.OutboxEntry) (ledger.EmissionResult, error) {
		emissions <- emitted{id: e.ID, at: time.Now()}
		return ledger.EmissionResult{}, nil
	})
	opts := []dispatch.DispatcherOption{dispatch.WithPollInterval(benchPollInterval), dispatch.WithLogger(discardLogger())}
	if notify {
		wake, err := store.Listen(ctx, pgstore.ChannelOutbox)
		if err != nil {
			b.Fatal(err)
		}
		opts = append(opts, dispatch.WithWake(wake))
	}
	d, err := dispatch.NewDispatcher(outbox, emitter, opts...)
	if err != nil {
		b.Fatal(err)
	}
	runErr := make(chan error, 1)
	go func() { runErr <- d.Run(ctx) }()

	var latencies []time.Duration
	i := 0
	for b.Loop() {
		// Enqueue at a random phase of the poll: right after an emission
		// the dispatcher has just started a full wait, which would make
		// every poll latency one whole interval.
		b.StopTimer()
		time.Sleep(rand.N(benchPollInterval))
		b.StartTimer()

		start := time.Now()
		r, err := outbox.Enqueue(ctx, ledger.Envelope{
			Provider: "bench", Kind: "wake", Payload: []byte("x"), IdempotencyKey: fmt.Sprintf("e-%d", i),
		})
		if err != nil {
			b.Fatal(err)
		}
		i++
		latencies = append(latencies, waitEmitted(b, emissions, r.Entry.ID).Sub(start))
	}
	b.StopTimer()
	cancel()
	select {
	case err := <-runErr:
		if err != nil {
			b.Fatal(err)
		}
	case <-time.After(waitLimit):
		b.Fatal("Run did not return")
	}

	slices.Sort(latencies)
	b.ReportMetric(msOf(percentile(latencies, 50)), "p50-ms")
	b.ReportMetric(msOf(percentile(latencies, 99)), "p99-ms")
}

// waitEmitted waits, bounded, for the emission of id and returns its time.
func waitEmitted(b *testing.B, emissions <-chan emitted, id ledger.OutboxEntryID) time.Time {
	deadline := time.After(waitLimit)
	for {
		select {
		case e := <-emissions:
			if e.id == id {
				return e.at
			}
		case <-deadline:
			b.Fatalf("entry %s was not emitted", id)
		}
	}
}

// percentile returns the p-th percentile of sorted (nearest rank).
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 * n)
	return sorted[max(rank, 1)-1]
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
