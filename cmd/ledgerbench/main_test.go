package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger/internal/pgtest"
	"github.com/leaseledger/ledger/storekit"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// runJSON runs the program in-process with cfg and returns its report,
// decoded from the -json document, and what it wrote to stderr.
func runJSON(t *testing.T, cfg config) (report, string) {
	t.Helper()
	cfg.json = true
	var out, progress bytes.Buffer
	require.NoError(t, run(context.Background(), cfg, &out, &progress), progress.String())
	var rep report
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep), out.String())
	return rep, progress.String()
}

// value returns the figure of w named name, failing the test when the
// report lacks it.
func value(t *testing.T, rep report, w workloadName, name string) figure {
	t.Helper()
	for _, f := range rep.Figures {
		if f.Workload == w && f.Name == name {
			return f
		}
	}
	t.Fatalf("report has no %s / %q: %+v", w, name, rep.Figures)
	return figure{}
}

// judged are the workloads whose figures may carry a target: the scale
// targets and the in-memory heap. Every other figure is reported without
// one (the ceilings are context, the held snapshot's degradation is for
// information).
var judged = []workloadName{workloadScale, workloadMemory}

// assertOnlyScaleAndMemoryJudged fails for a figure of any other
// workload that carries a target or a verdict.
func assertOnlyScaleAndMemoryJudged(t *testing.T, rep report) {
	t.Helper()
	for _, f := range rep.Figures {
		if !slices.Contains(judged, f.Workload) {
			assert.Empty(t, f.Target, "%s / %s", f.Workload, f.Name)
			assert.Empty(t, f.Verdict, "%s / %s", f.Workload, f.Name)
		}
	}
}

// judgedRowsOutside returns the rows of a printed table, other than the
// scale and memory workloads', that end in PASS or FAIL: the drain,
// completion, steady and snapshot figures are printed without a verdict.
func judgedRowsOutside(table string) []string {
	var rows []string
	for _, l := range strings.Split(table, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] == string(workloadScale) || f[0] == string(workloadMemory) {
			continue
		}
		if v := f[len(f)-1]; v == string(verdictPass) || v == string(verdictFail) {
			rows = append(rows, l)
		}
	}
	return rows
}

func TestJudgedRowsOutside(t *testing.T) {
	table := `WORKLOAD        FIGURE                   VALUE  UNIT     CEILING RATIO  TARGET   RESULT
delivery-drain  drain: WAL per item      3075   bytes    -              -        -
scale           lease latency, 20 over 2 1.04   x        -              <= 1.5x  PASS
memory          heap in use              700    MiB      -              < 1024   FAIL
`
	assert.Empty(t, judgedRowsOutside(table))
	bad := table + "outbox-drain    drain: claim, delivered  1824   items/s  0.02x (ii)     >= 0.20x FAIL\n" +
		"snapshot        lease latency, end over start 2.1 x  -              <= 3x    PASS\n"
	got := judgedRowsOutside(bad)
	require.Len(t, got, 2)
	assert.True(t, strings.HasPrefix(got[0], "outbox-drain"))
	assert.True(t, strings.HasPrefix(got[1], "snapshot"))
}

