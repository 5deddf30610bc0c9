package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// This file holds what the Run loops of the Dispatcher, the Worker and the
// Sweeper share: telling a store that cannot work at all (stop) from one
// that fails for a while (back off), logging a failing store once per
// doubling of its failures rather than once per poll, and the readiness
// check a host exposes.

// MaxErrorBackoff bounds the wait of a Run loop between cycles that
// failed, unless its poll or sweep interval is longer. The wait starts at
// about the interval and doubles with every failed cycle in a row, with
// jitter, so that a database that is down is not polled by every loop of
// every process in step.
const MaxErrorBackoff = 30 * time.Second

// readyProbeID is the ID Ready looks up to see that the store answers: a
// valid name that no record is expected to have (one that does is found,
// which is as good).
const readyProbeID = "dispatch.ready-probe"

// health is what a Run loop knows of its store: whether it runs, how
// many cycles in a row failed and with what, and the error it stopped on.
type health struct {
	mu       sync.Mutex
	running  bool
	stopped  bool
	failures int
	last     error
	fatal    error
}

func (h *health) begin() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running, h.stopped, h.failures, h.last, h.fatal = true, false, 0, nil, nil
}

func (h *health) end(fatal error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running, h.stopped = false, true
	if fatal != nil {
		h.fatal = fatal
	}
}

// failed records a failed cycle and returns how many failed in a row.
func (h *health) failed(err error) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failures++
	h.last = err
	return h.failures
}

// succeeded records a cycle that worked and returns how many had failed
// in a row before it.
func (h *health) succeeded() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.failures
	h.failures, h.last = 0, nil
	return n
}

// ready answers Ready: the error Run stopped on, a loop that stopped, a
// loop whose latest cycles failed, or a store that does not answer probe;
// nil when the store answers, whether or not there is work.
func (h *health) ready(ctx context.Context, probe func(context.Context) error) error {
	if err := storekit.ValidateContext(ctx); err != nil {
		return err
	}
	h.mu.Lock()
	fatal, stopped, failures, last := h.fatal, h.stopped, h.failures, h.last
	h.mu.Unlock()
	switch {
	case fatal != nil:
		return fmt.Errorf("%w: %w", ErrNotReady, fatal)
	case stopped:
		return fmt.Errorf("%w: Run has returned", ErrNotReady)
	case failures > 0:
		return fmt.Errorf("%w: the last %d cycles failed: %w", ErrNotReady, failures, last)
	}
	if err := probe(ctx); err != nil && !errors.Is(err, ledger.ErrNotFound) {
		return fmt.Errorf("%w: %w", ErrNotReady, err)
	}
	return nil
}

