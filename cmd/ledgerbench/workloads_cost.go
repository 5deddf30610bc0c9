package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaseledger/ledger"
)

// The cost workload (PostgreSQL only) takes a drain apart: instead of
// interleaving the calls, it makes one kind of call for every item before
// the next kind starts (enqueue all -items, then claim or lease all of
// them in batches of -batch from -workers goroutines, then each completion
// call for all of them, every worker completing -fanout items of each of
// its batches at once, as in the drains), so that what the server counts
// between two calls' ends belongs to one call. Per item and per call it
// reports the heap tuples inserted, updated (HOT or not) and deleted over
// the store's tables, the B-tree entries written and the WAL bytes.
//
// Both ledgers share one fresh schema, outbox first. Autovacuum is off on
// its tables while it runs, so that a vacuum landing in a call's window
// does not add its writes to that call's. After the delivery ledger's
// four calls, on a store that closes a delivery in one call
// (ledger.AckProcessor, which dispatch.Worker uses), -items more are
// enqueued and leased unmeasured and closed with AcknowledgeProcessed.
//
// The table counters are flushed by each session at the end of its
// transactions at most once a second, so before each reading every
// connection of the pool is asked to flush (pg_stat_force_next_flush,
// PostgreSQL 15 and later), which it does before it answers. The WAL
// records come from pg_walinspect, whose extension is created in the
// workload's schema (and dropped with it) unless the database has it
// already; that takes a superuser, which the throwaway cluster has.
// Without it the table says so and still prints the rest.

// costMinServer is the server version the cost workload needs: the first
// with pg_stat_force_next_flush and pg_walinspect.
const costMinServer = 150000

// costFlushTries bounds how often a reading waits for a connection that
// someone else (the pool's health check) holds for a moment.
const costFlushTries = 50

// costMeter reads the server's counters around each call.
type costMeter struct {
	e      *env
	schema string
	// walStats is the qualified pg_get_wal_stats; empty when
	// pg_walinspect is not available.
	walStats string
}

// costReading is the counters at one moment.
type costReading struct {
	lsn    uint64
	tables tableCounts
}

// cost is the cost workload.
func (e *env) cost(ctx context.Context, rep *report) error {
	const w = workloadCost
	cr := &costReport{}
	rep.Cost = cr
	if e.cfg.store != storePG {
		cr.NotMeasured = "PostgreSQL only"
		return nil
	}
	var version int
	if err := e.pool.QueryRow(ctx, "SELECT current_setting('server_version_num')::integer").Scan(&version); err != nil {
		return err
	}
	if version < costMinServer {
		cr.NotMeasured = "needs PostgreSQL 15 or later (pg_stat_force_next_flush, pg_walinspect)"
		return nil
	}
	st, err := e.fresh(ctx, w)
	if err != nil {
		return err
	}
	defer st.drop()
	m := &costMeter{e: e, schema: st.schema}
	m.walStats, cr.IndexEntriesNotMeasured = e.openWALInspect(ctx, st.schema)
	if err := e.holdAutovacuum(ctx, st.schema); err != nil {
		return err
	}
	if err := e.costOutbox(ctx, m, st, cr); err != nil {
		return err
	}
	return e.costDeliveries(ctx, m, st, cr)
}

// costOutbox measures the outbox drain's calls.
func (e *env) costOutbox(ctx context.Context, m *costMeter, st *stores, cr *costReport) error {
	n := e.cfg.items
	label := string(workloadCost) + ": outbox "
	var claimed [][][]ledger.ClaimedEntry
	return e.measureSteps(ctx, m, st, cr, costOutbox, []costStep{
		{callEnqueue, func(ctx context.Context) error {
			_, err := e.enqueueEntries(ctx, st.outbox, label+"enqueue", "k", n)
			return err
		}},
		{callClaim, func(ctx context.Context) (err error) {
			claimed, err = takeAll(ctx, e, label+"claim", n, func(ctx context.Context, wk int) ([]ledger.ClaimedEntry, error) {
				return st.outbox.ClaimPending(ctx, ledger.ClaimRequest{
					Worker: fmt.Sprintf("bench-worker-%d", wk), Now: time.Now(), LeaseDuration: leaseDuration, Limit: e.cfg.batch,
				})
			})
			return err
		}},
		{callDelivered, func(ctx context.Context) error {
			return finishAll(ctx, e, label+"delivered", n, claimed, func(ctx context.Context, c ledger.ClaimedEntry) error {
				return deliver(ctx, st.outbox, c.Claim)
			})
		}},
	})
}

