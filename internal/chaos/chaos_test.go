package chaos

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/internal/pgcluster"
	"github.com/leaseledger/ledger/internal/pgtest"
	"github.com/leaseledger/ledger/memstore"
	"github.com/leaseledger/ledger/pgstore"
)

var (
	fullRun = flag.Bool("chaos.full", false, "run the chaos tests at full size: 10,000 deliveries and 10,000 outbox entries")
	seedArg = flag.Uint64("chaos.seed", 0, "seed of the chaos tests' random choices (0: a new one, which the test logs)")
)

// TestMain checks for leaked goroutines after the tests, and lets
// TestChaosPG fall back on LEDGER_TEST_DATABASE_URL.
func TestMain(m *testing.M) { pgtest.Main(m) }

// pgSetting is one configuration of pgstore that TestChaosPG runs the
// whole scenario against.
type pgSetting struct {
	name string
	opts []pgstore.Option
	// storeClock says the options make the store decide on a clock of its
	// own (the database's) rather than on the nows passed in. The run then
	// uses leases that last in wall time, the drain lets that clock pass,
	// and the checker relies only on the times the store returns.
	storeClock bool
}

// pgSettings lists the configurations TestChaosPG runs, one subtest each.
// To cover a new option, add a row.
func pgSettings() []pgSetting {
	return []pgSetting{
		{name: "caller_clock"},
		// The test's logical clock is years ahead of the server's, so
		// every call would warn of skew: the row logs nowhere.
		{name: "database_clock", opts: []pgstore.Option{
			pgstore.WithDatabaseClock(true), pgstore.WithLogger(slog.New(slog.DiscardHandler)),
		}, storeClock: true},
	}
}

func pgSettingNamed(name string) (pgSetting, bool) {
	for _, s := range pgSettings() {
		if s.name == name {
			return s, true
		}
	}
	return pgSetting{}, false
}

// runParams sizes a run: the short form by default (500 items on
// PostgreSQL), a longer one with LEDGER_TEST_LONG=true (make test/long:
// 1,000), the full form with -chaos.full, a small one with -short.
func runParams(pg bool) params {
	p := params{
		Items: 500, Workers: 16, Lease: 4 * time.Millisecond, MaxHeld: 4,
		CancelRate: 0.02, CancelMax: 2 * time.Millisecond, TinyRate: 0.02, CrashRate: 0.003, IdleLimit: 40,
	}
	if !pg {
		// In memory a call takes microseconds, and only a context that is
		// done before the call starts is noticed.
		p.Items, p.CancelMax, p.TinyRate = 3000, 20*time.Microsecond, 0
	}
	switch {
	case *fullRun:
		p.Items = 10000
	case pgtest.Long():
		p.Items = max(p.Items, 1000)
	case testing.Short():
		p.Items = 200
	}
	p.MaxCalls = 5*p.Items + 1000
	return p
}

// run is the state of one scenario: the shared clock and counters, the
// history, and what went wrong outside the stores.
type run struct {
	t        *testing.T
	p        params
	rng      *rand.Rand
	sh       *shared
	log      *memorySink
	faults   *faultCounts
	problems *problemLog
	prog     *progress
	start    time.Time
	// storeClock: the store decides on its own clock (see pgSetting),
	// which the test cannot drive: the drain must let it pass.
	storeClock bool
}

func newRun(t *testing.T, p params, sh *shared) *run {
	seed := *seedArg
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (repeat the random choices with -chaos.seed=%d); %d deliveries and %d outbox entries, %d workers",
		seed, seed, p.Items, p.Items, p.Workers)
	return &run{
		t: t, p: p, rng: rand.New(rand.NewPCG(seed, 0x5eed)), sh: sh,
		log: &memorySink{}, faults: newFaultCounts(), problems: &problemLog{},
		prog: &progress{
			every: max(int64(p.Items/8), 20), tick: make(chan struct{}, 1),
			crashAt: int64(p.Items) * 6 / 10, crash: make(chan struct{}),
		},
		start: time.Now(),
	}
}

// newWorker returns a goroutine worker of the run. A faulty one crashes,
// skews its clock and has its calls cancelled; a clean one sets up and
// drains.
func (r *run) newWorker(name string, faulty bool) *worker {
	w := &worker{
		name: name, agent: name, rng: rand.New(rand.NewPCG(r.rng.Uint64(), r.rng.Uint64())),
		p: r.p, sh: r.sh, sink: r.log, faults: r.faults, problems: r.problems,
	}
	if faulty {
		w.progress, w.canCrash = r.prog, true
		w.incarnate()
		return w
	}
	w.p.CancelRate, w.p.TinyRate = 0, 0
	w.inc, w.owner = 1, ledger.Owner{Agent: name, Incarnation: name + "-i1"}
	return w
}

