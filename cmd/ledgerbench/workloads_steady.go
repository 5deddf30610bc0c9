package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaseledger/ledger"
)

// The steady workload offers work at a fixed rate instead of draining a
// backlog: producers enqueue on a schedule while consumers lease and
// complete, and the figure that matters is how long an item waits from
// the moment it was due to be enqueued to its completion. A consumer
// completes -fanout items of its batch at once, as the drains do, and
// leases again when all of them are done.
//
// The producers are open-loop: item k is due at start + k/rate whatever
// happened before, and each producer enqueues, in one EnqueueBatch call,
// every item of its share that is due (one item per call while it keeps
// up, more when the store falls behind). Latency counts from the item's
// due time, so a store that cannot keep up shows it as latency instead of
// quietly lowering the offered rate. The due time travels in the first
// eight bytes of the payload, so consumers need no shared table.

// steadyProducers is how many goroutines share the offered rate.
const steadyProducers = 2

// steadyRun is what one steady run measured.
type steadyRun struct {
	enqueued, completed int
	elapsed             time.Duration
	// latencies are enqueue-to-completion times, one per completed item.
	latencies []time.Duration
	// leases are the lease calls that granted something.
	leases []leaseSample
}

// leaseSample is one lease call: when it started, from the run's start,
// and how long it took.
type leaseSample struct {
	at, took time.Duration
}

// runSteady runs producers and consumers on st for d.
func (e *env) runSteady(ctx context.Context, st *stores, label string, d time.Duration) (steadyRun, error) {
	var (
		enqueued, completed atomic.Int64
		latencies           = make([][]time.Duration, e.cfg.workers)
		leases              = make([][]leaseSample, e.cfg.workers)
	)
	interval := time.Duration(float64(time.Second) / e.cfg.rate)
	fanout := e.cfg.completeFanout()
	ph := e.prog.begin(fmt.Sprintf("%s: completed (fanout %d)", label, fanout), 0)
	start := time.Now()
	err := runWorkers(ctx, steadyProducers+e.cfg.workers, func(ctx context.Context, wk int) error {
		if wk < steadyProducers {
			return e.produce(ctx, st.ledger, wk, start, d, interval, &enqueued)
		}
		c := wk - steadyProducers
		for time.Since(start) < d {
			t0 := time.Now()
			r, err := st.ledger.Lease(ctx, ledger.LeaseFilter{}, owner(c), t0, leaseDuration, e.cfg.batch)
			if err != nil {
				return err
			}
			if len(r.Leased) == 0 {
				if err := sleep(ctx, idlePoll); err != nil {
					return err
				}
				continue
			}
			leases[c] = append(leases[c], leaseSample{at: t0.Sub(start), took: time.Since(t0)})
			// Each item's latency is taken when its own completion
			// returns, not when the batch's last one does, into a slot
			// of its own.
			took := make([]time.Duration, len(r.Leased))
			err = forEach(ctx, len(r.Leased), fanout, func(ctx context.Context, i int) error {
				l := r.Leased[i]
				if err := complete(ctx, st.ledger, l.Lease); err != nil {
					return err
				}
				took[i] = time.Since(start.Add(dueOffset(l.Delivery.Payload)))
				completed.Add(1)
				ph.add(1)
				return nil
			})
			if err != nil {
				return err
			}
			latencies[c] = append(latencies[c], took...)
		}
		return nil
	})
	elapsed := time.Since(start)
	ph.end()
	if err != nil {
		return steadyRun{}, err
	}
	run := steadyRun{enqueued: int(enqueued.Load()), completed: int(completed.Load()), elapsed: elapsed}
	for c := range e.cfg.workers {
		run.latencies = append(run.latencies, latencies[c]...)
		run.leases = append(run.leases, leases[c]...)
	}
	return run, nil
}

// produce is producer p: it enqueues items p, p+steadyProducers, ... each
// when it is due, until d has passed since start.
func (e *env) produce(ctx context.Context, l ledgerStore, p int, start time.Time, d, interval time.Duration, enqueued *atomic.Int64) error {
	step := time.Duration(steadyProducers) * interval
	next := p // the index of this producer's next item
	for {
		due := time.Duration(next) * interval
		if due >= d {
			return nil
		}
		if wait := due - time.Since(start); wait > 0 {
			if err := sleep(ctx, wait); err != nil {
				return err
			}
			continue
		}
		// Every item of this producer's share that is due by now, up
		// to a batch.
		var reqs []ledger.EnqueueRequest
		for ; len(reqs) < e.cfg.batch && due < d && due <= time.Since(start); due += step {
			req := deliveryRequests("s", next, 1)[0]
			binary.BigEndian.PutUint64(req.Payload, uint64(due))
			reqs = append(reqs, req)
			next += steadyProducers
		}
		rs, err := l.EnqueueBatch(ctx, reqs, time.Now())
		if err != nil {
			return err
		}
		if err := allApplied(len(rs), len(reqs), func(i int) ledger.Outcome { return rs[i].Outcome }); err != nil {
			return err
		}
		enqueued.Add(int64(len(reqs)))
	}
}

// dueOffset reads an item's due time, from the run's start, from its
// payload.
func dueOffset(payload []byte) time.Duration {
	return time.Duration(binary.BigEndian.Uint64(payload))
}

