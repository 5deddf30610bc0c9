package pgstoretest_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/internal/pgtest"
	"github.com/leaseledger/ledger/pgstore"
	"github.com/leaseledger/ledger/pgstore/pgstoretest"
)

func TestMain(m *testing.M) { pgstoretest.Main(m) }

var t0 = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)

// A test's own tables, made without a schema name, live in its schema
// beside the store's, and one transaction holds both.
func TestNewStoreAndOwnTables(t *testing.T) {
	store, pool := pgstoretest.New(t)
	ctx := t.Context()
	_, err := pool.Exec(ctx, "CREATE TABLE orders (id text PRIMARY KEY)")
	require.NoError(t, err)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "INSERT INTO orders (id) VALUES ('order-1')")
	require.NoError(t, err)
	res, err := store.WithTx(tx).Outbox().Enqueue(ctx, ledger.Envelope{Provider: "mail", Kind: "receipt", IdempotencyKey: "order-1"})
	require.NoError(t, err)
	require.True(t, res.Applied())
	require.NoError(t, tx.Commit(ctx))

	var where []string
	rows, err := pool.Query(ctx, "SELECT schemaname::text FROM pg_catalog.pg_tables WHERE tablename = 'orders'")
	require.NoError(t, err)
	where, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	assert.Equal(t, []string{store.Schema()}, where, "the test's table is in its schema only")
	e, err := store.Outbox().FindByID(ctx, res.Entry.ID)
	require.NoError(t, err)
	assert.Equal(t, ledger.OutboxStatusPending, e.Status)

	status, err := store.MigrationStatus(ctx)
	require.NoError(t, err)
	for _, v := range status {
		assert.True(t, v.Applied(), "version %d", v.Version)
	}
}

func TestSchemaDroppedWhenTheTestEnds(t *testing.T) {
	var schema string
	t.Run("Inner", func(t *testing.T) {
		store, _ := pgstoretest.New(t, pgstore.WithoutHistory())
		schema = store.Schema()
	})
	require.NotEmpty(t, schema)
	var exists bool
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.NoError(t, pgtest.Pool(t).QueryRow(ctx,
		"SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)", schema).Scan(&exists))
	assert.False(t, exists)
}

// Parallel tests do not see each other's records.
func TestParallelTestsAreApart(t *testing.T) {
	for _, name := range []string{"A", "B", "C"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store, _ := pgstoretest.New(t)
			res, err := store.Enqueue(t.Context(), ledger.EnqueueRequest{ID: "same-id", Target: ledger.Target("host-" + name)}, t0)
			require.NoError(t, err)
			assert.Equal(t, ledger.OutcomeApplied, res.Outcome, "a fresh schema has no same-id yet")
		})
	}
}
