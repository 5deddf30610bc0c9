package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/dispatch"
)

// errDown stands for a database that does not answer.
var errDown = errors.New("connection refused")

// errUnmigrated stands for a store that cannot work at all.
var errUnmigrated = fmt.Errorf("schema not migrated: %w", ledger.ErrUnusable)

// switchable holds the error a broken store answers, nil when it works.
type switchable struct {
	mu  sync.Mutex
	err error
}

func (s *switchable) set(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

func (s *switchable) get() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// brokenLedger fails Lease and Get with its switch's error.
type brokenLedger struct {
	ledger.Ledger
	down *switchable
}

func (b brokenLedger) Lease(ctx context.Context, f ledger.LeaseFilter, o ledger.Owner, now time.Time, d time.Duration, n int) (ledger.LeaseResult, error) {
	if err := b.down.get(); err != nil {
		return ledger.LeaseResult{}, err
	}
	return b.Ledger.Lease(ctx, f, o, now, d, n)
}

func (b brokenLedger) Get(ctx context.Context, id ledger.DeliveryID) (ledger.Delivery, error) {
	if err := b.down.get(); err != nil {
		return ledger.Delivery{}, err
	}
	return b.Ledger.Get(ctx, id)
}

// brokenExpireLedger fails Expire only.
type brokenExpireLedger struct {
	ledger.Ledger
	err error
}

func (b brokenExpireLedger) Expire(context.Context, time.Time) (ledger.SweepResult, error) {
	return ledger.SweepResult{}, b.err
}

// brokenOutbox fails the claims and FindByID with its switch's error.
type brokenOutbox struct {
	ledger.ClaimStore
	down *switchable
}

func (b brokenOutbox) ClaimRetryReady(ctx context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	if err := b.down.get(); err != nil {
		return nil, err
	}
	return b.ClaimStore.ClaimRetryReady(ctx, req)
}

func (b brokenOutbox) ClaimPending(ctx context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	if err := b.down.get(); err != nil {
		return nil, err
	}
	return b.ClaimStore.ClaimPending(ctx, req)
}

func (b brokenOutbox) FindByID(ctx context.Context, id ledger.OutboxEntryID) (ledger.OutboxEntry, error) {
	if err := b.down.get(); err != nil {
		return ledger.OutboxEntry{}, err
	}
	return b.ClaimStore.FindByID(ctx, id)
}

// logRecorder is a slog.Handler that keeps the messages logged.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Message)
	return nil
}

func (r *logRecorder) count(msg string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.msgs {
		if m == msg {
			n++
		}
	}
	return n
}

const (
	msgBackingOff = "dispatch: cycle failed; backing off"
	msgWorksAgain = "dispatch: the store works again"
)

func anyTimer(time.Duration) bool { return true }

// TestRunBacksOffWhileTheStoreIsDown: cycles that fail wait longer and
// longer (doubling from the poll interval to MaxErrorBackoff, with
// jitter), are logged once per doubling of the count, and Ready says the
// loop is not ready until a cycle works again; for both loops.
func TestRunBacksOffWhileTheStoreIsDown(t *testing.T) {
	t.Parallel()
	type loop struct{ run, ready func(context.Context) error }
	build := map[string]func(clk *testClock, down *switchable, opts []dispatch.LoopOption) loop{
		"worker": func(clk *testClock, down *switchable, opts []dispatch.LoopOption) loop {
			wopts := []dispatch.WorkerOption{dispatch.WithoutSweeper()}
			for _, o := range opts {
				wopts = append(wopts, o)
			}
			w := newWorker(t, brokenLedger{Ledger: newLedger(clk), down: down}, "agent", answer(newHandlerCalls(), dispatch.Decision{}, nil), wopts...)
			return loop{w.Run, w.Ready}
		},
		"dispatcher": func(clk *testClock, down *switchable, opts []dispatch.LoopOption) loop {
			dopts := make([]dispatch.DispatcherOption, 0, len(opts))
			for _, o := range opts {
				dopts = append(dopts, o)
			}
			d, err := dispatch.NewDispatcher(brokenOutbox{ClaimStore: newOutbox(clk), down: down}, dispatch.EmitterFunc(
				func(context.Context, ledger.OutboxEntry) (ledger.EmissionResult, error) {
					return ledger.EmissionResult{}, nil
				}), dopts...)
			require.NoError(t, err)
			return loop{d.Run, d.Ready}
		},
	}
	for name, mk := range build {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			down := &switchable{}
			timers := &fakeTimers{}
			obs := newCounter()
			logs := &logRecorder{}
			l := mk(clk, down, []dispatch.LoopOption{
				dispatch.WithClock(clk.Now), dispatch.WithAfterFunc(timers.AfterFunc), dispatch.WithObserver(obs),
				dispatch.WithLogger(slog.New(logs)), dispatch.WithPollInterval(time.Second), dispatch.WithoutPollJitter(),
			})
			require.NoError(t, l.ready(context.Background()), "an idle loop over a working store is ready")
			down.set(errDown)
			ctx, cancel := context.WithCancel(context.Background())
			runErr := make(chan error, 1)
			go func() { runErr <- l.run(ctx) }()

			step := time.Second
			for n := 1; n <= 8; n++ {
				var waits []time.Duration
				require.Eventually(t, func() bool {
					waits = timers.ActiveWhere(anyTimer)
					return len(waits) == 1
				}, waitLimit, time.Millisecond)
				assert.GreaterOrEqual(t, waits[0], step/2, "failure %d", n)
				assert.LessOrEqual(t, waits[0], step, "failure %d", n)
				err := l.ready(context.Background())
				require.ErrorIs(t, err, dispatch.ErrNotReady)
				require.ErrorIs(t, err, errDown)
				require.Equal(t, 1, timers.FireWhere(anyTimer))
				step = min(2*step, dispatch.MaxErrorBackoff)
			}
			require.Eventually(t, func() bool { return obs.Count(dispatch.EventStoreError) == 9 }, waitLimit, time.Millisecond)
			assert.Equal(t, 4, logs.count(msgBackingOff), "failures 1, 2, 4 and 8 are logged")

			down.set(nil)
			require.Eventually(t, func() bool { return timers.FireWhere(anyTimer) == 1 }, waitLimit, time.Millisecond)
			require.Eventually(t, func() bool { return timers.Active(time.Second) == 1 }, waitLimit, time.Millisecond,
				"back to the poll interval")
			assert.Equal(t, 1, logs.count(msgWorksAgain))
			require.NoError(t, l.ready(context.Background()))

			cancel()
			require.NoError(t, receive(t, runErr, "Run"))
		})
	}
}