// steady is workload (c): -rate items/s offered for -duration. On
// PostgreSQL it also reports the client's heap at the start and end. The
// latencies are reported without a target: the one that matters now is a
// share of another system's in the same run.
func (e *env) steady(ctx context.Context, rep *report) error {
	const w = workloadSteady
	st, err := e.fresh(ctx, w)
	if err != nil {
		return err
	}
	defer st.drop()
	heapStart := heapInUse()
	run, err := e.runSteady(ctx, st, string(w), e.cfg.duration)
	if err != nil {
		return err
	}
	heapEnd := heapInUse()
	rep.add(w, "offered", e.cfg.rate, "items/s", "", nil)
	rep.add(w, "completed", float64(run.completed)/run.elapsed.Seconds(), "items/s", ceilingRows, nil)
	rep.add(w, "left in the queue at the end", float64(run.enqueued-run.completed), "items", "", nil)
	rep.add(w, "enqueue to completion p50", percentile(run.latencies, 50), "ms", ceilingTxnTime, nil)
	rep.add(w, "enqueue to completion p99", percentile(run.latencies, 99), "ms", ceilingTxnTime, nil)
	rep.add(w, "lease (granting) p50", percentile(leaseTimes(run.leases, 0, run.elapsed), 50), "ms", ceilingTxnTime, nil)
	if e.cfg.store == storePG {
		rep.add(w, "client heap in use at start", mib(heapStart), "MiB", "", nil)
		rep.add(w, "client heap in use at end", mib(heapEnd), "MiB", "", nil)
	}
	return nil
}

// leaseTimes returns the durations of the lease calls that started in
// [from, to).
func leaseTimes(samples []leaseSample, from, to time.Duration) []time.Duration {
	var out []time.Duration
	for _, s := range samples {
		if s.at >= from && s.at < to {
			out = append(out, s.took)
		}
	}
	return out
}

// snapshotWindow is the share of the held-snapshot run whose lease calls
// make its start and end figures: the first and the last tenth.
const snapshotWindow = 10

// snapshot is workload (e), PostgreSQL only: the steady workload for
// -snapshot-duration while another session holds a REPEATABLE READ
// transaction open after reading, so its snapshot keeps every row version
// that dies during the run: vacuum cannot reclaim them, and lease scans
// step over them. It reports lease latency in the first and last tenth of
// the run, their ratio (the degradation, for information: no target) and
// the deliveries table's dead tuples at the start and end.
func (e *env) snapshot(ctx context.Context, rep *report) (err error) {
	const w = workloadSnapshot
	st, err := e.fresh(ctx, w)
	if err != nil {
		return err
	}
	defer st.drop()
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if rerr := tx.Rollback(rctx); rerr != nil && !errors.Is(rerr, pgx.ErrTxClosed) {
			err = errors.Join(err, rerr)
		}
	}()
	// A repeatable-read transaction takes its snapshot at its first
	// query, not at BEGIN.
	var seen int
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{st.schema, "deliveries"}.Sanitize()).Scan(&seen); err != nil {
		return fmt.Errorf("hold snapshot: %w", err)
	}
	deadStart, err := e.deadTuples(ctx, st.schema)
	if err != nil {
		return err
	}
	run, err := e.runSteady(ctx, st, string(w)+" (held snapshot)", e.cfg.snapshotDuration)
	if err != nil {
		return err
	}
	deadEnd, err := e.deadTuples(ctx, st.schema)
	if err != nil {
		return err
	}
	window := e.cfg.snapshotDuration / snapshotWindow
	first := percentile(leaseTimes(run.leases, 0, window), 50)
	last := percentile(leaseTimes(run.leases, e.cfg.snapshotDuration-window, run.elapsed), 50)
	rep.add(w, "completed", float64(run.completed)/run.elapsed.Seconds(), "items/s", ceilingRows, nil)
	rep.add(w, "enqueue to completion p99", percentile(run.latencies, 99), "ms", ceilingTxnTime, nil)
	rep.add(w, "lease (granting) p50, first tenth", first, "ms", ceilingTxnTime, nil)
	rep.add(w, "lease (granting) p50, last tenth", last, "ms", ceilingTxnTime, nil)
	if first > 0 && last > 0 {
		rep.add(w, "lease latency, end over start", last/first, "x", "", nil)
		rep.note("snapshot: lease latency, end over start is the held snapshot's degradation, for information; it has no target")
	} else {
		rep.note("snapshot: too few granting lease calls at the start or end to compare")
	}
	rep.add(w, "dead tuples in deliveries at start", float64(deadStart), "rows", "", nil)
	rep.add(w, "dead tuples in deliveries at end", float64(deadEnd), "rows", "", nil)
	return nil
}

// deadTuples reads the statistics' dead tuple count of the deliveries
// table. The statistics lag the writes by up to a second or so.
func (e *env) deadTuples(ctx context.Context, schema string) (int64, error) {
	var n int64
	err := e.pool.QueryRow(ctx, `SELECT coalesce(max(n_dead_tup), 0) FROM pg_catalog.pg_stat_user_tables
		WHERE schemaname = $1 AND relname = 'deliveries'`, schema).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("dead tuples: %w", err)
	}
	return n, nil
}
