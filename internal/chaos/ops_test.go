package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/leaseledger/ledger"
)

// This file is what a worker does with the leases and claims it holds,
// and with those it gave up.

// workLease makes the next call on one held lease: acknowledge, then
// process; or fail, release, or forget it.
func (w *worker) workLease(ctx context.Context) {
	i := w.rng.IntN(len(w.leases))
	h := w.leases[i]
	if h.plan == "" {
		switch p := w.rng.IntN(100); {
		case h.acked:
			h.plan = fnProcess
		case p < 80 && !h.expired:
			h.plan = fnAck
		case p < 89:
			h.plan, h.permanent = fnFail, p >= 87
		case p < 97:
			h.plan = fnRelease
		default: // forget it: the lease runs out
			w.dropLease(i)
			return
		}
	}
	if done, _ := w.leaseCall(ctx, h); done {
		w.dropLease(i)
	}
}

func (w *worker) dropLease(i int) {
	w.bury(heldLease{lease: w.leases[i].lease, target: w.leases[i].target})
	w.leases = append(w.leases[:i], w.leases[i+1:]...)
}

// retryLater keeps a held lease or claim after an error, for its call to
// be made again (a repeat of one that applied answers Repeated), up to a
// few times.
func retryLater(errs *int) bool {
	*errs++
	return *errs > 3
}

// leaseCall makes h's planned call, reports whether h is done with, and
// returns the call.
func (w *worker) leaseCall(ctx context.Context, h *heldLease) (bool, *call) {
	l := h.lease
	under := grantOfLease(l, 0)
	now := w.now()
	c := &call{Fn: h.plan, Kind: kindDelivery, Owner: l.Owner, Now: now, Under: &under, Permanent: h.permanent}
	if h.plan == fnProcess {
		if h.action == "" {
			h.action = ledger.ActionRef(fmt.Sprintf("%s/%d", w.name, w.n+1))
			h.fence = w.pickFence(h.target)
		}
		c.Under, c.Item, c.Target, c.Action, c.Fence = nil, string(l.DeliveryID), string(h.target), string(h.action), h.fence
	}
	var res ledger.DeliveryResult
	err := w.do(ctx, c, func(ctx context.Context, b backend) error {
		var err error
		switch h.plan {
		case fnAck:
			res, err = b.deliveries.Acknowledge(ctx, l, "chaos", now)
		case fnProcess:
			var fence *ledger.Fence
			if h.fence != nil {
				fence = ledger.FenceOf(*h.fence)
			}
			res, err = b.deliveries.MarkProcessed(ctx, l.DeliveryID, l.Owner, fence, h.action, now)
		case fnFail:
			res, err = b.deliveries.MarkFailed(ctx, l, ledger.FailureReason{Message: "chaos", Permanent: h.permanent}, now)
		case fnRelease:
			res, err = b.deliveries.Release(ctx, l, now)
		}
		c.Outcome, c.Version = res.Outcome, res.Delivery.Version
		if res.Applied() && h.plan != fnAck {
			c.EndAt = endStamp(res.Delivery)
		}
		return err
	})
	switch {
	case err != nil:
		return retryLater(&h.errs), c
	case h.plan == fnAck && (res.Outcome == ledger.OutcomeApplied || res.Outcome == ledger.OutcomeRepeated):
		h.acked, h.plan = true, ""
		return false, c
	case h.plan == fnAck && res.Outcome == ledger.OutcomeLeaseExpired:
		h.expired, h.plan = true, ""
		return false, c
	case h.plan == fnProcess && res.Outcome == ledger.OutcomeFenceRejected:
		// Try again with another fence; after a few, without one.
		h.fence = w.pickFence(h.target)
		if h.rejected++; h.rejected > 4 {
			h.fence = nil
		}
		return false, c
	}
	return true, c
}

// endStamp is when an applied call that ended a grant says it ended.
func endStamp(d ledger.Delivery) time.Time {
	switch {
	case d.EndedLease != nil:
		return d.EndedLease.At
	case !d.EndedAt.IsZero():
		return d.EndedAt
	}
	return d.UpdatedAt
}

