package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/pgstore"
)

// The drain workloads move a fixed backlog through the store as fast as
// -workers goroutines can and report items/s. Enqueueing is measured and
// reported on its own; the drain rate counts from the first lease (or
// claim) to the last completion. Each worker completes -fanout items of
// its batch at once (see forEach) and leases again when all are done.
// Over the same window they measure what each drained item cost: WAL
// bytes and CPU (see meter.go). No drain figure is judged: the ceilings
// beside the rates are context, and the targets that matter now are set
// against other systems in the same run, which this program does not run.

// deliveryDrain is workload (a): enqueue -items in batches, then -workers
// lease batches and acknowledge and mark processed each item, -fanout at
// once, until every item is Processed.
func (e *env) deliveryDrain(ctx context.Context, rep *report) error {
	const w = workloadDeliveryDrain
	st, err := e.fresh(ctx, w)
	if err != nil {
		return err
	}
	defer st.drop()
	n := e.cfg.items
	enqueueRate, err := e.enqueueDeliveries(ctx, st.ledger, string(w)+": enqueue", "d", n)
	if err != nil {
		return err
	}
	if err := e.analyze(ctx, st, false); err != nil {
		return err
	}
	before, err := e.meter(ctx)
	if err != nil {
		return err
	}
	rate, err := drain(ctx, e, string(w)+": lease, acknowledge, processed", n,
		func(ctx context.Context, wk int) ([]ledger.LeasedDelivery, error) {
			r, err := st.ledger.Lease(ctx, ledger.LeaseFilter{}, owner(wk), time.Now(), leaseDuration, e.cfg.batch)
			return r.Leased, err
		},
		func(ctx context.Context, l ledger.LeasedDelivery) error { return complete(ctx, st.ledger, l.Lease) })
	if err != nil {
		return err
	}
	after, err := e.meter(ctx)
	if err != nil {
		return err
	}
	rep.add(w, "items enqueued and processed", float64(n), "items", "", nil)
	rep.add(w, "enqueue (EnqueueBatch)", enqueueRate, "items/s", ceilingRows, nil)
	rep.add(w, "drain: lease, acknowledge, processed", rate, "items/s", ceilingRows, nil)
	e.addWindowCost(rep, w, "drain: ", costPerItem(before, after, n))
	return nil
}

// outboxDrain is workload (b): enqueue -items outbox entries, then
// -workers claim batches and mark each entry delivered, -fanout at once.
func (e *env) outboxDrain(ctx context.Context, rep *report) error {
	const w = workloadOutboxDrain
	st, err := e.fresh(ctx, w)
	if err != nil {
		return err
	}
	defer st.drop()
	n := e.cfg.items
	enqueueRate, err := e.enqueueEntries(ctx, st.outbox, string(w)+": enqueue", "e", n)
	if err != nil {
		return err
	}
	if err := e.analyze(ctx, st, false); err != nil {
		return err
	}
	before, err := e.meter(ctx)
	if err != nil {
		return err
	}
	rate, err := drain(ctx, e, string(w)+": claim, delivered", n,
		func(ctx context.Context, wk int) ([]ledger.ClaimedEntry, error) {
			return st.outbox.ClaimPending(ctx, ledger.ClaimRequest{
				Worker: fmt.Sprintf("bench-worker-%d", wk), Now: time.Now(), LeaseDuration: leaseDuration, Limit: e.cfg.batch,
			})
		},
		func(ctx context.Context, c ledger.ClaimedEntry) error { return deliver(ctx, st.outbox, c.Claim) })
	if err != nil {
		return err
	}
	after, err := e.meter(ctx)
	if err != nil {
		return err
	}
	rep.add(w, "entries enqueued and delivered", float64(n), "items", "", nil)
	rep.add(w, "enqueue (EnqueueBatch)", enqueueRate, "items/s", ceilingRows, nil)
	rep.add(w, "drain: claim, delivered", rate, "items/s", ceilingRows, nil)
	e.addWindowCost(rep, w, "drain: ", costPerItem(before, after, n))
	return nil
}

// drain is the timed part of a drain workload: -workers goroutines each
// take a batch (an empty one: the backlog is gone) and finish every item
// of it, -fanout at once, then take the next. It returns the items/s from
// the first take to the last finish, and fails unless n items were
// finished.
func drain[T any](ctx context.Context, e *env, label string, n int,
	take func(ctx context.Context, worker int) ([]T, error), finish func(ctx context.Context, item T) error) (float64, error) {
	fanout := e.cfg.completeFanout()
	ph := e.prog.begin(fmt.Sprintf("%s (fanout %d)", label, fanout), n)
	var finished atomic.Int64
	start := time.Now()
	err := runWorkers(ctx, e.cfg.workers, func(ctx context.Context, wk int) error {
		for {
			batch, err := take(ctx, wk)
			if err != nil {
				return err
			}
			// Everything was available from the start and nothing
			// fails, so an empty batch means every item is taken.
			if len(batch) == 0 {
				return nil
			}
			err = forEach(ctx, len(batch), fanout, func(ctx context.Context, i int) error {
				if err := finish(ctx, batch[i]); err != nil {
					return err
				}
				finished.Add(1)
				ph.add(1)
				return nil
			})
			if err != nil {
				return err
			}
		}
	})
	elapsed := time.Since(start)
	ph.end()
	if err != nil {
		return 0, err
	}
	if got := int(finished.Load()); got != n {
		return 0, fmt.Errorf("%s: finished %d of %d enqueued items", label, got, n)
	}
	return float64(n) / elapsed.Seconds(), nil
}

