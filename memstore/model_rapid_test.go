package memstore_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/memstore"
)

// This file checks memstore against a small reference model of the delivery
// ledger contract, driven by rapid's state-machine testing. The model is
// written from DESIGN.md, not from the root package: it never calls the
// transition functions of ledger.Delivery (Grant, Acknowledge, Offerable...),
// so a rule that the root package and memstore got wrong together still
// shows up as a difference. The one exception is Policy.Backoff: the
// jitter formula is a policy, not a transition.

var (
	mdlT0       = time.Date(2030, time.January, 2, 3, 4, 5, 0, time.UTC)
	mdlIDs      = []ledger.DeliveryID{"d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7"}
	mdlTargets  = []ledger.Target{"host-a", "host-b", "host-c"}
	mdlCers     = []ledger.CeremonyID{"", "cer-1", "cer-2"}
	mdlPayloads = []string{"", "p1", "p2"}
	mdlOwners   = []ledger.Owner{
		{Agent: "agent-a", Incarnation: "boot-1"}, {Agent: "agent-a", Incarnation: "boot-2"},
		{Agent: "agent-b", Incarnation: "boot-1"}, {Agent: "agent-b", Incarnation: "boot-2"},
	}
	mdlDurations = []time.Duration{time.Microsecond, 5 * time.Second, 30 * time.Second}
	// mdlDefaults is the store's default policy; requests vary only
	// MaxAttempts, so that attempts run out within a short run.
	mdlDefaults = ledger.Policy{MaxAttempts: 3, BackoffBase: time.Second, BackoffMax: 4 * time.Second, AckWindow: time.Minute}
)

// mdlContent is what Enqueue compares for Repeated versus Conflict.
type mdlContent struct {
	target      ledger.Target
	ceremony    ledger.CeremonyID
	payload     string // nil and empty are the same content
	maxAttempts int    // resolved
}

// mdlEnded is how the latest grant ended while the record stayed open: a
// repeat of that same call under that grant is Repeated, not LeaseLost.
type mdlEnded struct {
	Token ledger.Token
	Seq   int64
	Op    ledger.Operation
}

// mdlRecord is what the model tracks of a delivery; the store's answers
// are turned into the same shape (viewOf) so that one comparison shows
// every difference.
type mdlRecord struct {
	ID                ledger.DeliveryID
	State             ledger.DeliveryState
	Target            ledger.Target
	Ceremony          ledger.CeremonyID
	Payload           string
	MaxAttempts       int
	Attempts          int
	LeaseSeq, Version int64
	Created, Updated  time.Time
	EndedAt           time.Time
	Failure           ledger.FailureKind
	AvailableAt       time.Time // compared for Offered and Leased only
	Lease             *ledger.Lease
	Ended             *mdlEnded
	AckOwner          *ledger.Owner
	AckDeadline       time.Time
	Action            ledger.ActionRef // compared for Processed only
	Fence             *ledger.Fence    // compared for Processed only
	Cause             ledger.CauseKind // compared for Expired only
}

type mdlDelivery struct {
	mdlRecord
	content mdlContent // as enqueued
	moved   bool       // by Supersede/Follow
}

func (m *mdlDelivery) terminal() bool {
	return m.State == ledger.DeliveryStateProcessed || m.State == ledger.DeliveryStateFailed || m.State == ledger.DeliveryStateExpired
}

func (m *mdlDelivery) touch(now time.Time) { m.Version++; m.Updated = now }

// end makes m terminal: no lease, no remembered grant.
func (m *mdlDelivery) end(state ledger.DeliveryState, now time.Time) {
	m.State, m.Lease, m.Ended, m.EndedAt = state, nil, nil, now
	m.touch(now)
}

