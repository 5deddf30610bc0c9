package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/internal/pgtest"
	"github.com/leaseledger/ledger/pgstore"
)

// largeTableRows is the size of the table TestMigrateConcurrentlyOnALargeTable
// builds indexes on: a million rows in its long form (make test/long), a
// fifth of that in make test.
func largeTableRows() int {
	if pgtest.Long() {
		return 1_000_000
	}
	return 200_000
}

// concurrentFixture builds an index on deliveries outside a transaction.
var concurrentFixture = fstest.MapFS{
	"0200_large.sql": {Data: []byte(`-- 0200_large: a fixture run outside a transaction.
-- pgstore:no-transaction
CREATE INDEX CONCURRENTLY IF NOT EXISTS deliveries_large_idx ON {schema}.deliveries (target, ended_at, id);
`)},
}

// blockingFixture is concurrentFixture and then the same kind of build in
// a transaction, which blocks writers: what the writer check must catch.
var blockingFixture = fstest.MapFS{
	"0200_large.sql": concurrentFixture["0200_large.sql"],
	"0201_blocking.sql": {Data: []byte(`-- 0201_blocking: a build that takes a lock writers wait for.
CREATE INDEX deliveries_blocking_idx ON {schema}.deliveries (ceremony, ended_at, id);
`)},
}

// TestMigrateConcurrentlyOnALargeTable builds an index outside a
// transaction on a table of a million rows (200,000 outside make
// test/long) while a writer enqueues, and requires that the writer went
// on throughout; a build cancelled half way leaves an INVALID index that
// the next Migrate replaces. The writer check is then shown to catch a
// build that does block writers.
func TestMigrateConcurrentlyOnALargeTable(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a table of 200,000 rows or more")
	}
	s, pool := newStore(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	pgstore.InsertTerminalDeliveries(ctx, t, pool, s.Schema(), largeTableRows(), t0)
	_, err := pool.Exec(ctx, "ANALYZE "+pgx.Identifier{s.Schema(), "deliveries"}.Sanitize())
	require.NoError(t, err)

	t.Run("CancelledBuildIsRebuilt", func(t *testing.T) {
		mctx, stop := context.WithCancel(ctx)
		defer stop()
		done := make(chan error, 1)
		go func() { done <- s.MigrateWith(mctx, concurrentFixture) }()
		waitForIndexBuild(ctx, t, pool, s.Schema())
		stop()
		select {
		case err := <-done:
			require.ErrorIs(t, err, context.Canceled)
		case <-ctx.Done():
			t.Fatal("Migrate did not return after its context was cancelled")
		}
		require.Equal(t, map[string]bool{"deliveries_large_idx": false},
			indexValidity(ctx, t, pool, s.Schema(), "deliveries_large_idx"), "the cancelled build leaves its index INVALID")
	})

	t.Run("WritersGoOn", func(t *testing.T) {
		w := startWriter(ctx, s)
		from := time.Now()
		err := s.MigrateWith(ctx, concurrentFixture)
		to := time.Now()
		writes, werr := w.stop()
		require.NoError(t, err)
		require.NoError(t, werr)
		require.NoError(t, checkWritersWentOn(writes, from, to))
		assert.Equal(t, map[string]bool{"deliveries_large_idx": true},
			indexValidity(ctx, t, pool, s.Schema(), "deliveries_large_idx"))
		t.Logf("built in %v beside %d writes", to.Sub(from).Round(time.Millisecond), len(writes))
	})

	t.Run("CheckerCatchesABlockingBuild", func(t *testing.T) {
		w := startWriter(ctx, s)
		from := time.Now()
		err := s.MigrateWith(ctx, blockingFixture)
		to := time.Now()
		writes, werr := w.stop()
		require.NoError(t, err)
		require.NoError(t, werr)
		require.Error(t, checkWritersWentOn(writes, from, to), "a build in a transaction blocks the writer")
	})
}

// write is one enqueue of the writer: when it started and ended.
type write struct{ start, end time.Time }

// writer enqueues deliveries one at a time until stopped.
type writer struct {
	stopping chan struct{}
	done     chan struct{}
	writes   []write
	err      error
}

// startWriter starts a writer on s that enqueues. Its writes use ctx:
// one in flight when the writer is stopped is waited for, so that a write
// a migration held up is counted with its whole wait.
func startWriter(ctx context.Context, s *pgstore.Store) *writer {
	return startWrites(func(n int) error {
		id := ledger.DeliveryID(fmt.Sprintf("w-%d-%d", time.Now().UnixNano(), n))
		_, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: id, Target: "writer"}, t0)
		return err
	})
}

// startWrites starts a writer that makes write n with do, one after the
// other, until stopped or do fails.
func startWrites(do func(n int) error) *writer {
	w := &writer{stopping: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for n := 0; ; n++ {
			select {
			case <-w.stopping:
				return
			default:
			}
			start := time.Now()
			if err := do(n); err != nil {
				w.err = err
				return
			}
			w.writes = append(w.writes, write{start, time.Now()})
		}
	}()
	return w
}

// stop stops the writer and returns its writes and its error, if any.
func (w *writer) stop() ([]write, error) {
	close(w.stopping)
	<-w.done
	return w.writes, w.err
}

// checkWritersWentOn returns an error unless writes went on while the
// migration ran from from to to: at least 20 of them ended in that time,
// and none took more than half of it. A build that blocks writers holds a
// write for nearly all of the migration; a stall of a tenth of it is what
// a loaded machine running the race detector does on its own.
func checkWritersWentOn(writes []write, from, to time.Time) error {
	var during int
	var longest time.Duration
	for _, w := range writes {
		if w.end.After(from) && w.end.Before(to) {
			during++
		}
		if w.end.After(from) && w.start.Before(to) {
			longest = max(longest, w.end.Sub(w.start))
		}
	}
	took := to.Sub(from)
	var errs []error
	if during < 20 {
		errs = append(errs, fmt.Errorf("only %d writes ended during the %v migration", during, took))
	}
	if longest > took/2 {
		errs = append(errs, fmt.Errorf("a write waited %v during the %v migration", longest, took))
	}
	return errors.Join(errs...)
}

// waitForIndexBuild returns once a CREATE INDEX on schema's deliveries is
// scanning the table.
func waitForIndexBuild(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	table := pgx.Identifier{schema, "deliveries"}.Sanitize()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	last := "none" // the last phase seen, for the failure message
	for {
		var phase string
		err := pool.QueryRow(ctx, `SELECT coalesce(min(phase), '') FROM pg_catalog.pg_stat_progress_create_index
			WHERE relid = to_regclass($1)`, table).Scan(&phase)
		require.NoError(t, err, "waiting for the index build; last phase %s", last)
		if phase == "building index: scanning table" {
			return
		}
		if phase != "" {
			last = phase
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no index build seen scanning the table; last phase %s", last)
		case <-tick.C:
		}
	}
}
