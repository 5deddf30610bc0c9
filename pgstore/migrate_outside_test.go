package pgstore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/internal/pgtest"
	"github.com/leaseledger/ledger/pgstore"
)

// outsideFixture is two migrations after the embedded ones: 0100 builds
// two indexes concurrently and drops one of 0004's, outside a
// transaction; 0101, an ordinary one, must run after it.
var outsideFixture = fstest.MapFS{
	"0100_concurrent.sql": {Data: []byte(`-- 0100_concurrent: a fixture run outside a transaction.
-- pgstore:no-transaction

CREATE INDEX CONCURRENTLY IF NOT EXISTS deliveries_fixture_target_idx
    ON {schema}.deliveries (target, created_at);
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_entries_fixture_idx ON {schema}.outbox_entries (provider);
-- A comment between steps; with a semicolon.
DROP INDEX CONCURRENTLY IF EXISTS {schema}.deliveries_ended_idx;
`)},
	"0101_after.sql": {Data: []byte(`-- 0101_after: runs in a transaction, after 0100.
CREATE TABLE {schema}.fixture_after (x integer);
`)},
}

// fixtureVersions is how many versions the embedded migrations and
// outsideFixture record together.
func fixtureVersions(t *testing.T) int { return len(migrationFiles(t)) + 2 }

func TestMigrateOutsideTransaction(t *testing.T) {
	t.Run("StepsRunAndTheVersionIsRecorded", func(t *testing.T) {
		s, pool := newUnmigratedStore(t)
		ctx := testContext(t)
		require.NoError(t, s.MigrateWith(ctx, outsideFixture))
		assertFixtureApplied(ctx, t, pool, s.Schema())

		rows := migrationRows(ctx, t, pool, s.Schema())
		before := dumpSchema(ctx, t, pool, s.Schema())
		require.NoError(t, s.MigrateWith(ctx, outsideFixture))
		assert.Equal(t, rows, migrationRows(ctx, t, pool, s.Schema()), "a second Migrate records nothing")
		assert.Equal(t, before, dumpSchema(ctx, t, pool, s.Schema()))
	})

	// A build interrupted before this run left the fixture's index
	// INVALID (here: a unique build that failed on duplicates). IF NOT
	// EXISTS alone would skip it; Migrate drops it and builds it again.
	t.Run("RecoversAnIndexLeftInvalid", func(t *testing.T) {
		s, pool := newStore(t)
		ctx := testContext(t)
		for _, id := range []ledger.DeliveryID{"a", "b"} {
			_, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: id, Target: "same"}, t0)
			require.NoError(t, err)
		}
		_, err := pool.Exec(ctx, "CREATE UNIQUE INDEX CONCURRENTLY deliveries_fixture_target_idx ON "+
			pgx.Identifier{s.Schema(), "deliveries"}.Sanitize()+" (target)")
		require.Error(t, err, "a unique build over duplicates fails")
		require.Equal(t, map[string]bool{"deliveries_fixture_target_idx": false}, indexValidity(ctx, t, pool, s.Schema(), "deliveries_fixture_target_idx"))

		require.NoError(t, s.MigrateWith(ctx, outsideFixture))
		assertFixtureApplied(ctx, t, pool, s.Schema())
	})

	t.Run("ConcurrentMigrators", func(t *testing.T) {
		pool := pgtest.Pool(t)
		schema := pgtest.Schema(t, pool)
		wide := widePool(t, 12)
		ctx := testContext(t)
		errs := make([]error, 6)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() {
				s, err := pgstore.New(wide, pgstore.WithSchema(schema))
				if err == nil {
					err = s.MigrateWith(ctx, outsideFixture)
				}
				errs[i] = err
			})
		}
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "migrator %d", i)
		}
		assertFixtureApplied(ctx, t, pool, schema)
	})

	t.Run("InsideACallersTransactionIsRefused", func(t *testing.T) {
		s, pool := newUnmigratedStore(t)
		ctx := testContext(t)
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		err = s.WithTx(tx).MigrateWith(ctx, outsideFixture)
		require.ErrorIs(t, err, ledger.ErrInvalid)
		var applied int
		require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = $1", s.Schema()).Scan(&applied))
		assert.Zero(t, applied, "nothing applied in the caller's transaction")
	})
}

func TestMigrateRefusesNewerSchema(t *testing.T) {
	s, pool := newStore(t)
	ctx := testContext(t)
	_, err := pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{s.Schema(), "schema_migrations"}.Sanitize()+
		" (version, name, applied_at) VALUES (9999, 'from_the_future', now())")
	require.NoError(t, err)
	before := dumpSchema(ctx, t, pool, s.Schema())

	err = s.Migrate(ctx)
	require.ErrorIs(t, err, pgstore.ErrNewerSchema)
	assert.NotErrorIs(t, err, ledger.ErrInvalid)
	// The fixture's versions are pending and below 9999: still refused,
	// and nothing of them applied.
	require.ErrorIs(t, s.MigrateWith(ctx, outsideFixture), pgstore.ErrNewerSchema)
	assert.Equal(t, before, dumpSchema(ctx, t, pool, s.Schema()))
}

