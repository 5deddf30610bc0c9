package pgstore_test

import (
	"fmt"
	"time"

	"github.com/leaseledger/ledger"
)

// The delivery half of the generator of TestRandomSequencesMatchMemstore
// (the drawing machinery is in differential_random_gen_test.go).

// enqueueRequest draws a request: mostly the usual content of its ID
// (Repeated once enqueued), sometimes the same content spelled otherwise
// (still Repeated), sometimes other content (Conflict).
func (r *diffRun) enqueueRequest() ledger.EnqueueRequest {
	req := r.canon[pickOne(r, diffIDs)]
	switch r.rng.IntN(12) {
	case 0:
		req.Payload = []byte("other payload")
	case 1:
		req.Target = pickOther(r, diffTargets, req.Target)
	case 2:
		req.Ceremony = pickOther(r, []ledger.CeremonyID{"", "c1", "c2"}, req.Ceremony)
	case 3:
		req.Policy = pickOne(r, diffPolicies)
	case 4:
		if req.Payload == nil {
			req.Payload = []byte{}
		}
	case 5:
		req.Policy = req.Policy.Resolve(ledger.DefaultPolicy())
	case 6:
		req.AvailableAt = r.w.now.Add(time.Duration(r.rng.IntN(60)-30)*time.Second + r.nanos())
	}
	return req
}

func descReq(req ledger.EnqueueRequest) string {
	avail := "now"
	if !req.AvailableAt.IsZero() {
		avail = atT0(req.AvailableAt)
	}
	payload := fmt.Sprintf("%q", req.Payload)
	if req.Payload == nil {
		payload = "nil"
	}
	return fmt.Sprintf("%s{target=%s ceremony=%q payload=%s policy=%+v available=%s}",
		req.ID, req.Target, req.Ceremony, payload, req.Policy, avail)
}

func (r *diffRun) opEnqueue() diffOp {
	req, now := r.enqueueRequest(), r.callNow()
	return diffOp{"Enqueue", fmt.Sprintf("Enqueue %s at %s", descReq(req), atT0(now)), writesDeliveries, nil,
		func(s *diffSide) (any, error) { return s.l.Enqueue(r.ctx, cloneReqs(req)[0], now) }}
}

func (r *diffRun) opEnqueueBatch() diffOp {
	reqs := make([]ledger.EnqueueRequest, 1+r.rng.IntN(4))
	descs := make([]string, len(reqs))
	for i := range reqs {
		reqs[i] = r.enqueueRequest()
	}
	if r.chance(8) {
		reqs[r.rng.IntN(len(reqs))].Target = "" // the whole batch is ErrInvalid
	}
	for i := range reqs {
		descs[i] = descReq(reqs[i])
	}
	now := r.callNow()
	return diffOp{"EnqueueBatch", fmt.Sprintf("EnqueueBatch %v at %s", descs, atT0(now)), writesDeliveries, nil,
		func(s *diffSide) (any, error) { return s.b.EnqueueBatch(r.ctx, cloneReqs(reqs...), now) }}
}

func (r *diffRun) someTargets() []ledger.Target {
	perm := r.rng.Perm(len(diffTargets))
	ts := make([]ledger.Target, 1+r.rng.IntN(2))
	for i := range ts {
		ts[i] = diffTargets[perm[i]]
	}
	return ts
}

func (r *diffRun) opLease() diffOp {
	var f ledger.LeaseFilter
	if r.chance(40) {
		f.Targets = r.someTargets()
	}
	if r.chance(25) {
		f.Ceremony = pickOne(r, []ledger.CeremonyID{"c1", "c2", "c9"})
	}
	owner, dur, limit, now := pickOne(r, diffOwners), pickOne(r, diffDurations), 1+r.rng.IntN(5), r.callNow()
	if r.chance(4) {
		if r.chance(50) {
			limit = 0
		} else {
			dur = 999 // under a microsecond
		}
	}
	return diffOp{"Lease", fmt.Sprintf("Lease %+v to %s for %s, limit %d, at %s", f, owner, dur, limit, atT0(now)), writesDeliveries, nil,
		func(s *diffSide) (any, error) {
			lr, err := s.l.Lease(r.ctx, f, owner, now, dur, limit)
			if err == nil {
				s.rememberLeases(lr)
			}
			return lr, err
		}}
}

