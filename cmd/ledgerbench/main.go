// Command ledgerbench measures the ledger under load, on the in-memory
// store or on PostgreSQL: throughput and latency, and on PostgreSQL what
// each drained item costs the server (WAL bytes, CPU, and the heap tuples
// and index entries each store call writes).
//
// Workloads (-workload, a comma-separated list; default all):
//
//	delivery-drain (a)  enqueue -items in batches, then -workers lease batches,
//	                    acknowledge and mark processed until every item ended,
//	                    -fanout items of a batch at once
//	outbox-drain (b)    enqueue -items outbox entries, then -workers claim
//	                    batches and mark each delivered, -fanout at once
//	cost                the two drains taken apart (PostgreSQL only): each
//	                    store call made for every item before the next, and
//	                    per item and call the heap tuples inserted, updated
//	                    (HOT or not) and deleted, the index entries and the
//	                    WAL bytes written
//	completions         lease -items in batches, then acknowledge and mark
//	                    processed each with its own call from -callers goroutines;
//	                    on PostgreSQL with group commit and without, side by side
//	steady (c)          producers offer -rate items/s for -duration while
//	                    -workers consumers lease and complete them, -fanout
//	                    at once; enqueue-to-completion latency
//	scale (d)           lease 1 and claim 1 beside 1,000 open records and
//	                    -scale-max/100, -scale-max/10 and -scale-max terminal ones
//	snapshot (e)        the steady workload for -snapshot-duration while another
//	                    session holds a REPEATABLE READ snapshot (PostgreSQL only)
//	memory              heap for 1,000,000 open deliveries (in memory only)
//	ceilings            what the server itself does (PostgreSQL only; measured
//	                    first in every PostgreSQL run)
//
// A worker that leased (or claimed) a batch completes -fanout of its items
// at once, each in a goroutine of its own, as a host does that processes
// the batch it leased in parallel; -fanout 0, the default, means the whole
// batch, and -fanout 1 completes one item after another. Concurrent
// completions are what pgstore's group commit coalesces into shared
// transactions: one item at a time per worker leaves a group no more calls
// than there are workers, and every item pays for about two commits.
//
// Each drain, and each run of the completions workload, also reports, per
// item, the client's CPU (this process's user and system time, where the
// store's Go code runs) and, on PostgreSQL, the WAL bytes written (the WAL
// position before and after the timed part, divided by the items: a
// figure that does not move with the machine) and the server's CPU (the
// postmaster and its children, read from /proc; "not measured" when the
// server is not on this machine).
//
// What is judged: the scale targets (lease 1 and claim 1 beside
// -scale-max terminal records within 1.5x of beside -scale-max/100) and
// the in-memory heap for 1,000,000 deliveries, each with PASS or FAIL. The
// ceilings, the single-row UPDATE transactions/s and batched UPDATE rows/s
// the server manages in the same run, are printed as context, with each
// rate's and latency's ratio to them; no drain, completion, steady or
// snapshot figure is judged against them, and the held snapshot's
// degradation is printed for information.
//
// With -store pg and no -dsn it starts a throwaway cluster with default
// server settings (fsync and synchronous_commit on) and removes it
// afterwards, also when interrupted. Each workload runs in a fresh schema,
// dropped when it ends.
//
// A progress line goes to stderr while it runs; the report goes to stdout,
// as a table or, with -json, as one JSON document. A target that is not met
// is a measurement, not an error: the exit status is non-zero only when the
// run itself fails.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"
)

// storeKind names the store under test.
type storeKind string

const (
	storeMem storeKind = "mem"
	storePG  storeKind = "pg"
)

// workloadName names one workload of the -workload flag.
type workloadName string

// The workloads, in the order a run measures them.
const (
	workloadCeilings      workloadName = "ceilings"
	workloadDeliveryDrain workloadName = "delivery-drain"
	workloadOutboxDrain   workloadName = "outbox-drain"
	workloadCost          workloadName = "cost"
	workloadCompletions   workloadName = "completions"
	workloadSteady        workloadName = "steady"
	workloadScale         workloadName = "scale"
	workloadSnapshot      workloadName = "snapshot"
	workloadMemory        workloadName = "memory"
)

