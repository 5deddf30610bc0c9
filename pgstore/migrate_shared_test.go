package pgstore_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/internal/pgtest"
	"github.com/leaseledger/ledger/pgstore"
)

// freshMigrationLimit bounds the migration of fresh schemas beside
// another schema's long transaction: far above what it takes (a few
// seconds, tens on a machine loaded by many test binaries), far below
// forever, which is how long an index built CONCURRENTLY waits for a
// transaction that holds an older snapshot.
const freshMigrationLimit = 2 * time.Minute

// TestMigrateFreshSchemasBesideALongTransaction: many test binaries (or
// users of pgstoretest) share one database, each migrating schemas of its
// own while others run. A fresh schema's migration must not wait for
// another schema's transactions, as CREATE INDEX CONCURRENTLY does (it
// waits for every transaction of the database holding an older
// snapshot): its tables are empty, so the runner builds their indexes
// plainly, which waits only for the table's own users.
func TestMigrateFreshSchemasBesideALongTransaction(t *testing.T) {
	// Not parallel: the package's other tests build indexes concurrently
	// and hold transactions open on purpose, and this test is about the
	// one long transaction it opens. It used to fail now and then: with
	// the long transaction holding one of the pool's four connections,
	// three migrations could each hold one in an index step while waiting
	// for a second (TestMigrateOnAPoolOfOneConnection).
	other, pool := newStore(t)
	ctx := testContext(t)
	// Another schema's transaction, open with a snapshot all along.
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	var n int
	require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{other.Schema(), "deliveries"}.Sanitize()).Scan(&n))

	const schemas = 4
	errs := make([]error, schemas)
	mctx, cancel := context.WithTimeout(t.Context(), freshMigrationLimit)
	defer cancel()
	var wg sync.WaitGroup
	for i := range schemas {
		s, err := pgstore.New(pool, pgstore.WithSchema(pgtest.Schema(t, pool)))
		require.NoError(t, err)
		wg.Go(func() { errs[i] = s.Migrate(mctx) })
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "schema %d", i)
	}
}

// logCapture is a slog.Handler that keeps the records logged.
type logCapture struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (c *logCapture) Enabled(context.Context, slog.Level) bool { return true }
func (c *logCapture) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *logCapture) WithGroup(string) slog.Handler            { return c }
func (c *logCapture) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recs = append(c.recs, r.Clone())
	return nil
}

// attr returns the values of attribute key of the records logged.
func (c *logCapture) attr(key string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, r := range c.recs {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == key {
				out = append(out, a.Value.String())
			}
			return true
		})
	}
	return out
}

// TestMigrateSaysWhatItWaitsFor: an index on a table with rows is built
// CONCURRENTLY, and that build waits for another schema's transaction
// holding an older snapshot. The migration logs which session it waits
// for while it waits, and the error it ends with names it.
func TestMigrateSaysWhatItWaitsFor(t *testing.T) {
	t.Parallel()
	logs := &logCapture{}
	s, pool := newStore(t, pgstore.WithLogger(slog.New(logs)))
	other, _ := newStore(t)
	ctx := testContext(t)
	_, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: "d-1", Target: "host-1", Payload: []byte("p")}, t0)
	require.NoError(t, err)

	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	blocker := conn.Conn().PgConn().PID()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	var n int
	require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{other.Schema(), "deliveries"}.Sanitize()).Scan(&n))

	mctx, cancel := context.WithTimeout(ctx, 8*time.Second) // past the first report, at 5 s
	defer cancel()
	err = s.MigrateWith(mctx, fstest.MapFS{"0200_waits.sql": {Data: []byte(`-- 0200_waits: a build that must wait.
-- pgstore:no-transaction
CREATE INDEX CONCURRENTLY IF NOT EXISTS deliveries_waits_idx ON {schema}.deliveries (target, ended_at, id);
`)}})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	who := fmt.Sprintf("pid %d ", blocker)
	require.Contains(t, err.Error(), who, "the error names the session the build waited for")
	waits := logs.attr("waiting_for")
	require.NotEmpty(t, waits, "the wait was logged while it lasted")
	require.Contains(t, waits[0], who)
}

// TestMigrateOnAPoolOfOneConnection: a step that builds an index holds a
// connection of its own; anything else it runs while it holds it must go
// over that connection, or migrations that hold every connection of a
// small pool wait for each other for ever. One connection makes the wait
// certain rather than a matter of timing.
func TestMigrateOnAPoolOfOneConnection(t *testing.T) {
	t.Parallel()
	url, err := pgtest.URL()
	require.NoError(t, err)
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(testContext(t), cfg)
	require.NoError(t, err)
	defer pool.Close()
	s, err := pgstore.New(pool, pgstore.WithSchema(pgtest.Schema(t, pgtest.Pool(t))))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(testContext(t), freshMigrationLimit)
	defer cancel()
	require.NoError(t, s.Migrate(ctx))
}
