package dispatch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// This file holds what the Dispatcher's and the Worker's loops share: the
// poll wait, the contexts of work in flight and of store calls, bounded
// fan-out, calling user code, the checks of the shared settings and the
// sanitising of text bound for the store. Renewals are in renew.go.

// invalid returns the *ledger.InvalidError for a malformed argument.
func invalid(field, reason string) error {
	return &ledger.InvalidError{Field: field, Reason: reason}
}

// validateLoop reports the first malformed setting among those both loops
// use, as a *ledger.InvalidError.
func (c *config) validateLoop() error {
	if err := storekit.ValidateDuration("lease duration", c.leaseDuration); err != nil {
		return err
	}
	switch {
	case c.concurrency < 1:
		return invalid("concurrency", "must be at least 1")
	case c.pollInterval <= 0:
		return invalid("poll interval", "must be positive")
	case c.shutdownTimeout < 0:
		return invalid("shutdown timeout", "must not be negative")
	case c.linger < 0 || c.linger > time.Second:
		return invalid("completion linger", "must be between 0 and 1s")
	}
	if err := c.common.validate(); err != nil {
		return err
	}
	return storekit.ValidateLimit("batch size", c.batchSize)
}

// waitPoll waits for the poll interval (with jitter unless disabled), or
// less when the wake channel (WithWake) fires first; it reports false when
// ctx ended first. Polls that view shows another loop has just made are
// skipped (see share.go): the wait then starts again.
func (c *config) waitPoll(ctx context.Context, view *queueView) bool {
	for {
		mark := view.mark()
		ok, woken := c.waitOnce(ctx)
		if !ok || woken || !view.lookedSince(mark) {
			return ok
		}
	}
}

// waitOnce is one wait of waitPoll; woken reports that the wake channel
// ended it.
func (c *config) waitOnce(ctx context.Context) (ok, woken bool) {
	interval := c.pollInterval
	if c.pollJitter && interval >= 10 {
		interval += rand.N(interval / 10)
	}
	due := make(chan struct{})
	var once sync.Once
	stop := c.afterFunc(interval, func() { once.Do(func() { close(due) }) })
	wake := c.wake // nil without WithWake: never ready
	for {
		select {
		case <-due:
			return true, false
		case _, ok := <-wake:
			if !ok {
				// The source of wake-ups ended (a listener whose context
				// was cancelled): a closed channel is always ready, so
				// stop reading it and fall back on the interval alone.
				wake = nil
				continue
			}
			stop()
			return true, true
		case <-ctx.Done():
			stop()
			return false, false
		}
	}
}

// flight returns the context work in flight runs under: it outlives ctx
// by the shutdown timeout, so that a cancelled Run lets work finish
// instead of abandoning it half done (an emission the provider may already
// have accepted, a handler halfway through), and is then cancelled with
// ErrShutdown. stop releases its timers and cancels it.
func (c *config) flight(ctx context.Context) (flight context.Context, stop func()) {
	flight, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	var mu sync.Mutex
	var stopGrace func() bool
	stopWatch := context.AfterFunc(ctx, func() {
		if c.shutdownTimeout == 0 {
			cancel(ErrShutdown)
			return
		}
		stop := c.afterFunc(c.shutdownTimeout, func() { cancel(ErrShutdown) })
		mu.Lock()
		stopGrace = stop
		mu.Unlock()
	})
	return flight, func() {
		stopWatch()
		mu.Lock()
		if stopGrace != nil {
			stopGrace()
		}
		mu.Unlock()
		cancel(nil)
	}
}

// storeContexts hands out the contexts of one cycle's completions and
// releases: store calls that must happen even after the cycle's ctx was
// cancelled, since otherwise the claim or lease would be stranded until
// it expires. Each is bounded by the lease duration, after which the
// claim or lease is worthless anyway.
//
// The calls that start within a tenth of the lease duration of each other
// share one context, so that a drained item costs no context and timer of
// its own: a call is bounded by the lease duration from the start of the
// first call that shared its context, so by at least nine tenths of it
// from its own start.
type storeContexts struct {
	detached context.Context // the cycle's ctx without its cancellation
	lease    time.Duration

	mu  sync.Mutex
	cur *storeContext // the context new calls share; nil before the first
}

// storeContext is one shared context and the number of calls using it.
type storeContext struct {
	ctx      context.Context
	cancel   context.CancelFunc
	deadline time.Time
	users    int
}

// newStoreContexts returns the store contexts of a cycle run under ctx.
func newStoreContexts(ctx context.Context, lease time.Duration) *storeContexts {
	return &storeContexts{detached: context.WithoutCancel(ctx), lease: lease}
}

// get returns the context of one store call; put gives it back when the
// call is done.
func (s *storeContexts) get() *storeContext {
	// Real time, as the context's own deadline is: the loop's clock
	// (WithClock) says when claims and leases expire, not when this
	// process gives up on a call.
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.cur; c == nil || c.deadline.Sub(now) < s.lease-s.lease/10 {
		if c != nil && c.users == 0 {
			c.cancel()
		}
		c = &storeContext{deadline: now.Add(s.lease)}
		c.ctx, c.cancel = context.WithDeadline(s.detached, c.deadline)
		s.cur = c
	}
	s.cur.users++
	return s.cur
}

