package pgstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaseledger/ledger"
)

// This file is group commit: the single-record transitions of many
// goroutines (see WithGroupCommit for which) share one transaction, and
// so one commit, instead of paying for one each. The queue below is
// generic; what a group transaction does is in group_tx.go, and how it
// writes its records back in group_bulk.go.
//
// There is no background goroutine (a Store has no Close): a caller that
// finds nobody collecting a group becomes the leader. It waits until the
// oldest waiting request has waited the window, or the group is full,
// takes the waiting requests, runs their transaction and hands each
// caller its own result. Requests that arrive meanwhile queue up, and the
// oldest of them is made the next leader as soon as the group before is
// taken. At most groupsInFlight groups of a queue run at once, so under
// load a group fills while the ones before it commit, and groups grow
// with the load without waiting for the window at all.
//
// A leader whose requests all linger (ledger.WithLinger), from one caller,
// waits for another caller's request instead, up to the linger: see
// WithGroupCommit.
//
// A group of one request is not run as a group: its caller runs the call
// on the ordinary path, in a transaction of its own under its own
// context, so a lone caller sees exactly what it would without group
// commit, after the window it waited (none when nothing else was in
// flight: see groupQueue.alone).

// DefaultGroupCommitWindow is how long a group waits for company, from
// the arrival of its oldest request, unless WithGroupCommitWindow says
// otherwise. About a fifth of a durable commit on common hardware: short
// enough that a lone caller hardly notices, long enough that callers
// arriving together share a commit.
const DefaultGroupCommitWindow = 500 * time.Microsecond

// DefaultGroupCommitMax is the largest group, unless WithGroupCommitMax
// says otherwise.
const DefaultGroupCommitMax = 128

// MaxGroupCommitWindow bounds WithGroupCommitWindow: every grouped call
// may wait that long.
const MaxGroupCommitWindow = time.Second

// groupsInFlight is how many group transactions of one queue run at once.
// Two, so that one group is read and decided while the other writes and
// waits for its commit to be flushed; more only split the same callers
// into smaller groups, whose fixed costs (statements, round trips,
// commits) then weigh more, and which contend for the same count rows.
const groupsInFlight = 2

// groupConfig is what the group commit options set.
type groupConfig struct {
	off    bool
	window time.Duration
	max    int
}

func defaultGroupConfig() groupConfig {
	return groupConfig{window: DefaultGroupCommitWindow, max: DefaultGroupCommitMax}
}

// WithGroupCommit turns group commit on or off (default on). With it on,
// the single-record transitions that run at the same time, from any
// number of goroutines, are coalesced into one transaction per short
// window (WithGroupCommitWindow) or full group (WithGroupCommitMax):
// Acknowledge, MarkProcessed, MarkFailed, Release, RecordActivation and
// Abandon share the Store's groups; MarkClaimDelivered, MarkClaimFailed,
// MarkClaimDeadLettered, ReleaseClaim and SaveClaim share its Outbox's.
// A commit, flushed to disk, is what a single-record call mostly waits
// for, so many callers sharing one do many times the calls per second,
// on fewer connections. A leader waits the window only while another
// call is in flight, so a caller whose calls come one at a time waits
// nothing more.
//
// A call made under ledger.WithLinger waits longer when it leads: until a
// call of another caller arrives (then the window from that arrival, for
// the calls that come with it), or its linger, at most
// MaxGroupCommitWindow, has passed. dispatch's loops linger the
// completions of a cycle that found the queue drained, so that at a
// steady rate the cycles of several loops share a commit. A call without
// a linger never waits for one that has it.
//
// Each call still gets its own outcome and the record as it stands,
// exactly as it would alone: the group locks its records in ID order
// (and, for fenced MarkProcessed calls, their targets' fence rows after
// them, in target order, as a single call takes them), applies the
// calls' state machine steps one after the other in arrival order, so
// that two calls on one record see each other as if made in turn, and
// writes the changed records back in one statement, with their history
// entries and count changes, in one commit. A call that does not apply
// writes nothing, as alone: a fence row the group created for it only is
// removed again.
//
// When the group's transaction fails before its commit, nothing of it
// was applied, and every call is run again on its own (in a transaction
// of its own, under its own context), so that one failing call cannot
// fail the others; a deadlock or serialization failure retries the group
// first. When the outcome of the commit is unknown (the connection was
// lost while it ran, or a pooler answered that its server link dropped),
// the group reads one of the rows it wrote, under its lock (settle.go):
// written, every call gets its answer; untouched, every call runs again
// on its own; anything else, every call returns the error.
//
// Context: a call whose context ends while it waits for its group to be
// taken is withdrawn and returns an error matching ctx.Err(), having
// written nothing. Once its group is taken, the group's transaction runs
// on for the others, and is cancelled only when every caller in it has
// gone; a call whose context ends meanwhile returns at once with an
// error matching ctx.Err() that says the call may have applied (read the
// record to know), as a single call cut short during its commit may
// have. The caller that leads a group stays for the group's end and
// returns its own result.
//
// Calls through WithTx never group: they run in the caller's
// transaction. Everything else (enqueues, Lease and the claims, the
// sweeps, RenewLease and RenewClaim, the base outbox methods) is one
// transaction per call either way.
func WithGroupCommit(on bool) Option {
	return func(c *config) { c.group.off = !on }
}

