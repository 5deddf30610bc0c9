package pgcluster_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
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

// TestKillTakesEveryBackend: a backend busy in a statement that never
// looks for its postmaster dies with it, as on a machine that lost power.
// PostgreSQL puts each backend in a session of its own, so a signal to
// the postmaster's process group alone would leave it running.
func TestKillTakesEveryBackend(t *testing.T) {
	t.Parallel()
	c := start(t, pgcluster.Options{Fast: true})
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var pid int
	if err := conn.QueryRow(ctx, "select pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	// Minutes of work with no wait in it, so no check of the postmaster.
	busy := make(chan error, 1)
	go func() {
		_, err := conn.Exec(ctx, "select count(*) from generate_series(1, 10000000000)")
		busy <- err
	}()
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	// A killed process is gone, or a zombie until its new parent reaps
	// it; either way it runs no more. Delivery of SIGKILL is
	// asynchronous, so this waits for it, up to a bound.
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("backend %d still runs after Kill", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := <-busy; err == nil {
		t.Error("the busy statement finished after Kill")
	}
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i >= 0 && !strings.HasPrefix(strings.TrimSpace(string(stat[i+1:])), "Z")
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

// TestReplicated: a commit the primary acknowledged is on the standby
// that replaces it, whether the primary was killed or shut down for a
// switchover, and the multi-host DSN finds whichever is primary.
func TestReplicated(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := pgcluster.StartReplicated(ctx, pgcluster.Options{Fast: true, Logf: t.Logf})
	if errors.Is(err, pgcluster.ErrNoServer) && !ci() {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Stop(); err != nil {
			t.Error(err)
		}
	})
	exec := func(sql string) {
		t.Helper()
		conn, err := pgx.Connect(ctx, r.DSN())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	exec("CREATE TABLE t (n int)")
	exec("INSERT INTO t VALUES (1)")
	first := r.Primary()
	// A session open at the kill is gone with the server.
	held, err := pgx.Connect(ctx, first.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close(ctx)
	if err := r.KillPrimary(); err != nil {
		t.Fatal(err)
	}
	if _, err := held.Exec(ctx, "INSERT INTO t VALUES (0)"); err == nil {
		t.Fatal("a session of the killed primary still takes writes")
	}
	if err := r.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if r.Primary() == first {
		t.Fatal("the killed primary is still the primary after Promote")
	}
	if got := queryInt(t, r.DSN(), "select count(*) from t"); got != 1 {
		t.Fatalf("the promoted standby holds %d rows, want the 1 acknowledged before the kill", got)
	}
	exec("INSERT INTO t VALUES (2)") // the new primary takes writes alone
	if err := r.Rejoin(ctx); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, r.Primary().DSN(), "select count(*) from pg_stat_replication where sync_state = 'sync'"); got != 1 {
		t.Fatalf("%d synchronous standbys after Rejoin, want 1", got)
	}
	exec("INSERT INTO t VALUES (3)")
	if err := r.ShutdownPrimary(); err != nil {
		t.Fatal(err)
	}
	if err := r.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if r.Primary() != first {
		t.Fatal("the switchover did not promote the first primary, rebuilt as standby")
	}
	if got := queryInt(t, r.DSN(), "select count(*) from t"); got != 3 {
		t.Fatalf("after the switchover the primary holds %d rows, want 3", got)
	}
	if err := r.Rejoin(ctx); err != nil {
		t.Fatal(err)
	}
}