// drawLease draws a lease; the function returns each side's own lease.
// Acknowledge aims at unexpired leases (acknowledgeable), MarkFailed and
// Release at any lease in force.
func (r *diffRun) drawLease(acknowledgeable bool) (string, func(s *diffSide) (ledger.Lease, error)) {
	var live []string
	for _, d := range r.peek(ledger.DeliveryStateLeased, ledger.DeliveryStateAcknowledged) {
		if !acknowledgeable || (d.State == ledger.DeliveryStateLeased && d.Lease.ExpiresAt.After(r.w.now)) {
			live = append(live, string(d.ID))
		}
	}
	g, desc := r.drawGrant(r.leaseKeys, r.latestLease, r.deliveryIDs, live)
	return "lease " + desc, func(s *diffSide) (ledger.Lease, error) {
		l := ledger.Lease{DeliveryID: ledger.DeliveryID(g.key.id), Owner: diffOwners[0], Token: forgedToken, Seq: g.key.seq}
		if !g.madeUp {
			var ok bool
			if l, ok = s.leases[g.key]; !ok {
				return l, fmt.Errorf("%w: %s has no lease %s", errMissingGrant, s.name, g.key)
			}
		}
		switch g.bend {
		case 1:
			l.DeliveryID = ledger.DeliveryID(g.other)
		case 2:
			l.Token = forgedToken
		case 3:
			l.Seq++
		case 4:
			l.Seq = 0
		}
		return l, nil
	}
}

// peek lists memstore's deliveries in states, to aim a call at them.
func (r *diffRun) peek(states ...ledger.DeliveryState) []ledger.Delivery {
	p, err := r.sides[0].l.List(r.ctx, ledger.ListQuery{States: states, Limit: ledger.MaxLimit})
	if err != nil {
		return nil // then the call is aimed at random
	}
	return p.Deliveries
}

// withLease runs call with each side's lease.
func withLease[T any](lease func(s *diffSide) (ledger.Lease, error), call func(s *diffSide, l ledger.Lease) (T, error)) func(s *diffSide) (any, error) {
	return func(s *diffSide) (any, error) {
		l, err := lease(s)
		if err != nil {
			return nil, err
		}
		return call(s, l)
	}
}

func (r *diffRun) opAcknowledge() diffOp {
	desc, lease := r.drawLease(true)
	obs, now := pickOne(r, []string{"", "got it", "seen ✓"}), r.callNow()
	return diffOp{"Acknowledge", fmt.Sprintf("Acknowledge %s, %q, at %s", desc, obs, atT0(now)), writesDeliveries, nil,
		withLease(lease, func(s *diffSide, l ledger.Lease) (ledger.DeliveryResult, error) {
			return s.l.Acknowledge(r.ctx, l, obs, now)
		})}
}

// ackProcessedAnswer is what AcknowledgeProcessed answers.
type ackProcessedAnswer struct{ Ack, Processed ledger.DeliveryResult }

func (r *diffRun) opAcknowledgeProcessed() diffOp {
	desc, lease := r.drawLease(true)
	action, now := pickOne(r, []ledger.ActionRef{"act-1", "act-2"}), r.callNow()
	var fence *ledger.Fence
	if r.chance(30) {
		fence = ledger.FenceOf(int64(r.rng.IntN(7)))
	}
	return diffOp{"AcknowledgeProcessed", fmt.Sprintf("AcknowledgeProcessed %s, fence %v, action %s, at %s", desc, fence, action, atT0(now)), writesDeliveries, nil,
		withLease(lease, func(s *diffSide, l ledger.Lease) (ackProcessedAnswer, error) {
			p, ok := s.l.(ledger.AckProcessor)
			if !ok {
				return ackProcessedAnswer{}, fmt.Errorf("%s: %T is no ledger.AckProcessor", s.name, s.l)
			}
			ack, processed, err := p.AcknowledgeProcessed(r.ctx, l, "seen", fence, action, now)
			return ackProcessedAnswer{ack, processed}, err
		})}
}

