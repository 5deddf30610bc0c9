package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leaseledger/ledger"
)

// This file is the workers: each one loops over random calls on both
// contracts, keeps the leases and claims it was granted, and logs every
// call it makes.

// deliveryStore and entryStore are what a worker calls, and the counts
// the checker reads afterwards.
type deliveryStore interface {
	ledger.Ledger
	ledger.BatchEnqueuer
	ledger.StatsReporter
}

type entryStore interface {
	ledger.ClaimStore
	ledger.OutboxBatchEnqueuer
	ledger.OutboxStatsReporter
}

// backend is one connection's view of both stores.
type backend struct {
	deliveries deliveryStore
	entries    entryStore
}

// params sizes a run and sets its fault rates. The child process gets it
// as JSON, so that it works like the goroutine workers.
type params struct {
	Items   int `json:"items"`   // deliveries, and as many outbox entries
	Workers int `json:"workers"` // goroutine workers
	// Lease is the lease and claim duration in logical time; skews are
	// up to one Lease either way.
	Lease time.Duration `json:"lease"`
	// StoreClock: the store decides on the database's clock, so times a
	// worker hands it (a claim's next retry) must be on that clock too.
	StoreClock bool `json:"store_clock"`
	MaxHeld    int  `json:"max_held"` // leases (and claims) a worker holds at most
	// CancelRate of calls get a context cancelled after a random delay of
	// up to CancelMax of wall time (zero: before the call starts).
	CancelRate float64       `json:"cancel_rate"`
	CancelMax  time.Duration `json:"cancel_max"`
	// TinyRate of calls run on a connection with statement_timeout=1ms.
	TinyRate float64 `json:"tiny_rate"`
	// CrashRate of a goroutine worker's steps are crashes of its holder.
	CrashRate float64 `json:"crash_rate"`
	// A worker stops after IdleLimit steps in a row found nothing to do
	// once every item is enqueued, or after MaxCalls calls.
	IdleLimit int `json:"idle_limit"`
	MaxCalls  int `json:"max_calls"`
}

// policy lets attempts run out under the faults, keeps backoffs short
// against the lease, and gives acknowledged work a few leases' time.
func (p params) policy() ledger.Policy {
	return ledger.Policy{MaxAttempts: 10, BackoffBase: 50 * time.Microsecond, BackoffMax: 500 * time.Microsecond, AckWindow: 4 * p.Lease}
}

const numTargets = 8

func deliveryID(i int64) ledger.DeliveryID { return ledger.DeliveryID(fmt.Sprintf("d%06d", i)) }

func entryKey(i int64) string { return fmt.Sprintf("e%06d", i) }

func target(i int64) ledger.Target { return ledger.Target(fmt.Sprintf("host-%d", i%numTargets)) }

func targetIndex(t ledger.Target) int {
	i, _ := strconv.Atoi(strings.TrimPrefix(string(t), "host-"))
	return i % numTargets
}

// problemLog collects what goes wrong in a worker outside the stores'
// contract (a malformed call is a bug of the test); the test fails on any.
type problemLog struct {
	mu   sync.Mutex
	list []string
}

func (p *problemLog) add(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.list = append(p.list, fmt.Sprintf(format, args...))
}

func (p *problemLog) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.list...)
}

// heldLease is a lease a worker holds and what it has done under it.
type heldLease struct {
	lease     ledger.Lease
	target    ledger.Target
	plan      fn   // the call being made; kept while it is retried after errors
	permanent bool // the planned MarkFailed is for good
	acked     bool
	expired   bool // Acknowledge answered LeaseExpired: only giving up is left
	// action and fence are chosen at the first MarkProcessed and kept for
	// its repeats, so that a repeat of one that applied answers Repeated.
	action   ledger.ActionRef
	fence    *int64
	errs     int // errors of the planned call so far
	rejected int // FenceRejected answers so far
}

// heldClaim is a claim a worker holds.
type heldClaim struct {
	claim     ledger.Claim
	plan      fn   // as heldLease.plan
	permanent bool // the planned MarkClaimFailed has no retry
	errs      int
}

