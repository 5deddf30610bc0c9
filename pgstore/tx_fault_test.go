package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/pgstore"
)

// failingStatement replaces the statement a faultTx fails: it fails on
// the server, as a constraint violation or a timeout would, so that
// outside a savepoint it aborts the transaction it runs in.
const failingStatement = "SELECT 1/0"

// faultTx is the caller's transaction as a store sees it through WithTx,
// with one statement made to fail: it counts the statements the store
// sends (Exec, Query, QueryRow, and each statement of a batch), in this
// transaction and the savepoints opened from it, and replaces the one
// numbered failAt (from 1) with failingStatement. Savepoints themselves
// are not counted: opening and closing them is what keeps a failure
// inside the call.
type faultTx struct {
	pgx.Tx
	c *faultCount
}

type faultCount struct {
	mu     sync.Mutex
	n      int // statements sent so far
	failAt int // 0: none
	fired  bool
}

// rewrite counts one statement and returns what to send instead of sql.
func (c *faultCount) rewrite(sql string, args []any) (string, []any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	if c.n == c.failAt {
		c.fired = true
		return failingStatement, nil
	}
	return sql, args
}

func (tx faultTx) Begin(ctx context.Context) (pgx.Tx, error) {
	inner, err := tx.Tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return faultTx{Tx: inner, c: tx.c}, nil
}

func (tx faultTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	sql, args = tx.c.rewrite(sql, args)
	return tx.Tx.Exec(ctx, sql, args...)
}

func (tx faultTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	sql, args = tx.c.rewrite(sql, args)
	return tx.Tx.Query(ctx, sql, args...)
}

func (tx faultTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	sql, args = tx.c.rewrite(sql, args)
	return tx.Tx.QueryRow(ctx, sql, args...)
}

func (tx faultTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	for _, q := range b.QueuedQueries {
		q.SQL, q.Arguments = tx.c.rewrite(q.SQL, q.Arguments)
	}
	return tx.Tx.SendBatch(ctx, b)
}

// txFixture is what the calls of TestWithTxFailureNeverAbortsTheCaller
// work on, committed before any of them: an offered delivery of a
// ceremony, a leased one, an acknowledged one; a pending, a claimed and a
// retry-scheduled outbox entry.
type txFixture struct {
	leased, acked ledger.Lease
	claim         ledger.Claim
	pending       ledger.OutboxEntry
	retry         ledger.OutboxEntryID
}

func newTxFixture(t *testing.T, s *pgstore.Store) txFixture {
	ctx := testContext(t)
	o := s.Outbox()
	owner := ledger.Owner{Agent: "agent", Incarnation: "boot-1"}
	var f txFixture
	for _, r := range []ledger.EnqueueRequest{
		{ID: "d-acked", Target: "host"}, {ID: "d-leased", Target: "host"}, {ID: "d-offered", Target: "host", Ceremony: "cer"},
	} {
		_, err := s.Enqueue(ctx, r, t0)
		require.NoError(t, err)
	}
	lr, err := s.Lease(ctx, ledger.LeaseFilter{}, owner, t0, time.Hour, 2)
	require.NoError(t, err)
	require.Len(t, lr.Leased, 2)
	f.acked, f.leased = lr.Leased[0].Lease, lr.Leased[1].Lease
	_, err = s.Acknowledge(ctx, f.acked, "seen", t0)
	require.NoError(t, err)

	for _, key := range []string{"e-claimed", "e-pending", "e-retry"} {
		_, err := o.Enqueue(ctx, ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: key})
		require.NoError(t, err)
	}
	cs, err := o.ClaimPending(ctx, ledger.ClaimRequest{Worker: "w", Now: t0, LeaseDuration: time.Hour, Limit: 1})
	require.NoError(t, err)
	require.Len(t, cs, 1)
	f.claim = cs[0].Claim
	f.pending, err = o.FindByID(ctx, ledger.OutboxEntryIDFor("e-pending"))
	require.NoError(t, err)
	if f.pending.ID == f.claim.EntryID {
		f.pending, err = o.FindByID(ctx, ledger.OutboxEntryIDFor("e-claimed"))
		require.NoError(t, err)
	}
	f.retry = ledger.OutboxEntryIDFor("e-retry")
	if f.retry == f.claim.EntryID {
		f.retry = ledger.OutboxEntryIDFor("e-claimed")
	}
	due := t0
	_, err = o.MarkFailed(ctx, f.retry, ledger.EmissionError{Message: "later"}, &due)
	require.NoError(t, err)
	return f
}