func TestRunInMemory(t *testing.T) {
	cfg := defaultConfig()
	cfg.items, cfg.workers, cfg.duration, cfg.memoryItems = 200, 4, time.Second, 2000
	cfg.fanout = 8
	cfg.workloads = []workloadName{workloadDeliveryDrain, workloadOutboxDrain, workloadCost, workloadCompletions, workloadSteady, workloadMemory}
	rep, progress := runJSON(t, cfg)

	assert.Equal(t, storeMem, rep.Store)
	assert.Equal(t, 8, rep.Settings.Fanout)
	assert.Nil(t, rep.Ceilings)
	assert.Equal(t, 200.0, value(t, rep, workloadDeliveryDrain, "items enqueued and processed").Value)
	assert.Equal(t, 200.0, value(t, rep, workloadOutboxDrain, "entries enqueued and delivered").Value)
	assert.Equal(t, 200.0, value(t, rep, workloadCompletions, "items completed").Value)
	for _, f := range []figure{
		value(t, rep, workloadDeliveryDrain, "enqueue (EnqueueBatch)"),
		value(t, rep, workloadDeliveryDrain, "drain: lease, acknowledge, processed"),
		value(t, rep, workloadOutboxDrain, "drain: claim, delivered"),
		value(t, rep, workloadCompletions, "completion calls (acknowledge, processed)"),
	} {
		assert.Positive(t, f.Value, f.Name)
		assert.Nil(t, f.CeilingRatio, "no ceilings in memory: %s", f.Name)
	}
	assertOnlyScaleAndMemoryJudged(t, rep)

	// In memory the store runs in this process: the client's CPU is all
	// of it, and there is no WAL and no server.
	assert.Positive(t, value(t, rep, workloadDeliveryDrain, "drain: client CPU per item").Value)
	assert.Positive(t, value(t, rep, workloadOutboxDrain, "drain: client CPU per item").Value)
	assert.Positive(t, value(t, rep, workloadCompletions, "client CPU per item").Value)
	for _, w := range []workloadName{workloadDeliveryDrain, workloadOutboxDrain, workloadCompletions} {
		for _, f := range rep.Figures {
			assert.False(t, f.Workload == w && (strings.Contains(f.Name, "WAL") || strings.Contains(f.Name, "server")),
				"%s / %s in memory", f.Workload, f.Name)
		}
	}
	require.NotNil(t, rep.Cost, "the cost workload ran")
	assert.Equal(t, "PostgreSQL only", rep.Cost.NotMeasured)
	assert.Empty(t, rep.Cost.Calls)

	// About a second at 1,000 items/s: work completes, never more than was
	// offered. How much of it completes in the second depends on the
	// machine (a race-detector build on a busy one completes far less),
	// which is for the benchmark to measure, not for a test to judge.
	completed := value(t, rep, workloadSteady, "completed").Value
	assert.Positive(t, completed)
	assert.Less(t, completed, 1500.0)
	p50 := value(t, rep, workloadSteady, "enqueue to completion p50")
	p99 := value(t, rep, workloadSteady, "enqueue to completion p99")
	assert.Positive(t, p50.Value)
	assert.GreaterOrEqual(t, p99.Value, p50.Value)

	assert.Equal(t, 2000.0, value(t, rep, workloadMemory, "open deliveries held").Value)
	heap := value(t, rep, workloadMemory, "heap in use")
	assert.Positive(t, heap.Value)
	assert.Equal(t, verdictNA, heap.Verdict, "the heap target is stated for a million")
	// Each delivery holds at least its 256-byte payload.
	assert.Greater(t, value(t, rep, workloadMemory, "heap growth per delivery").Value, 256.0)

	assert.Contains(t, progress, "delivery-drain: enqueue: 200/200")
	assert.Contains(t, progress, "delivery-drain: lease, acknowledge, processed (fanout 8): 200/200")
	assert.Contains(t, progress, "outbox-drain: claim, delivered (fanout 8): 200/200")
	assert.Contains(t, progress, "steady: completed (fanout 8):")
}

// TestCostInMemoryTable: the table of an in-memory run says that the cost
// workload measures PostgreSQL only, and "all" in memory includes it.
func TestCostInMemoryTable(t *testing.T) {
	cfg, err := parseFlags([]string{"-items", "10"}, io.Discard)
	require.NoError(t, err)
	assert.Contains(t, cfg.workloads, workloadCost, "all runs the cost workload in memory too, to say so")
	cfg.workloads = []workloadName{workloadCost}
	var out, progress bytes.Buffer
	require.NoError(t, run(context.Background(), cfg, &out, &progress))
	assert.Contains(t, out.String(), "\ncost per item, by store call (workload cost): PostgreSQL only\n")
	assert.NotContains(t, out.String(), "INDEX ENTRIES")
	assert.NotContains(t, out.String(), "WORKLOAD", "no figures, no empty table of them")
}