// costStep is one call of the cost workload, made for every item by run.
type costStep struct {
	call costCall
	run  func(ctx context.Context) error
}

// measureSteps measures l's steps one after another into cr. After an
// enqueue it refreshes the planner's statistics, as the drains do,
// outside any call's window.
func (e *env) measureSteps(ctx context.Context, m *costMeter, st *stores, cr *costReport, l costLedger, steps []costStep) error {
	for _, s := range steps {
		cm, err := m.measure(ctx, l, s.call, e.cfg.items, s.run)
		if err != nil {
			return fmt.Errorf("%s %s: %w", l, s.call, err)
		}
		cr.addCall(cm)
		if s.call == callEnqueue {
			if err := e.analyze(ctx, st, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// costDeliveries measures the delivery drain's calls, and
// AcknowledgeProcessed when the store has it.
func (e *env) costDeliveries(ctx context.Context, m *costMeter, st *stores, cr *costReport) error {
	n := e.cfg.items
	label := string(workloadCost) + ": delivery "
	var leased [][][]ledger.LeasedDelivery
	lease := func(label string) func(ctx context.Context) (err error) {
		return func(ctx context.Context) (err error) {
			leased, err = takeAll(ctx, e, label, n, func(ctx context.Context, wk int) ([]ledger.LeasedDelivery, error) {
				r, err := st.ledger.Lease(ctx, ledger.LeaseFilter{}, owner(wk), time.Now(), leaseDuration, e.cfg.batch)
				return r.Leased, err
			})
			return err
		}
	}
	each := func(label string, fn func(ctx context.Context, l ledger.Lease) error) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			return finishAll(ctx, e, label, n, leased, func(ctx context.Context, l ledger.LeasedDelivery) error { return fn(ctx, l.Lease) })
		}
	}
	err := e.measureSteps(ctx, m, st, cr, costDelivery, []costStep{
		{callEnqueue, func(ctx context.Context) error {
			_, err := e.enqueueDeliveries(ctx, st.ledger, label+"enqueue", "k", n)
			return err
		}},
		{callLease, lease(label + "lease")},
		{callAcknowledge, each(label+"acknowledge", func(ctx context.Context, l ledger.Lease) error {
			return applied("acknowledge", l.DeliveryID)(st.ledger.Acknowledge(ctx, l, "received", time.Now()))
		})},
		{callProcessed, each(label+"processed", func(ctx context.Context, l ledger.Lease) error {
			return applied("mark processed", l.DeliveryID)(st.ledger.MarkProcessed(ctx, l.DeliveryID, l.Owner, nil, "done", time.Now()))
		})},
	})
	ap, ok := st.ledger.(ledger.AckProcessor)
	if err != nil || !ok {
		return err
	}
	if _, err := e.enqueueDeliveries(ctx, st.ledger, label+"enqueue again", "q", n); err != nil {
		return err
	}
	if err := lease(label + "lease again")(ctx); err != nil {
		return err
	}
	return e.measureSteps(ctx, m, st, cr, costDelivery, []costStep{
		{callAckProcessed, each(label+"acknowledge and processed", func(ctx context.Context, l ledger.Lease) error {
			ack, done, err := ap.AcknowledgeProcessed(ctx, l, "received", nil, "done", time.Now())
			if err := applied("acknowledge", l.DeliveryID)(ack, err); err != nil {
				return err
			}
			return applied("mark processed", l.DeliveryID)(done, nil)
		})},
	})
}

// applied returns a check that a delivery call on id applied.
func applied(call string, id ledger.DeliveryID) func(ledger.DeliveryResult, error) error {
	return func(r ledger.DeliveryResult, err error) error {
		if err != nil {
			return err
		}
		if r.Outcome != ledger.OutcomeApplied {
			return fmt.Errorf("%s %s: outcome %s", call, id, r.Outcome)
		}
		return nil
	}
}

// measure runs one call for all n items and returns what it cost.
func (m *costMeter) measure(ctx context.Context, l costLedger, call costCall, n int, run func(context.Context) error) (callMeasure, error) {
	before, err := m.read(ctx)
	if err != nil {
		return callMeasure{}, err
	}
	if err := run(ctx); err != nil {
		return callMeasure{}, err
	}
	after, err := m.read(ctx)
	if err != nil {
		return callMeasure{}, err
	}
	cm := callMeasure{ledger: l, call: call, items: n, tables: countsDelta(before.tables, after.tables),
		walBytes: after.lsn - min(before.lsn, after.lsn)}
	if m.walStats != "" {
		if cm.records, err = m.records(ctx, before.lsn, after.lsn); err != nil {
			return callMeasure{}, err
		}
	}
	return cm, nil
}

// read takes the WAL position, then has every connection of the pool
// flush its table counters and reads them.
//
// The WAL position is pg_current_wal_insert_lsn, where the next record
// goes, rather than pg_current_wal_lsn, what has been written out: the
// latter lags the records inserted but not yet written (with
// synchronous_commit off, up to the WAL writer's next round).
func (m *costMeter) read(ctx context.Context) (costReading, error) {
	var r costReading
	var lsn string
	if err := m.e.pool.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn); err != nil {
		return r, fmt.Errorf("read the WAL position: %w", err)
	}
	var err error
	if r.lsn, err = parseLSN(lsn); err != nil {
		return r, err
	}
	conns, err := m.flushStats(ctx)
	if err != nil {
		return r, err
	}
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	r.tables, err = readTableCounts(ctx, conns[0].Conn(), m.schema)
	return r, err
}

// flushStats holds every connection of the pool and has each flush its
// pending table counters: a session flushes them before it answers the
// statement after pg_stat_force_next_flush. It returns the connections,
// still held; the caller releases them.
func (m *costMeter) flushStats(ctx context.Context) ([]*pgxpool.Conn, error) {
	pool := m.e.pool
	var conns []*pgxpool.Conn
	release := func() {
		for _, c := range conns {
			c.Release()
		}
		conns = nil
	}
	// Every connection must be idle, or one still holding counters would
	// be missed. Nothing of the run holds one between calls, but the
	// pool's health check takes idle ones for a moment now and then.
	for try := 1; ; try++ {
		if pool.Stat().TotalConns() == 0 {
			// An empty pool: open a connection to read with.
			c, err := pool.Acquire(ctx)
			if err != nil {
				return nil, err
			}
			c.Release()
		}
		conns = pool.AcquireAllIdle(ctx)
		if len(conns) > 0 && len(conns) == int(pool.Stat().TotalConns()) {
			break
		}
		release()
		if try == costFlushTries {
			return nil, errors.New("flush table statistics: some connection of the pool stays busy")
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return nil, err
		}
	}
	for _, c := range conns {
		if _, err := c.Exec(ctx, "SELECT pg_catalog.pg_stat_force_next_flush()"); err != nil {
			release()
			return nil, fmt.Errorf("flush table statistics: %w", err)
		}
	}
	return conns, nil
}

// readTableCounts reads the row counters of schema's tables. A fresh
// snapshot of the statistics is taken first: within a transaction the
// server may answer from the one it took earlier.
func readTableCounts(ctx context.Context, conn *pgx.Conn, schema string) (tableCounts, error) {
	if _, err := conn.Exec(ctx, "SELECT pg_catalog.pg_stat_clear_snapshot()"); err != nil {
		return nil, fmt.Errorf("read table statistics: %w", err)
	}
	rows, err := conn.Query(ctx, `SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del
		FROM pg_catalog.pg_stat_user_tables WHERE schemaname = $1`, schema)
	if err != nil {
		return nil, fmt.Errorf("read table statistics: %w", err)
	}
	t := tableCounts{}
	for rows.Next() {
		var name string
		var c tupleCounts
		if err := rows.Scan(&name, &c.Inserted, &c.Updated, &c.HOTUpdated, &c.Deleted); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read table statistics: %w", err)
		}
		t[name] = c
	}
	return t, rows.Err()
}

