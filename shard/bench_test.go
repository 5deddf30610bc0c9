package shard_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/internal/pgtest"
	"github.com/leaseledger/ledger/memstore"
	"github.com/leaseledger/ledger/shard"
)

// BenchmarkEnqueue enqueues one delivery per call, as a producer does,
// directly and through a shard.Ledger over three memstores.
func BenchmarkEnqueue(b *testing.B) {
	targets := []ledger.Target{"t0-a", "t1-a", "t2-a"}
	for _, c := range []struct {
		name string
		opts []shard.Option
	}{{"direct", nil}, {"sharded-3", []shard.Option{}}, {"sharded-3-noidcheck", []shard.Option{shard.WithoutIDCheck()}}} {
		b.Run(c.name, func(b *testing.B) {
			var l ledger.Ledger = memstore.New()
			if c.opts != nil {
				var err error
				if l, err = shard.New([]ledger.Ledger{memstore.New(), memstore.New(), memstore.New()},
					append([]shard.Option{shard.WithPlacement(placed)}, c.opts...)...); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			cpu0 := pgtest.ProcessCPU()
			for i := 0; b.Loop(); i++ {
				req := ledger.EnqueueRequest{ID: ledger.DeliveryID(fmt.Sprintf("d-%d", i)), Target: targets[i%3], Payload: []byte("p")}
				if _, err := l.Enqueue(b.Context(), req, t0); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(pgtest.ProcessCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkCycle drains deliveries as dispatch.Worker does (a batch
// enqueue, a lease of the batch, one AcknowledgeProcessed per delivery)
// through one memstore directly and through a shard.Ledger over three
// memstores, with the enqueue's ID look-up and without. A memstore call
// costs only CPU, so the difference is what the routing adds to the
// client per call; cpu-ns/item counts every goroutine's CPU (the fan-out
// runs shards concurrently), not just the benchmark's.
//
//	go test -run '^$' -bench BenchmarkCycle -cpu 1 -count 5 ./shard
func BenchmarkCycle(b *testing.B) {
	three := func(opts ...shard.Option) ledger.Ledger {
		l, err := shard.New([]ledger.Ledger{memstore.New(), memstore.New(), memstore.New()},
			append([]shard.Option{shard.WithPlacement(placed)}, opts...)...)
		if err != nil {
			b.Fatal(err)
		}
		return l
	}
	for _, c := range []struct {
		name string
		l    func() ledger.Ledger
	}{
		{"direct", func() ledger.Ledger { return memstore.New() }},
		{"sharded-3", func() ledger.Ledger { return three() }},
		{"sharded-3-noidcheck", func() ledger.Ledger { return three(shard.WithoutIDCheck()) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			drainCycle(b, c.l(), func(i int) time.Time { return t0.Add(time.Duration(i) * time.Millisecond) })
		})
	}
}

// drainCycle drains deliveries through l as dispatch.Worker does, in
// batches of 30 over three targets placed one on each shard, and reports
// the process CPU per item: in all, and around each kind of call. now
// gives the time of the batch that starts at item i.
//
// A drain works through a backlog: before the clock starts, each target
// holds three batches' worth, so that a lease finds more work on the
// shard it asks first than it asks for, as in a busy ledger, and the
// backlog stays about that deep as the cycles enqueue and lease.
func drainCycle(b *testing.B, l ledger.Ledger, now func(i int) time.Time) {
	const batch = 30
	targets := []ledger.Target{"t0-a", "t1-a", "t2-a"}
	owner := ledger.Owner{Agent: "bench", Incarnation: "boot-1"}
	ctx := b.Context()
	be := l.(ledger.BatchEnqueuer)
	ap := l.(ledger.AckProcessor)
	reqs := make([]ledger.EnqueueRequest, batch)
	n := 0
	for range 3 * len(targets) {
		for k := range reqs {
			reqs[k] = ledger.EnqueueRequest{ID: ledger.DeliveryID(fmt.Sprintf("backlog-%d", n)), Target: targets[k%3], Payload: []byte("p")}
			n++
		}
		if _, err := be.EnqueueBatch(ctx, reqs, now(0)); err != nil {
			b.Fatal(err)
		}
	}
	// Process CPU around each kind of call, so that each shows
	// what the routing adds to it; three reads of it per batch
	// of 30 cost the same in every variant.
	var enq, lease, done int64
	b.ReportAllocs()
	cpu0 := pgtest.ProcessCPU()
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		now := now(i)
		for k := range reqs {
			reqs[k] = ledger.EnqueueRequest{ID: ledger.DeliveryID(fmt.Sprintf("d-%d", n)), Target: targets[k%3], Payload: []byte("p")}
			n++
		}
		c0 := pgtest.ProcessCPU()
		if _, err := be.EnqueueBatch(ctx, reqs, now); err != nil {
			b.Fatal(err)
		}
		c1 := pgtest.ProcessCPU()
		res, err := l.Lease(ctx, ledger.LeaseFilter{Targets: targets}, owner, now, time.Minute, batch)
		if err != nil || len(res.Leased) != batch {
			b.Fatalf("leased %d: %v", len(res.Leased), err)
		}
		c2 := pgtest.ProcessCPU()
		for _, g := range res.Leased {
			if _, _, err := ap.AcknowledgeProcessed(ctx, g.Lease, "", nil, "done", now); err != nil {
				b.Fatal(err)
			}
		}
		c3 := pgtest.ProcessCPU()
		enq, lease, done = enq+c1-c0, lease+c2-c1, done+c3-c2
	}
	b.StopTimer()
	items := float64(((b.N + batch - 1) / batch) * batch)
	b.ReportMetric(float64(pgtest.ProcessCPU()-cpu0)/items, "cpu-ns/item")
	b.ReportMetric(float64(enq)/items, "enqueue-cpu-ns/item")
	b.ReportMetric(float64(lease)/items, "lease-cpu-ns/item")
	b.ReportMetric(float64(done)/items, "ackprocessed-cpu-ns/item")
}