// WithGroupCommitWindow sets how long a group waits for more calls after
// its first arrives (default DefaultGroupCommitWindow); 0 to
// MaxGroupCommitWindow, else New fails with ErrInvalid. With 0 a group
// takes what is waiting at once; calls still share commits under load,
// because they queue while the groups before them commit.
func WithGroupCommitWindow(d time.Duration) Option {
	return func(c *config) {
		if d < 0 || d > MaxGroupCommitWindow {
			c.fail(&ledger.InvalidError{Field: "group commit window", Reason: fmt.Sprintf("must be between 0 and %v", MaxGroupCommitWindow)})
			return
		}
		c.group.window = d
	}
}

// WithGroupCommitMax sets the most calls one group transaction takes
// (default DefaultGroupCommitMax); 1 to ledger.MaxLimit, else New fails
// with ErrInvalid. A full group does not wait for the rest of its
// window. With 1 every call runs on its own, as with group commit off.
func WithGroupCommitMax(n int) Option {
	return func(c *config) {
		if n < 1 || n > ledger.MaxLimit {
			c.fail(&ledger.InvalidError{Field: "group commit max", Reason: fmt.Sprintf("must be between 1 and %d", ledger.MaxLimit)})
			return
		}
		c.group.max = n
	}
}

// groups are a Store's two group commit queues, shared by its Outbox.
type groups struct {
	deliveries *groupQueue[deliveryCompletion, ledger.DeliveryResult]
	entries    *groupQueue[entryCompletion, ledger.OutboxResult]
	stmts      groupStatements
	pool       *pgxpool.Pool // what the group transactions run on
	// How a group reads and writes each kind of record (group_records.go).
	deliveryRecords *recordKind[ledger.Delivery]
	entryRecords    *recordKind[ledger.OutboxEntry]
}

// newGroups returns the queues of s, or nil with group commit off. The
// groups run on s, which is bound to the pool (never to a caller's
// transaction: those calls never group).
func newGroups(s *Store) *groups {
	c := s.cfg.group
	pool, ok := s.db.(*pgxpool.Pool)
	if c.off || !ok {
		return nil
	}
	g := &groups{
		pool:            pool,
		stmts:           newGroupStatements(s.cfg.schema),
		deliveryRecords: newDeliveryRecords(s.cfg.schema, s.q),
		entryRecords:    newEntryRecords(s.cfg.schema, s.q),
	}
	g.deliveries = newGroupQueue(c, func(ctx context.Context, ms []*groupMember[deliveryCompletion, ledger.DeliveryResult]) {
		s.runDeliveryGroup(ctx, ms)
	})
	g.entries = newGroupQueue(c, func(ctx context.Context, ms []*groupMember[entryCompletion, ledger.OutboxResult]) {
		s.runEntryGroup(ctx, ms)
	})
	return g
}

// memberState says where a request stands; guarded by groupQueue.mu.
type memberState int