// errorBackoff returns the wait after the n-th failed cycle in a row:
// base doubled n-1 times, at most limit, of which a random half is
// dropped ("equal jitter": at least half the step, so the backoff still
// grows, and loops that failed together retry apart).
func errorBackoff(n int, base, limit time.Duration) time.Duration {
	d := min(base, limit)
	for i := 1; i < n && d < limit; i++ {
		d = min(2*d, limit)
	}
	if d < 2 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// worthLogging reports whether the n-th failure in a row is logged: the
// first, then each time the count doubles, so that a store down for an
// hour costs a dozen lines per loop, not one per poll.
func worthLogging(n int) bool { return n > 0 && bits.OnesCount(uint(n)) == 1 }

// sleep waits d on c's timers; it reports false when ctx ended first.
func (c *common) sleep(ctx context.Context, d time.Duration) bool {
	due := make(chan struct{})
	var once sync.Once
	stop := c.afterFunc(d, func() { once.Do(func() { close(due) }) })
	select {
	case <-due:
		return true
	case <-ctx.Done():
		stop()
		return false
	}
}

// loopSpec describes one Run loop for runLoop.
type loopSpec struct {
	what  string      // "dispatcher", "worker", "sweeper", for logs and errors
	attrs []slog.Attr // who the loop is, for logs
	// base and limit bound the backoff after failed cycles.
	base, limit time.Duration
	// cycle runs one cycle; more asks for the next at once.
	cycle func(ctx context.Context) (more bool, err error)
	// idle waits after a cycle that found nothing more; false when ctx ended.
	idle func(ctx context.Context) bool
	// view, when not nil, is told where each cycle began and which came
	// back short of a full batch, for the loops polling the same queue.
	view *queueView
}

// runLoop repeats spec's cycle until ctx ends (nil) or a cycle fails with
// ledger.ErrUnusable: the store cannot work until someone changes its
// set-up, so the loop stops and returns the error rather than retry what
// cannot succeed. Other failures are retried after errorBackoff; the
// first failure of a run of them is logged, then one per doubling of the
// count, and the recovery once.
func (c *common) runLoop(ctx context.Context, h *health, spec loopSpec) error {
	for {
		var n uint64
		if spec.view != nil {
			n = spec.view.begin()
		}
		more, err := spec.cycle(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if spec.view != nil && err == nil && !more {
			spec.view.short(n)
		}
		if err != nil && errors.Is(err, ledger.ErrUnusable) {
			err = fmt.Errorf("dispatch: %s stopped: %w", spec.what, err)
			c.logger.LogAttrs(ctx, slog.LevelError, "dispatch: the store cannot work; stopping",
				append(spec.attrs, slog.String("loop", spec.what), slog.Any("error", err))...)
			h.end(err)
			return err
		}
		if err != nil {
			n := h.failed(err)
			wait := errorBackoff(n, spec.base, spec.limit)
			if worthLogging(n) {
				c.logger.LogAttrs(ctx, slog.LevelError, "dispatch: cycle failed; backing off",
					append(spec.attrs, slog.String("loop", spec.what), slog.Int("failures_in_a_row", n),
						slog.Duration("retry_in", wait), slog.Any("error", err))...)
			}
			if !c.sleep(ctx, wait) {
				return nil
			}
			continue
		}
		if n := h.succeeded(); n > 0 {
			c.logger.LogAttrs(ctx, slog.LevelInfo, "dispatch: the store works again",
				append(spec.attrs, slog.String("loop", spec.what), slog.Int("failed_cycles", n))...)
		}
		if more {
			continue
		}
		if !spec.idle(ctx) {
			return nil
		}
	}
}

// runBeside runs loop, and sw beside it when sw is not nil, under one
// context: when sw stops on an error (a store it cannot work with), loop
// is cancelled as at shutdown and runBeside returns that error; when loop
// returns, sw is stopped and waited for. h records the end.
func runBeside(ctx context.Context, h *health, sw *Sweeper, loop func(context.Context) error) error {
	h.begin()
	if sw == nil {
		err := loop(ctx)
		h.end(err)
		return err
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	swErr := make(chan error, 1)
	go func() {
		err := sw.Run(runCtx)
		if err != nil {
			cancel(err)
		}
		swErr <- err
	}()
	err := loop(runCtx)
	cancel(nil)
	if serr := <-swErr; err == nil && serr != nil && ctx.Err() == nil {
		err = serr
	}
	h.end(err)
	return err
}

// Run polls until ctx is cancelled: a poll cycle (RunOnce), then, unless
// the cycle claimed a full batch, a wait of the poll interval (or less,
// see WithWake). When ctx is cancelled Run stops claiming, lets the
// emissions in flight finish within the shutdown timeout, releases the
// claims it had not started, and returns nil.
//
// A cycle that fails (the claim or a completion could not reach the
// store) is observed (EventStoreError) and retried after a backoff that
// starts at the poll interval and doubles with each failure in a row, up
// to MaxErrorBackoff (or the poll interval when longer), with jitter; the
// first failure is logged, then one per doubling of the count. When the
// store cannot work at all (an error matching ledger.ErrUnusable, such as
// pgstore.ErrNotMigrated), Run stops as on cancellation and returns that
// error; Ready reports it. With WithSweeper, the Sweeper runs beside the
// poll loop and stops with it, and its own ErrUnusable stops Run too.
func (d *Dispatcher) Run(ctx context.Context) error {
	if err := storekit.ValidateContext(ctx); err != nil {
		return err
	}
	view, leave := joinView(d.store, nil, d.cfg.ownClock)
	defer leave()
	return runBeside(ctx, &d.health, d.sweeper, func(ctx context.Context) error {
		return d.cfg.runLoop(ctx, &d.health, loopSpec{
			what:  "dispatcher",
			attrs: []slog.Attr{slog.String("worker", d.cfg.worker)},
			base:  d.cfg.pollInterval,
			limit: max(d.cfg.pollInterval, MaxErrorBackoff),
			cycle: func(ctx context.Context) (bool, error) {
				st, err := d.RunOnce(ctx)
				return st.Claimed >= d.cfg.batchSize, err
			},
			idle: func(ctx context.Context) bool { return d.cfg.waitPoll(ctx, view) },
			view: view,
		})
	})
}

// Ready reports whether the dispatcher can work: nil when its store
// answers, whether or not anything is due, so that a host's readiness
// check tells a dead database from an idle queue. Otherwise the error
// matches ErrNotReady and wraps the cause: the error Run stopped on, Run
// having returned, the store error of Run's latest cycles while they keep
// failing, or the error of a lookup of one entry (FindByID, which is
// bounded by ctx).
func (d *Dispatcher) Ready(ctx context.Context) error {
	return d.health.ready(ctx, func(ctx context.Context) error {
		_, err := d.store.FindByID(ctx, readyProbeID)
		return err
	})
}

// Run polls until ctx is cancelled: a poll cycle (RunOnce), then, unless
// the cycle leased a full batch, a wait of the poll interval. When ctx is
// cancelled Run stops leasing, lets the handlers in flight finish within
// the shutdown timeout, releases the leases it had not started, and
// returns nil. The Worker's Sweeper (see Worker) runs beside the poll loop
// and stops with it. Failing cycles back off, and a store that cannot
// work at all stops Run with its error, as for Dispatcher.Run.
func (w *Worker) Run(ctx context.Context) error {
	if err := storekit.ValidateContext(ctx); err != nil {
		return err
	}
	view, leave := joinView(w.ledger, w.filter, w.cfg.ownClock)
	defer leave()
	return runBeside(ctx, &w.health, w.sweeper, func(ctx context.Context) error {
		return w.cfg.runLoop(ctx, &w.health, loopSpec{
			what:  "worker",
			attrs: []slog.Attr{slog.String("owner", w.owner.String())},
			base:  w.cfg.pollInterval,
			limit: max(w.cfg.pollInterval, MaxErrorBackoff),
			cycle: func(ctx context.Context) (bool, error) {
				st, err := w.RunOnce(ctx)
				return st.Leased >= w.cfg.batchSize, err
			},
			idle: func(ctx context.Context) bool { return w.cfg.waitPoll(ctx, view) },
			view: view,
		})
	})
}

// Ready reports whether the Worker can work, as Dispatcher.Ready does,
// looking one delivery up (Get) to see that the ledger answers.
func (w *Worker) Ready(ctx context.Context) error {
	return w.health.ready(ctx, func(ctx context.Context) error {
		_, err := w.ledger.Get(ctx, readyProbeID)
		return err
	})
}