// allWorkloads is every workload in run order.
func allWorkloads() []workloadName {
	return []workloadName{workloadCeilings, workloadDeliveryDrain, workloadOutboxDrain, workloadCost,
		workloadCompletions, workloadSteady, workloadScale, workloadSnapshot, workloadMemory}
}

// workloadLetters are the names for the workloads it lettered.
var workloadLetters = map[string]workloadName{
	"a": workloadDeliveryDrain, "b": workloadOutboxDrain, "c": workloadSteady,
	"d": workloadScale, "e": workloadSnapshot,
}

// pgOnly reports whether w runs on PostgreSQL only. "all" leaves out the
// workloads the chosen store cannot run; an explicit list rejects them.
// The cost workload is not one of them: in memory it runs to say, in the
// report, that it measures PostgreSQL only.
func (w workloadName) pgOnly() bool { return w == workloadSnapshot || w == workloadCeilings }

// memOnly reports whether w runs in memory only.
func (w workloadName) memOnly() bool { return w == workloadMemory }

// defaultMemoryItems is how many open deliveries the memory workload holds.
const defaultMemoryItems = 1_000_000

// defaultCallers is the completions workload's goroutines: the items a
// busy worker process has in hand at once, each finished with calls of
// its own. Far more callers than sessions is what group commit is for;
// the sessions stay those of the pool (-workers and a few).
const defaultCallers = 256

// config is one run's settings, from the flags.
type config struct {
	store            storeKind
	dsn              string
	workers          int
	items            int
	batch            int
	duration         time.Duration
	rate             float64
	scaleMax         int
	scaleCalls       int
	snapshotDuration time.Duration
	ceilingDuration  time.Duration
	memoryItems      int
	workloads        []workloadName
	json             bool
	// groupCommit is pgstore.WithGroupCommit for every store of the run
	// (the completions workload measures both ways regardless).
	groupCommit bool
	// callers is how many goroutines make the completions workload's
	// calls, each one call at a time.
	callers int
	// fanout is how many items of its batch a drain or steady worker
	// completes at once; 0 means the whole batch (see completeFanout).
	fanout int
	// cpuProfile is where -cpuprofile writes; empty for none.
	cpuProfile string
}

// completeFanout is the number of items of a leased or claimed batch that
// a worker completes at once: -fanout, or the batch size for 0. A batch
// holds no more than -batch items, so neither does the fanout.
func (c config) completeFanout() int {
	if c.fanout == 0 {
		return c.batch
	}
	return min(c.fanout, c.batch)
}

// selected reports whether the run includes w.
func (c config) selected(w workloadName) bool { return slices.Contains(c.workloads, w) }

// defaultConfig is the full run: the sizes.
func defaultConfig() config {
	return config{
		store:            storeMem,
		workers:          8,
		items:            20_000,
		batch:            100,
		duration:         30 * time.Second,
		rate:             1000,
		scaleMax:         1_000_000,
		scaleCalls:       300,
		snapshotDuration: 60 * time.Second,
		ceilingDuration:  5 * time.Second,
		memoryItems:      defaultMemoryItems,
		groupCommit:      true,
		callers:          defaultCallers,
	}
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ledgerbench:", err)
		os.Exit(2)
	}
	// The first interrupt cancels the run, which then cleans up (drops
	// its schemas, stops the cluster) on its way out.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = profiled(cfg.cpuProfile, func() error { return run(ctx, cfg, os.Stdout, os.Stderr) })
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ledgerbench:", err)
		os.Exit(1)
	}
}

// profiled runs fn, under the CPU profiler writing to path unless path is
// empty: where the client's own time goes decides whether a figure
// measures the store or the benchmark.
func profiled(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return err
	}
	runErr := fn()
	pprof.StopCPUProfile()
	return errors.Join(runErr, f.Close())
}

