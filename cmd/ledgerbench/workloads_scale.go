package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaseledger/ledger"
)

// The scale workload asks whether history slows the hot path: the latency
// of leasing one delivery (and of claiming one outbox entry) beside 1,000
// open records and -scale-max/100, -scale-max/10 and -scale-max terminal
// ones. Each timed call is followed, untimed, by completing the record it
// got and enqueueing a replacement, so that 1,000 records stay open
// throughout. The figure per size is the median over -scale-calls calls.
// The three sizes are held at once (in memory that takes a few GiB at the
// default -scale-max).
//
// On PostgreSQL the terminal rows are written by one INSERT ... SELECT
// generate_series per chunk straight into the store's tables, with the
// columns and CHECK constraints of the migrations; in memory they go
// through the API.

const (
	// scaleOpen is how many open records stay beside the terminal ones.
	scaleOpen = 1_000
	// scaleChunk is how many terminal rows one INSERT writes.
	scaleChunk = 100_000
	// maxScale keeps the generated IDs (ten digits) unique, and fits
	// every int.
	maxScale = 1_000_000_000
)

// scaleSizes returns the terminal-row counts of the scale workload.
func (c config) scaleSizes() []int {
	return []int{c.scaleMax / 100, c.scaleMax / 10, c.scaleMax}
}

// scaleStore is one size of the scale workload: its store and the
// latencies measured on it.
type scaleStore struct {
	terminal       int
	st             *stores
	leases, claims []time.Duration
}

// scale is workload (d). Every size is built first, then the timed calls
// go round the sizes in turn, so that a change in the machine's load
// during the run (this is a shared machine, often) weighs on every size
// alike instead of on whichever was measured at the time.
func (e *env) scale(ctx context.Context, rep *report) error {
	const w = workloadScale
	var built []*scaleStore
	defer func() {
		for _, b := range built {
			b.st.drop()
		}
	}()
	for _, n := range e.cfg.scaleSizes() {
		st, err := e.buildScale(ctx, n)
		if err != nil {
			return fmt.Errorf("%d terminal rows: %w", n, err)
		}
		built = append(built, &scaleStore{terminal: n, st: st})
	}
	ph := e.prog.begin(string(w)+": lease 1, claim 1", 2*len(built)*e.cfg.scaleCalls)
	for i := range e.cfg.scaleCalls {
		for _, b := range built {
			lease, err := timeLease(ctx, b.st, scaleOpen+i)
			if err != nil {
				ph.end()
				return fmt.Errorf("%d terminal rows: %w", b.terminal, err)
			}
			claim, err := timeClaim(ctx, b.st, scaleOpen+i)
			if err != nil {
				ph.end()
				return fmt.Errorf("%d terminal rows: %w", b.terminal, err)
			}
			b.leases, b.claims = append(b.leases, lease), append(b.claims, claim)
			ph.add(2)
		}
	}
	ph.end()
	for _, b := range built {
		rep.add(w, fmt.Sprintf("lease 1 beside %d terminal", b.terminal), percentile(b.leases, 50), "ms", ceilingTxnTime, nil)
		rep.add(w, fmt.Sprintf("claim 1 beside %d terminal", b.terminal), percentile(b.claims, 50), "ms", ceilingTxnTime, nil)
	}
	smallest, largest := built[0], built[len(built)-1]
	for _, r := range []struct {
		call         string
		large, small []time.Duration
	}{{"lease", largest.leases, smallest.leases}, {"claim", largest.claims, smallest.claims}} {
		small := percentile(r.small, 50)
		if small <= 0 {
			return fmt.Errorf("%s latency beside %d terminal rows measured as zero", r.call, smallest.terminal)
		}
		rep.add(w, fmt.Sprintf("%s latency, %d over %d", r.call, largest.terminal, smallest.terminal),
			percentile(r.large, 50)/small, "x", "", atMost(1.5, "x"))
	}
	return nil
}

// buildScale returns a store with n terminal and scaleOpen open records
// of each kind.
func (e *env) buildScale(ctx context.Context, n int) (_ *stores, err error) {
	st, err := e.fresh(ctx, workloadScale)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			st.drop()
		}
	}()
	label := fmt.Sprintf("%s %d", workloadScale, n)
	if err := e.loadTerminal(ctx, st, label, n); err != nil {
		return nil, err
	}
	if _, err := e.enqueueDeliveries(ctx, st.ledger, label+": open deliveries", "open", scaleOpen); err != nil {
		return nil, err
	}
	if _, err := e.enqueueEntries(ctx, st.outbox, label+": open entries", "open", scaleOpen); err != nil {
		return nil, err
	}
	// Bulk-loaded tables get vacuumed and analysed by autovacuum soon
	// after; the question here is the steady cost beside history, not the
	// minute before autovacuum first looks.
	if err := e.analyze(ctx, st, true); err != nil {
		return nil, err
	}
	return st, nil
}

