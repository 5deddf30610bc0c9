package storekit

import (
	"testing"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	t0     = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	ownerA = ledger.Owner{Agent: "agent-a", Incarnation: "1"}
	ownerB = ledger.Owner{Agent: "agent-b", Incarnation: "1"}
)

// fixtures returns one delivery in every state, all built through the state
// machine itself, and the lease held on the Leased and Acknowledged ones.
func fixtures(t *testing.T) (map[ledger.DeliveryState]ledger.Delivery, ledger.Lease) {
	t.Helper()
	offered := NewDelivery(ledger.EnqueueRequest{ID: "d1", Target: "host-1", Ceremony: "c1", Payload: []byte("x")}, ledger.DefaultPolicy(), t0)
	leased, lease := Delivery(offered).Grant(ownerA, "tok-1", t0, time.Minute)
	acked, o := Delivery(leased).Acknowledge(lease, "seen", t0.Add(time.Second))
	require.Equal(t, ledger.OutcomeApplied, o)
	processed, o := Delivery(acked).MarkProcessed(ownerA, nil, nil, "act-1", t0.Add(2*time.Second))
	require.Equal(t, ledger.OutcomeApplied, o)
	failed, o := Delivery(leased).MarkFailed(lease, ledger.FailureReason{Message: "boom", Permanent: true}, t0.Add(time.Second))
	require.Equal(t, ledger.OutcomeApplied, o)
	expired, o := Delivery(offered).Abandon(ledger.Cause{Kind: ledger.CauseQueueBounded}, t0.Add(time.Second))
	require.Equal(t, ledger.OutcomeApplied, o)
	return map[ledger.DeliveryState]ledger.Delivery{
		ledger.DeliveryStateOffered:      offered,
		ledger.DeliveryStateLeased:       leased,
		ledger.DeliveryStateAcknowledged: acked,
		ledger.DeliveryStateProcessed:    processed,
		ledger.DeliveryStateFailed:       failed,
		ledger.DeliveryStateExpired:      expired,
	}, lease
}

func TestFixturesAreInTheirStates(t *testing.T) {
	all, _ := fixtures(t)
	for state, d := range all {
		assert.Equal(t, state, d.State)
		assert.Equal(t, state.Terminal(), !d.EndedAt.IsZero(), "terminal <=> EndedAt set, %s", state)
		assert.Equal(t, state == ledger.DeliveryStateLeased || state == ledger.DeliveryStateAcknowledged, d.Lease != nil,
			"lease set only while leased or acknowledged, %s", state)
	}
}

func TestGrantCountsAttemptAndBumpsSeq(t *testing.T) {
	all, lease := fixtures(t)
	d := all[ledger.DeliveryStateLeased]
	assert.Equal(t, 1, d.Attempts)
	assert.Equal(t, int64(1), d.LeaseSeq)
	assert.Equal(t, int64(1), lease.Seq)
	assert.Equal(t, t0.Add(time.Minute), d.AvailableAt, "a leased delivery is available again at its lease's expiry")
	assert.False(t, Delivery(d).Offerable(t0.Add(time.Minute-time.Microsecond)))
	assert.True(t, Delivery(d).Offerable(t0.Add(time.Minute)), "half-open interval: expired at ExpiresAt")

	again, lease2 := Delivery(d).Grant(ownerB, "tok-2", t0.Add(time.Minute), time.Minute)
	assert.Equal(t, 2, again.Attempts)
	assert.Equal(t, int64(2), lease2.Seq)
	require.NotNil(t, again.LastFailure)
	assert.Equal(t, ledger.FailureLeaseExpired, again.LastFailure.Kind)
	assert.Equal(t, ownerA, again.LastFailure.Owner)

	_, o := Delivery(again).Acknowledge(lease, "late", t0.Add(time.Minute))
	assert.Equal(t, ledger.OutcomeLeaseLost, o, "an earlier grant never lands on a later one")
	stale := lease2
	stale.Seq = 1
	_, o = Delivery(again).Acknowledge(stale, "late", t0.Add(time.Minute))
	assert.Equal(t, ledger.OutcomeLeaseLost, o, "token and seq must both match")
}