// offerAgain ends the lease under op and offers m again at at, or ends it
// as Failed when attempts are used up (the attempt stays counted).
func (m *mdlDelivery) offerAgain(op ledger.Operation, at, now time.Time) {
	if m.Attempts >= m.MaxAttempts {
		m.end(ledger.DeliveryStateFailed, now)
		return
	}
	m.Ended = &mdlEnded{Token: m.Lease.Token, Seq: m.Lease.Seq, Op: op}
	m.State, m.Lease, m.AvailableAt = ledger.DeliveryStateOffered, nil, at
	m.touch(now)
}

// deliveryModel is the rapid state machine: the store under test, the
// model, and every lease the store ever granted (for stale calls).
type deliveryModel struct {
	ctx    context.Context
	l      ledger.Ledger
	now    time.Time
	recs   map[ledger.DeliveryID]*mdlDelivery
	fences map[ledger.Target]ledger.Fence
	grants []ledger.Lease
	tokens map[ledger.Token]bool
}

// actions lists the state machine's actions. rapid picks among the keys
// uniformly, so the constructive ones appear more than once: a run should
// reach acknowledgement and processing often, not end everything early.
func (s *deliveryModel) actions() map[string]func(*rapid.T) {
	acts := map[string]func(*rapid.T){"": s.check}
	for name, a := range map[string]struct {
		fn     func(*rapid.T)
		weight int
	}{
		"Enqueue": {s.enqueue, 3}, "Lease": {s.lease, 3}, "Acknowledge": {s.acknowledge, 3},
		"MarkProcessed": {s.markProcessed, 3}, "MarkFailed": {s.markFailed, 1}, "Release": {s.release, 1},
		"RecordActivation": {s.recordActivation, 1}, "Expire": {s.expire, 2}, "Abandon": {s.abandon, 1},
		"ExpireCeremony": {s.expireCeremony, 1}, "Supersede": {s.supersede, 1}, "Tick": {s.tick, 2},
		"ToAnEdge": {s.toAnEdge, 2},
	} {
		for i := range a.weight {
			acts[name+strings.Repeat("'", i)] = a.fn
		}
	}
	return acts
}

func (s *deliveryModel) enqueue(t *rapid.T) {
	id := rapid.SampledFrom(mdlIDs).Draw(t, "id")
	m := s.recs[id]
	c := mdlContent{
		// Mostly one target, so that fences of several deliveries meet.
		target:      rapid.SampledFrom([]ledger.Target{mdlTargets[0], mdlTargets[0], mdlTargets[1]}).Draw(t, "target"),
		ceremony:    rapid.SampledFrom(mdlCers).Draw(t, "ceremony"),
		payload:     rapid.SampledFrom(mdlPayloads).Draw(t, "payload"),
		maxAttempts: rapid.IntRange(0, 2).Draw(t, "maxAttempts"), // 0: the default
	}
	if m != nil && rapid.Bool().Draw(t, "sameContent") {
		c = m.content
		if rapid.Bool().Draw(t, "zeroForDefault") && c.maxAttempts == mdlDefaults.MaxAttempts {
			c.maxAttempts = 0
		}
	}
	req := ledger.EnqueueRequest{ID: id, Target: c.target, Ceremony: c.ceremony, Policy: ledger.Policy{MaxAttempts: c.maxAttempts}}
	if c.payload != "" {
		req.Payload = []byte(c.payload)
	} else if rapid.Bool().Draw(t, "emptyNotNil") {
		req.Payload = []byte{}
	}
	if rapid.IntRange(0, 3).Draw(t, "delayed") == 0 {
		req.AvailableAt = s.now.Add(time.Duration(rapid.IntRange(-2, 5).Draw(t, "delaySeconds")) * time.Second)
	}
	if c.maxAttempts == 0 {
		c.maxAttempts = mdlDefaults.MaxAttempts
	}
	res, err := s.l.Enqueue(s.ctx, req, s.now)
	require.NoError(t, err)
	switch {
	case m == nil:
		require.Equal(t, ledger.OutcomeApplied, res.Outcome)
		m = &mdlDelivery{content: c, mdlRecord: mdlRecord{
			ID: id, State: ledger.DeliveryStateOffered, Target: c.target, Ceremony: c.ceremony, Payload: c.payload,
			MaxAttempts: c.maxAttempts, Version: 1, Created: s.now, Updated: s.now, AvailableAt: s.now,
		}}
		if !req.AvailableAt.IsZero() {
			m.AvailableAt = req.AvailableAt
		}
		s.recs[id] = m
	case m.moved && c.ceremony == m.content.ceremony && c.payload == m.content.payload &&
		c.maxAttempts == m.content.maxAttempts && (c.target == m.content.target || c.target == m.Target):
		// A repeat after the record moved on is still Repeated, whether it
		// names the target the delivery was enqueued for or the one a
		// Follow supersession moved it to.
		require.Equal(t, ledger.OutcomeRepeated, res.Outcome)
	case c == m.content:
		require.Equal(t, ledger.OutcomeRepeated, res.Outcome)
	default:
		require.Equal(t, ledger.OutcomeConflict, res.Outcome)
	}
	s.same(t, m, res.Delivery)
}

