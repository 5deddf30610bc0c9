package main

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/memstore"
)

// memoryTarget is the heap the memory workload may use for
// defaultMemoryItems open deliveries.
const memoryTarget = 1 << 30

// memory is the in-memory store's footprint: it holds -items (at most
// 1,000,000) open deliveries with 256-byte payloads and reports the heap in
// use after a full collection, and the growth per delivery over the heap
// before it started.
func (e *env) memory(ctx context.Context, rep *report) error {
	const w = workloadMemory
	n := e.cfg.memoryItems
	before := heapInUse()
	s := memstore.New()
	ph := e.prog.begin(string(w)+": enqueue open deliveries", n)
	for from := 0; from < n; from += ledger.MaxLimit {
		k := min(ledger.MaxLimit, n-from)
		rs, err := s.EnqueueBatch(ctx, deliveryRequests("m", from, k), time.Now())
		if err != nil {
			ph.end()
			return err
		}
		if err := allApplied(len(rs), k, func(i int) ledger.Outcome { return rs[i].Outcome }); err != nil {
			ph.end()
			return err
		}
		ph.add(k)
	}
	ph.end()
	after := heapInUse()
	// The store must still be reachable when the heap is read, or the
	// collection above could have freed it.
	runtime.KeepAlive(s)
	rep.add(w, "open deliveries held", float64(n), "items", "", nil)
	rep.add(w, "heap in use", mib(after), "MiB", "",
		below(memoryTarget>>20, "MiB").when(n == defaultMemoryItems, "for 1,000,000"))
	rep.add(w, "heap growth per delivery", float64(after-min(before, after))/float64(n), "bytes", "", nil)
	if n != defaultMemoryItems {
		rep.note(fmt.Sprintf("memory: the heap target is stated for %d deliveries; this run held %d", defaultMemoryItems, n))
	}
	return nil
}
