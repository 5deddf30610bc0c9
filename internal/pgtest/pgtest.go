// Package pgtest gives test binaries a PostgreSQL database: one throwaway
// cluster per test binary (or an external server named by
// LEDGER_TEST_DATABASE_URL), a pool per test, and a unique schema per test.
//
// Usage:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// (or, to check for leaked goroutines in the package's own TestMain,
// goleak.VerifyTestMain(pgtest.Harness(m)), which is what Main does)
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
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

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

// Main runs the tests of a package and exits; call it from TestMain. It
// is Harness(m) under goleak.VerifyTestMain: after tests that passed, a
// goroutine still running (a pool, a listener or a loop some test or the
// code under test forgot to stop) fails the binary.
func Main(m *testing.M) { goleak.VerifyTestMain(Harness(m)) }

// Harness wraps m so that its Run gives the tests the database: the
// cluster is started lazily on the first DSN or Pool call, so test
// binaries (or -run selections, or -short runs) that never touch the
// database pay nothing, and it is stopped after the tests whatever their
// outcome, before Run returns. Packages whose TestMain checks for leaked
// goroutines itself pass it to goleak.VerifyTestMain:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Harness(m)) }
func Harness(m *testing.M) interface{ Run() int } { return harnessM{m} }

type harnessM struct{ m *testing.M }

// Run runs the tests with the database and returns their exit code.
func (h harnessM) Run() int {
	harness.mu.Lock()
	harness.mainCalled = true
	if url := os.Getenv(EnvDatabaseURL); url != "" {
		harness.dsn = url
	} else if _, err := pgcluster.Find(); err != nil {
		if ci() {
			fmt.Fprintf(os.Stderr, "pgtest: CI=true requires a database: %v; %s\n", err, alternative)
			harness.mu.Unlock()
			return 1
		}
		harness.skip = fmt.Sprintf("no database: %v; %s", err, alternative)
	}
	harness.mu.Unlock()

	code := h.m.Run()

	harness.mu.Lock()
	defer harness.mu.Unlock()
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
	return connect(t, DSN(t), true)
}

// connect opens a pool on url, closed when the test ends. emptyPath sets
// an empty search_path on its connections; a bouncer cannot pass one on.
func connect(t testing.TB, url string, emptyPath bool) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("pgtest: parse DSN: %v", err)
	}
	if emptyPath {
		cfg.ConnConfig.RuntimeParams["search_path"] = ""
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

// Schema returns a fresh, unique schema name for this test. It does not
// create the schema (the store's migration does); it registers a cleanup
// that drops it with everything in it. Register it after Pool so that the
// cleanup (cleanups run last-in, first-out) runs while the pool is open.
func Schema(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	name := "t_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		// Not t.Context(): it is already canceled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("pgtest: drop schema %s: %v", name, err)
		}
	})
	return name
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
	return connect(t, b.DSN(), false)
}