// TestDrainFanoutInMemory drains in memory completing one item at a time,
// part of each batch at once, and whole batches at once: every way ends
// every item (a drain that does not fails the run) and the report says
// which way it measured.
func TestDrainFanoutInMemory(t *testing.T) {
	for _, tc := range []struct{ fanout, want int }{{1, 1}, {7, 7}, {0, 50}, {500, 50}} {
		cfg := defaultConfig()
		cfg.items, cfg.workers, cfg.batch, cfg.fanout = 400, 3, 50, tc.fanout
		cfg.workloads = []workloadName{workloadDeliveryDrain, workloadOutboxDrain}
		rep, progress := runJSON(t, cfg)
		assert.Equal(t, tc.want, rep.Settings.Fanout, "-fanout %d", tc.fanout)
		assert.Equal(t, 400.0, value(t, rep, workloadDeliveryDrain, "items enqueued and processed").Value)
		assert.Equal(t, 400.0, value(t, rep, workloadOutboxDrain, "entries enqueued and delivered").Value)
		assert.Contains(t, progress, fmt.Sprintf("processed (fanout %d): 400/400", tc.want))
		assert.Contains(t, progress, fmt.Sprintf("delivered (fanout %d): 400/400", tc.want))
	}
}

func TestForEach(t *testing.T) {
	t.Run("every index once, limit at a time", func(t *testing.T) {
		const n, limit = 1000, 16
		var calls [n]atomic.Int32
		var running, arrived atomic.Int32
		var over atomic.Bool
		// The first limit calls wait for one another, so they end only
		// if that many run at once; the deadline turns a forEach that
		// runs fewer into a failure instead of a hang.
		barrier := make(chan struct{})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := forEach(ctx, n, limit, func(ctx context.Context, i int) error {
			if running.Add(1) > limit {
				over.Store(true)
			}
			defer running.Add(-1)
			if arrived.Add(1) == limit {
				close(barrier)
			}
			select {
			case <-barrier:
			case <-ctx.Done():
				return ctx.Err()
			}
			calls[i].Add(1)
			return nil
		})
		require.NoError(t, err)
		for i := range calls {
			require.Equal(t, int32(1), calls[i].Load(), "index %d", i)
		}
		assert.False(t, over.Load(), "more than %d calls at once", limit)
	})
	t.Run("one after another with limit 1", func(t *testing.T) {
		var order []int
		require.NoError(t, forEach(context.Background(), 5, 1, func(_ context.Context, i int) error {
			order = append(order, i)
			return nil
		}))
		assert.Equal(t, []int{0, 1, 2, 3, 4}, order)
	})
	t.Run("the first error stops the rest and is returned", func(t *testing.T) {
		boom := errors.New("boom")
		var order []int
		err := forEach(context.Background(), 100, 1, func(_ context.Context, i int) error {
			order = append(order, i)
			if i == 10 {
				return boom
			}
			return nil
		})
		require.ErrorIs(t, err, boom)
		assert.Len(t, order, 11, "no call after the failing one")

		// In parallel the others see the cancellation; the error
		// returned is still the cause, not a cancellation.
		err = forEach(context.Background(), 100, 8, func(ctx context.Context, i int) error {
			if i == 10 {
				return boom
			}
			return ctx.Err()
		})
		require.ErrorIs(t, err, boom)
	})
}

