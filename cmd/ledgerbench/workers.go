package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaseledger/ledger"
)

const (
	// leaseDuration is long enough that no lease or claim of a workload
	// runs out while its holder still works on it: expiry is not what is
	// measured here.
	leaseDuration = time.Hour
	// payloadSize is a delivery's payload, as in the figures.
	payloadSize = 256
	// targets spreads the deliveries over this many host targets.
	targets = 16
	// idlePoll is how long a consumer that found nothing waits before it
	// polls again. With several consumers polling out of step, new work
	// waits for the next poll of any of them, a fraction of this.
	idlePoll = 10 * time.Millisecond
)

// runWorkers runs fn in n goroutines and waits for them. The first error
// cancels the others' context and is the one returned, so that a failure
// is reported by its cause rather than by the cancellations it caused.
func runWorkers(ctx context.Context, n int, fn func(ctx context.Context, w int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(ctx, w); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		}()
	}
	wg.Wait()
	return first
}

// forEach calls fn for every index of [0, n) from up to limit goroutines
// at once and waits for them, as a worker that completes the items of its
// batch in parallel. The first error cancels the calls not yet made and is
// the one returned. With a limit of 1 the calls are made one after another
// on the caller's goroutine.
func forEach(ctx context.Context, n, limit int, fn func(ctx context.Context, i int) error) error {
	if limit <= 1 || n <= 1 {
		for i := range n {
			if err := fn(ctx, i); err != nil {
				return err
			}
		}
		return nil
	}
	var next atomic.Int64
	return runWorkers(ctx, min(limit, n), func(ctx context.Context, _ int) error {
		for {
			i := int(next.Add(1)) - 1
			if i >= n {
				return nil
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := fn(ctx, i); err != nil {
				return err
			}
		}
	})
}

// owner is worker w's lease owner: one agent per worker, so that the
// incarnation rule never takes work back from a sibling.
func owner(w int) ledger.Owner {
	return ledger.Owner{Agent: fmt.Sprintf("bench-agent-%d", w), Incarnation: "run"}
}

// newPayload returns a fresh payload, so that no two records share one.
func newPayload() []byte {
	p := make([]byte, payloadSize)
	for i := range p {
		p[i] = 'a' + byte(i%26)
	}
	return p
}

// deliveryRequests returns requests prefix-from ... prefix-(from+n-1).
func deliveryRequests(prefix string, from, n int) []ledger.EnqueueRequest {
	reqs := make([]ledger.EnqueueRequest, n)
	for i := range reqs {
		reqs[i] = ledger.EnqueueRequest{
			ID:      ledger.DeliveryID(fmt.Sprintf("%s-%09d", prefix, from+i)),
			Target:  ledger.Target(fmt.Sprintf("host-%d", (from+i)%targets)),
			Payload: newPayload(),
		}
	}
	return reqs
}

// envelopes returns outbox envelopes keyed prefix-from ... .
func envelopes(prefix string, from, n int) []ledger.Envelope {
	envs := make([]ledger.Envelope, n)
	for i := range envs {
		envs[i] = ledger.Envelope{Provider: "mail", Kind: "notice", Payload: newPayload(),
			IdempotencyKey: fmt.Sprintf("%s-%09d", prefix, from+i)}
	}
	return envs
}

// enqueueDeliveries enqueues n deliveries in batches of -batch from
// -workers goroutines and returns the rate in items/s.
func (e *env) enqueueDeliveries(ctx context.Context, l ledgerStore, label, prefix string, n int) (float64, error) {
	return e.inBatches(ctx, label, n, func(ctx context.Context, from, k int) error {
		rs, err := l.EnqueueBatch(ctx, deliveryRequests(prefix, from, k), time.Now())
		if err != nil {
			return err
		}
		return allApplied(len(rs), k, func(i int) ledger.Outcome { return rs[i].Outcome })
	})
}

// enqueueEntries is enqueueDeliveries for the outbox.
func (e *env) enqueueEntries(ctx context.Context, o outboxStore, label, prefix string, n int) (float64, error) {
	return e.inBatches(ctx, label, n, func(ctx context.Context, from, k int) error {
		rs, err := o.EnqueueBatch(ctx, envelopes(prefix, from, k))
		if err != nil {
			return err
		}
		return allApplied(len(rs), k, func(i int) ledger.Outcome { return rs[i].Outcome })
	})
}

// inBatches calls put for consecutive batches of -batch items out of n,
// from -workers goroutines, and returns the rate in items/s.
func (e *env) inBatches(ctx context.Context, label string, n int, put func(ctx context.Context, from, k int) error) (float64, error) {
	ph := e.prog.begin(label, n)
	start := time.Now()
	batches := make(chan int)
	err := runWorkers(ctx, e.cfg.workers+1, func(ctx context.Context, w int) error {
		if w == e.cfg.workers { // the feeder
			defer close(batches)
			for from := 0; from < n; from += e.cfg.batch {
				select {
				case batches <- from:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		}
		for from := range batches {
			k := min(e.cfg.batch, n-from)
			if err := put(ctx, from, k); err != nil {
				return err
			}
			ph.add(k)
		}
		return nil
	})
	elapsed := time.Since(start)
	ph.end()
	if err != nil {
		return 0, err
	}
	return float64(n) / elapsed.Seconds(), nil
}

// allApplied checks that a batch answered k results, every one Applied:
// the workloads enqueue fresh IDs only.
func allApplied(got, k int, outcome func(int) ledger.Outcome) error {
	if got != k {
		return fmt.Errorf("enqueue answered %d results for %d requests", got, k)
	}
	for i := range got {
		if o := outcome(i); o != ledger.OutcomeApplied {
			return fmt.Errorf("enqueue: outcome %s", o)
		}
	}
	return nil
}

// complete acknowledges a leased delivery and marks it processed, one call
// each, as a host does.
func complete(ctx context.Context, l ledgerStore, lease ledger.Lease) error {
	r, err := l.Acknowledge(ctx, lease, "received", time.Now())
	if err != nil {
		return err
	}
	if r.Outcome != ledger.OutcomeApplied {
		return fmt.Errorf("acknowledge %s: outcome %s", lease.DeliveryID, r.Outcome)
	}
	r, err = l.MarkProcessed(ctx, lease.DeliveryID, lease.Owner, nil, "done", time.Now())
	if err != nil {
		return err
	}
	if r.Outcome != ledger.OutcomeApplied {
		return fmt.Errorf("mark processed %s: outcome %s", lease.DeliveryID, r.Outcome)
	}
	return nil
}

// deliver marks a claimed outbox entry delivered.
func deliver(ctx context.Context, o outboxStore, c ledger.Claim) error {
	r, err := o.MarkClaimDelivered(ctx, c, ledger.EmissionResult{ProviderRef: "bench"})
	if err != nil {
		return err
	}
	if r.Outcome != ledger.OutcomeApplied {
		return fmt.Errorf("mark delivered %s: outcome %s", c.EntryID, r.Outcome)
	}
	return nil
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// percentile returns the p-th percentile (0 to 100) of ds in
// milliseconds: the sample at rank p/100 * (len-1), rounded down, of ds
// sorted in place; 0 for none.
func percentile(ds []time.Duration, p float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(p / 100 * float64(len(ds)-1))
	return millis(ds[i])
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// heapInUse returns the process's heap in use after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// mib converts bytes to MiB.
func mib(b uint64) float64 { return float64(b) / (1 << 20) }