// parseFlags reads the command line into a config and checks it.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("ledgerbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageText)
		fs.PrintDefaults()
	}
	store := fs.String("store", string(cfg.store), "store under test: mem or pg")
	fs.StringVar(&cfg.dsn, "dsn", "", "PostgreSQL URL for -store pg; empty starts a throwaway cluster")
	fs.IntVar(&cfg.workers, "workers", cfg.workers, "concurrent workers (and ceiling sessions)")
	fs.IntVar(&cfg.items, "items", cfg.items, "items per drain, cost and completions workload")
	fs.IntVar(&cfg.batch, "batch", cfg.batch, "enqueue, lease and claim batch size (1 to 1000)")
	fs.DurationVar(&cfg.duration, "duration", cfg.duration, "length of the steady workload")
	fs.Float64Var(&cfg.rate, "rate", cfg.rate, "items/s offered by the steady workload's producers")
	fs.IntVar(&cfg.scaleMax, "scale-max", cfg.scaleMax, "largest terminal-row count of the scale workload (also runs /10 and /100)")
	fs.IntVar(&cfg.scaleCalls, "scale-calls", cfg.scaleCalls, "timed lease and claim calls per size of the scale workload")
	fs.DurationVar(&cfg.snapshotDuration, "snapshot-duration", cfg.snapshotDuration, "length of the held-snapshot workload")
	fs.DurationVar(&cfg.ceilingDuration, "ceiling-duration", cfg.ceilingDuration, "length of each ceiling measurement")
	workloads := fs.String("workload", "all", "comma-separated workloads: "+workloadList()+", or all")
	fs.BoolVar(&cfg.json, "json", false, "print one JSON document instead of the table")
	fs.BoolVar(&cfg.groupCommit, "group-commit", cfg.groupCommit, "PostgreSQL: coalesce concurrent per-item completions into shared transactions (pgstore.WithGroupCommit)")
	fs.IntVar(&cfg.callers, "callers", cfg.callers, "goroutines making the completions workload's calls (1 to 4096)")
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run (this process: the client side) to this file")
	fs.IntVar(&cfg.fanout, "fanout", cfg.fanout, "items of a leased or claimed batch each drain and steady worker completes at once, each in its own goroutine; 0 means -batch, 1 one after another")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	cfg.store = storeKind(*store)
	// The memory workload holds a million deliveries unless -items asks
	// for fewer.
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "items" && cfg.items < cfg.memoryItems {
			cfg.memoryItems = cfg.items
		}
	})
	var err error
	if cfg.workloads, err = parseWorkloads(*workloads, cfg.store); err != nil {
		return config{}, err
	}
	return cfg, cfg.validate()
}

// usageText heads -h.
const usageText = `Usage: ledgerbench [flags]

Measures the ledger under load, in memory (-store mem) or on PostgreSQL
(-store pg; a throwaway cluster unless -dsn is given), and prints a report.

Workloads (-workload, comma-separated; default all the store can run):
  delivery-drain (a)  lease, acknowledge, processed a backlog of -items
  outbox-drain (b)    claim and mark delivered a backlog of -items entries
  cost                per item and store call of both drains: heap tuples
                      inserted, updated (HOT or not) and deleted, index
                      entries and WAL bytes (PostgreSQL only)
  completions         per-item acknowledge and processed from -callers
  steady (c)          -rate items/s for -duration: enqueue-to-completion latency
  scale (d)           lease 1 and claim 1 beside up to -scale-max ended records
  snapshot (e)        the steady workload while a snapshot is held (PostgreSQL)
  memory              heap for 1,000,000 open deliveries (in memory)
  ceilings            what the server itself does (PostgreSQL; always first)

Each drain and completions run also prints, per item, the client's CPU
and, on PostgreSQL, the WAL bytes and the server's CPU (when the server is
on this machine). Only
the scale targets (within 1.5x of the smallest size) and the in-memory heap
get PASS or FAIL; the ceilings are context, and the held snapshot's
degradation is for information.

Flags:
`

func workloadList() string {
	names := make([]string, 0, len(allWorkloads()))
	for _, w := range allWorkloads() {
		names = append(names, string(w))
	}
	return strings.Join(names, ", ")
}