// txCall is one call of the store made through WithTx.
type txCall struct {
	name string
	call func(ctx context.Context, s *pgstore.Store, f txFixture) error
}

func txCalls() []txCall {
	owner := ledger.Owner{Agent: "agent", Incarnation: "boot-1"}
	now := t0.Add(time.Minute)
	later := t0.Add(48 * time.Hour)
	cause := ledger.Cause{Kind: ledger.CauseBindingRevoked}
	emission := ledger.EmissionError{Code: "c", Message: "m"}
	err2 := func(_ any, err error) error { return err }
	return []txCall{
		{"Enqueue", func(ctx context.Context, s *pgstore.Store, _ txFixture) error {
			return err2(s.Enqueue(ctx, ledger.EnqueueRequest{ID: "d-new", Target: "host"}, now))
		}},
		{"EnqueueBatch", func(ctx context.Context, s *pgstore.Store, _ txFixture) error {
			return err2(s.EnqueueBatch(ctx, []ledger.EnqueueRequest{{ID: "d-new-1", Target: "host"}, {ID: "d-new-2", Target: "host"}}, now))
		}},
		{"Lease", func(ctx context.Context, s *pgstore.Store, _ txFixture) error {
			// A new incarnation: it takes the fixture's leases back first.
			return err2(s.Lease(ctx, ledger.LeaseFilter{}, ledger.Owner{Agent: "agent", Incarnation: "boot-2"}, now, time.Minute, 10))
		}},
		{"Acknowledge", func(ctx context.Context, s *pgstore.Store, f txFixture) error {
			return err2(s.Acknowledge(ctx, f.leased, "seen", now))
		}},
		{"MarkProcessed", func(ctx context.Context, s *pgstore.Store, _ txFixture) error {
			return err2(s.MarkProcessed(ctx, "d-acked", owner, ledger.FenceOf(3), "done", now))
		}},
		{"RecordActivation", func(ctx context.Context, s *pgstore.Store, _ txFixture) error {
			return err2(s.RecordActivation(ctx, "d-offered", ledger.Activation{Result: ledger.ActivationDelivered}, now))
		}},
		{"MarkFailed", func(ctx context.Context, s *pgstore.Store, f txFixture) error {
			return err2(s.MarkFailed(ctx, f.leased, ledger.FailureReason{Message: "no"}, now))
		}},
		{"Release", func(ctx context.Context, s *pgstore.Store, f txFixture) error {
			return err2(s.Release(ctx, f.leased, now))
		}},
		{"RenewLease", func(ctx context.Context, s *pgstore.Store, f txFixture) error {
			return err2(s.RenewLease(ctx, f.leased, now, time.Hour))
		}},
		{"Abandon", func(ctx context.Context, s *pgstore.Store, _ txFixture) error {
			return err2(s.Abandon(ctx, "d-offered", cause, now))
		}},
		{"Expire", func(ctx context.Context, s *pgstore.Store, _ txFixture) error { return err2(s.Expire(ctx, later)) }},
		{"ExpireCeremony", func(ctx context.Context, s *pgstore.Store, _ txFixture) error {
			return err2(s.ExpireCeremony(ctx, "cer", cause, now))
		}},
		{"Supersede", func(ctx context.Context, s *pgstore.Store, _ txFixture) error {
			return err2(s.Supersede(ctx, "host", "host-2", ledger.Follow, now))
		}},
		{"Get", func(ctx context.Context, s *pgstore.Store, _ txFixture) error { return err2(s.Get(ctx, "d-leased")) }},
		{"List", func(ctx context.Context, s *pgstore.Store, _ txFixture) error {
			return err2(s.List(ctx, ledger.ListQuery{Limit: 10}))
		}},
		{"History", func(ctx context.Context, s *pgstore.Store, _ txFixture) error {
			return err2(s.History(ctx, "d-leased"))
		}},
		{"Stats", func(ctx context.Context, s *pgstore.Store, _ txFixture) error {
			return err2(s.Stats(ctx, ledger.StatsFilter{}, now))
		}},
		{"PurgeDeliveries", func(ctx context.Context, s *pgstore.Store, _ txFixture) error {
			return err2(s.PurgeDeliveries(ctx, later, 10))
		}},
		{"Outbox.Enqueue", func(ctx context.Context, s *pgstore.Store, _ txFixture) error {
			return err2(s.Outbox().Enqueue(ctx, ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: "e-new"}))
		}},
		{"Outbox.EnqueueBatch", func(ctx context.Context, s *pgstore.Store, _ txFixture) error {
			return err2(s.Outbox().EnqueueBatch(ctx, []ledger.Envelope{
				{Provider: "p", Kind: "k", IdempotencyKey: "e-new-1"}, {Provider: "p", Kind: "k", IdempotencyKey: "e-new-2"},
			}))
		}},
		{"Outbox.Save", func(ctx context.Context, s *pgstore.Store, f txFixture) error {
			e := f.pending
			e.Status, e.NextAttemptAt = ledger.OutboxStatusDeferred, later
			return err2(s.Outbox().Save(ctx, e))
		}},
		{"Outbox.FindByID", func(ctx context.Context, s *pgstore.Store, f txFixture) error {
			return err2(s.Outbox().FindByID(ctx, f.pending.ID))
		}},
		{"Outbox.FindPending", func(ctx context.Context, s *pgstore.Store, _ txFixture) error {
			return err2(s.Outbox().FindPending(ctx, 10))
		}},
		{"Outbox.FindRetryReady", func(ctx context.Context, s *pgstore.Store, _ txFixture) error {
			return err2(s.Outbox().FindRetryReady(ctx, now, 10))
		}},
		{"Outbox.MarkDelivered", func(ctx context.Context, s *pgstore.Store, f txFixture) error {
			return err2(s.Outbox().MarkDelivered(ctx, f.pending.ID, ledger.EmissionResult{}))
		}},
		{"Outbox.MarkFailed", func(ctx context.Context, s *pgstore.Store, f txFixture) error {
			return err2(s.Outbox().MarkFailed(ctx, f.pending.ID, emission, nil))
		}},
		{"Outbox.MarkDeadLettered", func(ctx context.Context, s *pgstore.Store, f txFixture) error {
			return err2(s.Outbox().MarkDeadLettered(ctx, f.pending.ID, emission, "gone"))
		}},
		{"Outbox.ClaimPending", func(ctx context.Context, s *pgstore.Store, _ txFixture) error {
			return err2(s.Outbox().ClaimPending(ctx, ledger.ClaimRequest{Worker: "w2", Now: now, LeaseDuration: time.Minute, Limit: 10}))
		}},
		{"Outbox.ClaimRetryReady", func(ctx context.Context, s *pgstore.Store, _ txFixture) error {
			return err2(s.Outbox().ClaimRetryReady(ctx, ledger.ClaimRequest{Worker: "w2", Now: now, LeaseDuration: time.Minute, Limit: 10}))
		}},
		{"Outbox.MarkClaimDelivered", func(ctx context.Context, s *pgstore.Store, f txFixture) error {
			return err2(s.Outbox().MarkClaimDelivered(ctx, f.claim, ledger.EmissionResult{}))
		}},
		{"Outbox.MarkClaimFailed", func(ctx context.Context, s *pgstore.Store, f txFixture) error {
			return err2(s.Outbox().MarkClaimFailed(ctx, f.claim, emission, &later))
		}},
		{"Outbox.MarkClaimDeadLettered", func(ctx context.Context, s *pgstore.Store, f txFixture) error {
			return err2(s.Outbox().MarkClaimDeadLettered(ctx, f.claim, emission, "gone"))
		}},
		{"Outbox.ReleaseClaim", func(ctx context.Context, s *pgstore.Store, f txFixture) error {
			return err2(s.Outbox().ReleaseClaim(ctx, f.claim, "later"))
		}},
		{"Outbox.SaveClaim", func(ctx context.Context, s *pgstore.Store, f txFixture) error {
			e := ledger.OutboxEntry{ID: f.claim.EntryID, Status: ledger.OutboxStatusDeferred, NextAttemptAt: later}
			return err2(s.Outbox().SaveClaim(ctx, f.claim, e))
		}},
		{"Outbox.RenewClaim", func(ctx context.Context, s *pgstore.Store, f txFixture) error {
			return err2(s.Outbox().RenewClaim(ctx, f.claim, now, time.Hour))
		}},
		{"Outbox.EntryHistory", func(ctx context.Context, s *pgstore.Store, f txFixture) error {
			return err2(s.Outbox().EntryHistory(ctx, f.claim.EntryID))
		}},
		{"Outbox.OutboxStats", func(ctx context.Context, s *pgstore.Store, _ txFixture) error {
			return err2(s.Outbox().OutboxStats(ctx, now))
		}},
		{"Outbox.PurgeEntries", func(ctx context.Context, s *pgstore.Store, _ txFixture) error {
			return err2(s.Outbox().PurgeEntries(ctx, later, 10))
		}},
	}
}