const (
	memberQueued  memberState = iota // waiting for a leader to take it
	memberTaken                      // in a group that is running or ran
	memberDropped                    // its context ended before it was taken
)

// groupMember is one call waiting in, or decided by, a group.
type groupMember[Req, Res any] struct {
	ctx    context.Context
	req    Req
	queued time.Time // when it arrived
	// linger is how long it may wait for another caller's company
	// (ledger.WithLinger, at most MaxGroupCommitWindow); caller names
	// whose call it is.
	linger  time.Duration
	caller  any
	state   memberState   // guarded by the queue's mu
	promote chan struct{} // a token: lead the next group (buffered 1)
	done    chan struct{} // closed once the fields below are set

	res Res
	err error // not wrapped with the operation
	// single: the group did not decide the call (a group of one, or a
	// group whose transaction failed before its commit); the caller runs
	// it on its own.
	single bool
}

// groupQueue coalesces the requests of concurrent callers into groups
// and runs each group with run, which sets every member's res, err or
// single.
type groupQueue[Req, Res any] struct {
	window time.Duration
	max    int
	run    func(ctx context.Context, ms []*groupMember[Req, Res])

	mu         sync.Mutex
	pending    []*groupMember[Req, Res] // in arrival order
	collecting bool                     // a leader is (or is about to be) collecting
	running    int                      // group transactions in flight
	// kick wakes the collecting leader: the group is full, or a running
	// group ended and freed its slot. Buffered 1; a stale kick only makes
	// the leader look again.
	kick chan struct{}
	// alone counts the calls running on the single path (submit
	// answered single). With nothing queued behind the leader, no group
	// running and no call alone, nobody is about to arrive, so the leader
	// does not wait the window: a caller whose calls come one at a time
	// pays nothing for group commit, as PostgreSQL's commit_delay waits
	// only with commit_siblings active. waitAlone makes a leader wait even
	// then, for tests that gather a group of callers started together.
	alone     atomic.Int64
	waitAlone bool

	// Counters for tests and for a curious operator with a debugger: how
	// many group transactions ran, and how many calls they decided.
	groupsRun, callsGrouped atomic.Int64
}

func newGroupQueue[Req, Res any](c groupConfig, run func(context.Context, []*groupMember[Req, Res])) *groupQueue[Req, Res] {
	return &groupQueue[Req, Res]{window: c.window, max: c.max, run: run, kick: make(chan struct{}, 1)}
}

// arrive stamps m, arriving at now, with its linger. The caller holds
// q.mu and appends m to q.pending after.
func (q *groupQueue[Req, Res]) arrive(m *groupMember[Req, Res], now time.Time) {
	m.queued = now
	d, caller := ledger.LingerFrom(m.ctx)
	m.linger, m.caller = min(d, MaxGroupCommitWindow), caller
	if len(q.pending) > 0 && q.pending[0].linger > 0 && q.pending[0].caller != caller {
		// Company for a leader that lingers: it need wait no more.
		q.kickLocked()
	}
}

// submit queues req and waits until a group decided it, leading groups
// when its turn comes. single reports that it was not decided: the
// caller then runs the call on its own. The error is not wrapped.
func (q *groupQueue[Req, Res]) submit(ctx context.Context, req Req) (res Res, single bool, err error) {
	if err := ctx.Err(); err != nil {
		return res, false, err
	}
	m := &groupMember[Req, Res]{ctx: ctx, req: req, promote: make(chan struct{}, 1), done: make(chan struct{})}
	q.mu.Lock()
	q.arrive(m, time.Now())
	q.pending = append(q.pending, m)
	// While a leader collects, every arrival joins its group or the next
	// one; the collecting leader hands over before it runs its group, so
	// there is always one when requests wait (see handOffLocked).
	lead := !q.collecting
	q.collecting = true
	if len(q.pending) >= q.max {
		q.kickLocked()
	}
	q.mu.Unlock()
	for {
		if lead {
			lead = false
			q.lead()
		}
		// A decided call returns its decision even when its context
		// ended at the same moment.
		select {
		case <-m.done:
			return m.res, m.single, m.err
		default:
		}
		select {
		case <-m.done:
			return m.res, m.single, m.err
		case <-m.promote:
			lead = true
		case <-ctx.Done():
			return q.abandon(m)
		}
	}
}

