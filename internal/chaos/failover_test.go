package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/dispatch"
	"github.com/leaseledger/ledger/internal/pgcluster"
	"github.com/leaseledger/ledger/pgstore"
)

// This file is the failover test: the dispatch loops drain both ledgers
// of a primary with a synchronous standby while the primary is killed
// and the standby promoted, and the checker of the fault test explains
// every end afterwards. See doc.go.

const (
	faultFailover   faultKind = "failover"   // the primary killed (SIGKILL), the standby promoted
	faultSwitchover faultKind = "switchover" // the primary shut down cleanly, the standby promoted
)

// failoverPlan sizes a failover run.
type failoverPlan struct {
	items      int // deliveries, and as many outbox entries
	rate       int // of each kind enqueued per second
	loops      int // Workers, and as many Dispatchers
	kills      int // failovers after a SIGKILL of the primary
	switchover bool
	lease      time.Duration
}

// failoverPlanFor returns the short form (make test: one failover), or
// the full one with -chaos.full (make chaos: three failovers and a
// switchover).
func failoverPlanFor() failoverPlan {
	if *fullRun {
		return failoverPlan{items: 6000, rate: 200, loops: 4, kills: 3, switchover: true, lease: 2 * time.Second}
	}
	return failoverPlan{items: 600, rate: 100, loops: 2, kills: 1, lease: time.Second}
}

// faultEvent is one role change of the pair, in wall-clock nanoseconds:
// when the primary was gone (killed, or shut down), when the standby accepted writes, when the
// old primary was back as the synchronous standby.
type faultEvent struct {
	kind                   faultKind
	down, promoted, rejoin int64
}

func TestChaosFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a primary and a standby of its own and fails over under load")
	}
	plan := failoverPlanFor()
	pair := startPair(t)
	f := newFailoverRun(t, plan)
	ctx := t.Context()
	dsn := pair.DSN()
	f.pair = pair

	admin, err := newPool(ctx, dsn, "failover-admin", false)
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	schema := fmt.Sprintf("failover_%x", f.rng.Uint64())
	migrator, err := pgstore.New(admin, pgstore.WithSchema(schema))
	require.NoError(t, err)
	require.NoError(t, migrator.Migrate(ctx))
	f.open = func(ctx context.Context, proc string) backend {
		cfg, err := pgxpool.ParseConfig(dsn)
		require.NoError(t, err)
		cfg.ConnConfig.RuntimeParams["search_path"] = ""
		cfg.ConnConfig.RuntimeParams["application_name"] = "failover-" + proc
		cfg.MaxConns = 4
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		f.pmu.Lock()
		f.pools = append(f.pools, pool)
		f.pmu.Unlock()
		s, err := pgstore.New(pool, pgstore.WithSchema(schema))
		require.NoError(t, err)
		return backend{deliveries: s, entries: s.Outbox()}
	}
	defer f.closePools()
	events := f.drive(ctx)
	require.Len(t, events, plan.kills+btoi(plan.switchover), "the planned role changes did not all happen")

	// The drain and the reads go through a pool opened after the last
	// role change, so that no connection of theirs died with a primary.
	clean := f.newWorker("clean", false)
	// The drain's clock is years ahead of the server's, so every call
	// would warn of skew: it logs nowhere.
	quiet := pgSetting{name: "caller_clock", opts: []pgstore.Option{pgstore.WithLogger(slog.New(slog.DiscardHandler))}}
	after, pool, err := pgBackend(ctx, dsn, schema, "chaos-after", false, clean.stamp, quiet)
	require.NoError(t, err)
	f.pools = append(f.pools, pool)
	clean.main = after
	f.drain(ctx, clean)

	calls := f.log.history()
	rows, err := pool.Query(ctx, "SELECT id FROM "+pgx.Identifier{schema}.Sanitize()+".outbox_entries")
	require.NoError(t, err)
	more, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	final := readFinal(ctx, t, after, append(entryIDs(calls), more...))
	final.allEntries = true
	f.verify(calls, final, checkOptions{planned: plan.items})
	t.Logf("recovery of %s:\n%s", t.Name(), recoveryFigures(calls, events))
	for _, d := range recoveries(calls, events) {
		assert.Positive(t, d, "the loops did not complete work again after every role change")
	}
}