// worker is one client: a goroutine, or the child process.
type worker struct {
	name     string // the history's Proc
	agent    string
	inc      int
	owner    ledger.Owner
	skew     time.Duration
	rng      *rand.Rand
	p        params
	sh       *shared
	sink     sink
	main     backend
	tiny     *backend // statement_timeout=1ms; nil for the in-memory store
	faults   *faultCounts
	problems *problemLog
	progress *progress // nil in the child
	onInvoke func()    // the child tells its parent that a call starts
	canCrash bool
	greedy   bool  // lease and claim as much as a call may (the drain)
	last     *call // the latest call made

	n         int64
	leases    []*heldLease
	claims    []*heldClaim
	zombies   []any // heldLease and ledger.Claim values given up, for stale calls
	idle      int
	errStreak int
}

func (w *worker) incarnate() {
	w.inc++
	w.owner = ledger.Owner{Agent: w.agent, Incarnation: fmt.Sprintf("%s-i%d", w.name, w.inc)}
	us := int64(w.p.Lease / time.Microsecond)
	w.skew = time.Duration(w.rng.Int64N(2*us+1)-us) * time.Microsecond
	if w.skew != 0 {
		w.faults.add(faultSkew)
	}
}

// now reads the shared clock, driving it forward a little, as seen by
// this incarnation's skewed clock.
func (w *worker) now() time.Time { return w.sh.tick(1 + w.rng.Int64N(4)).Add(w.skew) }

// stamp is the clock the outbox completions stamp records with.
func (w *worker) stamp() time.Time { return w.sh.now().Add(w.skew) }

func (w *worker) producerDone() bool {
	return w.sh.load(slotDeliveries) >= int64(w.p.Items) && w.sh.load(slotEntries) >= int64(w.p.Items)
}

// classify says what an error tells about whether the call happened:
// nothing reached the server (a connection never made, or pgconn's
// guarantee that nothing was sent), or maybe it committed.
func classify(err error) status {
	var connectErr *pgconn.ConnectError
	if errors.Is(err, ledger.ErrInvalid) || pgconn.SafeToRetry(err) || errors.As(err, &connectErr) {
		return statusFail
	}
	return statusInfo
}

// do makes one call: it logs the invocation, applies the per-call faults
// (a cancelled context, a tiny statement timeout), runs it, and logs how
// it ended. run fills in c's results.
func (w *worker) do(ctx context.Context, c *call, run func(ctx context.Context, b backend) error) error {
	w.n++
	c.Proc, c.N, c.Status = w.name, w.n, statusInvoke
	c.Invoked = time.Now().UnixNano()
	if err := w.sink.invoke(c); err != nil {
		w.problems.add("%s: log: %v", w.name, err)
	}
	if w.onInvoke != nil {
		w.onInvoke()
	}
	b := w.main
	if w.tiny != nil && w.rng.Float64() < w.p.TinyRate {
		b = *w.tiny
		w.faults.add(faultTinyTimeout)
	}
	callCtx, cancel := context.WithCancel(ctx)
	var timer *time.Timer
	if w.rng.Float64() < w.p.CancelRate {
		w.faults.add(faultCancel)
		if w.rng.IntN(4) == 0 {
			cancel() // before the call starts
		} else {
			timer = time.AfterFunc(1+time.Duration(w.rng.Int64N(int64(w.p.CancelMax))), cancel)
		}
	}
	err := run(callCtx, b)
	if timer != nil {
		timer.Stop()
	}
	cancel()
	c.Returned = time.Now().UnixNano()
	switch {
	case err != nil:
		c.Err, c.Status = err.Error(), classify(err)
		if errors.Is(err, ledger.ErrInvalid) {
			w.problems.add("%s: %s %s: %v", w.name, c.Kind, c.Fn, err)
		}
	case c.Outcome == "" || c.Outcome == ledger.OutcomeApplied:
		c.Status = statusOK
	default:
		c.Status = statusFail
	}
	if err := w.sink.complete(c); err != nil {
		w.problems.add("%s: log: %v", w.name, err)
	}
	if w.progress != nil {
		w.progress.observe(c)
	}
	w.last = c
	w.shed(ctx, err)
	return err
}