// groupAnswer is what submitAll answers for one request: as submit
// does, and the request as its group left it (with what a held write
// wrote, when it tried one: see decideHeld).
type groupAnswer[Req, Res any] struct {
	req    Req
	res    Res
	single bool
	err    error
}

// submitAll queues reqs together, as one caller's calls made at once, and
// waits until groups decided every one of them, leading groups when its
// turn comes, so that a batch shares its commits with the calls and
// batches of other callers. The answers are in the order of reqs. Groups
// may split the batch; a caller whose requests must apply in their order
// (several on one record) runs them as one group of its own instead.
//
// A batch is one arrival: a leader with nothing but one batch queued and
// nothing else in flight does not wait the window, as for a lone call.
// When ctx ends, every request no leader took yet is withdrawn (its error
// matches ctx.Err(); nothing of it applied), and a taken one whose group
// is still running answers an error saying it may have applied.
func (q *groupQueue[Req, Res]) submitAll(ctx context.Context, reqs []Req) []groupAnswer[Req, Res] {
	out := make([]groupAnswer[Req, Res], len(reqs))
	if err := ctx.Err(); err != nil {
		for i, r := range reqs {
			out[i] = groupAnswer[Req, Res]{req: r, err: err}
		}
		return out
	}
	// One promotion token for the batch: the queue hands out one at a
	// time (handOffLocked), so one slot holds it.
	promote := make(chan struct{}, 1)
	ms := make([]*groupMember[Req, Res], len(reqs))
	q.mu.Lock()
	now := time.Now()
	for i, r := range reqs {
		ms[i] = &groupMember[Req, Res]{ctx: ctx, req: r, promote: promote, done: make(chan struct{})}
		q.arrive(ms[i], now)
	}
	q.pending = append(q.pending, ms...)
	lead := !q.collecting
	q.collecting = true
	if len(q.pending) >= q.max {
		q.kickLocked()
	}
	q.mu.Unlock()
wait:
	for i := 0; i < len(ms); {
		if lead {
			lead = false
			q.lead()
		}
		select {
		case <-ms[i].done:
			i++
			continue
		default:
		}
		select {
		case <-ms[i].done:
			i++
		case <-promote:
			lead = true
		case <-ctx.Done():
			q.abandonAll(ms[i:], promote)
			break wait
		}
	}
	for i, m := range ms {
		select {
		case <-m.done:
			out[i] = groupAnswer[Req, Res]{req: m.req, res: m.res, single: m.single, err: m.err}
		default:
			// Its group is running: its fields are the group's until done.
			out[i] = groupAnswer[Req, Res]{req: reqs[i],
				err: fmt.Errorf("%w (its group transaction was still running: the call may have applied)", ctx.Err())}
		}
	}
	return out
}

// abandonAll is abandon for the undecided requests ms of one submitAll,
// whose promotion token is promote: a request no leader took yet is
// withdrawn, answered with its context's error and done; one a running
// group took stays the group's.
func (q *groupQueue[Req, Res]) abandonAll(ms []*groupMember[Req, Res], promote chan struct{}) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range ms {
		if m.state != memberQueued {
			continue
		}
		m.state, m.err = memberDropped, m.ctx.Err()
		q.pending = slices.DeleteFunc(q.pending, func(p *groupMember[Req, Res]) bool { return p == m })
		close(m.done)
	}
	select {
	case <-promote:
		q.collecting = false
		q.handOffLocked()
	default:
	}
}

// abandon is what a caller whose context ended answers: withdrawn when
// no leader took its request yet (nothing applied), else an error saying
// the call may have applied. A promotion it held passes on.
func (q *groupQueue[Req, Res]) abandon(m *groupMember[Req, Res]) (res Res, single bool, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch m.state {
	case memberQueued:
		m.state = memberDropped
		q.pending = slices.DeleteFunc(q.pending, func(p *groupMember[Req, Res]) bool { return p == m })
		select {
		case <-m.promote:
			q.collecting = false
			q.handOffLocked()
		default:
		}
		return res, false, m.ctx.Err()
	case memberDropped:
		return res, false, m.ctx.Err()
	}
	select {
	case <-m.done: // decided after all
		return m.res, m.single, m.err
	default:
	}
	return res, false, fmt.Errorf("%w (its group transaction was still running: the call may have applied)", m.ctx.Err())
}

