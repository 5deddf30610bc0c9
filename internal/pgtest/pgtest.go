// Package pgtest gives test binaries a PostgreSQL database: one throwaway
// cluster per test binary (or an external server named by
// LEDGER_TEST_DATABASE_URL), a pool per test, and a unique schema per test.
//
// Usage:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	func TestX(t *testing.T) {
//		pool := pgtest.Pool(t)
//		schema := pgtest.Schema(t, pool)
//		...
//	}
//
// Without server binaries, database tests are skipped, except under CI=true,
// where a missing database is a broken build and fails loudly instead.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"go.uber.org/goleak"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaseledger/ledger/internal/pgcluster"
)

// EnvDatabaseURL names the environment variable that points tests at an
// existing server instead of a throwaway cluster.
const EnvDatabaseURL = "LEDGER_TEST_DATABASE_URL"

// EnvDurable names the environment variable that, set to true, keeps the
// throwaway cluster durable: fsync, synchronous_commit and
// full_page_writes stay on, as on a production server. Tests do not need
// that and run faster without it; benchmarks do, since a commit that is
// never flushed costs almost nothing and would leave every figure that
// includes one (a lease, an acknowledge) lower than any real deployment
// sees. `make bench` sets it.
const EnvDurable = "LEDGER_TEST_DURABLE"

// EnvLong names the environment variable that, set to true, runs the
// long forms of the slowest tests (`make test/long`): `make test` runs
// shorter forms of the same checks, so that it stays fast.
const EnvLong = "LEDGER_TEST_LONG"

// Long reports whether EnvLong asks for the long forms of the tests.
func Long() bool {
	v, _ := strconv.ParseBool(os.Getenv(EnvLong))
	return v
}

// durable reports whether EnvDurable asks for a durable cluster.
func durable() bool {
	v, _ := strconv.ParseBool(os.Getenv(EnvDurable))
	return v
}

// alternative completes pgcluster.ErrNoServer's advice on what to install.
const alternative = "or set " + EnvDatabaseURL + " to an existing server"

// harness is the one database per test binary. It is package-level state,
// which this repository otherwise avoids, because TestMain cannot pass values
// to tests any other way; it lives only in this internal test helper.
var harness struct {
	mu         sync.Mutex
	mainCalled bool
	skip       string // non-empty: tests skip with this reason
	dsn        string // set once known (external URL or started cluster)
	startErr   error  // sticky: a failed start fails every test that asks
	cluster    *pgcluster.Cluster
	// The PgBouncer in front of the database, started on first use by
	// BouncerPool.
	bouncer    *pgcluster.Bouncer
	bouncerErr error
}

// ci reports whether we run under CI, where skipping database tests would
// silently hide a broken environment.
func ci() bool {
	v, _ := strconv.ParseBool(os.Getenv("CI"))
	return v
}

// Main runs the tests of a package and exits; call it from TestMain. The
// cluster is started lazily on the first DSN/Pool call, so test binaries
// (or -run selections, or -short runs) that never touch the database pay
// nothing; it is stopped after m.Run whatever the outcome. Goroutines
// left running after passing tests fail the run.
func Main(m *testing.M) { os.Exit(Run(m, true)) }

// Harness wraps m for a TestMain that checks for leaked goroutines itself,
// with goleak.VerifyTestMain, so that the check is in the package's own
// TestMain; its Run is Run(m, false):
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Harness(m)) }
func Harness(m *testing.M) interface{ Run() int } { return harnessM{m} }

type harnessM struct{ m *testing.M }

// Run runs the tests with the database and returns their exit code.
func (h harnessM) Run() int { return Run(h.m, false) }

// Run is Main without the exit: it returns the exit code for os.Exit.
// checkLeaks turns the check for goroutines left running on; a harness
// for other people's tests (pgstoretest) leaves it off, since their code
// may keep goroutines of its own.
func Run(m *testing.M, checkLeaks bool) int {
	harness.mu.Lock()
	harness.mainCalled = true
	if url := os.Getenv(EnvDatabaseURL); url != "" {
		harness.dsn = url
	} else if _, err := pgcluster.Find(); err != nil {
		if ci() {
			harness.mu.Unlock()
			fmt.Fprintf(os.Stderr, "pgtest: CI=true requires a database: %v; %s\n", err, alternative)
			return 1
		}
		harness.skip = fmt.Sprintf("no database: %v; %s", err, alternative)
	}
	harness.mu.Unlock()

	code := m.Run()

	harness.mu.Lock()
	if b := harness.bouncer; b != nil {
		if err := b.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: stopping pgbouncer: %v\n", err)
		}
	}
	if c := harness.cluster; c != nil {
		// A stop problem is reported but does not change the tests' verdict:
		// the directory is swept by the next run anyway.
		if err := c.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: stopping cluster: %v\n", err)
		}
	}
	harness.mu.Unlock()
	// Every package that talks to PostgreSQL also starts goroutines (pools,
	// listeners, dispatch loops); one left running after the tests is a
	// leak in the code or a test that forgot its cleanup.
	if code == 0 && checkLeaks {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: goroutines left running after the tests: %v\n", err)
			code = 1
		}
	}
	return code
}