// setup enqueues a quarter of the items before the workers start; the
// workers enqueue the rest while they work.
func (r *run) setup(ctx context.Context, w *worker) {
	n := int64(r.p.Items / 4)
	for done := int64(0); done < n; done += 500 {
		w.enqueueDeliveries(ctx, min(500, n-done))
		require.Equal(r.t, statusOK, w.last.Status, "setup: %s", w.last.Err)
		w.enqueueEntries(ctx, min(500, n-done))
		require.Equal(r.t, statusOK, w.last.Status, "setup: %s", w.last.Err)
	}
}

// chaos runs the workers, and beside them the background faults, until
// every worker stopped.
func (r *run) chaos(ctx context.Context, workers []*worker, background ...func(ctx context.Context)) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	bgCtx, stopBackground := context.WithCancel(ctx)
	var bg, wg sync.WaitGroup
	for _, f := range background {
		bg.Go(func() { f(bgCtx) })
	}
	for _, w := range workers {
		wg.Go(func() { w.run(ctx) })
	}
	wg.Wait()
	require.NoError(r.t, ctx.Err(), "the workers did not finish")
	stopBackground()
	bg.Wait()
	r.t.Logf("chaos phase: %d calls by the goroutine workers in %s", r.prog.calls.Load(), time.Since(r.start).Round(time.Millisecond))
}

// drain drives time far past every lease, backoff and acknowledgement
// deadline, sweeps until nothing changes, and has a clean worker finish
// whatever is still open, until a round finds nothing left. Then every
// record is terminal: what is acknowledged by someone else lapses, the
// rest is leased or claimed, and processed or delivered.
func (r *run) drain(ctx context.Context, w *worker) {
	t := r.t
	w.greedy = true
	pol := r.p.policy()
	step := int64((pol.AckWindow + 2*r.p.Lease + pol.BackoffMax) / time.Microsecond)
	applied := func(what string) {
		require.True(t, w.last.Status == statusOK, "drain %s: %s %s", what, w.last.Outcome, w.last.Err)
	}
	for round := 0; ; round++ {
		require.Less(t, round, 50, "the drain keeps finding work")
		r.sh.tick(step)
		if r.storeClock {
			// The one wait of the test: a clock the test does not drive
			// has to run past the leases by itself.
			wait := time.NewTimer(time.Duration(step) * time.Microsecond)
			select {
			case <-ctx.Done():
			case <-wait.C:
			}
			wait.Stop()
		}
		found := false
		for {
			w.expire(ctx)
			applied("Expire")
			if len(w.last.Changed) == 0 {
				break
			}
			found = true
		}
		for w.lease(ctx) {
			found = true
			for _, h := range w.leases {
				h.plan = fnAck
				w.leaseCall(ctx, h)
				applied("Acknowledge")
				h.plan, h.action, h.fence = fnProcess, "drain", nil
				w.leaseCall(ctx, h)
				applied("MarkProcessed")
			}
			w.leases = nil
		}
		applied("Lease")
		for w.claimFrom(ctx, false) || w.claimFrom(ctx, true) {
			found = true
			for _, h := range w.claims {
				h.plan = fnDeliver
				w.claimCall(ctx, h)
				applied("MarkClaimDelivered")
			}
			w.claims = nil
		}
		applied("claim")
		if !found {
			break
		}
	}
	r.sh.tick(100 * step)
	w.expire(ctx)
	applied("Expire")
	require.Empty(t, w.last.Changed, "a sweep far in the future still changed records after the drain")
}

// readFinal reads every delivery, the outbox entries named by ids, and
// how many records of each kind the store counts in all.
func readFinal(ctx context.Context, t *testing.T, b backend, ids []string) finalState {
	final := finalState{deliveries: map[string]ledger.Delivery{}, entries: map[string]ledger.OutboxEntry{}}
	dstats, err := b.deliveries.Stats(ctx, ledger.StatsFilter{}, t0)
	require.NoError(t, err)
	for _, n := range dstats.ByState {
		final.storedDeliveries += int(n)
	}
	estats, err := b.entries.OutboxStats(ctx, t0)
	require.NoError(t, err)
	for _, n := range estats.ByStatus {
		final.storedEntries += int(n)
	}
	for cursor := ""; ; {
		page, err := b.deliveries.List(ctx, ledger.ListQuery{Limit: ledger.MaxLimit, Cursor: cursor})
		require.NoError(t, err)
		for _, d := range page.Deliveries {
			final.deliveries[string(d.ID)] = d
		}
		if cursor = page.Next; cursor == "" {
			break
		}
	}
	for _, id := range ids {
		e, err := b.entries.FindByID(ctx, ledger.OutboxEntryID(id))
		if err == nil {
			final.entries[id] = e
			continue
		}
		require.ErrorIs(t, err, ledger.ErrNotFound)
	}
	return final
}

