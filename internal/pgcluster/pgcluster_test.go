package pgcluster_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaseledger/ledger/internal/pgcluster"
)

// start starts a cluster or skips when the binaries are missing (never under
// CI, where a missing server is a broken build image).
func start(t *testing.T, opts pgcluster.Options) *pgcluster.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts.Logf = t.Logf
	c, err := pgcluster.Start(ctx, opts)
	if errors.Is(err, pgcluster.ErrNoServer) && !ci() {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// ci mirrors pgtest: under CI a missing server is an error, not a skip.
func ci() bool {
	v, _ := strconv.ParseBool(os.Getenv("CI"))
	return v
}

func queryInt(t *testing.T, dsn, sql string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, sql).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestStartStop(t *testing.T) {
	t.Parallel()
	c := start(t, pgcluster.Options{Fast: true, Settings: map[string]string{"work_mem": "8MB"}})
	if got := queryInt(t, c.DSN(), "select 1"); got != 1 {
		t.Fatalf("select 1 = %d", got)
	}
	if got := queryInt(t, c.DSN(), "select setting::int from pg_settings where name = 'max_connections'"); got != 200 {
		t.Errorf("max_connections = %d, want 200", got)
	}
	if got := queryInt(t, c.DSN(), "select (setting = 'off')::int from pg_settings where name = 'fsync'"); got != 1 {
		t.Error("fsync is not off in Fast mode")
	}
	if got := queryInt(t, c.DSN(), "select setting::int from pg_settings where name = 'work_mem'"); got != 8192 {
		t.Errorf("work_mem = %dkB, want 8192 (Settings not applied)", got)
	}
	if c.Port() == 0 || c.BinDir() == "" {
		t.Errorf("Port=%d BinDir=%q", c.Port(), c.BinDir())
	}
	dir := c.DataDir()
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("data dir %s still exists after Stop (err=%v)", dir, err)
	}
	if err := c.Restart(context.Background()); err == nil {
		t.Error("Restart after Stop succeeded")
	}
}

func TestCrashRestart(t *testing.T) {
	t.Parallel()
	c := start(t, pgcluster.Options{})
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.DSN())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "create table survivor (id int); insert into survivor values (42)"); err != nil {
		t.Fatal(err)
	}
	port := c.Port()
	if err := c.Crash(); err != nil {
		t.Fatal(err)
	}
	if err := conn.Ping(ctx); err == nil {
		t.Error("connection still works after Crash")
	}
	conn.Close(ctx)
	if err := c.Crash(); err == nil {
		t.Error("second Crash succeeded on a stopped server")
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if c.Port() != port {
		t.Errorf("port changed across restart: %d -> %d", port, c.Port())
	}
	if got := queryInt(t, c.DSN(), "select id from survivor"); got != 42 {
		t.Errorf("committed row lost across crash: got %d", got)
	}
	// Restart of a running server crashes it first.
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, c.DSN(), "select count(*) from survivor"); got != 1 {
		t.Errorf("count = %d after second restart", got)
	}
}

func TestFind(t *testing.T) {
	dir, err := pgcluster.Find()
	if errors.Is(err, pgcluster.ErrNoServer) && !ci() {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		if _, err := os.Stat(dir + "/" + name); err != nil {
			t.Error(err)
		}
	}
}