func TestTableReport(t *testing.T) {
	cfg := defaultConfig()
	cfg.store, cfg.workloads = storePG, []workloadName{workloadDeliveryDrain}
	rep := newReport(cfg, "PostgreSQL test")
	rep.setCeilings(&ceilings{Workers: 8, Seconds: 5, UpdateTxnPerSec: 2000, UpdateTxnMillis: 4, BatchedRowsPerSec: 50_000})
	rep.add(workloadDeliveryDrain, "drain", 7000, "items/s", ceilingRows, nil)
	rep.addNotMeasured(workloadDeliveryDrain, "drain: server CPU per item", "µs", "the server is not on this machine")
	rep.add(workloadCompletions, "calls", 5000, "calls/s", ceilingTxn, nil)
	rep.add(workloadSteady, "p50", 6, "ms", ceilingTxnTime, nil)
	rep.add(workloadScale, "lease latency, 1000000 over 10000", 1.2, "x", "", atMost(1.5, "x"))
	rep.add(workloadScale, "claim latency, 1000000 over 10000", 1.6, "x", "", atMost(1.5, "x"))
	var out bytes.Buffer
	require.NoError(t, rep.write(&out, false))
	assert.Contains(t, out.String(), "batch 100, fanout 100,", "the header says how many items of a batch were completed at once")
	assert.Contains(t, out.String(), "Context only: no figure is judged against a ceiling.")
	lines := strings.Split(out.String(), "\n")
	// row returns the row that starts with prefix, its columns one space
	// apart.
	row := func(prefix string) string {
		for _, l := range lines {
			if l := strings.Join(strings.Fields(l), " "); strings.HasPrefix(l, prefix) {
				return l
			}
		}
		t.Fatalf("no row %q in\n%s", prefix, out.String())
		return ""
	}
	// Ratios to the ceilings stay, as context, with neither target nor
	// verdict.
	assert.Equal(t, "delivery-drain drain 7000 items/s 0.14x (ii) - -", row("delivery-drain drain 7000"))
	assert.Equal(t, "delivery-drain drain: server CPU per item not measured µs - - -", row("delivery-drain drain: server"))
	assert.Equal(t, "completions calls 5000 calls/s 2.50x (i) - -", row("completions"))
	assert.Equal(t, "steady p50 6.00 ms 1.50x (i time) - -", row("steady"))
	assert.Equal(t, "scale lease latency, 1000000 over 10000 1.20 x - <= 1.5x PASS", row("scale lease"))
	assert.Equal(t, "scale claim latency, 1000000 over 10000 1.60 x - <= 1.5x FAIL", row("scale claim"))
	assert.Contains(t, lines, "note: delivery-drain drain: server CPU per item not measured: the server is not on this machine")
}

func TestParseFlags(t *testing.T) {
	var stderr bytes.Buffer
	cfg, err := parseFlags([]string{"-store", "pg", "-workload", "a, d,ceilings", "-items", "500"}, &stderr)
	require.NoError(t, err)
	assert.Equal(t, []workloadName{workloadCeilings, workloadDeliveryDrain, workloadScale}, cfg.workloads)
	assert.Equal(t, 500, cfg.memoryItems, "-items below a million sizes the memory workload too")

	cfg, err = parseFlags(nil, &stderr)
	require.NoError(t, err)
	assert.Equal(t, defaultMemoryItems, cfg.memoryItems)
	assert.NotContains(t, cfg.workloads, workloadSnapshot, "all leaves out what memory cannot run")
	assert.NotContains(t, cfg.workloads, workloadCeilings)
	assert.Contains(t, cfg.workloads, workloadMemory)

	cfg, err = parseFlags([]string{"-store", "pg"}, &stderr)
	require.NoError(t, err)
	assert.Contains(t, cfg.workloads, workloadSnapshot)
	assert.NotContains(t, cfg.workloads, workloadMemory)
	assert.True(t, cfg.groupCommit, "group commit is on by default, as in pgstore")
	assert.Equal(t, defaultCallers, cfg.callers)

	assert.Zero(t, cfg.fanout)
	assert.Equal(t, cfg.batch, cfg.completeFanout(), "-fanout 0 completes whole batches at once")

	cfg, err = parseFlags([]string{"-store", "pg", "-group-commit=false", "-callers", "32", "-fanout", "1"}, &stderr)
	require.NoError(t, err)
	assert.False(t, cfg.groupCommit)
	assert.Equal(t, 32, cfg.callers)
	assert.Equal(t, 1, cfg.completeFanout())

	cfg, err = parseFlags([]string{"-batch", "20", "-fanout", "64"}, &stderr)
	require.NoError(t, err)
	assert.Equal(t, 20, cfg.completeFanout(), "no more at once than a batch holds")

	_, err = parseFlags([]string{"-fanout", "-1"}, &stderr)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "-fanout")

	for _, args := range [][]string{
		{"-workload", "snapshot"},
		{"-store", "pg", "-workload", "memory"},
		{"-workload", "z"},
		{"-store", "oracle"},
		{"-batch", "1001"},
		{"-dsn", "postgres://x"},
		{"-scale-max", "10"},
		{"-callers", "0"},
	} {
		_, err := parseFlags(args, &stderr)
		assert.Error(t, err, "%q", args)
	}
}