// put gives back the context of a store call that is done, cancelling
// it (to release its timer) when no call uses it and new calls no longer
// take it.
func (s *storeContexts) put(c *storeContext) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.users--; c.users == 0 && c != s.cur {
		c.cancel()
	}
}

// linger makes the store calls of the cycle, from now on, carry a linger
// of d (ledger.WithLinger); nothing when d is 0. Call it before the
// first get.
func (s *storeContexts) linger(d time.Duration) {
	if d > 0 {
		s.detached = ledger.WithLinger(s.detached, d)
	}
}

// close cancels the shared context once the cycle's calls are done.
func (s *storeContexts) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.cur; c != nil {
		s.cur = nil
		if c.users == 0 {
			c.cancel()
		}
	}
}

// task is one item's work as fanOut runs it: the user's code (call)
// under the context of its job, then done with its answer. A task embeds
// its job (base returns it), made by job.init before anything can cancel
// it; the item's other set-up is made before the task is handed over, and
// its clean-up belongs in done, which runs exactly once.
type task[A any] interface {
	base() *job
	call() (A, error)
	done(A, error)
}

// The states of a job.
const (
	jobStarting  int32 = iota // being prepared: a cancellation only ends its context
	jobRunning                // the user's call has not answered
	jobAnswered               // it answered; done runs with its answer
	jobAbandoned              // cancelled first; done ran without it
)

// job is one item in flight: the context its user call runs under, which
// its timeout, a lost renewal, or the end of the cycle's flight cancels.
//
// A job's context is not a child of the flight's: a hundred items that
// start together would each take the flight's lock to join it and again
// to leave it. fanOut keeps the job of each of its places instead, and
// cancels those when the flight ends.
type job struct {
	ctx       context.Context
	cancelCtx context.CancelCauseFunc
	state     atomic.Int32
	// place is where the job runs, which takes over when it is
	// abandoned; set before the job is running.
	place abandoner
}

// abandoner is a place of fanOut's pool, seen from a job.
type abandoner interface {
	// abandon completes the item of j with cause and goes on with the
	// rest of the place's work, on the calling goroutine.
	abandon(j *job, cause error)
}

// init gives j its context, which carries the values of values.
func (j *job) init(values context.Context) {
	j.ctx, j.cancelCtx = context.WithCancelCause(values)
}

// base returns j, for the tasks that embed it.
func (j *job) base() *job { return j }

// cancel cancels j's context with cause. When j's user call has not
// answered yet, it is abandoned (see runUser): the item is done at once,
// on a goroutine of its own, whatever the call does later.
func (j *job) cancel(cause error) {
	j.cancelCtx(cause)
	if j.state.CompareAndSwap(jobRunning, jobAbandoned) {
		go j.place.abandon(j, context.Cause(j.ctx))
	}
}

// end ends j before its item is completed: it takes r out of rs (when
// the item was renewed: rs is not nil), stops the timeout, and then runs
// complete under a store context of sc. The renewal stops first, so that
// no renewal can race the completion and report a claim or lease lost
// only because it ended.
func (j *job) end(rs *renewals, r *renewal, stopTimeout func() bool, sc *storeContexts, complete func(context.Context)) {
	defer j.cancelCtx(nil)
	if rs != nil {
		rs.leave(r)
	}
	stopTimeout()
	c := sc.get()
	defer sc.put(c)
	complete(c.ctx)
}

// fan is what the places of one fanOut share.
type fan[T, A any] struct {
	ctx     context.Context // the cycle's: once done, nothing new starts
	flight  context.Context
	values  context.Context // flight's values without its cancellation
	who     string          // "emitter" or "handler"
	prepare func(*T, context.Context) task[A]
	wg      sync.WaitGroup

	mu    sync.Mutex
	items []T
	next  int // items[:next] were started or released
}

// take returns the next item to start, nil when none is left or ctx is
// done.
func (f *fan[T, A]) take() *T {
	f.mu.Lock()
	defer f.mu.Unlock()
	// A cancelled cycle starts nothing new, even when the release has
	// not run yet.
	if f.next == len(f.items) || f.ctx.Err() != nil {
		return nil
	}
	f.next++
	return &f.items[f.next-1]
}

// place is one place of the pool: the task it runs while its user call
// runs, which the flight's end cancels.
type place[T, A any] struct {
	f       *fan[T, A]
	running atomic.Pointer[job]
	cur     task[A] // the task of running; read by abandon
}