func (r *diffRun) opMarkFailed() diffOp {
	desc, lease := r.drawLease(false)
	reason, now := ledger.FailureReason{Message: pickOne(r, []string{"", "timeout", "host said no"}), Permanent: r.chance(25)}, r.callNow()
	return diffOp{"MarkFailed", fmt.Sprintf("MarkFailed %s, %+v, at %s", desc, reason, atT0(now)), writesDeliveries, nil,
		withLease(lease, func(s *diffSide, l ledger.Lease) (ledger.DeliveryResult, error) {
			return s.l.MarkFailed(r.ctx, l, reason, now)
		})}
}

func (r *diffRun) opRelease() diffOp {
	desc, lease := r.drawLease(false)
	now := r.callNow()
	return diffOp{"Release", fmt.Sprintf("Release %s at %s", desc, atT0(now)), writesDeliveries, nil,
		withLease(lease, func(s *diffSide, l ledger.Lease) (ledger.DeliveryResult, error) {
			return s.l.Release(r.ctx, l, now)
		})}
}

// opMarkProcessed aims mostly at acknowledged (or processed) deliveries,
// by their acknowledging owner and with their action, and at fences
// around the target's highest; it looks them up in memstore first.
func (r *diffRun) opMarkProcessed() diffOp {
	id, owner, target := pickOne(r, diffIDs), pickOne(r, diffOwners), pickOne(r, diffTargets)
	action := pickOne(r, []ledger.ActionRef{"act-1", "act-2"})
	acked, processed, all := r.peek(ledger.DeliveryStateAcknowledged), r.peek(ledger.DeliveryStateProcessed), r.peek()
	var aim []ledger.Delivery
	switch {
	case len(acked) > 0 && r.chance(75):
		aim = acked
	case len(processed) > 0 && r.chance(40):
		aim = processed // a repeat, or a late call by another owner or action
	case len(all) > 0 && r.chance(85):
		aim = all
	}
	if len(aim) > 0 {
		d := pickOne(r, aim)
		id, target = d.ID, d.Target
		if d.Ack != nil && r.chance(80) {
			owner = d.Ack.Owner
		}
		if d.Processing != nil && r.chance(70) {
			action = d.Processing.Action
		}
	}
	// Fences: none, equal to the target's highest, above, below (rejected),
	// any small one, or a negative one (ErrInvalid).
	high, seen := r.fences[target]
	var fence *ledger.Fence
	switch x := r.rng.IntN(20); {
	case x < 4:
	case x < 8 && seen:
		fence = ledger.FenceOf(int64(high))
	case x < 11 && seen:
		fence = ledger.FenceOf(int64(high) + 1)
	case x < 16 && seen && high > 0:
		fence = ledger.FenceOf(int64(high) - 1 - int64(r.rng.IntN(int(high))))
	case x < 19:
		fence = ledger.FenceOf(int64(r.rng.IntN(7)))
	default:
		fence = ledger.FenceOf(-1)
	}
	fdesc := "no fence"
	if fence != nil {
		fdesc = fmt.Sprintf("fence %d (highest on %s: %d, seen %t)", *fence, target, high, seen)
	}
	now := r.callNow()
	return diffOp{"MarkProcessed", fmt.Sprintf("MarkProcessed %s by %s, %s, action %s, at %s", id, owner, fdesc, action, atT0(now)), writesDeliveries, nil,
		func(s *diffSide) (any, error) { return s.l.MarkProcessed(r.ctx, id, owner, fence, action, now) }}
}