func TestAcknowledgeOutcomeOrder(t *testing.T) {
	all, lease := fixtures(t)
	leased := all[ledger.DeliveryStateLeased]
	wrong := lease
	wrong.Token = "nope"

	_, o := Delivery(all[ledger.DeliveryStateProcessed]).Acknowledge(wrong, "", t0.Add(time.Hour))
	assert.Equal(t, ledger.OutcomeEnded, o, "Ended before LeaseLost")
	_, o = Delivery(leased).Acknowledge(wrong, "", t0.Add(time.Hour))
	assert.Equal(t, ledger.OutcomeLeaseLost, o, "LeaseLost before LeaseExpired")
	_, o = Delivery(all[ledger.DeliveryStateAcknowledged]).Acknowledge(lease, "", t0.Add(time.Hour))
	assert.Equal(t, ledger.OutcomeRepeated, o, "Repeated before LeaseExpired")
	_, o = Delivery(leased).Acknowledge(lease, "", t0.Add(time.Minute))
	assert.Equal(t, ledger.OutcomeLeaseExpired, o)
	got, o := Delivery(leased).Acknowledge(lease, "ok", t0.Add(time.Minute-time.Microsecond))
	assert.Equal(t, ledger.OutcomeApplied, o)
	assert.Equal(t, t0.Add(time.Minute-time.Microsecond).Add(ledger.DefaultPolicy().AckWindow), got.Ack.Deadline)
}

func TestMarkProcessedOutcomeOrder(t *testing.T) {
	all, _ := fixtures(t)
	acked := all[ledger.DeliveryStateAcknowledged]
	now := t0.Add(time.Hour)

	_, o := Delivery(all[ledger.DeliveryStateProcessed]).MarkProcessed(ownerA, nil, nil, "act-1", now)
	assert.Equal(t, ledger.OutcomeRepeated, o)
	_, o = Delivery(all[ledger.DeliveryStateProcessed]).MarkProcessed(ownerA, nil, nil, "act-2", now)
	assert.Equal(t, ledger.OutcomeEnded, o, "another action on a processed delivery")
	_, o = Delivery(all[ledger.DeliveryStateProcessed]).MarkProcessed(ownerB, nil, nil, "act-1", now)
	assert.Equal(t, ledger.OutcomeEnded, o, "another owner on a processed delivery")
	_, o = Delivery(all[ledger.DeliveryStateLeased]).MarkProcessed(ownerB, nil, nil, "act-1", now)
	assert.Equal(t, ledger.OutcomeWrongState, o, "WrongState before WrongOwner")
	_, o = Delivery(acked).MarkProcessed(ownerB, ledger.FenceOf(1), ledger.FenceOf(5), "act-1", now)
	assert.Equal(t, ledger.OutcomeWrongOwner, o, "WrongOwner before FenceRejected")
	newIncarnation := ledger.Owner{Agent: ownerA.Agent, Incarnation: "2"}
	_, o = Delivery(acked).MarkProcessed(newIncarnation, nil, nil, "act-1", now)
	assert.Equal(t, ledger.OutcomeWrongOwner, o, "only the acknowledging incarnation")
	unchanged, o := Delivery(acked).MarkProcessed(ownerA, ledger.FenceOf(4), ledger.FenceOf(5), "act-1", now)
	assert.Equal(t, ledger.OutcomeFenceRejected, o)
	assert.Equal(t, acked, unchanged, "a rejected call writes nothing")
	got, o := Delivery(acked).MarkProcessed(ownerA, ledger.FenceOf(5), ledger.FenceOf(5), "act-1", now)
	assert.Equal(t, ledger.OutcomeApplied, o, "an equal fence is accepted")
	assert.Equal(t, ledger.Fence(5), *got.Processing.Fence)
	assert.Nil(t, got.Lease)
	assert.Equal(t, now, got.EndedAt)
}