// shed slows a worker down while its calls keep failing (the server is
// restarting, say), so that it does not spin; it serves load, not any
// decision on time, which comes from the logical clock only.
func (w *worker) shed(ctx context.Context, err error) {
	if err == nil {
		w.errStreak = 0
		return
	}
	if w.errStreak++; w.errStreak < 3 {
		return
	}
	t := time.NewTimer(time.Millisecond << min(w.errStreak-3, 5))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// run loops until ctx is done, the worker has been idle long enough
// after every item was enqueued, or it made its share of calls.
func (w *worker) run(ctx context.Context) {
	for ctx.Err() == nil && w.n < int64(w.p.MaxCalls) {
		if w.step(ctx) {
			w.idle = 0
		} else if w.idle++; w.idle >= w.p.IdleLimit && w.producerDone() {
			return
		}
	}
}

// step makes one random move and reports whether it found work.
func (w *worker) step(ctx context.Context) bool {
	switch r := w.rng.Float64(); {
	case w.canCrash && r < w.p.CrashRate:
		w.crash()
		return true
	case r < 0.025:
		w.expire(ctx)
	case r < 0.05:
		w.stale(ctx)
	case r < 0.15 && !w.producerDone():
		return w.enqueue(ctx)
	}
	busy := false
	if len(w.leases) < w.p.MaxHeld && (len(w.leases) == 0 || w.rng.IntN(2) == 0) {
		busy = w.lease(ctx) || busy
	}
	if len(w.claims) < w.p.MaxHeld && (len(w.claims) == 0 || w.rng.IntN(2) == 0) {
		busy = w.claim(ctx) || busy
	}
	if len(w.leases) > 0 {
		w.workLease(ctx)
		busy = true
	}
	if len(w.claims) > 0 {
		w.workClaim(ctx)
		busy = true
	}
	if !busy {
		// Nothing to do: drive time on, so that what crashed holders
		// still hold runs out.
		w.sh.tick(int64(w.p.Lease/time.Microsecond) / 4)
	}
	return busy
}

// crash forgets every lease and claim without a word, as a process that
// died would, and comes back as a new incarnation with a new clock skew.
func (w *worker) crash() {
	for _, h := range w.leases {
		w.bury(heldLease{lease: h.lease, target: h.target})
	}
	for _, h := range w.claims {
		w.bury(h.claim)
	}
	w.leases, w.claims = nil, nil
	w.faults.add(faultCrashHolder)
	w.incarnate()
}

// bury keeps a lease or claim the worker gave up, for stale calls.
func (w *worker) bury(grant any) {
	if len(w.zombies) >= 16 {
		w.zombies[w.rng.IntN(len(w.zombies))] = grant
		return
	}
	w.zombies = append(w.zombies, grant)
}

func (w *worker) enqueue(ctx context.Context) bool {
	n := int64(1 + w.rng.IntN(20))
	if w.rng.IntN(2) == 0 {
		return w.enqueueDeliveries(ctx, n)
	}
	return w.enqueueEntries(ctx, n)
}

// take reserves up to n item numbers from slot; ok is false when every
// item was handed out already.
func (w *worker) take(slot int, n int64) (first, count int64, ok bool) {
	first = w.sh.take(slot, n)
	if first >= int64(w.p.Items) {
		return 0, 0, false
	}
	return first, min(n, int64(w.p.Items)-first), true
}

// enqueueDeliveries offers a batch. After an error it may repeat it, as a
// producer would (a repeat of one that committed answers Repeated), or
// give up, leaving it to the checker to find out whether it committed.
func (w *worker) enqueueDeliveries(ctx context.Context, n int64) bool {
	first, n, ok := w.take(slotDeliveries, n)
	if !ok {
		return false
	}
	reqs := make([]ledger.EnqueueRequest, n)
	ids := make([]string, n)
	for i := range reqs {
		id := deliveryID(first + int64(i))
		reqs[i] = ledger.EnqueueRequest{ID: id, Target: target(first + int64(i)), Payload: []byte(id), Policy: w.p.policy()}
		ids[i] = string(id)
	}
	for range 3 {
		now := w.now()
		c := &call{Fn: fnEnqueue, Kind: kindDelivery, Now: now, IDs: ids}
		err := w.do(ctx, c, func(ctx context.Context, b backend) error {
			rs, err := b.deliveries.EnqueueBatch(ctx, reqs, now)
			for _, r := range rs {
				c.Outcomes = append(c.Outcomes, r.Outcome)
			}
			return err
		})
		if err == nil || ctx.Err() != nil || w.rng.IntN(2) == 0 {
			break
		}
	}
	return true
}

func (w *worker) enqueueEntries(ctx context.Context, n int64) bool {
	first, n, ok := w.take(slotEntries, n)
	if !ok {
		return false
	}
	envs := make([]ledger.Envelope, n)
	ids := make([]string, n)
	for i := range envs {
		key := entryKey(first + int64(i))
		envs[i] = ledger.Envelope{Provider: "provider", Kind: "chaos", Payload: []byte(key), IdempotencyKey: key}
		ids[i] = string(ledger.OutboxEntryIDFor(key))
	}
	for range 3 {
		c := &call{Fn: fnEnqueue, Kind: kindEntry, IDs: ids}
		err := w.do(ctx, c, func(ctx context.Context, b backend) error {
			rs, err := b.entries.EnqueueBatch(ctx, envs)
			for _, r := range rs {
				c.Outcomes = append(c.Outcomes, r.Outcome)
			}
			return err
		})
		if err == nil || ctx.Err() != nil || w.rng.IntN(2) == 0 {
			break
		}
	}
	return true
}

func (w *worker) lease(ctx context.Context) bool {
	now, owner, limit := w.now(), w.owner, 1+w.rng.IntN(w.p.MaxHeld)
	if w.greedy {
		limit = ledger.MaxLimit
	}
	c := &call{Fn: fnGrant, Kind: kindDelivery, Owner: owner, Now: now}
	var res ledger.LeaseResult
	_ = w.do(ctx, c, func(ctx context.Context, b backend) error {
		var err error
		res, err = b.deliveries.Lease(ctx, ledger.LeaseFilter{}, owner, now, w.p.Lease, limit)
		for _, ld := range res.Leased {
			c.Grants = append(c.Grants, grantOfLease(ld.Lease, ld.Delivery.Version))
		}
		for _, id := range res.Reclaimed {
			c.Reclaimed = append(c.Reclaimed, string(id))
		}
		return err
	})
	for _, ld := range res.Leased {
		w.leases = append(w.leases, &heldLease{lease: ld.Lease, target: ld.Delivery.Target})
	}
	return len(res.Leased) > 0
}

func (w *worker) claim(ctx context.Context) bool { return w.claimFrom(ctx, w.rng.IntN(10) < 3) }

// claimFrom claims pending entries, or with retry those due for a retry.
func (w *worker) claimFrom(ctx context.Context, retry bool) bool {
	now := w.now()
	req := ledger.ClaimRequest{Worker: w.agent, Now: now, LeaseDuration: w.p.Lease, Limit: 1 + w.rng.IntN(w.p.MaxHeld)}
	if w.greedy {
		req.Limit = ledger.MaxLimit
	}
	c := &call{Fn: fnGrant, Kind: kindEntry, Owner: ledger.Owner{Agent: w.agent}, Now: now}
	var got []ledger.ClaimedEntry
	_ = w.do(ctx, c, func(ctx context.Context, b backend) error {
		var err error
		if retry {
			got, err = b.entries.ClaimRetryReady(ctx, req)
		} else {
			got, err = b.entries.ClaimPending(ctx, req)
		}
		for _, ce := range got {
			c.Grants = append(c.Grants, grantOfClaim(ce.Claim, ce.Entry.Version))
		}
		return err
	})
	for _, ce := range got {
		w.claims = append(w.claims, &heldClaim{claim: ce.Claim})
	}
	return len(got) > 0
}

func (w *worker) expire(ctx context.Context) {
	now := w.now()
	c := &call{Fn: fnExpire, Kind: kindDelivery, Now: now}
	_ = w.do(ctx, c, func(ctx context.Context, b backend) error {
		res, err := b.deliveries.Expire(ctx, now)
		for _, id := range res.Changed {
			c.Changed = append(c.Changed, string(id))
		}
		return err
	})
}