func (r *diffRun) opRecordActivation() diffOp {
	id, now := pickOne(r, diffIDs), r.callNow()
	a := ledger.Activation{
		Result: pickOne(r, []ledger.ActivationResult{ledger.ActivationDelivered, ledger.ActivationUnreachable, ledger.ActivationFailed}),
		Detail: pickOne(r, []string{"", "woke", "asleep"}),
	}
	if r.chance(4) {
		a.Result = "bogus"
	}
	return diffOp{"RecordActivation", fmt.Sprintf("RecordActivation %s %+v at %s", id, a, atT0(now)), writesDeliveries, nil,
		func(s *diffSide) (any, error) { return s.l.RecordActivation(r.ctx, id, a, now) }}
}

func (r *diffRun) opExpire() diffOp {
	now := r.callNow()
	return diffOp{"Expire", "Expire at " + atT0(now), writesDeliveries, nil,
		func(s *diffSide) (any, error) { return s.l.Expire(r.ctx, now) }}
}

func (r *diffRun) opAbandon() diffOp {
	id, now := pickOne(r, diffIDs), r.callNow()
	cause := ledger.Cause{Kind: pickOne(r, []ledger.CauseKind{ledger.CauseQueueBounded, "operator_drop"}), Detail: pickOne(r, []string{"", "full"})}
	return diffOp{"Abandon", fmt.Sprintf("Abandon %s %+v at %s", id, cause, atT0(now)), writesDeliveries, nil,
		func(s *diffSide) (any, error) { return s.l.Abandon(r.ctx, id, cause, now) }}
}

func (r *diffRun) opExpireCeremony() diffOp {
	c, now := pickOne(r, []ledger.CeremonyID{"c1", "c2", "c9"}), r.callNow()
	cause := ledger.Cause{Kind: pickOne(r, []ledger.CauseKind{ledger.CauseCeremonyEnded, ledger.CauseBindingRevoked}), Detail: "over"}
	return diffOp{"ExpireCeremony", fmt.Sprintf("ExpireCeremony %s %+v at %s", c, cause, atT0(now)), writesDeliveries, nil,
		func(s *diffSide) (any, error) { return s.l.ExpireCeremony(r.ctx, c, cause, now) }}
}

func (r *diffRun) opSupersede() diffOp {
	prev := pickOne(r, diffTargets)
	repl := pickOther(r, []ledger.Target{"h1", "h2", "h3", "h4"}, prev)
	if r.chance(4) {
		repl = prev // ErrInvalid
	}
	mode, now := pickOne(r, []ledger.FollowMode{ledger.Follow, ledger.LeaveBehind}), r.callNow()
	return diffOp{"Supersede", fmt.Sprintf("Supersede %s by %s, %s, at %s", prev, repl, mode, atT0(now)), writesDeliveries, nil,
		func(s *diffSide) (any, error) { return s.l.Supersede(r.ctx, prev, repl, mode, now) }}
}

func (r *diffRun) opGet() diffOp {
	id := pickOne(r, diffIDs)
	return diffOp{"Get", "Get " + string(id), writesNothing, nil,
		func(s *diffSide) (any, error) { return s.l.Get(r.ctx, id) }}
}

// opList walks every page of a random query.
func (r *diffRun) opList() diffOp {
	q := ledger.ListQuery{Limit: 1 + r.rng.IntN(4)}
	if r.chance(30) {
		q.Targets = r.someTargets()
	}
	if r.chance(25) {
		q.Ceremony = pickOne(r, diffCeremonies)
	}
	if r.chance(30) {
		for _, st := range ledger.DeliveryStates() {
			if r.chance(40) {
				q.States = append(q.States, st)
			}
		}
	}
	if r.chance(4) {
		q.Cursor = "not-a-cursor"
	}
	return diffOp{"List", fmt.Sprintf("List %+v to the last page", q), writesNothing, nil,
		func(s *diffSide) (any, error) {
			q := q
			var pages []ledger.Page
			for range 2 * len(diffIDs) { // bounded even if a cursor never ends
				p, err := s.l.List(r.ctx, q)
				if err != nil {
					return nil, err
				}
				pages = append(pages, p)
				if p.Next == "" {
					break
				}
				q.Cursor = p.Next
			}
			return pages, nil
		}}
}