// newFailoverRun returns the state of a run of plan, without stores.
func newFailoverRun(t *testing.T, plan failoverPlan) *failoverRun {
	p := params{Items: plan.items, Workers: 2 * plan.loops, Lease: plan.lease, MaxHeld: 4, IdleLimit: 40}
	p.MaxCalls = 5*p.Items + 1000
	r := newRun(t, p, newShared())
	return &failoverRun{run: r, plan: plan, targets: &targetBook{m: map[string]string{}},
		hrng: rand.New(rand.NewPCG(r.rng.Uint64(), 3))}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// startPair starts the primary and its standby. Without server binaries
// the test skips, except under CI=true, where it fails.
func startPair(t *testing.T) *pgcluster.Replicated {
	t.Helper()
	if _, err := pgcluster.Find(); err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatalf("CI=true, but the failover test needs the PostgreSQL server binaries: %v", err)
		}
		t.Skipf("the failover test needs the PostgreSQL server binaries: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	opts := pgcluster.Options{Fast: true}
	if testing.Verbose() {
		opts.Logf = t.Logf
	}
	pair, err := pgcluster.StartReplicated(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, pair.Stop()) })
	return pair
}

// failoverRun is the state of one failover run besides the run's own.
type failoverRun struct {
	*run
	plan failoverPlan
	// open returns both stores, on a connection pool of their own where
	// the store has one, for the loop proc. It is called from the test's
	// goroutine only.
	open func(ctx context.Context, proc string) backend
	// pair is the primary and standby whose roles change; nil: none.
	pair    *pgcluster.Replicated
	targets *targetBook
	// consumed counts the items processed or delivered, to time the role
	// changes by progress.
	consumed atomic.Int64
	hmu      sync.Mutex
	hrng     *rand.Rand // the handlers' and emitters' choices
	actions  atomic.Int64
	pmu      sync.Mutex
	pools    []*pgxpool.Pool
}

func (f *failoverRun) closePools() {
	f.pmu.Lock()
	defer f.pmu.Unlock()
	for _, p := range f.pools {
		p.Close()
	}
}

// recorder returns the recorder of the loop proc.
func (f *failoverRun) recorder(proc string) *recorder {
	return &recorder{proc: proc, sink: f.log, targets: f.targets, problems: f.problems, completed: func(c *call) {
		if c.Status == statusOK && (c.Fn == fnProcess || c.Fn == fnDeliver) {
			f.consumed.Add(1)
		}
	}}
}

// stores returns both stores of the loop proc, recorded.
func (f *failoverRun) stores(ctx context.Context, proc string) (*recordedDeliveries, *recordedEntries) {
	b := f.open(ctx, proc)
	rc := f.recorder(proc)
	return &recordedDeliveries{deliveryStore: b.deliveries, rc: rc}, &recordedEntries{entryStore: b.entries, rc: rc}
}

