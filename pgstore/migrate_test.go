package pgstore_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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

var update = flag.Bool("update", false, "rewrite testdata/schema.golden.sql from the migrated schema")

func TestMigrate(t *testing.T) {
	t.Run("TwiceIsNoOp", func(t *testing.T) {
		s, pool := newStore(t)
		ctx := testContext(t)
		before := dumpSchema(ctx, t, pool, s.Schema())
		versions := migrationRows(ctx, t, pool, s.Schema())
		require.NoError(t, s.Migrate(ctx))
		assert.Equal(t, before, dumpSchema(ctx, t, pool, s.Schema()))
		assert.Equal(t, versions, migrationRows(ctx, t, pool, s.Schema()), "a second Migrate must record nothing")
	})

	t.Run("ConcurrentOnFreshSchema", func(t *testing.T) {
		pool := pgtest.Pool(t)
		schema := pgtest.Schema(t, pool)
		// A connection per migrator, so that the eight really run at
		// once and meet on the advisory lock.
		wide := widePool(t, 8)

		ctx := testContext(t)
		errs := make([]error, 8)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() {
				s, err := pgstore.New(wide, pgstore.WithSchema(schema))
				if err != nil {
					errs[i] = err
					return
				}
				errs[i] = s.Migrate(ctx)
			})
		}
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "migrator %d", i)
		}
		rows := migrationRows(ctx, t, pool, schema)
		require.Len(t, rows, len(migrationFiles(t)), "each migration recorded exactly once")
	})

	t.Run("InvalidSchemaNames", func(t *testing.T) {
		pool := pgtest.Pool(t)
		for _, name := range []string{
			`x"; drop table y; --`, "", strings.Repeat("a", 64), "1abc", "a-b", "a.b", "sch\x00ema", "é",
			// The system's own schemas, which Migrate must never write
			// into (information_schema) or cannot create (pg_...).
			"pg_catalog", "pg_toast", "pg_temp", "pg_ledger", "PG_Catalog", "information_schema", "Information_Schema",
		} {
			s, err := pgstore.New(pool, pgstore.WithSchema(name))
			require.ErrorIs(t, err, ledger.ErrInvalid, "schema %q", name)
			var inv *ledger.InvalidError
			require.ErrorAs(t, err, &inv)
			require.Equal(t, "schema", inv.Field)
			require.Nil(t, s)
		}
		for _, name := range []string{"public", "my_pg_ledger", "pg", "pgledger", "information_schema2"} {
			_, err := pgstore.New(pool, pgstore.WithSchema(name))
			require.NoError(t, err, "schema %q", name)
		}
		s, err := pgstore.New(pool, pgstore.WithSchema(strings.Repeat("a", 63)))
		require.NoError(t, err)
		require.Equal(t, strings.Repeat("a", 63), s.Schema())
	})

	t.Run("InvalidOptions", func(t *testing.T) {
		pool := pgtest.Pool(t)
		for name, opt := range map[string]pgstore.Option{
			"policy":      pgstore.WithDefaultPolicy(ledger.Policy{MaxAttempts: -1}),
			"max payload": pgstore.WithMaxPayload(-1),
			"clock":       pgstore.WithClock(nil),
			"max retries": pgstore.WithMaxRetries(-1),
		} {
			_, err := pgstore.New(pool, opt)
			require.ErrorIs(t, err, ledger.ErrInvalid, name)
		}
		_, err := pgstore.New(nil)
		require.ErrorIs(t, err, ledger.ErrInvalid)
	})

	// 0002_enqueue_order numbers the entries already stored in the order
	// the store handed them out before (created_at, then id), so that an
	// upgrade does not reorder what is waiting, and numbers new entries
	// after them.
	t.Run("EnqueueOrderUpgradeKeepsWaitingOrder", func(t *testing.T) {
		pool := pgtest.Pool(t)
		schema := pgtest.Schema(t, pool)
		ctx := testContext(t)
		applyFirstMigration(ctx, t, pool, schema)
		at := time.Date(2031, time.March, 4, 5, 6, 7, 0, time.UTC)
		// The entries a store of 0001's time enqueued, as it wrote them.
		var old []ledger.OutboxEntryID
		for i := range 6 {
			key := fmt.Sprintf("old-%d", i)
			id := ledger.OutboxEntryIDFor(key)
			_, err := pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "outbox_entries"}.Sanitize()+`
				(id, provider, kind, idempotency_key, status, attempts, dead_letter_reason, claim_seq, created_at, updated_at, version)
				VALUES ($1, 'p', 'k', $2, 'pending', 0, '', 0, $3, $3, 1)`, string(id), key, at)
			require.NoError(t, err)
			old = append(old, id)
		}
		slices.Sort(old) // the order before 0002: created_at (shared), then id
		s, err := pgstore.New(pool, pgstore.WithSchema(schema), fixedClock(at), pgstore.WithoutHistory())
		require.NoError(t, err)
		o := s.Outbox()

		require.NoError(t, s.Migrate(ctx))
		var envs []ledger.Envelope
		var fresh []ledger.OutboxEntryID
		for i := range 6 {
			key := fmt.Sprintf("new-%d", i)
			envs = append(envs, ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: key})
			fresh = append(fresh, ledger.OutboxEntryIDFor(key))
		}
		require.False(t, slices.IsSorted(fresh), "the new keys must not already be in ID order")
		_, err = o.EnqueueBatch(ctx, envs)
		require.NoError(t, err)

		got, err := o.FindPending(ctx, ledger.MaxLimit)
		require.NoError(t, err)
		ids := make([]ledger.OutboxEntryID, len(got))
		for i, e := range got {
			require.True(t, at.Equal(e.CreatedAt), "one instant for all")
			ids[i] = e.ID
		}
		require.Equal(t, append(old, fresh...), ids, "old entries in their old order, then the batch in enqueue order")
	})

	t.Run("Golden", func(t *testing.T) {
		s, pool := newStore(t)
		got := dumpSchema(testContext(t), t, pool, s.Schema())
		path := filepath.Join("testdata", "schema.golden.sql")
		if *update {
			require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		}
		want, err := os.ReadFile(path)
		require.NoError(t, err, "run go test ./pgstore -run TestMigrate/Golden -update to create it")
		require.Equal(t, string(want), got, "the migrated schema changed; review and rerun with -update")
	})
}

