package pgstore_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/internal/pgtest"
	"github.com/leaseledger/ledger/pgstore"
)

// namedStore is newStore on a pool whose connections carry a unique
// application_name, so a test can find its store's backends in
// pg_stat_activity.
func namedStore(t *testing.T) (*pgstore.Store, *pgxpool.Pool, string) {
	t.Helper()
	app := "pgstore-test-" + rand.Text()[:12]
	cfg, err := pgxpool.ParseConfig(pgtest.DSN(t))
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = ""
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	pool, err := pgxpool.NewWithConfig(testContext(t), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	schema := pgtest.Schema(t, pool)
	s, err := pgstore.New(pool, pgstore.WithSchema(schema))
	require.NoError(t, err)
	require.NoError(t, s.Migrate(testContext(t)))
	return s, pool, app
}

// lockRow holds a row lock from a separate connection until the test
// releases it (or ends).
func lockRow(ctx context.Context, t *testing.T, query string, args ...any) (release func()) {
	t.Helper()
	conn, err := pgx.Connect(ctx, pgtest.DSN(t))
	require.NoError(t, err)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	tag, err := tx.Exec(ctx, query, args...)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected(), "the row to lock must exist")
	done := false
	release = func() {
		if !done {
			done = true
			_ = tx.Rollback(context.Background())
			_ = conn.Close(context.Background())
		}
	}
	t.Cleanup(release)
	return release
}

// waitingBackend waits (bounded) until a backend of app waits for a lock
// and returns its pid.
func waitingBackend(ctx context.Context, t *testing.T, pool *pgxpool.Pool, app string) int32 {
	t.Helper()
	var pid int32
	require.Eventually(t, func() bool {
		err := pool.QueryRow(ctx, `SELECT pid FROM pg_catalog.pg_stat_activity
			WHERE application_name = $1 AND wait_event_type = 'Lock' LIMIT 1`, app).Scan(&pid)
		return err == nil
	}, 10*time.Second, 5*time.Millisecond, "the call never blocked on the held lock")
	return pid
}

// callResult is what a call running in a goroutine answered.
type callResult struct {
	res ledger.DeliveryResult
	err error
}

func TestCancelledMidCall(t *testing.T) {
	s, pool, app := namedStore(t)
	ctx := testContext(t)
	owner := ledger.Owner{Agent: "agent", Incarnation: "boot-1"}
	_, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: "d1", Target: "host"}, t0)
	require.NoError(t, err)
	lr, err := s.Lease(ctx, ledger.LeaseFilter{}, owner, t0, time.Minute, 1)
	require.NoError(t, err)
	require.Len(t, lr.Leased, 1)
	before, err := s.Get(ctx, "d1")
	require.NoError(t, err)

	release := lockRow(ctx, t, fmt.Sprintf(`SELECT 1 FROM %q.deliveries WHERE id = 'd1' FOR UPDATE`, s.Schema()))
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan callResult, 1)
	go func() {
		r, err := s.Acknowledge(callCtx, lr.Leased[0].Lease, "seen", t0.Add(time.Second))
		done <- callResult{r, err}
	}()
	waitingBackend(ctx, t, pool, app)
	cancel()
	var got callResult
	select {
	case got = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Acknowledge did not return after its context was cancelled")
	}
	require.Error(t, got.err)
	require.ErrorIs(t, got.err, context.Canceled)
	release()

	after, err := s.Get(ctx, "d1")
	require.NoError(t, err)
	require.Equal(t, before, after, "a cancelled call must leave the record unchanged")
	// The store is still usable, and the lease still valid.
	r, err := s.Acknowledge(ctx, lr.Leased[0].Lease, "seen", t0.Add(time.Second))
	require.NoError(t, err)
	require.Equal(t, ledger.OutcomeApplied, r.Outcome)
}

func TestConnectionKilledMidTransition(t *testing.T) {
	s, pool, app := namedStore(t)
	ctx := testContext(t)
	owner := ledger.Owner{Agent: "agent", Incarnation: "boot-1"}
	for _, id := range []ledger.DeliveryID{"d1", "d2"} {
		_, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: id, Target: "host"}, t0)
		require.NoError(t, err)
	}
	lr, err := s.Lease(ctx, ledger.LeaseFilter{}, owner, t0, time.Minute, 2)
	require.NoError(t, err)
	require.Len(t, lr.Leased, 2)
	for _, l := range lr.Leased {
		r, err := s.Acknowledge(ctx, l.Lease, "", t0)
		require.NoError(t, err)
		require.True(t, r.Applied())
	}
	r, err := s.MarkProcessed(ctx, "d1", owner, ledger.FenceOf(5), "act-1", t0)
	require.NoError(t, err)
	require.True(t, r.Applied())
	before, err := s.Get(ctx, "d2")
	require.NoError(t, err)

	// MarkProcessed of d2 locks d2, then blocks on the target's fence row;
	// its connection is killed there, between the two.
	release := lockRow(ctx, t, fmt.Sprintf(`SELECT 1 FROM %q.target_fences WHERE target = 'host' FOR UPDATE`, s.Schema()))
	done := make(chan callResult, 1)
	go func() {
		r, err := s.MarkProcessed(ctx, "d2", owner, ledger.FenceOf(7), "act-2", t0)
		done <- callResult{r, err}
	}()
	pid := waitingBackend(ctx, t, pool, app)
	var killed bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT pg_catalog.pg_terminate_backend($1)`, pid).Scan(&killed))
	require.True(t, killed)
	var got callResult
	select {
	case got = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("MarkProcessed did not return after its connection was killed")
	}
	require.Error(t, got.err, "a transition whose connection died must report it")
	assert.False(t, errors.Is(got.err, context.Canceled))
	release()

	after, err := s.Get(ctx, "d2")
	require.NoError(t, err)
	require.Equal(t, before, after, "no half-applied transition")
	var highest int64
	require.NoError(t, pool.QueryRow(ctx, fmt.Sprintf(`SELECT highest FROM %q.target_fences WHERE target = 'host'`, s.Schema())).Scan(&highest))
	require.EqualValues(t, 5, highest, "the fence was not raised")

	// Done again on a healthy connection, it applies.
	r, err = s.MarkProcessed(ctx, "d2", owner, ledger.FenceOf(7), "act-2", t0)
	require.NoError(t, err)
	require.Equal(t, ledger.OutcomeApplied, r.Outcome)
	require.NoError(t, pool.QueryRow(ctx, fmt.Sprintf(`SELECT highest FROM %q.target_fences WHERE target = 'host'`, s.Schema())).Scan(&highest))
	require.EqualValues(t, 7, highest)
}