func TestRaiseFence(t *testing.T) {
	assert.Nil(t, RaiseFence(nil, nil))
	assert.Equal(t, ledger.Fence(3), *RaiseFence(nil, ledger.FenceOf(3)))
	assert.Equal(t, ledger.Fence(5), *RaiseFence(ledger.FenceOf(5), ledger.FenceOf(3)))
	assert.Equal(t, ledger.Fence(7), *RaiseFence(ledger.FenceOf(5), ledger.FenceOf(7)))
	assert.Equal(t, ledger.Fence(5), *RaiseFence(ledger.FenceOf(5), nil))
}

func TestMarkFailedRetriesWithBackoffThenGivesUp(t *testing.T) {
	d := NewDelivery(ledger.EnqueueRequest{ID: "d1", Target: "h", Policy: ledger.Policy{MaxAttempts: 2}}, ledger.DefaultPolicy(), t0)
	d, lease := Delivery(d).Grant(ownerA, "t1", t0, time.Minute)
	d, o := Delivery(d).MarkFailed(lease, ledger.FailureReason{Message: "flaky"}, t0.Add(time.Second))
	require.Equal(t, ledger.OutcomeApplied, o)
	assert.Equal(t, ledger.DeliveryStateOffered, d.State)
	wantAt := t0.Add(time.Second).Add(d.Policy.Backoff("d1", 1))
	assert.Equal(t, wantAt, d.AvailableAt)
	assert.False(t, Delivery(d).Offerable(wantAt.Add(-time.Microsecond)))
	assert.True(t, Delivery(d).Offerable(wantAt))

	_, o = Delivery(d).MarkFailed(lease, ledger.FailureReason{Message: "flaky"}, t0.Add(2*time.Second))
	assert.Equal(t, ledger.OutcomeRepeated, o, "the same lease failing again is a repeat")
	_, o = Delivery(d).Release(lease, t0.Add(2*time.Second))
	assert.Equal(t, ledger.OutcomeLeaseLost, o, "a different action on an ended lease is not a repeat")

	d, lease = Delivery(d).Grant(ownerA, "t2", wantAt, time.Minute)
	d, o = Delivery(d).MarkFailed(lease, ledger.FailureReason{Message: "flaky"}, wantAt)
	require.Equal(t, ledger.OutcomeApplied, o)
	assert.Equal(t, ledger.DeliveryStateFailed, d.State, "attempts used up")
	_, o = Delivery(d).MarkFailed(lease, ledger.FailureReason{Message: "flaky"}, wantAt)
	assert.Equal(t, ledger.OutcomeEnded, o)
}

func TestReleaseGivesTheAttemptBack(t *testing.T) {
	all, lease := fixtures(t)
	d, o := Delivery(all[ledger.DeliveryStateLeased]).Release(lease, t0.Add(time.Second))
	require.Equal(t, ledger.OutcomeApplied, o)
	assert.Equal(t, 0, d.Attempts)
	assert.True(t, Delivery(d).Offerable(t0.Add(time.Second)))
	_, o = Delivery(d).Release(lease, t0.Add(time.Second))
	assert.Equal(t, ledger.OutcomeRepeated, o)
	_, o = Delivery(all[ledger.DeliveryStateAcknowledged]).Release(lease, t0.Add(time.Second))
	assert.Equal(t, ledger.OutcomeWrongState, o, "acknowledged work is never offered again")
}