// records reads the WAL record types written in [from, to).
// pg_get_wal_stats reads only WAL flushed to disk and wants to end before
// the flushed position, so when that is not yet past to, a transaction
// that writes a record (a transactional logical message, which changes
// no table) and commits with synchronous_commit on moves it there: it
// flushes everything up to its commit record, which lands past to.
func (m *costMeter) records(ctx context.Context, from, to uint64) (walRecords, error) {
	if to <= from {
		return walRecords{}, nil
	}
	var flushed string
	if err := m.e.pool.QueryRow(ctx, "SELECT pg_current_wal_flush_lsn()::text").Scan(&flushed); err != nil {
		return nil, fmt.Errorf("read WAL records: %w", err)
	}
	if f, err := parseLSN(flushed); err != nil {
		return nil, err
	} else if f <= to {
		err := pgx.BeginFunc(ctx, m.e.pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = on; SELECT pg_logical_emit_message(true, 'ledgerbench', 'flush')")
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("flush the WAL: %w", err)
		}
	}
	rows, err := m.e.pool.Query(ctx, `SELECT t.r, t.c, t.rs, t.fs FROM `+m.walStats+`($1::pg_lsn, $2::pg_lsn, true)
		AS t(r, c, cp, rs, rsp, fs) WHERE t.c > 0`, formatLSN(from), formatLSN(to))
	if err != nil {
		return nil, fmt.Errorf("read WAL records: %w", err)
	}
	recs := walRecords{}
	for rows.Next() {
		var name string
		var s walRecordStat
		if err := rows.Scan(&name, &s.Count, &s.RecordBytes, &s.FPIBytes); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read WAL records: %w", err)
		}
		recs[name] = s
	}
	return recs, rows.Err()
}