func (s *deliveryModel) lease(t *rapid.T) {
	owner := rapid.SampledFrom(mdlOwners).Draw(t, "owner")
	var filter ledger.LeaseFilter
	if rapid.IntRange(0, 2).Draw(t, "byTarget") == 0 {
		filter.Targets = rapid.SliceOfNDistinct(rapid.SampledFrom(mdlTargets), 1, 2, rapid.ID[ledger.Target]).Draw(t, "targets")
	}
	if rapid.IntRange(0, 3).Draw(t, "byCeremony") == 0 {
		filter.Ceremony = rapid.SampledFrom(mdlCers[1:]).Draw(t, "filterCeremony")
	}
	dur := rapid.SampledFrom(mdlDurations).Draw(t, "duration")
	limit := rapid.IntRange(1, 3).Draw(t, "limit")

	// Incarnation rule first, whatever the filter: leases of the agent's
	// other incarnations come back at once, attempt counted.
	var reclaimed []ledger.DeliveryID
	for _, id := range mdlIDs {
		m := s.recs[id]
		if m != nil && m.State == ledger.DeliveryStateLeased && m.Lease.Owner.Agent == owner.Agent && m.Lease.Owner != owner {
			reclaimed = append(reclaimed, id)
			m.Failure = ledger.FailureReclaimed
			m.offerAgain(ledger.OpReclaim, s.now, s.now)
		}
	}
	// Offerable: Offered and due, or Leased with a lease that ran out;
	// attempts left; acknowledged work never again. Oldest first, then ID.
	var cands []*mdlDelivery
	for _, id := range mdlIDs {
		m := s.recs[id]
		if m == nil || (len(filter.Targets) > 0 && !slices.Contains(filter.Targets, m.Target)) ||
			(filter.Ceremony != "" && filter.Ceremony != m.Ceremony) || m.Attempts >= m.MaxAttempts {
			continue
		}
		if (m.State == ledger.DeliveryStateOffered && !m.AvailableAt.After(s.now)) ||
			(m.State == ledger.DeliveryStateLeased && !s.now.Before(m.Lease.ExpiresAt)) {
			cands = append(cands, m)
		}
	}
	slices.SortStableFunc(cands, func(a, b *mdlDelivery) int { return a.AvailableAt.Compare(b.AvailableAt) })
	cands = cands[:min(limit, len(cands))]

	res, err := s.l.Lease(s.ctx, filter, owner, s.now, dur, limit)
	require.NoError(t, err)
	require.Equal(t, len(reclaimed), len(res.Reclaimed), "reclaimed %v, want %v", res.Reclaimed, reclaimed)
	if len(reclaimed) > 0 {
		require.Equal(t, reclaimed, res.Reclaimed)
	}
	require.Len(t, res.Leased, len(cands), "leased %v", res.Leased)
	for i, m := range cands {
		got := res.Leased[i]
		require.Equal(t, m.ID, got.Delivery.ID, "grant %d", i)
		l := got.Lease
		want := ledger.Lease{DeliveryID: m.ID, Owner: owner, Token: l.Token, Seq: m.LeaseSeq + 1, GrantedAt: s.now, ExpiresAt: s.now.Add(dur)}
		require.Equal(t, want, l)
		require.NotEmpty(t, l.Token)
		require.False(t, s.tokens[l.Token], "token %q granted twice", l.Token)
		s.tokens[l.Token] = true
		s.grants = append(s.grants, l)
		if m.State == ledger.DeliveryStateLeased {
			m.Failure = ledger.FailureLeaseExpired // taken over after it ran out
		}
		m.State, m.Lease, m.Ended, m.AvailableAt = ledger.DeliveryStateLeased, &want, nil, l.ExpiresAt
		m.Attempts++
		m.LeaseSeq++
		m.touch(s.now)
		s.same(t, m, got.Delivery)
	}
}

