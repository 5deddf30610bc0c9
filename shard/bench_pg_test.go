package shard_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/internal/pgtest"
	"github.com/leaseledger/ledger/shard"
)

// pgBenchLedgers are the variants the PostgreSQL benchmarks compare: one
// pgstore directly (on the first server), a shard.Ledger over that one
// pgstore (the routing's code alone), and a shard.Ledger over three
// pgstores on three servers, with the enqueue's ID look-up (the default)
// and without it.
var pgBenchLedgers = []struct {
	name string
	l    func(b *testing.B) ledger.Ledger
}{
	{"direct", func(b *testing.B) ledger.Ledger { return pgStore(b, serverURLs(b)[0]) }},
	// The routing's own code, without a second store in the process: a
	// shard.Ledger over the one pgstore.
	{"sharded-1", func(b *testing.B) ledger.Ledger {
		l, err := shard.New([]ledger.Ledger{pgStore(b, serverURLs(b)[0])})
		if err != nil {
			b.Fatal(err)
		}
		return l
	}},
	{"sharded-3", func(b *testing.B) ledger.Ledger { return pgSharded(b) }},
	{"sharded-3-noidcheck", func(b *testing.B) ledger.Ledger { return pgSharded(b, shard.WithoutIDCheck()) }},
}

// pgSharded is a shard.Ledger over three pgstores on three servers,
// placed by placed (t0-* on the first, t1-* on the second, ...).
func pgSharded(b *testing.B, opts ...shard.Option) ledger.Ledger {
	s := pgShards(b)
	l, err := shard.New([]ledger.Ledger{s[0], s[1], s[2]}, append([]shard.Option{shard.WithPlacement(placed)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkPGCycle is BenchmarkCycle over PostgreSQL: what the routing
// adds to the client's CPU per item against one pgstore, when every call
// also costs the client a round trip's encoding and decoding. The
// servers are processes of their own, so cpu-ns counts the client alone
// (every goroutine of this process: pgx's, the fan-out's).
//
//	go test -run '^$' -bench BenchmarkPGCycle -benchtime 600x -count 3 ./shard
func BenchmarkPGCycle(b *testing.B) {
	for _, c := range pgBenchLedgers {
		b.Run(c.name, func(b *testing.B) {
			// The servers' clock: pgstore warns of a caller's clock that
			// differs from the database's by more than a second.
			drainCycle(b, c.l(b), func(int) time.Time { return time.Now() })
		})
	}
}

// BenchmarkPGEnqueue is BenchmarkEnqueue over PostgreSQL: one Enqueue per
// call, as a producer makes them. Through a shard.Ledger with the ID
// look-up, each call first reads the ID on the two other shards.
//
//	go test -run '^$' -bench BenchmarkPGEnqueue -benchtime 600x -count 3 ./shard
func BenchmarkPGEnqueue(b *testing.B) {
	targets := []ledger.Target{"t0-a", "t1-a", "t2-a"}
	for _, c := range pgBenchLedgers {
		b.Run(c.name, func(b *testing.B) {
			l := c.l(b)
			b.ReportAllocs()
			cpu0 := pgtest.ProcessCPU()
			for i := 0; b.Loop(); i++ {
				req := ledger.EnqueueRequest{ID: ledger.DeliveryID(fmt.Sprintf("d-%d", i)), Target: targets[i%3], Payload: []byte("p")}
				if _, err := l.Enqueue(b.Context(), req, time.Now()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(pgtest.ProcessCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkPGEnqueueBatch is one EnqueueBatch per call, of 30 or 300
// deliveries, for one target (one shard) or spread over three targets
// (three shards), reported per item. A batch that spans shards is one
// transaction on each: its share of the cost is what the other shards'
// transactions add, not routing.
//
//	go test -run '^$' -bench BenchmarkPGEnqueueBatch -benchtime 100x -count 3 ./shard
func BenchmarkPGEnqueueBatch(b *testing.B) {
	for _, size := range []int{30, 300} {
		for _, spread := range []int{1, 3} {
			for _, c := range pgBenchLedgers {
				b.Run(fmt.Sprintf("size-%d/targets-%d/%s", size, spread, c.name), func(b *testing.B) {
					be := c.l(b).(ledger.BatchEnqueuer)
					targets := []ledger.Target{"t0-a", "t1-a", "t2-a"}
					reqs := make([]ledger.EnqueueRequest, size)
					n := 0
					b.ReportAllocs()
					cpu0 := pgtest.ProcessCPU()
					for b.Loop() {
						for k := range reqs {
							reqs[k] = ledger.EnqueueRequest{ID: ledger.DeliveryID(fmt.Sprintf("d-%d", n)), Target: targets[k%spread], Payload: []byte("p")}
							n++
						}
						if _, err := be.EnqueueBatch(b.Context(), reqs, time.Now()); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(pgtest.ProcessCPU()-cpu0)/float64(n), "cpu-ns/item")
				})
			}
		}
	}
}
