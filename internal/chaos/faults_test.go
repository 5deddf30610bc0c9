package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaseledger/ledger/internal/pgcluster"
	"github.com/leaseledger/ledger/pgstore"
)

// This file injects the faults that come from outside a worker: killed
// connections, a crashed server, and a worker process killed with SIGKILL.
// The faults a worker makes itself (crashes, skew, cancelled contexts,
// tiny statement timeouts) are in workers_test.go.

// faultKind names a fault, for the counts a run logs.
type faultKind string

const (
	faultKillBackend      faultKind = "kill_backend"       // pg_terminate_backend of a worker's connections
	faultKillBackendHit   faultKind = "killed_backend"     // a connection that was killed
	faultKillBackendError faultKind = "kill_backend_error" // the admin connection failed
	faultCrashHolder      faultKind = "crash_holder"       // a worker forgot its leases and came back
	faultSkew             faultKind = "skewed_clock"       // an incarnation with a skewed clock
	faultCancel           faultKind = "cancel_mid_call"    // a call whose context was cancelled
	faultTinyTimeout      faultKind = "statement_timeout"  // a call on a connection with statement_timeout=1ms
	faultSigkill          faultKind = "sigkill_process"    // the child process killed mid-call
	faultServerCrash      faultKind = "server_crash"       // immediate shutdown and restart of PostgreSQL
)

// faultCounts counts the faults injected in a run.
type faultCounts struct {
	mu sync.Mutex
	n  map[faultKind]int
}

func newFaultCounts() *faultCounts { return &faultCounts{n: map[faultKind]int{}} }

func (f *faultCounts) add(k faultKind) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n[k]++
}

func (f *faultCounts) get(k faultKind) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n[k]
}

func (f *faultCounts) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := make([]string, 0, len(f.n))
	for k := range f.n {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	s := ""
	for _, k := range keys {
		s += fmt.Sprintf(" %s=%d", k, f.n[faultKind(k)])
	}
	return s
}

// newPool returns a pool on dsn whose connections carry application_name
// app, so that a fault can find and kill exactly them, and, when tiny is
// set, a statement_timeout of 1ms.
func newPool(ctx context.Context, dsn, app string, tiny bool) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = ""
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	if tiny {
		cfg.ConnConfig.RuntimeParams["statement_timeout"] = "1ms"
	}
	cfg.MaxConns = 2
	return pgxpool.NewWithConfig(ctx, cfg)
}

// pgBackend returns both stores of schema on a pool of their own. stamp
// is the clock of the outbox completions; the setting's options come last.
func pgBackend(ctx context.Context, dsn, schema, app string, tiny bool, stamp func() time.Time, setting pgSetting) (backend, *pgxpool.Pool, error) {
	pool, err := newPool(ctx, dsn, app, tiny)
	if err != nil {
		return backend{}, nil, err
	}
	opts := append([]pgstore.Option{pgstore.WithSchema(schema), pgstore.WithClock(stamp)}, setting.opts...)
	s, err := pgstore.New(pool, opts...)
	if err != nil {
		pool.Close()
		return backend{}, nil, err
	}
	return backend{deliveries: s, entries: s.Outbox()}, pool, nil
}

// injector kills worker connections at points of progress and crashes
// the server once.
type injector struct {
	admin    *pgxpool.Pool
	cluster  *pgcluster.Cluster // nil: no server crash
	apps     []string           // application names of the worker pools
	rng      *rand.Rand
	faults   *faultCounts
	problems *problemLog
	// crashedAt and restartedAt are wall-clock nanoseconds.
	crashedAt, restartedAt atomic.Int64
}

func (in *injector) run(ctx context.Context, prog *progress) {
	crash := prog.crash
	for {
		select {
		case <-ctx.Done():
			return
		case <-prog.tick:
			in.killBackend(ctx, in.apps[in.rng.IntN(len(in.apps))])
		case <-crash:
			crash = nil
			in.crashServer(ctx)
		}
	}
}

func (in *injector) killBackend(ctx context.Context, app string) {
	in.faults.add(faultKillBackend)
	// Find the backends first and kill them one by one: in a single
	// statement the planner is free to call pg_terminate_backend before
	// the filter on application_name, on every backend, its own included.
	rows, err := in.admin.Query(ctx, `SELECT pid FROM pg_catalog.pg_stat_activity WHERE application_name = $1`, app)
	if err != nil {
		in.failed()
		return
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		in.failed()
		return
	}
	for _, pid := range pids {
		var killed bool
		if err := in.admin.QueryRow(ctx, `SELECT pg_catalog.pg_terminate_backend($1)`, pid).Scan(&killed); err != nil {
			in.failed()
			return
		}
		if killed {
			in.faults.add(faultKillBackendHit)
		}
	}
}