// drive runs the producer, the loops and the role changes until every
// item is enqueued, every role change happened and the loops finished
// what they could, then stops the loops. It returns the role changes.
func (f *failoverRun) drive(ctx context.Context) []faultEvent {
	t := f.t
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	loopCtx, stopLoops := context.WithCancel(ctx)
	defer stopLoops()
	discard := slog.New(slog.DiscardHandler)
	common := []dispatch.LoopOption{
		dispatch.WithLeaseDuration(f.plan.lease), dispatch.WithPollInterval(20 * time.Millisecond),
		dispatch.WithBatchSize(16), dispatch.WithConcurrency(4), dispatch.WithLogger(discard),
	}
	var loops sync.WaitGroup
	errs := make(chan error, 2*f.plan.loops)
	for i := range f.plan.loops {
		deliveries, _ := f.stores(ctx, fmt.Sprintf("worker-%d", i))
		opts := []dispatch.WorkerOption{dispatch.WithHandleTimeout(f.plan.lease / 2), dispatch.WithoutSweeper()}
		if i == 0 {
			// One sweeper ends what lapsed; over a store that is no
			// Elector every sweeper would sweep.
			opts[1] = dispatch.WithSweeper(dispatch.WithSweepInterval(time.Second))
		}
		for _, o := range common {
			opts = append(opts, o)
		}
		w, err := dispatch.NewWorker(deliveries, fmt.Sprintf("agent-%d", i), nil, handlerFunc(f.handle), opts...)
		require.NoError(t, err)
		loops.Go(func() { errs <- w.Run(loopCtx) })

		_, entries := f.stores(ctx, fmt.Sprintf("dispatcher-%d", i))
		dopts := []dispatch.DispatcherOption{
			dispatch.WithWorker(fmt.Sprintf("dispatcher-%d", i)), dispatch.WithEmitTimeout(f.plan.lease / 2),
			dispatch.WithPolicy(f.p.policy()),
		}
		for _, o := range common {
			dopts = append(dopts, o)
		}
		d, err := dispatch.NewDispatcher(entries, emitterFunc(f.emit), dopts...)
		require.NoError(t, err)
		loops.Go(func() { errs <- d.Run(loopCtx) })
	}

	var bg sync.WaitGroup
	// The producer holds its last items back until every role change is
	// made, so that there is work to come back to after the last one.
	held, changed := make(chan struct{}), make(chan struct{})
	deliveries, entries := f.stores(ctx, "producer")
	bg.Go(func() { f.produce(ctx, deliveries, entries, held, changed) })
	var events []faultEvent
	bg.Go(func() {
		defer close(changed)
		events = f.changeRoles(ctx, held)
	})
	bg.Wait()
	f.settle(ctx)
	stopLoops()
	loops.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err, "a loop stopped on an error")
	}
	require.NoError(t, ctx.Err(), "the run did not finish in time")
	return events
}