// timeLease times a lease of one delivery, then completes it and
// enqueues open delivery number next in its place, untimed.
func timeLease(ctx context.Context, st *stores, next int) (time.Duration, error) {
	t0 := time.Now()
	r, err := st.ledger.Lease(ctx, ledger.LeaseFilter{}, owner(0), t0, leaseDuration, 1)
	took := time.Since(t0)
	if err != nil {
		return 0, err
	}
	if len(r.Leased) != 1 {
		return 0, fmt.Errorf("lease 1 granted %d", len(r.Leased))
	}
	if err := complete(ctx, st.ledger, r.Leased[0].Lease); err != nil {
		return 0, err
	}
	return took, enqueueOne(ctx, st.ledger, next)
}

// timeClaim times a claim of one outbox entry, then delivers it and
// enqueues open entry number next in its place, untimed.
func timeClaim(ctx context.Context, st *stores, next int) (time.Duration, error) {
	t0 := time.Now()
	cs, err := st.outbox.ClaimPending(ctx, ledger.ClaimRequest{Worker: "bench-worker-0", Now: t0, LeaseDuration: leaseDuration, Limit: 1})
	took := time.Since(t0)
	if err != nil {
		return 0, err
	}
	if len(cs) != 1 {
		return 0, fmt.Errorf("claim 1 granted %d", len(cs))
	}
	if err := deliver(ctx, st.outbox, cs[0].Claim); err != nil {
		return 0, err
	}
	rs, err := st.outbox.EnqueueBatch(ctx, envelopes("open", next, 1))
	if err != nil {
		return 0, err
	}
	return took, allApplied(len(rs), 1, func(k int) ledger.Outcome { return rs[k].Outcome })
}

// enqueueOne enqueues open delivery number i.
func enqueueOne(ctx context.Context, l ledgerStore, i int) error {
	r, err := l.Enqueue(ctx, deliveryRequests("open", i, 1)[0], time.Now())
	if err == nil && r.Outcome != ledger.OutcomeApplied {
		err = fmt.Errorf("enqueue: outcome %s", r.Outcome)
	}
	return err
}

// loadTerminal writes n terminal deliveries and n terminal outbox entries.
func (e *env) loadTerminal(ctx context.Context, st *stores, label string, n int) error {
	if st.schema != "" {
		return e.insertTerminal(ctx, st.schema, label, n)
	}
	// In memory: through the API, each delivery enqueued, leased,
	// acknowledged and processed, each entry enqueued, claimed and
	// delivered.
	if _, err := e.enqueueDeliveries(ctx, st.ledger, label+": terminal deliveries, enqueue", "done", n); err != nil {
		return err
	}
	if err := e.completeAll(ctx, st, label+": terminal deliveries, complete", n); err != nil {
		return err
	}
	if _, err := e.enqueueEntries(ctx, st.outbox, label+": terminal entries, enqueue", "done", n); err != nil {
		return err
	}
	return e.deliverAll(ctx, st, label+": terminal entries, deliver", n)
}

// completeAll leases and completes every offerable delivery from -workers
// goroutines; n is for the progress line.
func (e *env) completeAll(ctx context.Context, st *stores, label string, n int) error {
	ph := e.prog.begin(label, n)
	defer ph.end()
	return runWorkers(ctx, e.cfg.workers, func(ctx context.Context, wk int) error {
		for {
			r, err := st.ledger.Lease(ctx, ledger.LeaseFilter{}, owner(wk), time.Now(), leaseDuration, ledger.MaxLimit)
			if err != nil || len(r.Leased) == 0 {
				return err
			}
			for _, l := range r.Leased {
				if err := complete(ctx, st.ledger, l.Lease); err != nil {
					return err
				}
			}
			ph.add(len(r.Leased))
		}
	})
}

// deliverAll claims and delivers every pending outbox entry from -workers
// goroutines; n is for the progress line.
func (e *env) deliverAll(ctx context.Context, st *stores, label string, n int) error {
	ph := e.prog.begin(label, n)
	defer ph.end()
	return runWorkers(ctx, e.cfg.workers, func(ctx context.Context, wk int) error {
		for {
			cs, err := st.outbox.ClaimPending(ctx, ledger.ClaimRequest{
				Worker: fmt.Sprintf("bench-worker-%d", wk), Now: time.Now(), LeaseDuration: leaseDuration, Limit: ledger.MaxLimit,
			})
			if err != nil || len(cs) == 0 {
				return err
			}
			for _, c := range cs {
				if err := deliver(ctx, st.outbox, c.Claim); err != nil {
					return err
				}
			}
			ph.add(len(cs))
		}
	})
}