// failed counts a kill that could not be made: the admin pool still held
// connections from before the server crash, say. The run asserts that
// kills did happen.
func (in *injector) failed() {
	in.faults.add(faultKillBackendError)
}

// crashServer stops PostgreSQL in immediate mode, as a power loss of the
// server process would, and starts it again.
func (in *injector) crashServer(ctx context.Context) {
	if in.cluster == nil {
		return
	}
	in.faults.add(faultServerCrash)
	in.crashedAt.Store(time.Now().UnixNano())
	if err := in.cluster.Crash(); err != nil {
		in.problems.add("crash: %v", err)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if err := in.cluster.Restart(rctx); err != nil {
		in.problems.add("restart after crash: %v", err)
	}
	in.restartedAt.Store(time.Now().UnixNano())
}

// childEnv carries a childConfig, as JSON, to the test binary run as a
// worker process.
const childEnv = "LEDGER_CHAOS_CHILD"

// childConfig is what a worker process needs to join the run.
type childConfig struct {
	DSN         string `json:"dsn"`
	Schema      string `json:"schema"`
	Setting     string `json:"setting"`
	SharedPath  string `json:"shared_path"`
	LogPath     string `json:"log_path"`
	Incarnation int    `json:"incarnation"`
	Seed        uint64 `json:"seed"`
	Params      params `json:"params"`
}

// childLog is the history file of one child incarnation, and when the
// parent killed it (wall-clock nanoseconds; 0 if it ended by itself).
type childLog struct {
	path     string
	killedAt int64
}

// children runs worker processes one after the other, each a new
// incarnation of the agent "child", killing each with SIGKILL after a
// random number of calls, until ctx is done or max incarnations ran.
type children struct {
	base     childConfig
	dir      string
	max      int
	rng      *rand.Rand
	faults   *faultCounts
	problems *problemLog
	logs     []childLog
}

func (ch *children) run(ctx context.Context) {
	for inc := 1; inc <= ch.max && ctx.Err() == nil; inc++ {
		ch.logs = append(ch.logs, ch.runOne(ctx, inc))
	}
}

func (ch *children) runOne(ctx context.Context, inc int) childLog {
	cfg := ch.base
	cfg.Incarnation, cfg.Seed = inc, ch.rng.Uint64()
	cfg.LogPath = filepath.Join(ch.dir, fmt.Sprintf("child-%d.jsonl", inc))
	log := childLog{path: cfg.LogPath}
	raw, err := json.Marshal(cfg)
	if err != nil {
		ch.problems.add("child %d: %v", inc, err)
		return log
	}
	// The usual way for a test to run a process of its own: the test
	// binary again, narrowed to the one test that plays the worker.
	cmd := exec.Command(os.Args[0], "-test.run=^TestChaosChild$", "-test.count=1", "-test.timeout=10m")
	cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	out, err := os.Create(filepath.Join(ch.dir, fmt.Sprintf("child-%d.out", inc)))
	if err != nil {
		ch.problems.add("child %d: %v", inc, err)
		return log
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	// The child writes a byte to this pipe as each call starts (after
	// its invoke line is synced), so the kill lands mid-call.
	pr, pw, err := os.Pipe()
	if err != nil {
		ch.problems.add("child %d: %v", inc, err)
		return log
	}
	defer pr.Close()
	cmd.ExtraFiles = []*os.File{pw}
	err = cmd.Start()
	pw.Close()
	if err != nil {
		ch.problems.add("child %d: start: %v", inc, err)
		return log
	}
	var killedAt atomic.Int64
	kill := func() {
		if killedAt.CompareAndSwap(0, time.Now().UnixNano()) {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			ch.faults.add(faultSigkill)
		}
	}
	stop := context.AfterFunc(ctx, kill)
	killAfter := 20 + ch.rng.IntN(150)
	buf := make([]byte, 64)
	for seen := 0; ; {
		n, err := pr.Read(buf)
		if seen += n; seen >= killAfter {
			kill()
		}
		if err != nil {
			break // the child exited, by itself or killed
		}
	}
	stop()
	waitErr := cmd.Wait()
	log.killedAt = killedAt.Load()
	if log.killedAt == 0 && waitErr != nil {
		output, _ := os.ReadFile(out.Name())
		ch.problems.add("child %d failed: %v; its output ends:\n%s", inc, waitErr, output[max(0, len(output)-4000):])
	}
	return log
}
