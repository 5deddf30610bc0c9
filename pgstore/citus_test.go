package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/ledgertest"
)

// envCitusURL names the environment variable that points the Citus tests
// at the coordinator of a Citus cluster (`make test/citus`; .ci/citus-cluster
// starts one on loopback). Without it they skip, also under CI=true: the
// default `make test` does not promise Citus, and make test/citus itself
// refuses to run without the URL.
const envCitusURL = "LEDGER_CITUS_URL"

// citusT0 is the fixed instant the Citus tests enqueue at.
var citusT0 = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)

// citusPool returns a pool on the coordinator named by envCitusURL, or
// skips the test. Its sessions turn schema-based sharding on, so that
// the schema Migrate creates is a distributed one, and have an empty
// search_path, so that a statement that does not name the store's
// schema fails.
func citusPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	url := os.Getenv(envCitusURL)
	if url == "" {
		t.Skip(envCitusURL + " is not set (make test/citus runs these tests)")
	}
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["citus.enable_schema_based_sharding"] = "on"
	cfg.ConnConfig.RuntimeParams["search_path"] = ""
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var version string
	require.NoError(t, pool.QueryRow(ctx, "SELECT citus_version()").Scan(&version),
		"%s must name the coordinator of a Citus cluster", envCitusURL)
	return pool
}

// newCitusStore returns a store migrated in a fresh distributed schema of
// the Citus cluster, dropped when the test ends. It fails the test if
// Citus did not make the schema a distributed one with the store's
// tables in it, since the suite would then prove nothing about Citus.
func newCitusStore(t *testing.T, opts ...Option) (*Store, *pgxpool.Pool) {
	t.Helper()
	pool := citusPool(t)
	var b [8]byte
	_, _ = rand.Read(b[:])
	schema := "t_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	s, err := New(pool, append([]Option{WithSchema(schema)}, opts...)...)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	require.NoError(t, s.Migrate(ctx))
	var tables int
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT count(*) FROM pg_catalog.pg_dist_schema s
		JOIN pg_catalog.pg_dist_partition p ON p.colocationid = s.colocationid
		WHERE s.schemaid = $1::regnamespace`, pgx.Identifier{schema}.Sanitize()).Scan(&tables))
	require.Equal(t, 9, tables, "the store's tables of a distributed schema, schema_migrations included")
	return s, pool
}

// TestCitusConformance runs the conformance suite on stores in
// distributed schemas of a Citus cluster (schema-based sharding).
func TestCitusConformance(t *testing.T) {
	t.Run("Ledger", func(t *testing.T) {
		ledgertest.TestLedger(t, func(t *testing.T) ledger.Ledger {
			s, _ := newCitusStore(t)
			return s
		})
	})
	t.Run("ClaimStore", func(t *testing.T) {
		ledgertest.TestClaimStore(t, func(t *testing.T) ledger.ClaimStore {
			s, _ := newCitusStore(t)
			return s.Outbox()
		})
	})
	t.Run("QueueBounds", func(t *testing.T) {
		ledgertest.TestQueueBounds(t, func(t *testing.T, b ledger.QueueBounds) ledger.Ledger {
			opts := []Option{WithQueueBound(b.Default)}
			for target, n := range b.Targets {
				opts = append(opts, WithTargetQueueBound(target, n))
			}
			s, _ := newCitusStore(t, opts...)
			return s
		})
	})
}

// TestCitusMigration checks what Migrate made on Citus: the Citus form
// of 0002 (enqueue_seq a sequence default, not an identity column), that
// of 0014 (on the shards too, where ANALYZE samples the rows), and a
// second Migrate that finds nothing to do.
func TestCitusMigration(t *testing.T) {
	s, pool := newCitusStore(t)
	ctx := t.Context()
	var def, identity string
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT coalesce(pg_catalog.pg_get_expr(d.adbin, d.adrelid), ''), a.attidentity::text
		FROM pg_catalog.pg_attribute a
		LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE a.attrelid = ($1 || '.outbox_entries')::regclass AND a.attname = 'enqueue_seq'`,
		pgx.Identifier{s.cfg.schema}.Sanitize()).Scan(&def, &identity))
	assert.Empty(t, identity)
	assert.Contains(t, def, "nextval(")
	assert.Contains(t, def, "outbox_entries_enqueue_seq")
	for _, table := range []string{"deliveries", "outbox_entries"} {
		rows, err := pool.Query(ctx, `SELECT success, result FROM pg_catalog.run_command_on_placements($1,
			$$SELECT string_agg(attname || ' ' || attstattarget, ', ' ORDER BY attname) FROM pg_catalog.pg_attribute
			WHERE attrelid = '%s'::regclass AND attname IN ('history', 'payload', 'metadata')$$)`,
			pgx.Identifier{s.cfg.schema, table}.Sanitize())
		require.NoError(t, err)
		placements := 0
		for rows.Next() {
			var ok bool
			var result string
			require.NoError(t, rows.Scan(&ok, &result))
			require.True(t, ok, result)
			assert.Equal(t, "history 0, metadata 0, payload 0", result, table)
			placements++
		}
		require.NoError(t, rows.Err())
		assert.Positive(t, placements, table)
	}
	require.NoError(t, s.Migrate(ctx))
}