// TestWithTxFailureNeverAbortsTheCaller fails, one after the other, each
// statement every call sends inside the caller's transaction (the clock
// read of WithDatabaseClock included), and checks each time that the call
// reports the error and the caller's transaction is still usable: it
// writes a row of its own after the call and commits both of its rows.
func TestWithTxFailureNeverAbortsTheCaller(t *testing.T) {
	s, pool := newStore(t, pgstore.WithDatabaseClock(true), quiet())
	ctx := testContext(t)
	f := newTxFixture(t, s)
	own := pgx.Identifier{s.Schema(), "caller_writes"}.Sanitize()
	_, err := pool.Exec(ctx, "CREATE TABLE "+own+" (label text PRIMARY KEY)")
	require.NoError(t, err)

	for _, c := range txCalls() {
		t.Run(c.name, func(t *testing.T) {
			for failAt := 1; ; failAt++ {
				require.Less(t, failAt, 50, "the call never finished its statements")
				count := &faultCount{failAt: failAt}
				label := fmt.Sprintf("%s/%d", c.name, failAt)
				fired, err := callInTx(ctx, pool, own, label, func(tx pgx.Tx) error {
					return c.call(ctx, s.WithTx(faultTx{Tx: tx, c: count}), f)
				}, count)
				if !fired {
					require.NoError(t, err, "%s with no statement failed", c.name)
					require.Greater(t, failAt, 1, "%s sent no statement", c.name)
					return
				}
				require.Error(t, err, "%s: statement %d failed, the call must say so", c.name, failAt)
				var n int
				require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+own+" WHERE label IN ($1, $2)",
					label+"/before", label+"/after").Scan(&n))
				require.Equal(t, 2, n, "%s: after statement %d failed, the caller's own writes must commit", c.name, failAt)
			}
		})
	}
}

// quiet keeps a store on the database clock from warning about the skew
// of the tests' fixed times.
func quiet() pgstore.Option { return pgstore.WithLogger(slog.New(slog.DiscardHandler)) }

// callInTx runs call in a transaction of the caller's that writes a row
// labelled before and after it. When the injected failure fired, it
// commits and returns the call's error, having checked that the caller
// could write and commit; otherwise it rolls back, so that the fixture
// stays as it was for the next call.
func callInTx(ctx context.Context, pool *pgxpool.Pool, own, label string, call func(pgx.Tx) error, count *faultCount) (fired bool, callErr error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "INSERT INTO "+own+" (label) VALUES ($1)", label+"/before"); err != nil {
		return false, err
	}
	callErr = call(tx)
	count.mu.Lock()
	fired = count.fired
	count.mu.Unlock()
	if !fired {
		return false, callErr
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+own+" (label) VALUES ($1)", label+"/after"); err != nil {
		return true, errors.Join(callErr, fmt.Errorf("the caller's transaction is no longer usable: %w", err))
	}
	if err := tx.Commit(ctx); err != nil {
		return true, errors.Join(callErr, fmt.Errorf("the caller's commit failed: %w", err))
	}
	return true, callErr
}