// pickFence returns a fresh fence for the target mostly, sometimes none,
// and sometimes a stale one on purpose.
func (w *worker) pickFence(t ledger.Target) *int64 {
	slot := slotFences + targetIndex(t)
	var f int64
	switch p := w.rng.IntN(100); {
	case p < 15:
		return nil
	case p < 30:
		f = max(0, w.sh.load(slot)-1-w.rng.Int64N(3))
	default:
		f = w.sh.take(slot, 1) + 1
	}
	return &f
}

// workClaim makes the next call on one held claim.
func (w *worker) workClaim(ctx context.Context) {
	i := w.rng.IntN(len(w.claims))
	h := w.claims[i]
	if h.plan == "" {
		switch p := w.rng.IntN(100); {
		case p < 75:
			h.plan = fnDeliver
		case p < 88:
			h.plan, h.permanent = fnFail, p >= 85
		case p < 90:
			h.plan = fnDeadLetter
		case p < 97:
			h.plan = fnRelease
		default:
			w.dropClaim(i)
			return
		}
	}
	if done, _ := w.claimCall(ctx, h); done {
		w.dropClaim(i)
	}
}

func (w *worker) dropClaim(i int) {
	w.bury(w.claims[i].claim)
	w.claims = append(w.claims[:i], w.claims[i+1:]...)
}

// claimCall makes h's planned completion, reports whether h is done,
// and returns the call.
func (w *worker) claimCall(ctx context.Context, h *heldClaim) (bool, *call) {
	cl := h.claim
	under := grantOfClaim(cl, 0)
	ref := fmt.Sprintf("%s#%d", cl.EntryID, cl.Seq)
	c := &call{Fn: h.plan, Kind: kindEntry, Owner: ledger.Owner{Agent: cl.Worker}, Under: &under, Action: ref, Permanent: h.permanent}
	var next *time.Time
	if h.plan == fnFail && !h.permanent {
		base := w.now()
		if w.p.StoreClock {
			// A retry time from the test's logical clock (years ahead of
			// the server's) would never come due on the database's.
			base = cl.ClaimedAt
		}
		t := base.Add(100 * time.Microsecond)
		next = &t
	}
	emission := ledger.EmissionError{Code: "chaos", Message: ref}
	err := w.do(ctx, c, func(ctx context.Context, b backend) error {
		var res ledger.OutboxResult
		var err error
		switch h.plan {
		case fnDeliver:
			res, err = b.entries.MarkClaimDelivered(ctx, cl, ledger.EmissionResult{ProviderRef: ref})
		case fnFail:
			res, err = b.entries.MarkClaimFailed(ctx, cl, emission, next)
		case fnDeadLetter:
			res, err = b.entries.MarkClaimDeadLettered(ctx, cl, emission, "chaos")
		case fnRelease:
			res, err = b.entries.ReleaseClaim(ctx, cl, "chaos")
		}
		c.Outcome, c.Version = res.Outcome, res.Entry.Version
		return err
	})
	if err != nil {
		return retryLater(&h.errs), c
	}
	return true, c
}

// stale repeats a call under a lease or claim given up before: the store
// must answer it without changing anything, unless it is still in force.
func (w *worker) stale(ctx context.Context) {
	if len(w.zombies) == 0 {
		return
	}
	switch z := w.zombies[w.rng.IntN(len(w.zombies))].(type) {
	case heldLease:
		h := &heldLease{lease: z.lease, target: z.target, plan: []fn{fnAck, fnProcess, fnFail, fnRelease}[w.rng.IntN(4)]}
		w.leaseCall(ctx, h)
	case ledger.Claim:
		h := &heldClaim{claim: z, plan: []fn{fnDeliver, fnFail, fnRelease}[w.rng.IntN(3)], permanent: w.rng.IntN(2) == 0}
		w.claimCall(ctx, h)
	}
}