func TestPercentile(t *testing.T) {
	ds := []time.Duration{5 * time.Millisecond, time.Millisecond, 3 * time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond}
	assert.Equal(t, 3.0, percentile(ds, 50))
	assert.Equal(t, 1.0, percentile(ds, 0))
	assert.Equal(t, 5.0, percentile(ds, 100))
	assert.Zero(t, percentile(nil, 50))
}

// TestRunOnPostgreSQL runs every PostgreSQL workload with tiny sizes on
// the test database and checks the figures, the ceilings and that the run
// leaves no schema behind.
func TestRunOnPostgreSQL(t *testing.T) {
	cfg := defaultConfig()
	cfg.store, cfg.dsn = storePG, pgtest.DSN(t)
	cfg.items, cfg.workers, cfg.batch = 200, 4, 50
	cfg.ceilingDuration, cfg.duration, cfg.snapshotDuration = 200*time.Millisecond, time.Second, time.Second
	cfg.rate, cfg.scaleMax, cfg.scaleCalls = 200, 1000, 10
	cfg.callers = 16
	cfg.fanout = 20 // several items of each batch of 50 at once, so that group commit coalesces them
	cfg.workloads = []workloadName{workloadDeliveryDrain, workloadOutboxDrain, workloadCost, workloadCompletions, workloadSteady, workloadScale, workloadSnapshot}
	pool := pgtest.Pool(t)
	var hadWALInspect bool
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_walinspect')`).Scan(&hadWALInspect))
	rep, _ := runJSON(t, cfg)

	require.NotNil(t, rep.Ceilings)
	assert.Positive(t, rep.Ceilings.UpdateTxnPerSec)
	assert.Positive(t, rep.Ceilings.BatchedRowsPerSec)
	assert.Equal(t, 4, rep.Ceilings.Workers)
	assert.Contains(t, rep.Server, "PostgreSQL")
	assert.Equal(t, 20, rep.Settings.Fanout)

	assert.Equal(t, 200.0, value(t, rep, workloadDeliveryDrain, "items enqueued and processed").Value)
	assert.Equal(t, 200.0, value(t, rep, workloadOutboxDrain, "entries enqueued and delivered").Value)
	drain := value(t, rep, workloadDeliveryDrain, "drain: lease, acknowledge, processed")
	require.NotNil(t, drain.CeilingRatio)
	assert.InDelta(t, drain.Value/rep.Ceilings.BatchedRowsPerSec, *drain.CeilingRatio, 1e-9)
	assertOnlyScaleAndMemoryJudged(t, rep)

	// What a drained item cost. Every drained item writes at least its
	// record's new version and a commit's share, far more than 100 bytes.
	// The test cluster runs on this machine, so its CPU is read, unless
	// the tests were pointed at another server.
	for _, w := range []workloadName{workloadDeliveryDrain, workloadOutboxDrain} {
		assert.Greater(t, value(t, rep, w, "drain: WAL per item").Value, 100.0, w)
		client := value(t, rep, w, "drain: client CPU per item")
		assert.Positive(t, client.Value, w)
		server := value(t, rep, w, "drain: server CPU per item")
		if os.Getenv(pgtest.EnvDatabaseURL) != "" && server.NotMeasured != "" {
			continue
		}
		assert.Empty(t, server.NotMeasured, w)
		assert.InDelta(t, client.Value+server.Value, value(t, rep, w, "drain: client + server CPU per item").Value, 1e-9, w)
	}

	on := value(t, rep, workloadCompletions, "completion calls, group commit on (16 callers)")
	off := value(t, rep, workloadCompletions, "completion calls, group commit off (16 callers)")
	assert.Positive(t, on.Value)
	assert.Positive(t, off.Value)
	assert.InDelta(t, on.Value/off.Value, value(t, rep, workloadCompletions, "group commit on over off").Value, 1e-9)
	// Each way, what an item's acknowledge and processed cost: two record
	// versions and two history rows at the least, whatever the commits
	// share.
	for _, way := range []string{"group commit on: ", "group commit off: "} {
		assert.Greater(t, value(t, rep, workloadCompletions, way+"WAL per item").Value, 100.0, way)
		assert.Positive(t, value(t, rep, workloadCompletions, way+"client CPU per item").Value, way)
		value(t, rep, workloadCompletions, way+"server CPU per item")
	}

	checkCostOnPostgreSQL(t, rep.Cost, cfg.items)
	if os.Getenv(pgtest.EnvDatabaseURL) == "" {
		// The tests' own cluster: a superuser may create pg_walinspect.
		assert.Empty(t, rep.Cost.IndexEntriesNotMeasured)
	}

	assert.Positive(t, value(t, rep, workloadSteady, "completed").Value)
	assert.Positive(t, value(t, rep, workloadSteady, "client heap in use at end").Value)

	for _, n := range []string{"10", "100", "1000"} {
		assert.Positive(t, value(t, rep, workloadScale, "lease 1 beside "+n+" terminal").Value)
		assert.Positive(t, value(t, rep, workloadScale, "claim 1 beside "+n+" terminal").Value)
	}
	assert.Contains(t, []verdict{verdictPass, verdictFail}, value(t, rep, workloadScale, "lease latency, 1000 over 10").Verdict)
	assert.Contains(t, []verdict{verdictPass, verdictFail}, value(t, rep, workloadScale, "claim latency, 1000 over 10").Verdict)

	value(t, rep, workloadSnapshot, "lease (granting) p50, last tenth")
	value(t, rep, workloadSnapshot, "dead tuples in deliveries at end")
	var out bytes.Buffer
	require.NoError(t, rep.write(&out, false))
	assert.Empty(t, judgedRowsOutside(out.String()))
	// The held snapshot's degradation, when the short run had lease calls
	// enough at both ends to compare, is printed for information.
	if slices.ContainsFunc(rep.Figures, func(f figure) bool {
		return f.Workload == workloadSnapshot && f.Name == "lease latency, end over start"
	}) {
		assert.Contains(t, out.String(), "note: snapshot: lease latency, end over start is the held snapshot's degradation, for information")
	}

	var left int
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_catalog.pg_namespace WHERE nspname LIKE 'ledgerbench\_%'`).Scan(&left))
	assert.Zero(t, left, "the run drops every schema it made")
	var hasWALInspect bool
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_walinspect')`).Scan(&hasWALInspect))
	assert.Equal(t, hadWALInspect, hasWALInspect, "the database keeps or lacks pg_walinspect as before the run")
}