// pickLease draws a lease the store granted: mostly one in force, else one
// whose grant just ended while its record stayed open (so that a repeated
// call is tried), else any earlier one; sometimes with a forged token.
func (s *deliveryModel) pickLease(t *rapid.T) ledger.Lease {
	var current, justEnded []ledger.Lease
	for _, l := range s.grants {
		m := s.recs[l.DeliveryID]
		switch {
		case m.Lease != nil && m.Lease.Token == l.Token:
			current = append(current, l)
		case m.Ended != nil && m.Ended.Token == l.Token:
			justEnded = append(justEnded, l)
		}
	}
	pool := s.grants
	switch k := rapid.IntRange(0, 5).Draw(t, "pool"); {
	case k < 3 && len(current) > 0:
		pool = current
	case k < 5 && len(justEnded) > 0:
		pool = justEnded
	}
	if len(pool) == 0 {
		t.Skip("nothing leased yet")
	}
	l := rapid.SampledFrom(pool).Draw(t, "lease")
	if rapid.IntRange(0, 7).Draw(t, "forge") == 0 {
		l.Token = "forged-" + l.Token
	}
	return l
}

// holdOutcome is the precedence for lease-bearing calls: Ended, LeaseLost,
// Repeated (a repeat of the call, op, that ended this very grant); "" when
// l is the grant in force.
func holdOutcome(m *mdlDelivery, l ledger.Lease, op ledger.Operation) ledger.Outcome {
	switch {
	case m.terminal():
		return ledger.OutcomeEnded
	case m.Lease != nil && m.Lease.Token == l.Token && m.Lease.Seq == l.Seq:
		return ""
	case op != "" && m.Ended != nil && *m.Ended == mdlEnded{Token: l.Token, Seq: l.Seq, Op: op}:
		return ledger.OutcomeRepeated
	}
	return ledger.OutcomeLeaseLost
}

// repeatedly runs call once, then again while rapid says so, so that a
// repeat of a call that applied is tried often.
func repeatedly(t *rapid.T, call func()) {
	call()
	for rapid.IntRange(0, 2).Draw(t, "again") == 0 {
		call()
	}
}

// answered checks the outcome and the record of a one-delivery call.
func (s *deliveryModel) answered(t *rapid.T, m *mdlDelivery, want ledger.Outcome, res ledger.DeliveryResult, err error) {
	require.NoError(t, err)
	require.Equal(t, want, res.Outcome)
	s.same(t, m, res.Delivery)
}

func (s *deliveryModel) acknowledge(t *rapid.T) {
	l := s.pickLease(t)
	repeatedly(t, func() {
		m := s.recs[l.DeliveryID]
		want := holdOutcome(m, l, "")
		switch {
		case want != "":
		case m.State == ledger.DeliveryStateAcknowledged:
			want = ledger.OutcomeRepeated
		case !s.now.Before(m.Lease.ExpiresAt): // valid on [granted, expires)
			want = ledger.OutcomeLeaseExpired
		default:
			want = ledger.OutcomeApplied
			owner := m.Lease.Owner
			m.State, m.AckOwner, m.AckDeadline = ledger.DeliveryStateAcknowledged, &owner, s.now.Add(mdlDefaults.AckWindow)
			m.touch(s.now)
		}
		res, err := s.l.Acknowledge(s.ctx, l, "seen", s.now)
		s.answered(t, m, want, res, err)
	})
}