// insertTerminal writes n terminal deliveries and n terminal outbox
// entries straight into schema's tables, in chunks of scaleChunk rows,
// all ended in the past.
func (e *env) insertTerminal(ctx context.Context, schema, label string, n int) error {
	before := time.Now().Add(-time.Hour)
	for _, t := range []struct{ table, sql string }{
		{"deliveries", terminalDeliveriesSQL},
		{"outbox_entries", terminalEntriesSQL},
	} {
		ph := e.prog.begin(fmt.Sprintf("%s: insert terminal %s", label, t.table), n)
		sql := fmt.Sprintf(t.sql, pgx.Identifier{schema, t.table}.Sanitize())
		for from := 1; from <= n; from += scaleChunk {
			to := min(n, from+scaleChunk-1)
			if _, err := e.pool.Exec(ctx, sql, from, to, before, payloadSize); err != nil {
				ph.end()
				return fmt.Errorf("insert terminal %s: %w", t.table, err)
			}
			ph.add(to - from + 1)
		}
		ph.end()
	}
	return nil
}

// terminalDeliveriesSQL writes deliveries $1 to $2, Processed, Failed and
// Expired in turn, each closed the way its state says (action, failure or
// cause), ended i seconds before $3, with $4-byte payloads; %s is the
// table.
const terminalDeliveriesSQL = `
INSERT INTO %s (id, target, ceremony, payload, max_attempts, backoff_base_us, backoff_max_us,
	ack_window_us, state, attempts, available_at, lease_seq, ended_lease_token, ended_lease_seq,
	ended_lease_op, ended_lease_at, processing_action, processing_at, last_failure_kind,
	last_failure_message, last_failure_permanent, last_failure_agent, last_failure_incarnation,
	last_failure_at, cause_kind, cause_detail, activations, created_at, updated_at, ended_at, version)
SELECT 'done-' || lpad(i::text, 10, '0'), 'host-' || (i %% 16), NULL,
	convert_to(repeat('x', $4::integer), 'UTF8'), 5, 1000000, 300000000, 300000000,
	s.state, 1, $3::timestamptz - make_interval(secs => i + 60), 1, 'token-' || i, 1, 'processed',
	$3::timestamptz - make_interval(secs => i),
	CASE WHEN s.state = 'processed' THEN 'done' END,
	CASE WHEN s.state = 'processed' THEN $3::timestamptz - make_interval(secs => i) END,
	CASE WHEN s.state = 'failed' THEN 'reported' END,
	CASE WHEN s.state = 'failed' THEN 'permanent failure' END,
	CASE WHEN s.state = 'failed' THEN true END,
	CASE WHEN s.state = 'failed' THEN 'bench-agent-0' END,
	CASE WHEN s.state = 'failed' THEN 'run' END,
	CASE WHEN s.state = 'failed' THEN $3::timestamptz - make_interval(secs => i) END,
	CASE WHEN s.state = 'expired' THEN 'acknowledgement_lapsed' END,
	CASE WHEN s.state = 'expired' THEN '' END,
	0, $3::timestamptz - make_interval(secs => i + 60), $3::timestamptz - make_interval(secs => i),
	$3::timestamptz - make_interval(secs => i), 4
FROM generate_series($1::bigint, $2::bigint) AS i,
	LATERAL (SELECT (ARRAY['processed', 'failed', 'expired'])[1 + i %% 3] AS state) AS s`

// terminalEntriesSQL is terminalDeliveriesSQL for the outbox: Delivered,
// Failed and DeadLettered entries in turn.
const terminalEntriesSQL = `
INSERT INTO %s (id, provider, kind, payload, idempotency_key, status, attempts,
	last_error_code, last_error_message, result_provider_ref, result_detail, dead_letter_reason,
	claim_seq, ended_claim_token, ended_claim_seq, ended_claim_op, ended_claim_at,
	created_at, updated_at, ended_at, version)
SELECT 'done-' || lpad(i::text, 10, '0'), 'mail', 'notice', convert_to(repeat('x', $4::integer), 'UTF8'),
	'done-' || i, s.status, 1,
	CASE WHEN s.status <> 'delivered' THEN 'code' END,
	CASE WHEN s.status <> 'delivered' THEN 'provider refused' END,
	CASE WHEN s.status = 'delivered' THEN 'bench' END,
	CASE WHEN s.status = 'delivered' THEN '' END,
	CASE WHEN s.status = 'dead_lettered' THEN 'poison' ELSE '' END,
	1, 'token-' || i, 1, 'delivered', $3::timestamptz - make_interval(secs => i),
	$3::timestamptz - make_interval(secs => i + 60), $3::timestamptz - make_interval(secs => i),
	$3::timestamptz - make_interval(secs => i), 3
FROM generate_series($1::bigint, $2::bigint) AS i,
	LATERAL (SELECT (ARRAY['delivered', 'failed', 'dead_lettered'])[1 + i %% 3] AS status) AS s`