// produce enqueues every item, each kind at the plan's rate, in batches,
// trying a batch again while there is no primary, as a producer would (a
// repeat of one that committed answers Repeated). Before the last tenth
// of the items (at least two seconds' worth) it closes held and waits
// until changed is closed.
func (f *failoverRun) produce(ctx context.Context, deliveries *recordedDeliveries, entries *recordedEntries, held chan<- struct{}, changed <-chan struct{}) {
	const perSecond = 20
	batch := max(1, f.plan.rate/perSecond)
	tick := time.NewTicker(time.Second / perSecond)
	defer tick.Stop()
	policy := f.p.policy()
	holdAt := int64(f.plan.items - min(f.plan.items/2, max(f.plan.items/10, 2*f.plan.rate)))
	for {
		if f.sh.load(slotDeliveries) >= holdAt && held != nil {
			close(held)
			held = nil
			select {
			case <-ctx.Done():
			case <-changed:
			}
		}
		first := f.sh.take(slotDeliveries, int64(batch))
		if first >= int64(f.plan.items) {
			return
		}
		n := min(int64(batch), int64(f.plan.items)-first)
		reqs := make([]ledger.EnqueueRequest, n)
		for i := range reqs {
			id := deliveryID(first + int64(i))
			reqs[i] = ledger.EnqueueRequest{ID: id, Target: target(first + int64(i)), Payload: []byte(id), Policy: policy}
		}
		f.retry(ctx, func() error { _, err := deliveries.EnqueueBatch(ctx, reqs, time.Now()); return err })
		f.sh.take(slotEntries, n)
		envs := make([]ledger.Envelope, n)
		for i := range envs {
			key := entryKey(first + int64(i))
			envs[i] = ledger.Envelope{Provider: "provider", Kind: "failover", Payload: []byte(key), IdempotencyKey: key}
		}
		f.retry(ctx, func() error { _, err := entries.EnqueueBatch(ctx, envs); return err })
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// retry makes call until it succeeds, up to a bound well past a role
// change, pausing between tries.
func (f *failoverRun) retry(ctx context.Context, call func() error) {
	for range 300 {
		if call() == nil || ctx.Err() != nil {
			return
		}
		pause := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-pause.C:
		}
		pause.Stop()
	}
}

// changeRoles makes the plan's role changes, each at a random point of
// progress (items processed or delivered) in its share of the run, one
// after the other: the next waits until the old primary is back as the
// synchronous standby. A change whose point the loops do not reach before
// the producer holds its last items back happens then, while the loops
// drain what is open.
func (f *failoverRun) changeRoles(ctx context.Context, held <-chan struct{}) []faultEvent {
	if f.pair == nil {
		return nil
	}
	kinds := slices.Repeat([]faultKind{faultFailover}, f.plan.kills)
	if f.plan.switchover {
		kinds = slices.Insert(kinds, f.rng.IntN(len(kinds)+1), faultSwitchover)
	}
	var events []faultEvent
	share := float64(f.plan.items) / float64(len(kinds))
	for i, k := range kinds {
		at := int64(share * (float64(i) + 0.2 + 0.6*f.rng.Float64()))
		for f.consumed.Load() < at {
			wait := time.NewTimer(5 * time.Millisecond)
			select {
			case <-ctx.Done():
				wait.Stop()
				return events
			case <-held:
				at = 0
			case <-wait.C:
			}
			wait.Stop()
		}
		ev, err := f.changeRole(ctx, k)
		if err != nil {
			f.problems.add("%s: %v", k, err)
			return events
		}
		f.faults.add(k)
		events = append(events, ev)
	}
	return events
}

func (f *failoverRun) changeRole(ctx context.Context, k faultKind) (faultEvent, error) {
	ev := faultEvent{kind: k}
	var err error
	if k == faultSwitchover {
		err = f.pair.ShutdownPrimary()
	} else {
		err = f.pair.KillPrimary()
	}
	if err != nil {
		return ev, err
	}
	// Times count from when the primary is gone: a call that started
	// before may still have completed on it.
	ev.down = time.Now().UnixNano()
	if err := f.pair.Promote(ctx); err != nil {
		return ev, err
	}
	ev.promoted = time.Now().UnixNano()
	if err := f.pair.Rejoin(ctx); err != nil {
		return ev, err
	}
	ev.rejoin = time.Now().UnixNano()
	return ev, nil
}

// settle lets the loops finish what is open, up to a bound: what they
// leave (an acknowledgement whose MarkProcessed was lost, say) the drain
// ends. The loops run on wall time, so this waits on it.
func (f *failoverRun) settle(ctx context.Context) {
	b := f.open(ctx, "settle")
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		ds, err1 := b.deliveries.Stats(ctx, ledger.StatsFilter{}, time.Now())
		es, err2 := b.entries.OutboxStats(ctx, time.Now())
		if err1 == nil && err2 == nil {
			open := 0
			for st, n := range ds.ByState {
				if !st.Terminal() {
					open += int(n)
				}
			}
			for st, n := range es.ByStatus {
				if !st.Terminal() {
					open += int(n)
				}
			}
			if open == 0 {
				return
			}
		}
		wait := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-wait.C:
		}
		wait.Stop()
	}
}