func (s *deliveryModel) markFailed(t *rapid.T) {
	l := s.pickLease(t)
	permanent := rapid.IntRange(0, 3).Draw(t, "permanent") == 0
	repeatedly(t, func() {
		m := s.recs[l.DeliveryID]
		want := holdOutcome(m, l, ledger.OpMarkFailed)
		switch {
		case want != "":
		case m.State != ledger.DeliveryStateLeased: // acknowledged work is never offered again
			want = ledger.OutcomeWrongState
		case permanent:
			want, m.Failure = ledger.OutcomeApplied, ledger.FailureReported
			m.end(ledger.DeliveryStateFailed, s.now)
		default:
			want, m.Failure = ledger.OutcomeApplied, ledger.FailureReported
			policy := mdlDefaults
			policy.MaxAttempts = m.MaxAttempts
			m.offerAgain(ledger.OpMarkFailed, s.now.Add(policy.Backoff(m.ID, m.Attempts)), s.now)
		}
		res, err := s.l.MarkFailed(s.ctx, l, ledger.FailureReason{Message: "boom", Permanent: permanent}, s.now)
		s.answered(t, m, want, res, err)
	})
}

func (s *deliveryModel) release(t *rapid.T) {
	l := s.pickLease(t)
	repeatedly(t, func() {
		m := s.recs[l.DeliveryID]
		want := holdOutcome(m, l, ledger.OpRelease)
		switch {
		case want != "":
		case m.State != ledger.DeliveryStateLeased:
			want = ledger.OutcomeWrongState
		default:
			want = ledger.OutcomeApplied
			m.Attempts-- // the attempt is given back
			m.Ended = &mdlEnded{Token: l.Token, Seq: l.Seq, Op: ledger.OpRelease}
			m.State, m.Lease, m.AvailableAt = ledger.DeliveryStateOffered, nil, s.now
			m.touch(s.now)
		}
		res, err := s.l.Release(s.ctx, l, s.now)
		s.answered(t, m, want, res, err)
	})
}

func (s *deliveryModel) markProcessed(t *rapid.T) {
	ids := slices.DeleteFunc(slices.Clone(mdlIDs), func(id ledger.DeliveryID) bool {
		return s.recs[id] == nil || s.recs[id].State != ledger.DeliveryStateAcknowledged
	})
	if len(ids) == 0 || rapid.IntRange(0, 3).Draw(t, "anyID") == 0 {
		ids = mdlIDs
	}
	id := rapid.SampledFrom(ids).Draw(t, "id")
	m := s.recs[id]
	owner := rapid.SampledFrom(mdlOwners).Draw(t, "owner")
	if m != nil && m.AckOwner != nil && rapid.Bool().Draw(t, "ackOwner") {
		owner = *m.AckOwner
	}
	var fence *ledger.Fence
	if rapid.IntRange(0, 3).Draw(t, "fenced") > 0 {
		fence = ledger.FenceOf(int64(rapid.IntRange(0, 3).Draw(t, "fence")))
	}
	action := rapid.SampledFrom([]ledger.ActionRef{"act-1", "act-2"}).Draw(t, "action")

	var want ledger.Outcome
	hw, fenced := ledger.Fence(0), false
	if m != nil {
		hw, fenced = s.fences[m.Target]
	}
	switch {
	case m == nil:
		want = ledger.OutcomeNotFound
	case m.State == ledger.DeliveryStateProcessed && m.Action == action && *m.AckOwner == owner:
		want = ledger.OutcomeRepeated
	case m.terminal():
		want = ledger.OutcomeEnded
	case m.State != ledger.DeliveryStateAcknowledged:
		want = ledger.OutcomeWrongState
	case *m.AckOwner != owner:
		want = ledger.OutcomeWrongOwner
	case fence != nil && fenced && *fence < hw: // per target; an equal fence is accepted
		want = ledger.OutcomeFenceRejected
	default:
		want = ledger.OutcomeApplied
		if fence != nil && (!fenced || *fence > hw) {
			s.fences[m.Target] = *fence
		}
		m.Action, m.Fence = action, fence
		m.end(ledger.DeliveryStateProcessed, s.now)
	}
	res, err := s.l.MarkProcessed(s.ctx, id, owner, fence, action, s.now)
	s.answered(t, m, want, res, err)
}