// TestRunStopsOnAStoreThatCannotWork: an error matching
// ledger.ErrUnusable stops Run at once with that error, for both loops,
// and Ready keeps saying why.
func TestRunStopsOnAStoreThatCannotWork(t *testing.T) {
	t.Parallel()
	clk := newClock()
	down := &switchable{}
	down.set(errUnmigrated)
	run := map[string]func(*fakeTimers, dispatch.Observer) (func(context.Context) error, func(context.Context) error){
		"worker": func(timers *fakeTimers, obs dispatch.Observer) (func(context.Context) error, func(context.Context) error) {
			w := newWorker(t, brokenLedger{Ledger: newLedger(clk), down: down}, "agent", answer(newHandlerCalls(), dispatch.Decision{}, nil),
				append(workerOptions(clk, timers, obs), dispatch.WithoutSweeper())...)
			return w.Run, w.Ready
		},
		"dispatcher": func(timers *fakeTimers, obs dispatch.Observer) (func(context.Context) error, func(context.Context) error) {
			d, err := dispatch.NewDispatcher(brokenOutbox{ClaimStore: newOutbox(clk), down: down}, dispatch.EmitterFunc(
				func(context.Context, ledger.OutboxEntry) (ledger.EmissionResult, error) {
					return ledger.EmissionResult{}, nil
				}),
				baseOptions(clk, timers, obs)...)
			require.NoError(t, err)
			return d.Run, d.Ready
		},
	}
	for name, mk := range run {
		t.Run(name, func(t *testing.T) {
			timers := &fakeTimers{}
			runFn, ready := mk(timers, newCounter())
			done := make(chan error, 1)
			go func() { done <- runFn(context.Background()) }()
			err := receive(t, done, "Run")
			require.ErrorIs(t, err, ledger.ErrUnusable)
			require.ErrorIs(t, err, errUnmigrated)
			assert.Empty(t, timers.ActiveWhere(anyTimer), "no retry was scheduled")
			err = ready(context.Background())
			require.ErrorIs(t, err, dispatch.ErrNotReady)
			require.ErrorIs(t, err, ledger.ErrUnusable)
		})
	}
}

// TestWorkerStopsWhenItsSweeperCannotWork: the Worker's sweeper meeting a
// store that cannot work stops the Worker too (a schema migrated by an
// older version lacks what the sweeper needs).
func TestWorkerStopsWhenItsSweeperCannotWork(t *testing.T) {
	t.Parallel()
	clk := newClock()
	l := brokenExpireLedger{Ledger: newLedger(clk), err: errUnmigrated}
	timers := &fakeTimers{}
	w := newWorker(t, l, "agent", answer(newHandlerCalls(), dispatch.Decision{}, nil), workerOptions(clk, timers, newCounter())...)
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background()) }()
	err := receive(t, done, "Run")
	require.ErrorIs(t, err, ledger.ErrUnusable)
	require.ErrorIs(t, w.Ready(context.Background()), ledger.ErrUnusable)
}

// TestReadyTellsADeadStoreFromAnIdleQueue: Ready is nil over a store that
// answers, with or without work, and an error when the store does not
// answer, before Run ever ran.
func TestReadyTellsADeadStoreFromAnIdleQueue(t *testing.T) {
	t.Parallel()
	clk := newClock()
	down := &switchable{}
	w := newWorker(t, brokenLedger{Ledger: newLedger(clk), down: down}, "agent", answer(newHandlerCalls(), dispatch.Decision{}, nil),
		workerOptions(clk, &fakeTimers{}, newCounter())...)
	d, err := dispatch.NewDispatcher(brokenOutbox{ClaimStore: newOutbox(clk), down: down}, dispatch.EmitterFunc(
		func(context.Context, ledger.OutboxEntry) (ledger.EmissionResult, error) {
			return ledger.EmissionResult{}, nil
		}))
	require.NoError(t, err)
	s := newSweeper(t, brokenLedger{Ledger: newLedger(clk), down: down}, nil)
	for name, ready := range map[string]func(context.Context) error{"worker": w.Ready, "dispatcher": d.Ready, "sweeper": s.Ready} {
		down.set(nil)
		require.NoError(t, ready(context.Background()), name)
		down.set(errDown)
		err := ready(context.Background())
		require.ErrorIs(t, err, dispatch.ErrNotReady, name)
		require.ErrorIs(t, err, errDown, name)
		require.ErrorIs(t, ready(nilContext()), ledger.ErrInvalid, name)
	}
}

// nilContext returns a nil context without tripping vet.
func nilContext() context.Context { return nil }
