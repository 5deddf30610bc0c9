package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger/internal/pgtest"
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

func TestRunInMemory(t *testing.T) {
	cfg := defaultConfig()
	cfg.items, cfg.workers, cfg.duration, cfg.memoryItems = 200, 4, time.Second, 2000
	cfg.fanout = 8
	cfg.workloads = []workloadName{workloadDeliveryDrain, workloadOutboxDrain, workloadCompletions, workloadSteady, workloadMemory}
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
	// Targets stated against a ceiling cannot be judged in memory.
	assert.Equal(t, verdictNA, value(t, rep, workloadDeliveryDrain, "drain: lease, acknowledge, processed").Verdict)
	assert.Equal(t, verdictNA, value(t, rep, workloadCompletions, "completion calls (acknowledge, processed)").Verdict)

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
	assert.Contains(t, []verdict{verdictPass, verdictFail}, p50.Verdict, "judged at 1,000 items/s")

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

// TestDrainFanoutInMemory drains in memory completing one item at a time,
// part of each batch at once, and whole batches at once: every way ends
// every item (a drain that does not fails the run) and the report says
// which way it measured.
func TestDrainFanoutInMemory(t *testing.T) {
	for _, tc := range []struct{ fanout, want int }{{1, 1}, {7, 7}, {0, 50}, {500, 50}} {
		cfg := defaultConfig()
		cfg.items, cfg.workers, cfg.batch, cfg.fanout = 1000, 3, 50, tc.fanout
		cfg.workloads = []workloadName{workloadDeliveryDrain, workloadOutboxDrain}
		rep, progress := runJSON(t, cfg)
		assert.Equal(t, tc.want, rep.Settings.Fanout, "-fanout %d", tc.fanout)
		assert.Equal(t, 1000.0, value(t, rep, workloadDeliveryDrain, "items enqueued and processed").Value)
		assert.Equal(t, 1000.0, value(t, rep, workloadOutboxDrain, "entries enqueued and delivered").Value)
		assert.Contains(t, progress, fmt.Sprintf("processed (fanout %d): 1000/1000", tc.want))
		assert.Contains(t, progress, fmt.Sprintf("delivered (fanout %d): 1000/1000", tc.want))
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
	rep.add(workloadDeliveryDrain, "drain", 7000, "items/s", ceilingRows, atLeastCeiling(0.12, ceilingRows).when(true, "at 8 workers"))
	rep.add(workloadCompletions, "calls", 5000, "calls/s", ceilingTxn, atLeastCeiling(3, ceilingTxn))
	rep.add(workloadSteady, "p50", 6, "ms", ceilingTxnTime, below(20, "ms").when(false, "at 1,000 items/s"))
	var out bytes.Buffer
	require.NoError(t, rep.write(&out, false))
	assert.Contains(t, out.String(), "batch 100, fanout 100,", "the header says how many items of a batch were completed at once")
	lines := strings.Split(out.String(), "\n")
	row := func(prefix string) string {
		for _, l := range lines {
			if strings.HasPrefix(l, prefix) {
				return strings.Join(strings.Fields(l), " ")
			}
		}
		t.Fatalf("no row %q in\n%s", prefix, out.String())
		return ""
	}
	assert.Equal(t, "delivery-drain drain 7000 items/s 0.14x (ii) >= 0.12x ceiling (ii) at 8 workers PASS", row("delivery-drain"))
	assert.Equal(t, "completions calls 5000 calls/s 2.50x (i) >= 3.00x ceiling (i) FAIL", row("completions"))
	assert.Equal(t, "steady p50 6.00 ms 1.50x (i time) < 20 ms at 1,000 items/s n/a", row("steady"))
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
	cfg.ceilingDuration, cfg.duration, cfg.snapshotDuration = 500*time.Millisecond, time.Second, 2*time.Second
	cfg.rate, cfg.scaleMax, cfg.scaleCalls = 200, 2000, 20
	cfg.callers = 16
	cfg.fanout = 20 // several items of each batch of 50 at once, so that group commit coalesces them
	cfg.workloads = []workloadName{workloadDeliveryDrain, workloadOutboxDrain, workloadCompletions, workloadSteady, workloadScale, workloadSnapshot}
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
	assert.Equal(t, verdictNA, drain.Verdict, "the drain targets are stated for 8 workers")

	on := value(t, rep, workloadCompletions, "completion calls, group commit on (16 callers)")
	off := value(t, rep, workloadCompletions, "completion calls, group commit off (16 callers)")
	assert.Positive(t, on.Value)
	assert.Positive(t, off.Value)
	assert.Contains(t, []verdict{verdictPass, verdictFail}, on.Verdict, "judged against ceiling (i)")
	assert.InDelta(t, on.Value/off.Value, value(t, rep, workloadCompletions, "group commit on over off").Value, 1e-9)

	assert.Positive(t, value(t, rep, workloadSteady, "completed").Value)
	assert.Positive(t, value(t, rep, workloadSteady, "client heap in use at end").Value)

	for _, n := range []string{"20", "200", "2000"} {
		assert.Positive(t, value(t, rep, workloadScale, "lease 1 beside "+n+" terminal").Value)
		assert.Positive(t, value(t, rep, workloadScale, "claim 1 beside "+n+" terminal").Value)
	}
	assert.Contains(t, []verdict{verdictPass, verdictFail}, value(t, rep, workloadScale, "lease latency, 2000 over 20").Verdict)

	value(t, rep, workloadSnapshot, "lease (granting) p50, last tenth")
	value(t, rep, workloadSnapshot, "dead tuples in deliveries at end")

	var left int
	pool := pgtest.Pool(t)
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_catalog.pg_namespace WHERE nspname LIKE 'ledgerbench\_%'`).Scan(&left))
	assert.Zero(t, left, "the run drops every schema it made")
}