// work runs items until none is left. A goroutine whose user call was
// abandoned leaves the pool there and then; the goroutine that abandoned
// it takes its place (and its count in the wait group) in abandon.
func (p *place[T, A]) work() {
	for item := p.f.take(); item != nil; item = p.f.take() {
		t := p.f.prepare(item, p.f.values)
		j := t.base()
		p.cur = t
		j.place = p
		p.running.Store(j)
		j.state.Store(jobRunning)
		if p.f.flight.Err() != nil {
			j.cancel(context.Cause(p.f.flight))
		}
		if !runUser(j, p.f.who, t) {
			return
		}
		p.running.CompareAndSwap(j, nil)
	}
	p.f.wg.Done()
}

func (p *place[T, A]) abandon(j *job, cause error) {
	p.running.CompareAndSwap(j, nil)
	var zero A
	p.cur.done(zero, explainCancel(j.ctx, p.f.who, cause))
	p.work()
}

// fanOut runs the task prepare returns for each item, at most limit at
// once, and waits until every item it started is done. The tasks run on
// a pool of at most limit goroutines that take the items in order, so a
// cycle starts limit goroutines, not one per item, and the user's code
// (who: "emitter" or "handler") runs on them (see runUser). Each item's
// job has a context that carries flight's values (prepare passes them to
// job.init) and ends when flight does. Once ctx is cancelled fanOut
// starts nothing new and passes the items it had not started to release
// at once, while the work in flight goes on.
func fanOut[T, A any](ctx, flight context.Context, who string, items []T, limit int, prepare func(*T, context.Context) task[A], release func([]T)) {
	f := &fan[T, A]{ctx: ctx, flight: flight, values: context.WithoutCancel(flight), who: who, prepare: prepare, items: items}
	released := make(chan struct{})
	stopWatch := context.AfterFunc(ctx, func() {
		defer close(released)
		f.mu.Lock()
		rest := f.items[f.next:]
		f.next = len(f.items)
		f.mu.Unlock()
		if len(rest) > 0 {
			release(rest)
		}
	})
	places := make([]place[T, A], min(limit, len(items)))
	// A place stores its job before it looks at flight, and the flight's
	// end is recorded before its watcher looks at the places, so every
	// job in flight is cancelled by one or the other.
	stopFlight := context.AfterFunc(flight, func() {
		cause := context.Cause(flight)
		for i := range places {
			if j := places[i].running.Load(); j != nil {
				j.cancel(cause)
			}
		}
	})
	defer stopFlight()
	f.wg.Add(len(places))
	for i := range places {
		places[i].f = f
		go places[i].work()
	}
	f.wg.Wait()
	if !stopWatch() {
		// ctx was cancelled: the release has started; wait for it.
		<-released
	}
}

// runUser runs t's call on the calling goroutine, recovering a panic as a
// *PanicError, and then t's done with its answer. It stops waiting when
// j, t's job, is cancelled first: code that ignores cancellation is
// abandoned, so that one hung provider call or handler cannot hold the
// cycle, or a shutdown, for ever. The job's place then completes the item
// at once with the cancellation's cause, on a goroutine of its own, and
// runUser reports false when the call returns at last: its answer is
// dropped, and the caller must stop.
//
// Running the call where the item's work already runs, rather than on a
// goroutine of its own, spares a drained item a goroutine, its stack and
// two hand-offs: the cost it has on every item, for a case (hung user
// code) that is rare.
func runUser[A any](j *job, who string, t task[A]) bool {
	var v A
	var err error
	// A job cancelled while it was prepared never calls the user's code.
	// One cancelled while the call runs keeps the call's answer when the
	// call returned first, as a completed emission must be recorded as
	// such.
	ran := j.ctx.Err() == nil
	if ran {
		v, err = callRecover(t.call)
	}
	if !j.state.CompareAndSwap(jobRunning, jobAnswered) {
		return false
	}
	if !ran {
		err = context.Cause(j.ctx)
	}
	t.done(v, explainCancel(j.ctx, who, err))
	return true
}

// callRecover calls f, returning a panic in it as a *PanicError.
func callRecover[A any](f func() (A, error)) (v A, err error) {
	defer func() {
		if r := recover(); r != nil {
			var zero A
			v, err = zero, &PanicError{Value: r}
		}
	}()
	return f()
}

// explainCancel explains a cancellation that user code returned as its
// error: it gave up because the loop cancelled it, so record why.
func explainCancel(ctx context.Context, who string, err error) error {
	if err != nil && ctx.Err() != nil &&
		(errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return fmt.Errorf("%w (%s returned: %w)", context.Cause(ctx), who, err)
	}
	return err
}

// sanitizeText makes s valid free text for the store (valid UTF-8, no
// NUL), cut to at most limit bytes on a rune boundary: a rejected
// completion would leave the claim or lease stranded until it expires.
func sanitizeText(s string, limit int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "")
	return truncate(s, limit)
}

// sanitizeName makes s a valid optional name: valid UTF-8, control and
// invisible characters (ledger.Invisible) replaced, at most
// ledger.MaxNameBytes.
func sanitizeName(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if ledger.Invisible(r) {
			return '?'
		}
		return r
	}, s)
	return truncate(s, ledger.MaxNameBytes)
}

// truncate cuts s to at most limit bytes on a rune boundary.
func truncate(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