func TestMigrationStatus(t *testing.T) {
	s, pool := newUnmigratedStore(t)
	ctx := testContext(t)
	files := migrationFiles(t)
	known := len(files)

	status, err := s.MigrationStatus(ctx)
	require.NoError(t, err)
	require.Len(t, status, known)
	for i, v := range status {
		// Versions ascend; a number may be skipped (kept for a migration
		// made on another branch).
		assert.Equal(t, filepath.Base(files[i])[:4], fmt.Sprintf("%04d", v.Version))
		assert.True(t, v.Known)
		assert.False(t, v.Applied(), "version %d pending on a fresh schema", v.Version)
		assert.NotEmpty(t, v.Name)
	}
	var exists bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)", s.Schema()).Scan(&exists))
	assert.False(t, exists, "MigrationStatus creates nothing")

	require.NoError(t, s.Migrate(ctx))
	_, err = pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{s.Schema(), "schema_migrations"}.Sanitize()+
		" (version, name, applied_at) VALUES (9999, 'from_the_future', $1)", t0)
	require.NoError(t, err)
	status, err = s.MigrationStatus(ctx)
	require.NoError(t, err)
	require.Len(t, status, known+1)
	for _, v := range status[:known] {
		assert.True(t, v.Applied(), "version %d", v.Version)
		assert.True(t, v.Known)
	}
	assert.Equal(t, pgstore.MigrationVersion{Version: 9999, Name: "from_the_future", AppliedAt: t0}, status[known])
}

// TestMigrationSQL applies MigrationSQL's output, version by version as
// another tool would, and requires the schema Migrate makes, with every
// version recorded so that Migrate afterwards does nothing.
func TestMigrationSQL(t *testing.T) {
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool)
	ctx := testContext(t)
	sql, err := pgstore.MigrationSQL(schema)
	require.NoError(t, err)
	require.NotContains(t, sql, "{schema}")

	files := migrationFiles(t)
	blocks := splitMigrationSQL(t, sql)
	require.Len(t, blocks, len(files))
	for i, b := range blocks {
		require.Equal(t, filepath.Base(files[i])[:4], b.id[:4])
		if strings.Contains(b.sql, "\n-- pgstore:no-transaction\n") {
			// One statement at a time, each its own implicit transaction,
			// as the version's marker asks: split as a tool that knows
			// SQL's quoting splits it (a DO block holds semicolons).
			stmts, err := pgstore.SplitStatements(b.sql)
			require.NoError(t, err, b.id)
			for _, stmt := range stmts {
				_, err = pool.Exec(ctx, stmt)
				require.NoError(t, err, "%s: %s", b.id, stmt)
			}
			continue
		}
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, b.sql)
		if err != nil {
			_ = tx.Rollback(ctx)
		}
		require.NoError(t, err, b.id)
		require.NoError(t, tx.Commit(ctx))
	}

	s, err := pgstore.New(pool, pgstore.WithSchema(schema))
	require.NoError(t, err)
	rows := migrationRows(ctx, t, pool, schema)
	require.Len(t, rows, len(blocks))
	require.NoError(t, s.Migrate(ctx))
	assert.Equal(t, rows, migrationRows(ctx, t, pool, schema), "Migrate finds every version applied")

	reference, refPool := newStore(t)
	assert.Equal(t, dumpSchema(ctx, t, refPool, reference.Schema()), dumpSchema(ctx, t, pool, schema))

	_, err = pgstore.MigrationSQL(`x"; DROP TABLE y; --`)
	require.ErrorIs(t, err, ledger.ErrInvalid)
}

// migrationBlock is one version of MigrationSQL's output.
type migrationBlock struct{ id, sql string }

// splitMigrationSQL cuts MigrationSQL's output at its version markers,
// as a team feeding another tool one file per version would.
func splitMigrationSQL(t *testing.T, sql string) []migrationBlock {
	t.Helper()
	const marker = "-- pgstore:migration "
	var blocks []migrationBlock
	for i, part := range strings.Split(sql, "\n"+marker) {
		if i == 0 {
			continue // the preamble
		}
		id, body, ok := strings.Cut(part, "\n")
		require.True(t, ok)
		blocks = append(blocks, migrationBlock{id: id, sql: body})
	}
	return blocks
}

// newUnmigratedStore is newStore without Migrate.
func newUnmigratedStore(t *testing.T) (*pgstore.Store, *pgxpool.Pool) {
	t.Helper()
	pool := pgtest.Pool(t)
	s, err := pgstore.New(pool, pgstore.WithSchema(pgtest.Schema(t, pool)))
	require.NoError(t, err)
	return s, pool
}

// widePool is a pool of its own with up to n connections, so that
// concurrent callers really run at once.
func widePool(t *testing.T, n int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.DSN(t))
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = ""
	cfg.MaxConns = n
	pool, err := pgxpool.NewWithConfig(testContext(t), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// assertFixtureApplied checks what outsideFixture leaves: every version
// recorded once, its two indexes there and valid, 0004's
// deliveries_ended_idx gone, and 0101's table made.
func assertFixtureApplied(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	rows := migrationRows(ctx, t, pool, schema)
	require.Len(t, rows, fixtureVersions(t))
	assert.Equal(t, map[string]bool{"deliveries_fixture_target_idx": true, "outbox_entries_fixture_idx": true},
		indexValidity(ctx, t, pool, schema, "deliveries_fixture_target_idx", "outbox_entries_fixture_idx", "deliveries_ended_idx"))
	var def string
	require.NoError(t, pool.QueryRow(ctx, "SELECT indexdef FROM pg_catalog.pg_indexes WHERE schemaname = $1 AND indexname = $2",
		schema, "deliveries_fixture_target_idx").Scan(&def))
	assert.NotContains(t, def, "UNIQUE", "the fixture's definition, not a leftover's")
	var after bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", pgx.Identifier{schema, "fixture_after"}.Sanitize()).Scan(&after))
	assert.True(t, after)
}

// indexValidity maps each of names that exists in schema to whether the
// index is valid.
func indexValidity(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string, names ...string) map[string]bool {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT c.relname, i.indisvalid FROM pg_catalog.pg_index i
		JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = ANY($2)`, schema, names)
	require.NoError(t, err)
	out := map[string]bool{}
	var (
		name  string
		valid bool
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &valid}, func() error {
		out[name] = valid
		return nil
	})
	require.NoError(t, err)
	return out
}
