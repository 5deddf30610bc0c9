package pgstore

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/internal/pgtest"
)

// BenchmarkDrain drains items the way a worker does: claim (or lease) a
// batch of benchDrainBatch, complete every item of it at once, again
// until none is left. An op is one item; the enqueue is not timed.
// Beside ns/op it reports the client's CPU per item (the benchmark
// process's user and system time over the timed part: what the library
// spends in Go, and what -benchmem's allocations cost it), which a busy
// machine disturbs less than wall time. Run with a fixed -benchtime, e.g.
// 20000x: the items are enqueued first.
func BenchmarkDrain(b *testing.B) {
	b.Run("Outbox", func(b *testing.B) { benchDrain(b, true) })
	b.Run("Deliveries", func(b *testing.B) { benchDrain(b, false) })
}

const benchDrainBatch = 100

func benchDrain(b *testing.B, outbox bool) {
	s, _ := newBenchStore(b)
	ctx := benchContext(b)
	for from := 0; from < b.N; from += ledger.MaxLimit {
		n := min(ledger.MaxLimit, b.N-from)
		var err error
		if outbox {
			envs := make([]ledger.Envelope, n)
			for i := range envs {
				envs[i] = ledger.Envelope{Provider: "mail", Kind: "welcome", Payload: benchPayload, IdempotencyKey: fmt.Sprintf("key-%09d", from+i)}
			}
			_, err = s.Outbox().EnqueueBatch(ctx, envs)
		} else {
			_, err = s.EnqueueBatch(ctx, benchRequests("d", from, n), benchT0)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	analyze(ctx, b, s)
	owner := ledger.Owner{Agent: "agent", Incarnation: "boot"}
	cpu := pgtest.ProcessCPU()
	b.ReportAllocs()
	b.ResetTimer()
	done := 0
	for done < b.N {
		var items int
		var wg sync.WaitGroup
		errs := make(chan error, benchDrainBatch)
		if outbox {
			cs, err := s.Outbox().ClaimPending(ctx, ledger.ClaimRequest{Worker: "worker", Now: benchT0, LeaseDuration: time.Hour, Limit: benchDrainBatch})
			if err != nil {
				b.Fatal(err)
			}
			items = len(cs)
			for _, c := range cs {
				wg.Go(func() {
					if r, err := s.Outbox().MarkClaimDelivered(ctx, c.Claim, ledger.EmissionResult{ProviderRef: "ref"}); err != nil || !r.Applied() {
						errs <- fmt.Errorf("delivered %s: %v %v", c.Claim.EntryID, r.Outcome, err)
					}
				})
			}
		} else {
			r, err := s.Lease(ctx, ledger.LeaseFilter{}, owner, benchT0, time.Hour, benchDrainBatch)
			if err != nil {
				b.Fatal(err)
			}
			items = len(r.Leased)
			for _, l := range r.Leased {
				wg.Go(func() {
					if _, p, err := s.AcknowledgeProcessed(ctx, l.Lease, "seen", nil, "done", benchT0); err != nil || !p.Applied() {
						errs <- fmt.Errorf("processed %s: %v %v", l.Lease.DeliveryID, p.Outcome, err)
					}
				})
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		if items == 0 {
			b.Fatalf("%d of %d drained, then nothing to take", done, b.N)
		}
		done += items
	}
	b.StopTimer()
	b.ReportMetric(float64(pgtest.ProcessCPU()-cpu)/float64(b.N), "client-cpu-ns/op")
}
