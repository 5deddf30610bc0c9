package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/leaseledger/ledger/internal/pgtest"
	"github.com/leaseledger/ledger/pgstore"
)

// TestMain gives the package one throwaway PostgreSQL cluster (or the
// server named by LEDGER_TEST_DATABASE_URL), and fails the binary when a
// goroutine outlives the tests that passed: pools, listeners and group
// commit leaders must all be gone.
func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Harness(m)) }

// t0 is the fixed instant the tests compute their times from.
var t0 = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)

// newStore returns a migrated store in a fresh schema, on a pool of its
// own that is closed (and the schema dropped) when the test ends.
func newStore(t *testing.T, opts ...pgstore.Option) (*pgstore.Store, *pgxpool.Pool) {
	t.Helper()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool)
	s, err := pgstore.New(pool, append([]pgstore.Option{pgstore.WithSchema(schema)}, opts...)...)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(testContext(t)))
	return s, pool
}

// testContext bounds every database call of a test.
func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// fixedClock stamps the outbox methods that carry no now with at.
func fixedClock(at time.Time) pgstore.Option {
	return pgstore.WithClock(func() time.Time { return at })
}