func (s *deliveryModel) recordActivation(t *rapid.T) {
	id := rapid.SampledFrom(mdlIDs).Draw(t, "id")
	m := s.recs[id]
	want := ledger.OutcomeApplied
	switch {
	case m == nil:
		want = ledger.OutcomeNotFound
	case m.terminal():
		want = ledger.OutcomeEnded
	default:
		m.touch(s.now) // transport only: the state stays as it is
	}
	res, err := s.l.RecordActivation(s.ctx, id, ledger.Activation{Result: ledger.ActivationDelivered}, s.now)
	s.answered(t, m, want, res, err)
}

func (s *deliveryModel) expire(t *rapid.T) {
	var changed []ledger.DeliveryID
	for _, id := range mdlIDs {
		m := s.recs[id]
		switch {
		case m == nil:
		case m.State == ledger.DeliveryStateLeased && !s.now.Before(m.Lease.ExpiresAt):
			changed = append(changed, id)
			m.Failure = ledger.FailureLeaseExpired
			m.offerAgain(ledger.OpExpire, m.Lease.ExpiresAt, s.now)
		case m.State == ledger.DeliveryStateAcknowledged && !s.now.Before(m.AckDeadline):
			changed = append(changed, id)
			m.Cause = ledger.CauseAcknowledgementLapsed
			m.end(ledger.DeliveryStateExpired, s.now)
		}
	}
	res, err := s.l.Expire(s.ctx, s.now)
	require.NoError(t, err)
	require.Equal(t, changed, res.Changed)
}

func (s *deliveryModel) abandon(t *rapid.T) {
	id := rapid.SampledFrom(mdlIDs).Draw(t, "id")
	m := s.recs[id]
	want := ledger.OutcomeApplied
	switch {
	case m == nil:
		want = ledger.OutcomeNotFound
	case m.terminal():
		want = ledger.OutcomeEnded
	default:
		m.Cause = ledger.CauseQueueBounded
		m.end(ledger.DeliveryStateExpired, s.now)
	}
	res, err := s.l.Abandon(s.ctx, id, ledger.Cause{Kind: ledger.CauseQueueBounded}, s.now)
	s.answered(t, m, want, res, err)
}

func (s *deliveryModel) expireCeremony(t *rapid.T) {
	cer := rapid.SampledFrom(mdlCers[1:]).Draw(t, "ceremony")
	var changed []ledger.DeliveryID
	for _, id := range mdlIDs {
		if m := s.recs[id]; m != nil && m.Ceremony == cer && !m.terminal() {
			changed = append(changed, id)
			m.Cause = ledger.CauseCeremonyEnded
			m.end(ledger.DeliveryStateExpired, s.now)
		}
	}
	res, err := s.l.ExpireCeremony(s.ctx, cer, ledger.Cause{Kind: ledger.CauseCeremonyEnded}, s.now)
	require.NoError(t, err)
	require.Equal(t, changed, res.Changed)
}