// openWALInspect returns the qualified name of pg_walinspect's
// pg_get_wal_stats, creating the extension in schema when the database
// does not have it yet, or why it is not available.
func (e *env) openWALInspect(ctx context.Context, schema string) (fn, whyNot string) {
	var where string
	err := e.pool.QueryRow(ctx, `SELECT n.nspname FROM pg_catalog.pg_extension x
		JOIN pg_catalog.pg_namespace n ON n.oid = x.extnamespace WHERE x.extname = 'pg_walinspect'`).Scan(&where)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// Created inside the workload's schema, it goes when the schema
		// is dropped and leaves the database as it was.
		if _, err := e.pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_walinspect SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
			return "", fmt.Sprintf("pg_walinspect is not available (%v)", err)
		}
		where = schema
	case err != nil:
		return "", fmt.Sprintf("pg_walinspect is not available (%v)", err)
	}
	fn = pgx.Identifier{where, "pg_get_wal_stats"}.Sanitize()
	var may bool
	if err := e.pool.QueryRow(ctx, "SELECT has_function_privilege($1, 'EXECUTE')",
		fn+"(pg_lsn, pg_lsn, boolean)").Scan(&may); err != nil {
		return "", fmt.Sprintf("pg_walinspect is not available (%v)", err)
	}
	if !may {
		return "", "this role may not run pg_walinspect's pg_get_wal_stats"
	}
	return fn, ""
}

// holdAutovacuum turns autovacuum off on schema's tables.
func (e *env) holdAutovacuum(ctx context.Context, schema string) error {
	rows, err := e.pool.Query(ctx, `SELECT tablename FROM pg_catalog.pg_tables WHERE schemaname = $1`, schema)
	if err != nil {
		return err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, t := range tables {
		if _, err := e.pool.Exec(ctx, "ALTER TABLE "+pgx.Identifier{schema, t}.Sanitize()+" SET (autovacuum_enabled = false)"); err != nil {
			return fmt.Errorf("autovacuum off on %s: %w", t, err)
		}
	}
	return nil
}

// takeAll has -workers goroutines take batches until none is left, as the
// drains do, and returns each worker's batches. It fails unless n items
// were taken.
func takeAll[T any](ctx context.Context, e *env, label string, n int, take func(ctx context.Context, worker int) ([]T, error)) ([][][]T, error) {
	ph := e.prog.begin(label, n)
	defer ph.end()
	taken := make([][][]T, e.cfg.workers)
	var count atomic.Int64
	err := runWorkers(ctx, e.cfg.workers, func(ctx context.Context, wk int) error {
		for {
			batch, err := take(ctx, wk)
			if err != nil || len(batch) == 0 {
				return err
			}
			taken[wk] = append(taken[wk], batch)
			count.Add(int64(len(batch)))
			ph.add(len(batch))
		}
	})
	if err != nil {
		return nil, err
	}
	if got := int(count.Load()); got != n {
		return nil, fmt.Errorf("%s: took %d of %d items", label, got, n)
	}
	return taken, nil
}

// finishAll has each worker finish the items of the batches it took,
// -fanout items of a batch at once, as the drains do; n is for the
// progress line.
func finishAll[T any](ctx context.Context, e *env, label string, n int, taken [][][]T, finish func(ctx context.Context, item T) error) error {
	fanout := e.cfg.completeFanout()
	ph := e.prog.begin(fmt.Sprintf("%s (fanout %d)", label, fanout), n)
	defer ph.end()
	return runWorkers(ctx, len(taken), func(ctx context.Context, wk int) error {
		for _, batch := range taken[wk] {
			err := forEach(ctx, len(batch), fanout, func(ctx context.Context, i int) error {
				if err := finish(ctx, batch[i]); err != nil {
					return err
				}
				ph.add(1)
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
}