// checkCostOnPostgreSQL checks the cost table of a run with n items: a
// row per call, each with what that call must write at the least, and
// totals that add the rows up.
func checkCostOnPostgreSQL(t *testing.T, c *costReport, n int) {
	t.Helper()
	require.NotNil(t, c)
	require.Empty(t, c.NotMeasured)
	call := func(l costLedger, name costCall) costRow {
		t.Helper()
		i := slices.IndexFunc(c.Calls, func(r costRow) bool { return r.Ledger == l && r.Call == string(name) })
		require.GreaterOrEqual(t, i, 0, "no cost row %s / %s in %+v", l, name, c.Calls)
		return c.Calls[i]
	}
	enqueue := call(costOutbox, callEnqueue)
	claim := call(costOutbox, callClaim)
	delivered := call(costOutbox, callDelivered)
	lease := call(costDelivery, callLease)
	ack := call(costDelivery, callAcknowledge)
	processed := call(costDelivery, callProcessed)
	call(costDelivery, callAckProcessed)
	for _, r := range c.Calls {
		assert.Equal(t, n, r.Items, r.Call)
		assert.Greater(t, r.WALBytes, 0.0, "%s %s", r.Ledger, r.Call)
		assert.LessOrEqual(t, r.HeapHOTUpdated, r.HeapUpdated, "%s %s", r.Ledger, r.Call)
		assert.NotEmpty(t, r.Tables, "%s %s", r.Ledger, r.Call)
	}
	// Enqueueing inserts each record; every transition updates it.
	assert.GreaterOrEqual(t, enqueue.HeapInserted, 1.0)
	assert.Equal(t, int64(n), enqueue.Tables["outbox_entries"].Inserted)
	assert.GreaterOrEqual(t, call(costDelivery, callEnqueue).HeapInserted, 1.0)
	for _, r := range []costRow{claim, delivered, lease, ack, processed} {
		assert.GreaterOrEqual(t, r.HeapUpdated, 1.0, r.Call)
	}
	assert.Equal(t, int64(n), lease.Tables["deliveries"].Updated)

	if c.IndexEntriesNotMeasured == "" {
		// A record inserted is in its primary key at the least.
		require.NotNil(t, enqueue.IndexEntries)
		assert.GreaterOrEqual(t, *enqueue.IndexEntries, 1.0)
		assert.Positive(t, enqueue.WALRecords["Btree/INSERT_LEAF"].Count)
	} else {
		assert.Nil(t, enqueue.IndexEntries)
	}

	require.Len(t, c.Totals, len(costDrains))
	for i, d := range costDrains {
		tot := c.Totals[i]
		assert.Equal(t, d.name, tot.Call)
		var wal, ins float64
		for _, name := range d.calls {
			wal += call(d.ledger, name).WALBytes
			ins += call(d.ledger, name).HeapInserted
		}
		assert.InDelta(t, wal, tot.WALBytes, 1e-6, d.name)
		assert.InDelta(t, ins, tot.HeapInserted, 1e-9, d.name)
	}
}