// parseWorkloads turns the -workload value into the run's workloads, in
// run order.
func parseWorkloads(list string, store storeKind) ([]workloadName, error) {
	if list == "" || list == "all" {
		var out []workloadName
		for _, w := range allWorkloads() {
			if (store == storeMem && w.pgOnly()) || (store == storePG && w.memOnly()) {
				continue
			}
			out = append(out, w)
		}
		return out, nil
	}
	want := map[workloadName]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		w, ok := workloadLetters[name]
		if !ok {
			w = workloadName(name)
		}
		switch {
		case !slices.Contains(allWorkloads(), w):
			return nil, fmt.Errorf("-workload: unknown workload %q (known: %s)", name, workloadList())
		case store == storeMem && w.pgOnly():
			return nil, fmt.Errorf("-workload: %s needs -store pg", w)
		case store == storePG && w.memOnly():
			return nil, fmt.Errorf("-workload: %s needs -store mem", w)
		}
		want[w] = true
	}
	var out []workloadName
	for _, w := range allWorkloads() {
		if want[w] {
			out = append(out, w)
		}
	}
	return out, nil
}

// validate rejects settings no workload can run with.
func (c config) validate() error {
	switch {
	case c.store != storeMem && c.store != storePG:
		return fmt.Errorf("-store must be mem or pg, not %q", c.store)
	case c.store == storeMem && c.dsn != "":
		return errors.New("-dsn needs -store pg")
	case c.workers < 1 || c.workers > 128:
		// Each worker holds a connection; the throwaway cluster allows 200.
		return errors.New("-workers must be between 1 and 128")
	case c.items < 1:
		return errors.New("-items must be positive")
	case c.callers < 1 || c.callers > 4096:
		return errors.New("-callers must be between 1 and 4096")
	case c.batch < 1 || c.batch > 1000:
		return errors.New("-batch must be between 1 and 1000")
	case c.fanout < 0:
		return errors.New("-fanout must not be negative (0 means -batch)")
	case c.duration <= 0 || c.snapshotDuration <= 0 || c.ceilingDuration <= 0:
		return errors.New("-duration, -snapshot-duration and -ceiling-duration must be positive")
	case c.rate <= 0:
		return errors.New("-rate must be positive")
	case c.scaleMax < 100 || c.scaleMax > maxScale:
		return fmt.Errorf("-scale-max must be between 100 and %d", maxScale)
	case c.scaleCalls < 1 || c.scaleCalls > scaleOpen/2:
		return fmt.Errorf("-scale-calls must be between 1 and %d", scaleOpen/2)
	}
	return nil
}

// run measures the selected workloads and writes the report to stdout and
// progress to stderr. The report is written also when a workload fails or
// the run is interrupted, with what was measured until then.
func run(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	prog := newProgress(stderr)
	e, err := openEnv(ctx, cfg, prog)
	if err != nil {
		return err
	}
	defer e.close()
	rep := newReport(cfg, e.server)
	runErr := e.runAll(ctx, rep)
	if runErr != nil && ctx.Err() != nil {
		runErr = fmt.Errorf("interrupted: %w", runErr)
	}
	if runErr != nil {
		rep.note("incomplete: " + runErr.Error())
	}
	return errors.Join(runErr, rep.write(stdout, cfg.json))
}

// runAll runs the selected workloads in order, ceilings first so that
// every later figure can be set against them.
func (e *env) runAll(ctx context.Context, rep *report) error {
	if e.cfg.store == storePG {
		c, err := e.measureCeilings(ctx)
		if err != nil {
			return fmt.Errorf("ceilings: %w", err)
		}
		rep.setCeilings(c)
	}
	steps := []struct {
		name workloadName
		fn   func(context.Context, *report) error
	}{
		{workloadDeliveryDrain, e.deliveryDrain},
		{workloadOutboxDrain, e.outboxDrain},
		{workloadCost, e.cost},
		{workloadCompletions, e.completions},
		{workloadSteady, e.steady},
		{workloadScale, e.scale},
		{workloadSnapshot, e.snapshot},
		{workloadMemory, e.memory},
	}
	for _, s := range steps {
		if !e.cfg.selected(s.name) {
			continue
		}
		if err := s.fn(ctx, rep); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return nil
}