// completions measures per-item completion calls alone: -items are
// enqueued and leased in batches first (not timed), then -callers
// goroutines acknowledge and mark processed each item, one call each, and
// the figure is completion calls/s. A store that commits every call on its
// own cannot beat ceiling (i), which is printed beside it as context.
// On PostgreSQL the workload runs twice, in fresh schemas, with group
// commit (pgstore.WithGroupCommit) and without, whatever -group-commit
// says, and reports both and their ratio. Each run also reports what an
// item's two calls cost, as the drains do (see meter.go): group commit
// shares commit records and round trips, so it shows in the WAL and CPU
// per item as well as in the rate. The callers share the run's
// pool, -workers connections and a few, so the server sees no more
// sessions than ceiling (i) had.
func (e *env) completions(ctx context.Context, rep *report) error {
	const w = workloadCompletions
	if e.cfg.store != storePG {
		run, err := e.completionRun(ctx, "")
		if err != nil {
			return err
		}
		rep.add(w, "items completed", float64(e.cfg.items), "items", "", nil)
		rep.add(w, "completion calls (acknowledge, processed)", run.rate, "calls/s", ceilingTxn, nil)
		e.addWindowCost(rep, w, "", run.cost)
		return nil
	}
	on, err := e.completionRun(ctx, "group commit on", pgstore.WithGroupCommit(true))
	if err != nil {
		return err
	}
	off, err := e.completionRun(ctx, "group commit off", pgstore.WithGroupCommit(false))
	if err != nil {
		return err
	}
	rep.add(w, "items completed (each way)", float64(e.cfg.items), "items", "", nil)
	rep.add(w, fmt.Sprintf("completion calls, group commit on (%d callers)", e.cfg.callers), on.rate, "calls/s", ceilingTxn, nil)
	e.addWindowCost(rep, w, "group commit on: ", on.cost)
	rep.add(w, fmt.Sprintf("completion calls, group commit off (%d callers)", e.cfg.callers), off.rate, "calls/s", ceilingTxn, nil)
	e.addWindowCost(rep, w, "group commit off: ", off.cost)
	rep.add(w, "group commit on over off", on.rate/off.rate, "x", "", nil)
	return nil
}

// completionResult is one run of the completions workload: completion
// calls/s, and what each item's two calls cost.
type completionResult struct {
	rate float64
	cost windowCost
}

// completionRun runs the completions workload once, in a fresh store
// made with opts.
func (e *env) completionRun(ctx context.Context, label string, opts ...pgstore.Option) (completionResult, error) {
	const w = workloadCompletions
	prefix := string(w)
	if label != "" {
		prefix += " (" + label + ")"
	}
	st, err := e.fresh(ctx, w, opts...)
	if err != nil {
		return completionResult{}, err
	}
	defer st.drop()
	n := e.cfg.items
	if _, err := e.enqueueDeliveries(ctx, st.ledger, prefix+": enqueue", "c", n); err != nil {
		return completionResult{}, err
	}
	if err := e.analyze(ctx, st, false); err != nil {
		return completionResult{}, err
	}
	leases, err := e.leaseAll(ctx, st.ledger, prefix+": lease", n)
	if err != nil {
		return completionResult{}, err
	}
	before, err := e.meter(ctx)
	if err != nil {
		return completionResult{}, err
	}
	ph := e.prog.begin(prefix+": acknowledge, processed (calls)", 2*n)
	var next atomic.Int64
	start := time.Now()
	err = runWorkers(ctx, e.cfg.callers, func(ctx context.Context, _ int) error {
		for {
			i := int(next.Add(1)) - 1
			if i >= len(leases) {
				return nil
			}
			if err := complete(ctx, st.ledger, leases[i]); err != nil {
				return err
			}
			ph.add(2)
		}
	})
	elapsed := time.Since(start)
	ph.end()
	if err != nil {
		return completionResult{}, err
	}
	after, err := e.meter(ctx)
	if err != nil {
		return completionResult{}, err
	}
	return completionResult{rate: float64(2*n) / elapsed.Seconds(), cost: costPerItem(before, after, n)}, nil
}

// leaseAll leases n offerable deliveries in batches of -batch, all to one
// owner, and returns their leases.
func (e *env) leaseAll(ctx context.Context, l ledgerStore, label string, n int) ([]ledger.Lease, error) {
	ph := e.prog.begin(label, n)
	defer ph.end()
	leases := make([]ledger.Lease, 0, n)
	for len(leases) < n {
		r, err := l.Lease(ctx, ledger.LeaseFilter{}, owner(0), time.Now(), leaseDuration, min(e.cfg.batch, n-len(leases)))
		if err != nil {
			return nil, err
		}
		if len(r.Leased) == 0 {
			return nil, fmt.Errorf("leased %d of %d deliveries", len(leases), n)
		}
		for _, ld := range r.Leased {
			leases = append(leases, ld.Lease)
		}
		ph.add(len(r.Leased))
	}
	return leases, nil
}
