package shard

import (
	"context"
	"fmt"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// CauseMoved is the cause with which Move ends a delivery's copy on the
// shard it left.
const CauseMoved ledger.CauseKind = "shard_moved"

// moverAgent is the agent Move leases under. Each Move is a new
// incarnation, so the incarnation rule gives back at once whatever a
// Move that died half-way still held.
const moverAgent = "leaseledger.shard.move"

// moveLease bounds how long a Move that dies holds what it took: until
// then the work is not offered on either shard (the next Move takes it
// back at once).
const moveLease = 10 * time.Minute

// MoveResult is what one Move did.
type MoveResult struct {
	// Moved lists the deliveries now open on the target's shard, in the
	// order they were taken.
	Moved []ledger.DeliveryID
	// Remaining counts the target's open deliveries still on the shard
	// moved from (leased or acknowledged by a worker, or offered for
	// later): up to ledger.MaxLimit, counted after the move.
	Remaining int
}

// ErrMoveConflict is returned by Move when the destination already holds
// a delivery with the ID of one being moved and other content.
var ErrMoveConflict = fmt.Errorf("shard: %w: the destination holds the ID with other content", ledger.ErrConflict)

// Move brings target's open work from shard from to the shard the
// placement now gives the target, for a placement that changed (Place)
// or a Follow supersession across shards. Use it so:
//
//  1. Place the target on its new shard, in every process (new
//     enqueues go there from then on).
//  2. Call Move until Remaining is 0. Until then this Ledger also leases
//     the target from the old shard, so nothing waits for the move.
//
// Each delivery that is offerable at now is leased on the old shard by
// a mover (so no worker can hold it meanwhile), enqueued on the new one
// with the same ID, content, metadata, policy and offer time, and then
// abandoned on the old one with cause CauseMoved. A delivery is never
// held by two workers: until the abandon it is held by the mover on the
// old shard, and only offered on the new one. A Move that dies
// half-way loses nothing: the next Move takes the mover's leases back
// (the incarnation rule) and finds the copies already made (Enqueue
// answers Repeated). Leased and acknowledged work stays and closes on the
// old shard (lease and by-ID calls find it there); work offered for
// later is moved by a later Move, once due.
//
// What a moved delivery does not keep: its attempt count starts again,
// its history stays on the old shard (History reads the new copy's), and
// the highest fence accepted for the target is the old shard's until the
// new shard accepts one, so a fence below it but above the new shard's
// would be accepted once.
func (l *Ledger) Move(ctx context.Context, target ledger.Target, from int, now time.Time) (MoveResult, error) {
	if err := storekit.ValidateName("target", string(target)); err != nil {
		return MoveResult{}, err
	}
	if err := storekit.ValidateTime("now", now); err != nil {
		return MoveResult{}, err
	}
	st := l.state.Load()
	if from < 0 || from >= len(st.shards) {
		return MoveResult{}, &ledger.InvalidError{Field: "from", Reason: fmt.Sprintf("no shard %d", from)}
	}
	to, err := st.home(target)
	if err != nil {
		return MoveResult{}, err
	}
	if to == from {
		return MoveResult{}, &ledger.InvalidError{Field: "from", Reason: "the target is placed on that shard"}
	}
	l.addExtra(target, from)
	src, dst := st.shards[from], st.shards[to]
	mover := ledger.Owner{Agent: moverAgent, Incarnation: string(storekit.NewToken())}
	filter := ledger.LeaseFilter{Targets: []ledger.Target{target}}
	var out MoveResult
	for {
		offers, err := offerTimes(ctx, src, target)
		if err != nil {
			return out, wrapShard(from, err)
		}
		res, err := src.Lease(ctx, filter, mover, now, moveLease, ledger.MaxLimit)
		if err != nil {
			return out, wrapShard(from, err)
		}
		for _, g := range res.Leased {
			d := g.Delivery
			req := ledger.EnqueueRequest{
				ID: d.ID, Target: d.Target, Ceremony: d.Ceremony, Payload: d.Payload,
				Metadata: d.Metadata, Policy: d.Policy, AvailableAt: offers[d.ID],
			}
			r, err := dst.Enqueue(ctx, req, now)
			if err != nil {
				return out, wrapShard(to, err)
			}
			if r.Outcome == ledger.OutcomeConflict {
				return out, fmt.Errorf("%w: delivery %s", ErrMoveConflict, d.ID)
			}
			cause := ledger.Cause{Kind: CauseMoved, Detail: fmt.Sprintf("moved to shard %d", to)}
			if _, err := src.Abandon(ctx, d.ID, cause, now); err != nil {
				return out, wrapShard(from, err)
			}
			out.Moved = append(out.Moved, d.ID)
		}
		if len(res.Leased) < ledger.MaxLimit {
			break
		}
	}
	page, err := src.List(ctx, ledger.ListQuery{
		Targets: []ledger.Target{target}, Limit: ledger.MaxLimit,
		States: []ledger.DeliveryState{ledger.DeliveryStateOffered, ledger.DeliveryStateLeased, ledger.DeliveryStateAcknowledged},
	})
	if err != nil {
		return out, wrapShard(from, err)
	}
	out.Remaining = len(page.Deliveries)
	if out.Remaining == 0 {
		l.dropExtra(target, from)
	}
	return out, nil
}

// offerTimes reads the offer times of target's offered deliveries on s,
// which a lease overwrites with its expiry.
func offerTimes(ctx context.Context, s ledger.Ledger, target ledger.Target) (map[ledger.DeliveryID]time.Time, error) {
	out := map[ledger.DeliveryID]time.Time{}
	q := ledger.ListQuery{Targets: []ledger.Target{target}, States: []ledger.DeliveryState{ledger.DeliveryStateOffered}, Limit: ledger.MaxLimit}
	for {
		page, err := s.List(ctx, q)
		if err != nil {
			return nil, err
		}
		for _, d := range page.Deliveries {
			out[d.ID] = d.AvailableAt
		}
		if page.Next == "" {
			return out, nil
		}
		q.Cursor = page.Next
	}
}