// entryIDs returns the outbox entries the history tries to enqueue.
func entryIDs(calls []call) []string {
	seen := map[string]bool{}
	var ids []string
	for _, c := range calls {
		if c.Fn == fnEnqueue && c.Kind == kindEntry {
			for _, id := range c.IDs {
				if !seen[id] {
					seen[id] = true
					ids = append(ids, id)
				}
			}
		}
	}
	return ids
}

// verify checks the history against the final records, logs the counts
// and the run's figures, and asserts each invariant on its own.
func (r *run) verify(calls []call, final finalState, opts checkOptions) {
	t := r.t
	began := time.Now()
	rep := check(calls, final, opts)
	t.Logf("checked %d calls in %s", len(calls), time.Since(began).Round(time.Millisecond))
	t.Logf("calls by kind, operation and status: %s", sortedCounts(rep.calls))
	if opts.crashedAt > 0 {
		t.Logf("%d applied calls returned before the server crash (at wall-clock %d ns); all must be visible",
			rep.okBeforeCrash, opts.crashedAt)
	}
	t.Logf("figures of %s:\n%s", t.Name(), figures(rep, r.faults))
	for _, inv := range invariants() {
		assert.Empty(t, rep.violations[inv], rep.failure(inv))
	}
	assert.Zero(t, rep.lost, "items lost")
	assert.Empty(t, r.problems.all(), "problems outside the stores' contract")
	if t.Failed() {
		explain(t, calls, final, rep)
	}
}

func TestChaosMemstore(t *testing.T) {
	p := runParams(false)
	r, b := runMemstore(t, p, func(b backend) backend { return b })
	calls := r.log.history()
	r.verify(calls, readFinal(t.Context(), t, b, entryIDs(calls)), checkOptions{planned: p.Items})
	if !testing.Short() {
		require.Positive(t, r.faults.get(faultCrashHolder), "no holder crashed")
		require.Positive(t, r.faults.get(faultCancel), "no call was cancelled")
	}
}

// runMemstore runs the scenario on a fresh in-memory store, seen by every
// worker through wrap (the identity for the store as it is; a broken
// wrapper to test the checker), and returns the run and the backend.
func runMemstore(t *testing.T, p params, wrap func(backend) backend) (*run, backend) {
	r := newRun(t, p, newShared())
	ctx := t.Context()
	store := memstore.New(memstore.WithClock(r.sh.now))
	b := wrap(backend{deliveries: store, entries: store.Outbox()})

	clean := r.newWorker("clean", false)
	clean.main = b
	r.setup(ctx, clean)
	workers := make([]*worker, p.Workers)
	for i := range workers {
		workers[i] = r.newWorker(fmt.Sprintf("w%02d", i), true)
		workers[i].main = b
	}
	r.chaos(ctx, workers)
	r.drain(ctx, clean)
	return r, b
}

func TestChaosPG(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL cluster of its own and runs for a while")
	}
	dsn, cluster := startServer(t)
	for _, s := range pgSettings() {
		t.Run(s.name, func(t *testing.T) { runPG(t, dsn, cluster, s) })
	}
}

// startServer starts the cluster this test crashes; it needs one of its
// own. Without server binaries it falls back on pgtest's database (an
// external server, or a skip), without the crash fault; under CI=true,
// where nothing may be left out silently, it fails instead.
func startServer(t *testing.T) (string, *pgcluster.Cluster) {
	if _, err := pgcluster.Find(); err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatalf("CI=true, but the server crash fault needs the PostgreSQL server binaries: %v", err)
		}
		if os.Getenv(pgtest.EnvDatabaseURL) != "" {
			t.Logf("no PostgreSQL server binaries (%v): running on %s without the server crash fault", err, pgtest.EnvDatabaseURL)
		}
		return pgtest.DSN(t), nil
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	// Fast turns fsync off, which is safe here (the OS does not crash),
	// but also synchronous_commit, whose commits a crash of the server
	// process loses: the test needs every commit it was told about.
	opts := pgcluster.Options{Fast: true, Settings: map[string]string{"synchronous_commit": "on"}}
	if testing.Verbose() {
		opts.Logf = t.Logf
	}
	c, err := pgcluster.Start(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Stop()) })
	return c.DSN(), c
}