func TestExpire(t *testing.T) {
	all, lease := fixtures(t)
	_, changed := Delivery(all[ledger.DeliveryStateLeased]).Expire(lease.ExpiresAt.Add(-time.Microsecond))
	assert.False(t, changed)
	d, changed := Delivery(all[ledger.DeliveryStateLeased]).Expire(lease.ExpiresAt)
	require.True(t, changed)
	assert.Equal(t, ledger.DeliveryStateOffered, d.State)
	assert.Equal(t, 1, d.Attempts, "the expired attempt stays counted")
	assert.Equal(t, ledger.FailureLeaseExpired, d.LastFailure.Kind)

	acked := all[ledger.DeliveryStateAcknowledged]
	d, changed = Delivery(acked).Expire(acked.Ack.Deadline)
	require.True(t, changed)
	assert.Equal(t, ledger.DeliveryStateExpired, d.State)
	assert.Equal(t, ledger.CauseAcknowledgementLapsed, d.Cause.Kind)

	for _, s := range []ledger.DeliveryState{ledger.DeliveryStateOffered, ledger.DeliveryStateProcessed, ledger.DeliveryStateFailed, ledger.DeliveryStateExpired} {
		_, changed = Delivery(all[s]).Expire(t0.Add(1000 * time.Hour))
		assert.False(t, changed, s)
	}
}

func TestReclaim(t *testing.T) {
	all, _ := fixtures(t)
	leased := all[ledger.DeliveryStateLeased]
	next := ledger.Owner{Agent: ownerA.Agent, Incarnation: "2"}
	require.True(t, Delivery(leased).HeldByOtherIncarnation(next))
	assert.False(t, Delivery(leased).HeldByOtherIncarnation(ownerA))
	assert.False(t, Delivery(leased).HeldByOtherIncarnation(ownerB))
	assert.False(t, Delivery(all[ledger.DeliveryStateAcknowledged]).HeldByOtherIncarnation(next), "acknowledged work stays")
	d := Delivery(leased).Reclaim(next, t0.Add(time.Second))
	assert.Equal(t, ledger.DeliveryStateOffered, d.State)
	assert.Equal(t, 1, d.Attempts)
	assert.Equal(t, ledger.FailureReclaimed, d.LastFailure.Kind)
	assert.True(t, Delivery(d).Offerable(t0.Add(time.Second)))
}

func TestSupersede(t *testing.T) {
	all, lease := fixtures(t)
	d, changed := Delivery(all[ledger.DeliveryStateLeased]).Supersede("host-2", ledger.Follow, t0.Add(time.Second))
	require.True(t, changed)
	assert.Equal(t, ledger.Target("host-2"), d.Target)
	assert.Equal(t, ledger.DeliveryStateOffered, d.State)
	assert.Equal(t, 0, d.Attempts, "revoked without counting the attempt")
	_, o := Delivery(d).Acknowledge(lease, "", t0.Add(time.Second))
	assert.Equal(t, ledger.OutcomeLeaseLost, o)

	d, changed = Delivery(all[ledger.DeliveryStateOffered]).Supersede("host-2", ledger.LeaveBehind, t0.Add(time.Second))
	require.True(t, changed)
	assert.Equal(t, ledger.DeliveryStateExpired, d.State)
	assert.Equal(t, ledger.CauseSuperseded, d.Cause.Kind)

	_, changed = Delivery(all[ledger.DeliveryStateAcknowledged]).Supersede("host-2", ledger.Follow, t0)
	assert.False(t, changed, "acknowledged work closes normally")
}