// TestCitusLostCopy checks the error Citus really raises for a COPY that
// repeats a stored primary key: copyFailed must take it for a lost race. It
// copies a stored row back into its table as it was read.
func TestCitusLostCopy(t *testing.T) {
	s, pool := newCitusStore(t)
	ctx := t.Context()
	_, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: "d1", Target: "t1", Payload: []byte("p")}, citusT0)
	require.NoError(t, err)
	table := pgx.Identifier{s.cfg.schema, "deliveries"}
	rows, err := pool.Query(ctx, "SELECT * FROM "+table.Sanitize())
	require.NoError(t, err)
	var columns []string
	for _, f := range rows.FieldDescriptions() {
		columns = append(columns, f.Name)
	}
	var copied [][]any
	for rows.Next() {
		vals, err := rows.Values()
		require.NoError(t, err)
		copied = append(copied, vals)
	}
	require.NoError(t, rows.Err())
	require.Len(t, copied, 1)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	_, err = tx.CopyFrom(ctx, table, columns, pgx.CopyFromRows(copied))
	require.Error(t, err)
	err = copyFailed(err, table)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	assert.Equal(t, sqlstateInternalError, pgErr.Code, "Citus passes a worker's COPY error on as XX000: %v", err)
	assert.True(t, lostRace(err), "%v", err)
}

// TestCitusEnqueueRace enqueues the same new IDs from several goroutines
// at once, again and again: the losers' copies fail on a worker, and
// each call must still answer (Applied once, Repeated for the others)
// instead of failing.
func TestCitusEnqueueRace(t *testing.T) {
	s, _ := newCitusStore(t)
	ctx := t.Context()
	const callers, rounds = 6, 15
	var offered, repeated, failed atomic.Int64
	var errs sync.Map
	for r := range rounds {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for c := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				res, err := s.EnqueueBatch(ctx, []ledger.EnqueueRequest{
					{ID: ledger.DeliveryID(fmt.Sprintf("r%d-a", r)), Target: "t1", Payload: []byte("p")},
					{ID: ledger.DeliveryID(fmt.Sprintf("r%d-b", r)), Target: "t2", Payload: []byte("p")},
				}, citusT0)
				if err != nil {
					failed.Add(1)
					errs.Store(c, err)
					return
				}
				for _, x := range res {
					switch x.Outcome {
					case ledger.OutcomeApplied:
						offered.Add(1)
					case ledger.OutcomeRepeated:
						repeated.Add(1)
					}
				}
			}()
		}
		close(start)
		wg.Wait()
	}
	errs.Range(func(_, err any) bool {
		t.Errorf("enqueue failed: %v", err)
		return false
	})
	assert.Zero(t, failed.Load())
	assert.Equal(t, int64(2*rounds), offered.Load())
	assert.Equal(t, int64(2*rounds*(callers-1)), repeated.Load())
}

// TestCitusLostCopyMatch pins what copyFailed takes for a COPY that lost an
// ID on Citus: XX000 with the duplicate-key message of the table's
// primary key, on the table or on one of its shards, and nothing else.
func TestCitusLostCopyMatch(t *testing.T) {
	dup := func(code, constraint string) error {
		return fmt.Errorf("enqueue: %w", &pgconn.PgError{Code: code,
			Message: `duplicate key value violates unique constraint "` + constraint + `"`})
	}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{dup("XX000", "deliveries_pkey_102008"), true},
		{dup("XX000", "deliveries_pkey"), true},
		{dup("23505", "deliveries_pkey_102008"), false}, // lostRace takes 23505 itself
		{dup("XX000", "outbox_entries_pkey_102008"), false},
		{dup("XX000", "deliveries_pkey_10a"), false},
		{dup("XX000", "deliveries_pkey_"), false},
		{dup("XX000", "deliveries_pkeyx"), false},
		{dup("XX000", "deliveries_history_pkey_1"), false},
		{&pgconn.PgError{Code: "XX000", Message: "could not find shard placement"}, false},
		{&pgconn.PgError{Code: "XX000", Message: `duplicate key value violates unique constraint "deliveries_pkey_1" (x)`}, false},
		{context.Canceled, false},
	} {
		assert.Equal(t, c.want, citusLostCopy(c.err, "deliveries"), "%v", c.err)
	}
	assert.True(t, lostRace(fmt.Errorf("enqueue: %w", &lostCopyError{err: dup("XX000", "deliveries_pkey_1")})))
	assert.False(t, lostRace(dup("XX000", "deliveries_pkey_1")), "only copyFailed, where a COPY raised it, turns XX000 into a lost race")
}

// TestCitusForms checks the Citus forms of migrations: each stands for a
// migration of the same version, name and kind, and its statements are
// those of the plain form but for the ones Citus needs in another form.
func TestCitusForms(t *testing.T) {
	ms, err := loadMigrations()
	require.NoError(t, err)
	forms, err := citusForms(ms)
	require.NoError(t, err)
	assert.Len(t, forms, 3)
	for _, v := range []int{2, 5, 14} {
		assert.Contains(t, forms, v)
	}
	for _, f := range forms {
		stmts, err := splitStatements(f.sql)
		require.NoError(t, err, f.id())
		for _, st := range stmts {
			assert.NotContains(t, st, "AS IDENTITY", f.id())
		}
	}

	_, err = citusForms([]migration{{version: 2, name: "other"}, {version: 5, name: "history_and_counts"}})
	require.Error(t, err, "a form whose name is not its version's")
	_, err = citusForms(ms[:1])
	require.Error(t, err, "a form of no migration")
}

// NewCitusStore is newCitusStore for the external tests.
var NewCitusStore = newCitusStore
