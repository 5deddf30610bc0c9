package dispatch

import (
	"context"
	"sync"
	"time"
)

// renewals keeps alive the claims or leases of one cycle's work in
// flight: every interval while any of it runs, it renews each one, on one
// timer for the cycle instead of a timer and a loop per item. Work joins
// as it starts and leaves as it ends; a renewal still in flight when its
// work leaves is not recorded, so no renewal can race the completion and
// report a claim or lease lost only because it ended.
//
// Work that starts while other work is in flight is first renewed at the
// cycle's next tick, which may come sooner than interval after its own
// start, never later. Its claim or lease was granted when the cycle
// began, before the work started, so this keeps it at least as well as
// a timer from the work's own start would.
//
// Callers renew every third of the lease: early enough that two renewals
// can fail (a slow store, a lost connection) before the lease runs out.
type renewals struct {
	ctx      context.Context // the cycle's flight context; renewals detach from it
	after    AfterFunc
	interval time.Duration

	mu      sync.Mutex
	live    renewal     // sentinel of the ring of work in flight
	gen     uint64      // the arming of the timer a tick belongs to
	armed   bool        // a timer is set (stop cancels it)
	stop    func() bool // cancels the armed timer
	running bool        // a tick is renewing
	closed  bool        // the cycle is over: nothing joins or ticks
}

// renewer is what one item's work renews: renew makes the store call
// under ctx (detached from the work's own context, which may be
// cancelled while the claim or lease still needs keeping, and bounded by
// the interval) and returns the function that records its answer, which
// reports false when there is nothing left to keep (the claim or lease
// was lost). settle runs under the renewals' lock.
type renewer interface {
	renew(ctx context.Context) (settle func() bool)
}

// renewal is one item's place among its cycle's renewals. Embed it in
// the renewer and pass both to join.
type renewal struct {
	r          renewer
	prev, next *renewal
}

// newRenewals returns the renewals of a cycle whose work runs under
// flight, renewing every interval.
func newRenewals(flight context.Context, after AfterFunc, interval time.Duration) *renewals {
	rs := &renewals{ctx: flight, after: after, interval: interval}
	rs.live.prev, rs.live.next = &rs.live, &rs.live
	return rs
}

// join adds n, the place of r, to the work in flight, and arms the timer
// when none is armed or ticking. A nil rs (a store that cannot renew)
// keeps nothing.
func (rs *renewals) join(n *renewal, r renewer) {
	if rs == nil {
		return
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.closed {
		return
	}
	n.r = r
	n.prev, n.next = rs.live.prev, &rs.live
	n.prev.next, rs.live.prev = n, n
	if !rs.armed && !rs.running {
		rs.arm()
	}
}

// leave removes n from the work in flight (its work ended, or its claim
// or lease was lost). It does nothing when n already left. The timer
// stays armed when no work is left: work ends and starts all through a
// cycle, and arming a timer anew for each would cost what one timer for
// the cycle saves. A tick that finds no work arms no next one, and close
// stops the timer when the cycle ends.
func (rs *renewals) leave(n *renewal) {
	if rs == nil {
		return
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.unlink(n)
}

// close stops the timer for good: the cycle's work has all ended.
func (rs *renewals) close() {
	if rs == nil {
		return
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.closed = true
	if rs.armed {
		rs.disarm()
	}
}

// unlink removes n from the ring, if it is in it. Called under mu.
func (rs *renewals) unlink(n *renewal) {
	if n.next == nil {
		return
	}
	n.prev.next, n.next.prev = n.next, n.prev
	n.prev, n.next = nil, nil
}

// arm sets the timer. Called under mu.
func (rs *renewals) arm() {
	rs.gen++
	gen := rs.gen
	rs.armed = true
	rs.stop = rs.after(rs.interval, func() { rs.tick(gen) })
}

// disarm stops the timer; a tick it already started finds its arming
// gone and does nothing. Called under mu, by close.
func (rs *renewals) disarm() {
	rs.stop()
	rs.gen++
	rs.armed, rs.stop = false, nil
}

// tick renews every work in flight, side by side, waits for the answers
// and records each (unless its work left meanwhile), then arms the timer
// again while work is in flight.
func (rs *renewals) tick(gen uint64) {
	rs.mu.Lock()
	if gen != rs.gen || rs.closed {
		rs.mu.Unlock()
		return
	}
	rs.armed, rs.stop, rs.running = false, nil, true
	var due []*renewal
	for n := rs.live.next; n != &rs.live; n = n.next {
		due = append(due, n)
	}
	rs.mu.Unlock()

	switch len(due) {
	case 0:
	case 1:
		rs.renewOne(due[0])
	default:
		var wg sync.WaitGroup
		for _, n := range due {
			wg.Go(func() { rs.renewOne(n) })
		}
		wg.Wait()
	}

	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.running = false
	if !rs.closed && !rs.armed && rs.live.next != &rs.live {
		rs.arm()
	}
}

// renewOne renews n's claim or lease and records the answer, unless n
// left while the call was in flight.
func (rs *renewals) renewOne(n *renewal) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(rs.ctx), rs.interval)
	settle := n.r.renew(sctx)
	cancel()

	rs.mu.Lock()
	defer rs.mu.Unlock()
	if n.next == nil {
		return // left: its work ended
	}
	if !settle() {
		rs.unlink(n)
	}
}