// handle is the Workers' handler: it processes most deliveries, under a
// fence of their target (a fresh one mostly, sometimes none, sometimes
// one already passed on purpose), and releases or fails the others.
func (f *failoverRun) handle(_ context.Context, d ledger.Delivery) (dispatch.Decision, error) {
	f.hmu.Lock()
	p, q := f.hrng.IntN(100), f.hrng.IntN(100)
	back := f.hrng.Int64N(3)
	f.hmu.Unlock()
	switch {
	case p < 4:
		return dispatch.Released(), nil
	case p < 9:
		return dispatch.Decision{}, errors.New("handler refused")
	case p < 11:
		return dispatch.Decision{}, dispatch.Permanent(errors.New("handler gave up"))
	}
	dec := dispatch.Processed(ledger.ActionRef(fmt.Sprintf("act-%d", f.actions.Add(1))))
	slot := slotFences + targetIndex(d.Target)
	switch {
	case q < 15:
	case q < 20:
		dec.Fence = ledger.FenceOf(max(0, f.sh.load(slot)-1-back))
	default:
		dec.Fence = ledger.FenceOf(f.sh.take(slot, 1) + 1)
	}
	return dec, nil
}

// emit is the Dispatchers' emitter: it delivers most entries and fails
// the others, for a retry or for good.
func (f *failoverRun) emit(_ context.Context, e ledger.OutboxEntry) (ledger.EmissionResult, error) {
	f.hmu.Lock()
	p := f.hrng.IntN(100)
	f.hmu.Unlock()
	ref := fmt.Sprintf("%s#%d", e.ID, e.ClaimSeq)
	switch {
	case p < 6:
		return ledger.EmissionResult{}, errors.New("provider refused " + ref)
	case p < 8:
		return ledger.EmissionResult{}, dispatch.Permanent(errors.New("provider rejected " + ref))
	}
	return ledger.EmissionResult{ProviderRef: ref}, nil
}

type handlerFunc func(ctx context.Context, d ledger.Delivery) (dispatch.Decision, error)

func (h handlerFunc) Handle(ctx context.Context, d ledger.Delivery) (dispatch.Decision, error) {
	return h(ctx, d)
}

type emitterFunc func(ctx context.Context, e ledger.OutboxEntry) (ledger.EmissionResult, error)

func (e emitterFunc) Emit(ctx context.Context, entry ledger.OutboxEntry) (ledger.EmissionResult, error) {
	return e(ctx, entry)
}

// recoveries returns, per role change, the time from the primary going
// down until both ledgers completed work again: a MarkProcessed and a
// MarkClaimDelivered that applied, each made after it went down. Zero
// means one of them never did.
func recoveries(calls []call, events []faultEvent) []time.Duration {
	out := make([]time.Duration, len(events))
	for i, ev := range events {
		first := map[fn]int64{}
		for _, c := range calls {
			if c.Status != statusOK || (c.Fn != fnProcess && c.Fn != fnDeliver) || c.Invoked <= ev.down {
				continue
			}
			if at, ok := first[c.Fn]; !ok || c.Returned < at {
				first[c.Fn] = c.Returned
			}
		}
		if len(first) == 2 {
			out[i] = time.Duration(max(first[fnProcess], first[fnDeliver]) - ev.down)
		}
	}
	return out
}

// recoveryFigures renders each role change and, over the failovers, the
// median and worst time until the loops completed work again.
func recoveryFigures(calls []call, events []faultEvent) string {
	rec := recoveries(calls, events)
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	s := ""
	var kills []time.Duration
	for i, ev := range events {
		s += fmt.Sprintf("  %d. %-10s standby promoted after %s, both ledgers completing work again after %s (%s after the promotion), old primary back as synchronous standby after %s\n",
			i+1, ev.kind, ms(time.Duration(ev.promoted-ev.down)), ms(rec[i]), ms(rec[i]-time.Duration(ev.promoted-ev.down)),
			ms(time.Duration(ev.rejoin-ev.down)))
		if ev.kind == faultFailover {
			kills = append(kills, rec[i])
		}
	}
	if len(kills) > 0 {
		slices.Sort(kills)
		s += fmt.Sprintf("  from a kill until the loops complete work again: median %s, worst %s (%d failovers)",
			ms(kills[len(kills)/2]), ms(kills[len(kills)-1]), len(kills))
	}
	return s
}