func runPG(t *testing.T, dsn string, cluster *pgcluster.Cluster, setting pgSetting) {
	p := runParams(true)
	if setting.storeClock {
		// Leases measured by the database's clock must outlast a few
		// calls of wall time.
		p.Lease = 100 * time.Millisecond
		p.StoreClock = true
	}
	dir := t.TempDir()
	sh, err := mapShared(filepath.Join(dir, "shared"))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, sh.unmap()) })
	r := newRun(t, p, sh)
	r.storeClock = setting.storeClock
	ctx := t.Context()
	admin, err := newPool(ctx, dsn, "chaos-admin", false)
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	schema := fmt.Sprintf("chaos_%x", r.rng.Uint64())
	quoted := pgx.Identifier{schema}.Sanitize()
	migrator, err := pgstore.New(admin, pgstore.WithSchema(schema))
	require.NoError(t, err)
	require.NoError(t, migrator.Migrate(ctx))
	t.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := admin.Exec(dctx, "DROP SCHEMA "+quoted+" CASCADE")
		assert.NoError(t, err)
	})

	clean := r.newWorker("clean", false)
	var pools []*pgxpool.Pool
	defer func() {
		for _, pool := range pools {
			pool.Close()
		}
	}()
	cleanBackend, pool, err := pgBackend(ctx, dsn, schema, "chaos-clean", false, clean.stamp, setting)
	require.NoError(t, err)
	pools = append(pools, pool)
	clean.main = cleanBackend
	r.setup(ctx, clean)

	workers := make([]*worker, p.Workers)
	var apps []string
	for i := range workers {
		w := r.newWorker(fmt.Sprintf("w%02d", i), true)
		app := "chaos-" + w.name
		main, pool, err := pgBackend(ctx, dsn, schema, app, false, w.stamp, setting)
		require.NoError(t, err)
		pools = append(pools, pool)
		tiny, tinyPool, err := pgBackend(ctx, dsn, schema, app+"-tiny", true, w.stamp, setting)
		require.NoError(t, err)
		pools = append(pools, tinyPool)
		w.main, w.tiny = main, &tiny
		workers[i] = w
		apps = append(apps, app, app+"-tiny")
	}
	in := &injector{admin: admin, cluster: cluster, apps: apps, rng: rand.New(rand.NewPCG(r.rng.Uint64(), 1)), faults: r.faults, problems: r.problems}
	kids := &children{
		base: childConfig{DSN: dsn, Schema: schema, Setting: setting.name, SharedPath: filepath.Join(dir, "shared"), Params: p},
		dir:  dir, max: 3, rng: rand.New(rand.NewPCG(r.rng.Uint64(), 2)), faults: r.faults, problems: r.problems,
	}
	if *fullRun {
		kids.max = 10
	}
	r.chaos(ctx, workers, func(ctx context.Context) { in.run(ctx, r.prog) }, kids.run)
	if cluster != nil {
		require.Equal(t, 1, r.faults.get(faultServerCrash), "the server was not crashed during the run")
		t.Logf("the server crashed after %d items were processed or delivered, and was back %s later",
			r.prog.crashAt, time.Duration(in.restartedAt.Load()-in.crashedAt.Load()).Round(time.Millisecond))
	}

	// The drain and the reads go through a pool opened after the crash,
	// so that no connection of theirs died with the server.
	after, pool, err := pgBackend(ctx, dsn, schema, "chaos-after", false, clean.stamp, setting)
	require.NoError(t, err)
	pools = append(pools, pool)
	clean.main = after
	r.drain(ctx, clean)
	calls := r.log.history()
	for _, l := range kids.logs {
		cs, err := readCallLog(l.path, l.killedAt)
		require.NoError(t, err)
		calls = append(calls, cs...)
	}
	ids := entryIDs(calls)
	rows, err := pool.Query(ctx, "SELECT id FROM "+quoted+".outbox_entries")
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	final := readFinal(ctx, t, after, ids)
	final.allEntries = true
	kills := 0
	for _, l := range kids.logs {
		if l.killedAt != 0 {
			kills++
		}
	}
	r.verify(calls, final, checkOptions{storeClock: setting.storeClock, crashedAt: in.crashedAt.Load(), planned: p.Items, kills: kills})
	require.Positive(t, r.faults.get(faultSigkill), "no worker process was killed")
	require.Positive(t, r.faults.get(faultKillBackendHit), "no worker connection was killed")
}
