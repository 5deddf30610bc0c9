// Package pgstoretest runs your tests against a real pgstore: each test
// gets a fresh schema, migrated, on its own pool, and the schema is
// dropped with everything in it when the test ends.
//
// The database is the server named by LEDGER_TEST_DATABASE_URL when it is
// set; otherwise one throwaway PostgreSQL cluster per test binary, started
// on a free loopback port from the local server binaries (initdb,
// pg_ctl, postgres: on PATH, under /usr/lib/postgresql/*/bin or
// /usr/pgsql-*/bin) on first use, with durability off for speed, and
// removed after the tests. Without either, the tests that ask for a store
// are skipped, except when the environment has CI=true, where they fail.
//
// Call Main from the package's TestMain, then New in each test:
//
//	func TestMain(m *testing.M) { pgstoretest.Main(m) }
//
//	func TestCheckout(t *testing.T) {
//		store, pool := pgstoretest.New(t)
//		// ... your code against store.Outbox(), and your own tables on pool ...
//	}
//
// Tests that call New may run in parallel: each has its own schema and
// pool.
package pgstoretest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaseledger/ledger/internal/pgtest"
	"github.com/leaseledger/ledger/pgstore"
)

// EnvDatabaseURL names the environment variable that points the tests at
// an existing server instead of a throwaway cluster. The role needs the
// right to create schemas in its database.
const EnvDatabaseURL = pgtest.EnvDatabaseURL

// Main runs the package's tests and exits; call it from TestMain. It
// stops the throwaway cluster, if it started one, after the tests,
// whatever their outcome.
func Main(m *testing.M) { os.Exit(pgtest.Run(m, false)) }

// New returns a store on a fresh schema of the test database, migrated,
// and the pool it runs on. The pool's connections have search_path set
// to that schema, so the tables your test makes without a schema name
// live beside the store's and go with them: when the test ends the schema
// is dropped and the pool closed. opts are passed to pgstore.New after
// the schema's own WithSchema, which they must not replace. New skips the
// test when there is no database (fails it under CI=true) and fails it
// when the store cannot be made or migrated.
func New(t testing.TB, opts ...pgstore.Option) (*pgstore.Store, *pgxpool.Pool) {
	t.Helper()
	pool, schema := pgtest.SchemaPool(t)
	store, err := pgstore.New(pool, append([]pgstore.Option{pgstore.WithSchema(schema)}, opts...)...)
	if err != nil {
		t.Fatalf("pgstoretest: %v", err)
	}
	if store.Schema() != schema {
		t.Fatalf("pgstoretest: the options replaced the test's schema %s with %s", schema, store.Schema())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := store.Migrate(ctx); err != nil {
		t.Fatalf("pgstoretest: %v", err)
	}
	return store, pool
}