// company returns the first pending request of another caller than the
// first request's (ledger.WithLinger), or nil. The caller holds q.mu.
func (q *groupQueue[Req, Res]) company() *groupMember[Req, Res] {
	for _, m := range q.pending[1:] {
		if m.caller != q.pending[0].caller || m.caller == nil {
			return m
		}
	}
	return nil
}

// lead collects one group and runs it. The caller was made the
// collecting leader (q.collecting is set for it).
func (q *groupQueue[Req, Res]) lead() {
	q.mu.Lock()
	for {
		if len(q.pending) == 0 { // every request withdrew
			q.collecting = false
			q.mu.Unlock()
			return
		}
		first := q.pending[0]
		wait := q.window - time.Since(first.queued)
		// One arrival: a lone call, or the requests of one submitAll,
		// which share a promotion channel.
		one := len(q.pending) == 1 || first.promote == q.pending[len(q.pending)-1].promote
		switch {
		case first.linger > 0:
			// In no hurry: it waits for another caller's company, up to
			// its linger (arrive kicks when company comes), and then the
			// window from the company's arrival, for the calls that the
			// same caller makes with it.
			if m := q.company(); m != nil {
				wait = q.window - time.Since(m.queued)
			} else {
				wait = max(q.window, first.linger) - time.Since(first.queued)
			}
		case one && q.running == 0 && q.alone.Load() == 0 && !q.waitAlone:
			// Nothing in flight promises company: no wait.
			wait = 0
		}
		full := len(q.pending) >= q.max
		slot := q.running < groupsInFlight
		if (wait <= 0 || full) && slot {
			break
		}
		q.mu.Unlock()
		if !slot {
			<-q.kick // a slot frees when a running group ends
		} else {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-q.kick:
			}
			t.Stop()
		}
		q.mu.Lock()
	}
	n := min(len(q.pending), q.max)
	group := make([]*groupMember[Req, Res], 0, n)
	for _, m := range q.pending[:n] {
		if err := m.ctx.Err(); err != nil {
			m.state, m.err = memberDropped, err
			close(m.done)
			continue
		}
		m.state = memberTaken
		group = append(group, m)
	}
	q.pending = slices.Delete(q.pending, 0, n)
	q.collecting = false
	if len(group) == 1 {
		// Not worth a group: the caller runs it on its own, under its
		// own context, exactly as without group commit.
		group[0].single = true
		close(group[0].done)
		q.handOffLocked()
		q.mu.Unlock()
		return
	}
	if len(group) > 1 {
		q.running++
	}
	q.handOffLocked()
	q.mu.Unlock()
	if len(group) == 0 {
		return
	}

	ctx, release := groupContext(group)
	q.run(ctx, group)
	release()
	q.groupsRun.Add(1)
	q.callsGrouped.Add(int64(len(group)))
	for _, m := range group {
		close(m.done)
	}
	q.mu.Lock()
	q.running--
	q.kickLocked()
	q.handOffLocked()
	q.mu.Unlock()
}

// handOffLocked makes the oldest waiting request's caller the collecting
// leader when nobody collects.
func (q *groupQueue[Req, Res]) handOffLocked() {
	if q.collecting || len(q.pending) == 0 {
		return
	}
	q.collecting = true
	q.pending[0].promote <- struct{}{} // never blocks: one token per promotion, taken before the next
}

func (q *groupQueue[Req, Res]) kickLocked() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// groupContext returns the context a group transaction runs under: the
// values of its first member's context, cancelled only when every
// member's context has ended (nobody is left to tell), so that one
// caller giving up does not undo the others' calls. release frees what
// it registered.
func groupContext[Req, Res any](ms []*groupMember[Req, Res]) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ms[0].ctx))
	var left atomic.Int64
	left.Store(int64(len(ms)))
	stops := make([]func() bool, len(ms))
	for i, m := range ms {
		stops[i] = context.AfterFunc(m.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}