// applyFirstMigration brings schema to version 1 only, as a build from
// before 0002 would have left it, by running migrations/0001_init.sql the
// way Migrate does.
func applyFirstMigration(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	body, err := os.ReadFile(filepath.Join("migrations", "0001_init.sql"))
	require.NoError(t, err)
	quoted := pgx.Identifier{schema}.Sanitize()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	_, err = tx.Exec(ctx, "CREATE SCHEMA "+quoted)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, strings.ReplaceAll(string(body), "{schema}", quoted))
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "INSERT INTO "+quoted+".schema_migrations (version, name, applied_at) VALUES (1, 'init', now())")
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
}

// migrationFiles lists the embedded migrations as files on disk.
func migrationFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("migrations", "*.sql"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	return files
}

func migrationRows(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	rows, err := pool.Query(ctx, fmt.Sprintf(`SELECT version::text || ' ' || name || ' ' || applied_at::text FROM %q.schema_migrations ORDER BY version`, schema))
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

// dumpSchema describes schema's tables, columns, constraints and indexes
// from the catalog, in a stable order, with the schema's name replaced by
// {schema}.
func dumpSchema(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("-- Generated by TestMigrate/Golden from the migrated schema; do not edit.\n")
	section := func(title, query string) {
		fmt.Fprintf(&b, "\n-- %s\n", title)
		rows, err := pool.Query(ctx, query, schema)
		require.NoError(t, err)
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			line = strings.ReplaceAll(line, `"`+schema+`"`, "{schema}")
			b.WriteString(strings.ReplaceAll(line, schema+".", "{schema}."))
			b.WriteString("\n")
		}
		require.NoError(t, rows.Err())
	}
	section("tables", `
		SELECT c.relname || coalesce(' WITH (' || array_to_string(c.reloptions, ', ') || ')', '')
		FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind = 'r' ORDER BY c.relname`)
	section("columns", `
		SELECT c.relname || '.' || a.attname || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod)
			|| CASE WHEN a.attcollation <> 0 AND a.attcollation <> t.typcollation
				THEN ' COLLATE ' || quote_ident(co.collname) ELSE '' END
			|| CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END
			|| coalesce(' DEFAULT ' || pg_catalog.pg_get_expr(d.adbin, d.adrelid), '')
			|| CASE a.attidentity WHEN 'a' THEN ' GENERATED ALWAYS AS IDENTITY'
				WHEN 'd' THEN ' GENERATED BY DEFAULT AS IDENTITY' ELSE '' END
			|| CASE WHEN a.attidentity <> '' THEN ' SEQUENCE ' || pg_catalog.pg_get_serial_sequence(
				quote_ident(n.nspname) || '.' || quote_ident(c.relname), a.attname) ELSE '' END
			-- A target set by a migration (-1, or NULL from PostgreSQL 17,
			-- is the default).
			|| CASE WHEN a.attstattarget >= 0 THEN ' STATISTICS ' || a.attstattarget ELSE '' END
		FROM pg_catalog.pg_attribute a
		JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
		LEFT JOIN pg_catalog.pg_collation co ON co.oid = a.attcollation
		LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE n.nspname = $1 AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY c.relname, a.attnum`)
	// PostgreSQL 18 records NOT NULL as constraints too (contype 'n'),
	// which older versions keep only in pg_attribute: the columns section
	// shows them on every version, so they are left out here.
	section("constraints", `
		SELECT c.relname || ' ' || con.conname || ' ' || pg_catalog.pg_get_constraintdef(con.oid)
		FROM pg_catalog.pg_constraint con
		JOIN pg_catalog.pg_class c ON c.oid = con.conrelid
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND con.contype <> 'n' ORDER BY c.relname, con.conname`)
	section("indexes", `
		SELECT indexdef FROM pg_catalog.pg_indexes WHERE schemaname = $1 ORDER BY tablename, indexname`)
	return b.String()
}
