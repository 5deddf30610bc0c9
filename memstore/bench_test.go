package memstore_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/memstore"
)

// Run with: go test -run '^$' -bench . -benchmem ./memstore
//
// Benchmarks whose store grows with b.N start a fresh store every chunk
// (with the timer stopped), so that a long run does not measure a store of
// millions of terminal records, nor run out of memory.

const benchChunk = 100_000

var (
	benchOwner   = ledger.Owner{Agent: "agent", Incarnation: "boot-1"}
	benchPayload = make([]byte, 256)
	benchTarget  = []ledger.Target{"target"}
)

func benchIDs(prefix string, n int) []ledger.DeliveryID {
	ids := make([]ledger.DeliveryID, n)
	for i := range ids {
		ids[i] = ledger.DeliveryID(fmt.Sprintf("%s-%08d", prefix, i))
	}
	return ids
}

// fill enqueues n deliveries with 256-byte payloads in batches, all
// available at t0, and returns their IDs.
func fill(b *testing.B, s *memstore.Store, n int) []ledger.DeliveryID {
	b.Helper()
	ids := benchIDs("d", n)
	fillIDs(b, s, ids)
	return ids
}

func fillIDs(b *testing.B, s *memstore.Store, ids []ledger.DeliveryID) {
	b.Helper()
	ctx := context.Background()
	n := len(ids)
	reqs := make([]ledger.EnqueueRequest, 0, ledger.MaxLimit)
	for i := 0; i < n; i += ledger.MaxLimit {
		reqs = reqs[:0]
		for _, id := range ids[i:min(n, i+ledger.MaxLimit)] {
			reqs = append(reqs, ledger.EnqueueRequest{ID: id, Target: "target", Payload: benchPayload})
		}
		if _, err := s.EnqueueBatch(ctx, reqs, t0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEnqueue(b *testing.B) {
	ctx := context.Background()
	var (
		s   *memstore.Store
		ids []ledger.DeliveryID
	)
	for i := 0; i < b.N; i++ {
		j := i % benchChunk
		if j == 0 {
			b.StopTimer()
			s, ids = memstore.New(), benchIDs("d", benchChunk)
			b.StartTimer()
		}
		if _, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: ids[j], Target: "target", Payload: benchPayload}, t0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLeaseBatch100(b *testing.B) {
	ctx := context.Background()
	s := memstore.New()
	fill(b, s, 10_000)
	now := t0.Add(time.Second)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := s.Lease(ctx, ledger.LeaseFilter{Targets: benchTarget}, benchOwner, now, time.Minute, 100)
		if err != nil || len(r.Leased) != 100 {
			b.Fatal(err, len(r.Leased))
		}
		b.StopTimer()
		for _, l := range r.Leased {
			if _, err := s.Release(ctx, l.Lease, now); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100), "ns/item")
}

// leased prepares a fresh store holding n deliveries leased to benchOwner.
func leased(b *testing.B, n int) (*memstore.Store, []ledger.Lease) {
	b.Helper()
	ctx := context.Background()
	s := memstore.New()
	fill(b, s, n)
	leases := make([]ledger.Lease, 0, n)
	for len(leases) < n {
		r, err := s.Lease(ctx, ledger.LeaseFilter{}, benchOwner, t0, time.Hour, ledger.MaxLimit)
		if err != nil || len(r.Leased) == 0 {
			b.Fatal(err, len(r.Leased))
		}
		for _, l := range r.Leased {
			leases = append(leases, l.Lease)
		}
	}
	return s, leases
}

const benchSmallChunk = 10_000

func BenchmarkAcknowledge(b *testing.B) {
	ctx := context.Background()
	var (
		s      *memstore.Store
		leases []ledger.Lease
	)
	for i := 0; i < b.N; i++ {
		j := i % benchSmallChunk
		if j == 0 {
			b.StopTimer()
			s, leases = leased(b, benchSmallChunk)
			b.StartTimer()
		}
		if r, err := s.Acknowledge(ctx, leases[j], "seen", t0); err != nil || !r.Applied() {
			b.Fatal(err, r.Outcome)
		}
	}
}

func BenchmarkMarkProcessed(b *testing.B) {
	ctx := context.Background()
	var (
		s      *memstore.Store
		leases []ledger.Lease
	)
	for i := 0; i < b.N; i++ {
		j := i % benchSmallChunk
		if j == 0 {
			b.StopTimer()
			s, leases = leased(b, benchSmallChunk)
			for _, l := range leases {
				if _, err := s.Acknowledge(ctx, l, "", t0); err != nil {
					b.Fatal(err)
				}
			}
			b.StartTimer()
		}
		fence := ledger.Fence(i)
		if r, err := s.MarkProcessed(ctx, leases[j].DeliveryID, benchOwner, &fence, "done", t0); err != nil || !r.Applied() {
			b.Fatal(err, r.Outcome)
		}
	}
}

// BenchmarkDeliveryCycle is the whole life of each delivery, drained the
// way a host drains work: enqueue in batches of 100 (EnqueueBatch), lease
// in batches of 100 (Lease with limit 100), then acknowledge and mark
// processed each item with its own call. One op is one item, so ns/op and
// ns/item are the full cycle per item (total time / items).
func BenchmarkDeliveryCycle(b *testing.B) {
	const batch = 100
	ctx := context.Background()
	var (
		s   *memstore.Store
		ids []ledger.DeliveryID
	)
	reqs := make([]ledger.EnqueueRequest, batch)
	for i := 0; i < b.N; i += batch {
		j := i % benchChunk // benchChunk is a multiple of batch
		if j == 0 {
			b.StopTimer()
			s, ids = memstore.New(), benchIDs("d", benchChunk)
			b.StartTimer()
		}
		n := min(batch, b.N-i)
		now := t0.Add(time.Duration(j) * time.Microsecond)
		reqs = reqs[:n]
		for k := range reqs {
			reqs[k] = ledger.EnqueueRequest{ID: ids[j+k], Target: "target", Payload: benchPayload}
		}
		if _, err := s.EnqueueBatch(ctx, reqs, now); err != nil {
			b.Fatal(err)
		}
		r, err := s.Lease(ctx, ledger.LeaseFilter{Targets: benchTarget}, benchOwner, now, time.Minute, batch)
		if err != nil || len(r.Leased) != n {
			b.Fatal(err, len(r.Leased))
		}
		for _, l := range r.Leased {
			finishCycle(ctx, b, s, l.Lease, now)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/item")
}

// BenchmarkDeliveryCycleSingle is the same cycle with one call per step and
// per item: Enqueue, Lease with limit 1, Acknowledge, MarkProcessed. One op
// is one item.
func BenchmarkDeliveryCycleSingle(b *testing.B) {
	ctx := context.Background()
	var (
		s   *memstore.Store
		ids []ledger.DeliveryID
	)
	for i := 0; i < b.N; i++ {
		j := i % benchChunk
		if j == 0 {
			b.StopTimer()
			s, ids = memstore.New(), benchIDs("d", benchChunk)
			b.StartTimer()
		}
		now := t0.Add(time.Duration(j) * time.Microsecond)
		if _, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: ids[j], Target: "target", Payload: benchPayload}, now); err != nil {
			b.Fatal(err)
		}
		r, err := s.Lease(ctx, ledger.LeaseFilter{Targets: benchTarget}, benchOwner, now, time.Minute, 1)
		if err != nil || len(r.Leased) != 1 {
			b.Fatal(err, len(r.Leased))
		}
		finishCycle(ctx, b, s, r.Leased[0].Lease, now)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/item")
}

// BenchmarkClaimCycle is the life of one outbox entry: enqueue it, claim
// it, mark it delivered. One op is one entry.
func BenchmarkClaimCycle(b *testing.B) {
	ctx := context.Background()
	var (
		o    *memstore.Outbox
		envs []ledger.Envelope
	)
	for i := 0; i < b.N; i++ {
		j := i % benchChunk
		if j == 0 {
			b.StopTimer()
			o = memstore.NewOutbox(memstore.WithClock(func() time.Time { return t0 }))
			envs = make([]ledger.Envelope, benchChunk)
			for k := range envs {
				envs[k] = ledger.Envelope{Provider: "p", Kind: "k", Payload: benchPayload, IdempotencyKey: fmt.Sprintf("key-%08d", k)}
			}
			b.StartTimer()
		}
		if _, err := o.Enqueue(ctx, envs[j]); err != nil {
			b.Fatal(err)
		}
		cs, err := o.ClaimPending(ctx, ledger.ClaimRequest{Worker: "w", Now: t0, LeaseDuration: time.Minute, Limit: 1})
		if err != nil || len(cs) != 1 {
			b.Fatal(err, len(cs))
		}
		if r, err := o.MarkClaimDelivered(ctx, cs[0].Claim, ledger.EmissionResult{ProviderRef: "ref"}); err != nil || !r.Applied() {
			b.Fatal(err, r.Outcome)
		}
	}
}

// BenchmarkClaimInForceAhead claims ten pending entries and marks them
// delivered per op, behind 0 or 10,000 older entries whose claims are in
// force: ClaimPending walks past those (see its godoc), so the op costs
// more with every one of them.
func BenchmarkClaimInForceAhead(b *testing.B) {
	const perOp, pool = 10, 10_000
	for _, ahead := range []int{0, 10_000} {
		b.Run(fmt.Sprintf("%dk", ahead/1000), func(b *testing.B) {
			ctx := context.Background()
			o := memstore.NewOutbox(memstore.WithClock(func() time.Time { return t0 }))
			enqueued := 0
			enqueue := func(n int) {
				b.Helper()
				envs := make([]ledger.Envelope, 0, ledger.MaxLimit)
				for ; n > 0; n-- {
					envs = append(envs, ledger.Envelope{Provider: "p", Kind: "k", Payload: benchPayload, IdempotencyKey: fmt.Sprintf("key-%08d", enqueued)})
					enqueued++
					if len(envs) == cap(envs) || n == 1 {
						if _, err := o.EnqueueBatch(ctx, envs); err != nil {
							b.Fatal(err)
						}
						envs = envs[:0]
					}
				}
			}
			enqueue(ahead)
			for held := 0; held < ahead; held += ledger.MaxLimit {
				cs, err := o.ClaimPending(ctx, ledger.ClaimRequest{Worker: "holder", Now: t0, LeaseDuration: time.Hour, Limit: ledger.MaxLimit})
				if err != nil || len(cs) != ledger.MaxLimit {
					b.Fatal(err, len(cs))
				}
			}
			left := 0
			for b.Loop() {
				if left < perOp {
					b.StopTimer()
					enqueue(pool)
					left += pool
					b.StartTimer()
				}
				cs, err := o.ClaimPending(ctx, ledger.ClaimRequest{Worker: "w", Now: t0, LeaseDuration: time.Minute, Limit: perOp})
				if err != nil || len(cs) != perOp {
					b.Fatal(err, len(cs))
				}
				for _, c := range cs {
					if r, err := o.MarkClaimDelivered(ctx, c.Claim, ledger.EmissionResult{ProviderRef: "ref"}); err != nil || !r.Applied() {
						b.Fatal(err, r.Outcome)
					}
				}
				left -= perOp
			}
		})
	}
}

// BenchmarkLeaseOpen leases and releases one delivery out of n open ones:
// the cost must grow with log n, not n.
func BenchmarkLeaseOpen(b *testing.B) {
	for _, n := range []int{1_000, 1_000_000} {
		b.Run(fmt.Sprintf("%dk", n/1000), func(b *testing.B) {
			if n > 1000 && testing.Short() {
				b.Skip("builds a million records")
			}
			ctx := context.Background()
			s := memstore.New()
			fill(b, s, n) // once: b.Loop runs this function body once
			now := t0.Add(time.Second)
			for b.Loop() {
				r, err := s.Lease(ctx, ledger.LeaseFilter{Targets: benchTarget}, benchOwner, now, time.Minute, 1)
				if err != nil || len(r.Leased) != 1 {
					b.Fatal(err, len(r.Leased))
				}
				if _, err := s.Release(ctx, r.Leased[0].Lease, now); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkHeapOpen1M reports the heap held by a store of a million open
// deliveries with 256-byte payloads, after a GC: heap-MiB is the whole
// heap of the process (store, the 16-byte ID strings and the test's own
// slice of them), store-B/delivery what the store added per delivery on
// top of the IDs the caller already held.
func BenchmarkHeapOpen1M(b *testing.B) {
	if testing.Short() {
		b.Skip("builds a million records")
	}
	const n = 1_000_000
	ids := benchIDs("d", n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := memstore.New()
	fillIDs(b, s, ids)
	runtime.GC()
	runtime.ReadMemStats(&after)
	for b.Loop() {
		if _, err := s.Get(context.Background(), ids[n/2]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(after.HeapAlloc)/(1<<20), "heap-MiB")
	b.ReportMetric((float64(after.HeapAlloc)-float64(before.HeapAlloc))/n, "store-B/delivery")
	runtime.KeepAlive(s)
}

// finishCycle is the end of a delivery's cycle: acknowledge it under
// lease, then mark it processed.
func finishCycle(ctx context.Context, b *testing.B, s *memstore.Store, lease ledger.Lease, now time.Time) {
	if a, err := s.Acknowledge(ctx, lease, "seen", now); err != nil || !a.Applied() {
		b.Fatal(err, a.Outcome)
	}
	if p, err := s.MarkProcessed(ctx, lease.DeliveryID, benchOwner, nil, "done", now); err != nil || !p.Applied() {
		b.Fatal(err, p.Outcome)
	}
}