func (s *deliveryModel) supersede(t *rapid.T) {
	prev := rapid.SampledFrom(mdlTargets).Draw(t, "previous")
	repl := rapid.SampledFrom(mdlTargets).Filter(func(r ledger.Target) bool { return r != prev }).Draw(t, "replacement")
	mode := rapid.SampledFrom([]ledger.FollowMode{ledger.Follow, ledger.LeaveBehind}).Draw(t, "mode")
	var changed []ledger.DeliveryID
	for _, id := range mdlIDs {
		m := s.recs[id]
		if m == nil || m.Target != prev || (m.State != ledger.DeliveryStateOffered && m.State != ledger.DeliveryStateLeased) {
			continue // acknowledged work stays and closes normally
		}
		changed = append(changed, id)
		if mode == ledger.LeaveBehind {
			m.Cause = ledger.CauseSuperseded
			m.end(ledger.DeliveryStateExpired, s.now)
			continue
		}
		m.Target, m.moved = repl, true
		if m.State == ledger.DeliveryStateLeased { // revoked, attempt not counted
			m.Attempts--
			m.Ended = &mdlEnded{Token: m.Lease.Token, Seq: m.Lease.Seq, Op: ledger.OpSupersede}
			m.State, m.Lease, m.AvailableAt = ledger.DeliveryStateOffered, nil, s.now
		}
		m.touch(s.now)
	}
	res, err := s.l.Supersede(s.ctx, prev, repl, mode, s.now)
	require.NoError(t, err)
	moved, ended := changed, []ledger.DeliveryID(nil)
	if mode == ledger.LeaveBehind {
		moved, ended = nil, changed
	}
	require.Equal(t, ledger.SupersedeResult{Moved: moved, Ended: ended}, res)
}

func (s *deliveryModel) tick(t *rapid.T) {
	steps := []time.Duration{time.Microsecond, time.Second, 4 * time.Second, 31 * time.Second, 61 * time.Second}
	s.now = s.now.Add(rapid.SampledFrom(steps).Draw(t, "step"))
}

// toAnEdge moves the clock to the last instant of a live lease or
// acknowledgement window, or to its very end.
func (s *deliveryModel) toAnEdge(t *rapid.T) {
	var edges []time.Time
	for _, m := range s.recs {
		if m.State == ledger.DeliveryStateLeased && m.Lease.ExpiresAt.After(s.now) {
			edges = append(edges, m.Lease.ExpiresAt)
		} else if m.State == ledger.DeliveryStateAcknowledged && m.AckDeadline.After(s.now) {
			edges = append(edges, m.AckDeadline)
		}
	}
	if len(edges) == 0 {
		t.Skip("no live lease or acknowledgement")
	}
	slices.SortFunc(edges, time.Time.Compare) // map order must not steer the draw
	edge := rapid.SampledFrom(edges).Draw(t, "edge")
	if rapid.Bool().Draw(t, "lastInstant") && edge.Add(-time.Microsecond).After(s.now) {
		edge = edge.Add(-time.Microsecond)
	}
	s.now = edge
}

// runDeliveryModel runs the state machine against the ledger newLedger
// makes, fresh for every rapid check.
func runDeliveryModel(t *testing.T, newLedger func() ledger.Ledger) {
	rapid.Check(t, func(t *rapid.T) {
		s := &deliveryModel{
			ctx: context.Background(), l: newLedger(), now: mdlT0, recs: map[ledger.DeliveryID]*mdlDelivery{},
			fences: map[ledger.Target]ledger.Fence{}, tokens: map[ledger.Token]bool{},
		}
		// Start with some work offered, and run longer than rapid's default
		// 30 steps, so that a run reaches the later states of several
		// deliveries at once (fences, incarnations, ceremonies).
		for range rapid.IntRange(1, 4).Draw(t, "initial") {
			s.enqueue(t)
		}
		for range 4 {
			t.Repeat(s.actions())
		}
	})
}

func newModelStore() ledger.Ledger { return memstore.New(memstore.WithDefaultPolicy(mdlDefaults)) }

// TestDeliveryModel checks memstore against the reference model.
func TestDeliveryModel(t *testing.T) {
	t.Parallel()
	runDeliveryModel(t, newModelStore)
}