// dsn returns the database URL, starting the cluster on first use.
func dsn() (url, skip string, err error) {
	harness.mu.Lock()
	defer harness.mu.Unlock()
	switch {
	case !harness.mainCalled:
		return "", "", errors.New("pgtest: add `func TestMain(m *testing.M) { pgtest.Main(m) }` to this package")
	case harness.skip != "":
		return "", harness.skip, nil
	case harness.dsn != "" || harness.startErr != nil:
		return harness.dsn, "", harness.startErr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := pgcluster.Options{Fast: !durable()}
	if testing.Verbose() {
		opts.Logf = func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, format+"\n", args...)
		}
	}
	c, err := pgcluster.Start(ctx, opts)
	if err != nil {
		harness.startErr = fmt.Errorf("pgtest: starting PostgreSQL: %w", err)
		return "", "", harness.startErr
	}
	harness.cluster = c
	harness.dsn = c.DSN()
	return harness.dsn, "", nil
}

// URL returns the connection URL of the test database, starting the
// cluster on first use, for code that has no testing.TB (Example
// functions). Where a test would be skipped it returns an error.
func URL() (string, error) {
	url, skip, err := dsn()
	if err == nil && skip != "" {
		err = errors.New("pgtest: " + skip)
	}
	return url, err
}

// DSN returns the connection URL of the test database. It skips the test
// when no database is available, except under CI=true, where it fails it.
func DSN(t testing.TB) string {
	t.Helper()
	url, skip, err := dsn()
	if err != nil {
		t.Fatal(err)
	}
	if skip != "" {
		if ci() {
			t.Fatal("pgtest: CI=true but " + skip)
		}
		t.Skip("pgtest: " + skip)
	}
	return url
}

// Pool returns a connection pool for this test, closed when the test ends.
// Its connections have an empty search_path, so any query that forgets to
// qualify a table with its schema fails instead of silently hitting public.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	empty := ""
	return connect(t, DSN(t), &empty)
}

// connect opens a pool on url, closed when the test ends, whose
// connections have *searchPath as their search_path; nil leaves the
// server's (a bouncer cannot pass one on).
func connect(t testing.TB, url string, searchPath *string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("pgtest: parse DSN: %v", err)
	}
	if searchPath != nil {
		cfg.ConnConfig.RuntimeParams["search_path"] = *searchPath
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: new pool: %v", err)
	}
	t.Cleanup(pool.Close)
	// Fail here, with a clear message, rather than in the first query.
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("pgtest: ping: %v", err)
	}
	return pool
}

// SchemaPool returns a fresh, unique schema name for this test and a
// pool, closed when the test ends, whose connections have search_path
// set to that schema, so that tables made without a schema name land in
// it. Like Schema it does not create the schema, and drops it with
// everything in it when the test ends.
func SchemaPool(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	url := DSN(t)
	name := schemaName(t)
	path := pgx.Identifier{name}.Sanitize()
	pool := connect(t, url, &path)
	dropAtCleanup(t, pool, name)
	return pool, name
}

// Schema returns a fresh, unique schema name for this test. It does not
// create the schema (the store's migration does); it registers a cleanup
// that drops it with everything in it. Register it after Pool so that the
// cleanup (cleanups run last-in, first-out) runs while the pool is open.
func Schema(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	name := schemaName(t)
	dropAtCleanup(t, pool, name)
	return name
}

// schemaName returns a fresh, unique schema name.
func schemaName(t testing.TB) string {
	t.Helper()
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return "t_" + hex.EncodeToString(b[:])
}

// dropAtCleanup drops schema name, with everything in it, through pool
// when the test ends.
func dropAtCleanup(t testing.TB, pool *pgxpool.Pool, name string) {
	t.Helper()
	t.Cleanup(func() {
		// Not t.Context(): it is already canceled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("pgtest: drop schema %s: %v", name, err)
		}
	})
}

// BouncerPool is Pool through a PgBouncer in transaction pooling mode,
// started in front of the test database on first use and stopped after
// the tests. Without a pgbouncer binary the test is skipped, except under
// CI=true, where it fails.
func BouncerPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	upstream := DSN(t)
	harness.mu.Lock()
	if harness.bouncer == nil && harness.bouncerErr == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		harness.bouncer, harness.bouncerErr = pgcluster.StartBouncer(ctx, upstream, 20)
		cancel()
	}
	b, err := harness.bouncer, harness.bouncerErr
	harness.mu.Unlock()
	if errors.Is(err, pgcluster.ErrNoBouncer) && !ci() {
		t.Skip("pgtest: " + err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	return connect(t, b.DSN(), nil)
}