// TestRunOnPostgreSQLAsPlainRole runs the drains and the cost workload as
// a role that is no superuser: it may not create pg_walinspect nor see the
// server's data directory. The run still succeeds, prints the heap and WAL
// byte figures, and says what it could not measure and why.
func TestRunOnPostgreSQLAsPlainRole(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	role := "ledgerbench_plain_" + strings.ToLower(string(storekit.NewToken())[:8])
	password := string(storekit.NewToken()) // base32: safe in a literal
	if _, err := pool.Exec(ctx, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN PASSWORD '"+password+"'"); err != nil {
		t.Skipf("cannot create a role on the test server: %v", err)
	}
	t.Cleanup(func() {
		for _, sql := range []string{"DROP OWNED BY " + pgx.Identifier{role}.Sanitize(), "DROP ROLE " + pgx.Identifier{role}.Sanitize()} {
			if _, err := pool.Exec(ctx, sql); err != nil {
				t.Errorf("%s: %v", sql, err)
			}
		}
	})
	var db string
	require.NoError(t, pool.QueryRow(ctx, "SELECT current_database()").Scan(&db))
	_, err := pool.Exec(ctx, "GRANT CREATE ON DATABASE "+pgx.Identifier{db}.Sanitize()+" TO "+pgx.Identifier{role}.Sanitize())
	require.NoError(t, err)
	u, err := url.Parse(pgtest.DSN(t))
	require.NoError(t, err)
	u.User = url.UserPassword(role, password)

	cfg := defaultConfig()
	cfg.store, cfg.dsn = storePG, u.String()
	cfg.items, cfg.workers, cfg.batch, cfg.ceilingDuration = 100, 2, 50, 200*time.Millisecond
	cfg.workloads = []workloadName{workloadOutboxDrain, workloadCost}
	rep, _ := runJSON(t, cfg)

	server := value(t, rep, workloadOutboxDrain, "drain: server CPU per item")
	assert.Contains(t, server.NotMeasured, "data directory", "a plain role cannot find the postmaster")
	assert.Greater(t, value(t, rep, workloadOutboxDrain, "drain: WAL per item").Value, 100.0)

	require.NotNil(t, rep.Cost)
	assert.Contains(t, rep.Cost.IndexEntriesNotMeasured, "pg_walinspect")
	checkCostOnPostgreSQL(t, rep.Cost, cfg.items)
	for _, r := range append(rep.Cost.Calls, rep.Cost.Totals...) {
		assert.Nil(t, r.IndexEntries, r.Call)
		assert.Nil(t, r.FPIBytes, r.Call)
		assert.Empty(t, r.WALRecords, r.Call)
	}

	var out bytes.Buffer
	require.NoError(t, rep.write(&out, false))
	assert.Contains(t, out.String(), "\nindex entries and full-page images not measured: pg_walinspect is not available (")
	assert.Contains(t, out.String(), "\nnote: outbox-drain drain: server CPU per item not measured: the server's data directory is not visible to this role (")
}