func TestEnqueueAgain(t *testing.T) {
	req := ledger.EnqueueRequest{ID: "d1", Target: "h", Payload: nil}
	d := NewDelivery(req, ledger.DefaultPolicy(), t0)
	assert.Equal(t, ledger.OutcomeRepeated, Delivery(d).EnqueueAgain(ledger.EnqueueRequest{ID: "d1", Target: "h", Payload: []byte{}}, ledger.DefaultPolicy()))
	assert.Equal(t, ledger.OutcomeRepeated, Delivery(d).EnqueueAgain(ledger.EnqueueRequest{ID: "d1", Target: "h", Policy: ledger.DefaultPolicy()}, ledger.DefaultPolicy()),
		"policies compare resolved")
	assert.Equal(t, ledger.OutcomeConflict, Delivery(d).EnqueueAgain(ledger.EnqueueRequest{ID: "d1", Target: "h2"}, ledger.DefaultPolicy()))
	assert.Equal(t, ledger.OutcomeConflict, Delivery(d).EnqueueAgain(ledger.EnqueueRequest{ID: "d1", Target: "h", Payload: []byte("x")}, ledger.DefaultPolicy()))
	assert.Equal(t, ledger.OutcomeConflict, Delivery(d).EnqueueAgain(ledger.EnqueueRequest{ID: "d1", Target: "h", Policy: ledger.Policy{MaxAttempts: 9}}, ledger.DefaultPolicy()))
}

func TestCloneSharesNothing(t *testing.T) {
	all, _ := fixtures(t)
	d := all[ledger.DeliveryStateProcessed]
	c := d.Clone()
	c.Payload[0] = 'y'
	c.Lease = nil
	c.Ack.Observation = "changed"
	assert.Equal(t, byte('x'), d.Payload[0])
	assert.Equal(t, "seen", d.Ack.Observation)
}

func TestBackoffIsCappedDeterministicAndJittered(t *testing.T) {
	p := ledger.DefaultPolicy()
	for attempt := 1; attempt < 40; attempt++ {
		b := p.Backoff("d1", attempt)
		assert.Equal(t, b, p.Backoff("d1", attempt), "deterministic")
		assert.LessOrEqual(t, b, p.BackoffMax)
		assert.GreaterOrEqual(t, b, p.BackoffBase/2)
	}
	spread := map[time.Duration]bool{}
	for i := range 20 {
		spread[p.Backoff(ledger.DeliveryID(string(rune('a'+i))), 3)] = true
	}
	assert.Greater(t, len(spread), 10, "jitter spreads different deliveries apart")
}

func TestRenew(t *testing.T) {
	all, lease := fixtures(t)
	d, o := Delivery(all[ledger.DeliveryStateLeased]).Renew(lease, lease.ExpiresAt.Add(-time.Microsecond), time.Hour)
	require.Equal(t, ledger.OutcomeApplied, o)
	assert.Equal(t, lease.ExpiresAt.Add(-time.Microsecond).Add(time.Hour), d.Lease.ExpiresAt)
	assert.Equal(t, d.Lease.ExpiresAt, d.AvailableAt, "a leased delivery is available again at its lease's expiry")
	assert.Equal(t, lease.Token, d.Lease.Token)
	assert.Equal(t, lease.Seq, d.Lease.Seq)
	assert.Equal(t, 1, d.Attempts, "a renewal is not an attempt")
	_, o = Delivery(d).Acknowledge(lease, "", lease.ExpiresAt.Add(time.Minute))
	assert.Equal(t, ledger.OutcomeApplied, o, "the old lease value still names the renewed grant")

	_, o = Delivery(all[ledger.DeliveryStateLeased]).Renew(lease, lease.ExpiresAt, time.Hour)
	assert.Equal(t, ledger.OutcomeLeaseExpired, o, "a lease that ran out is not revived")
	_, o = Delivery(all[ledger.DeliveryStateAcknowledged]).Renew(lease, t0, time.Hour)
	assert.Equal(t, ledger.OutcomeWrongState, o)
	_, o = Delivery(all[ledger.DeliveryStateProcessed]).Renew(lease, t0, time.Hour)
	assert.Equal(t, ledger.OutcomeEnded, o)
	stale := lease
	stale.Token = "other"
	_, o = Delivery(all[ledger.DeliveryStateLeased]).Renew(stale, t0, time.Hour)
	assert.Equal(t, ledger.OutcomeLeaseLost, o)
}
