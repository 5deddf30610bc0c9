package ledger

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	t0     = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	ownerA = Owner{Agent: "agent-a", Incarnation: "1"}
	ownerB = Owner{Agent: "agent-b", Incarnation: "1"}
)

// fixtures returns one delivery in every state, all built through the state
// machine itself, and the lease held on the Leased and Acknowledged ones.
func fixtures(t *testing.T) (map[DeliveryState]Delivery, Lease) {
	t.Helper()
	offered := NewDelivery(EnqueueRequest{ID: "d1", Target: "host-1", Ceremony: "c1", Payload: []byte("x")}, DefaultPolicy(), t0)
	leased, lease := offered.Grant(ownerA, "tok-1", t0, time.Minute)
	acked, o := leased.Acknowledge(lease, "seen", t0.Add(time.Second))
	require.Equal(t, OutcomeApplied, o)
	processed, o := acked.MarkProcessed(ownerA, nil, nil, "act-1", t0.Add(2*time.Second))
	require.Equal(t, OutcomeApplied, o)
	failed, o := leased.MarkFailed(lease, FailureReason{Message: "boom", Permanent: true}, t0.Add(time.Second))
	require.Equal(t, OutcomeApplied, o)
	expired, o := offered.Abandon(Cause{Kind: CauseQueueBounded}, t0.Add(time.Second))
	require.Equal(t, OutcomeApplied, o)
	return map[DeliveryState]Delivery{
		DeliveryStateOffered:      offered,
		DeliveryStateLeased:       leased,
		DeliveryStateAcknowledged: acked,
		DeliveryStateProcessed:    processed,
		DeliveryStateFailed:       failed,
		DeliveryStateExpired:      expired,
	}, lease
}

func TestFixturesAreInTheirStates(t *testing.T) {
	all, _ := fixtures(t)
	for state, d := range all {
		assert.Equal(t, state, d.State)
		assert.Equal(t, state.Terminal(), !d.EndedAt.IsZero(), "terminal <=> EndedAt set, %s", state)
		assert.Equal(t, state == DeliveryStateLeased || state == DeliveryStateAcknowledged, d.Lease != nil,
			"lease set only while leased or acknowledged, %s", state)
	}
}

func TestGrantCountsAttemptAndBumpsSeq(t *testing.T) {
	all, lease := fixtures(t)
	d := all[DeliveryStateLeased]
	assert.Equal(t, 1, d.Attempts)
	assert.Equal(t, int64(1), d.LeaseSeq)
	assert.Equal(t, int64(1), lease.Seq)
	assert.Equal(t, t0.Add(time.Minute), d.AvailableAt, "a leased delivery is available again at its lease's expiry")
	assert.False(t, d.Offerable(t0.Add(time.Minute-time.Microsecond)))
	assert.True(t, d.Offerable(t0.Add(time.Minute)), "half-open interval: expired at ExpiresAt")

	again, lease2 := d.Grant(ownerB, "tok-2", t0.Add(time.Minute), time.Minute)
	assert.Equal(t, 2, again.Attempts)
	assert.Equal(t, int64(2), lease2.Seq)
	require.NotNil(t, again.LastFailure)
	assert.Equal(t, FailureLeaseExpired, again.LastFailure.Kind)
	assert.Equal(t, ownerA, again.LastFailure.Owner)

	_, o := again.Acknowledge(lease, "late", t0.Add(time.Minute))
	assert.Equal(t, OutcomeLeaseLost, o, "an earlier grant never lands on a later one")
	stale := lease2
	stale.Seq = 1
	_, o = again.Acknowledge(stale, "late", t0.Add(time.Minute))
	assert.Equal(t, OutcomeLeaseLost, o, "token and seq must both match")
}

func TestAcknowledgeOutcomeOrder(t *testing.T) {
	all, lease := fixtures(t)
	leased := all[DeliveryStateLeased]
	wrong := lease
	wrong.Token = "nope"

	_, o := all[DeliveryStateProcessed].Acknowledge(wrong, "", t0.Add(time.Hour))
	assert.Equal(t, OutcomeEnded, o, "Ended before LeaseLost")
	_, o = leased.Acknowledge(wrong, "", t0.Add(time.Hour))
	assert.Equal(t, OutcomeLeaseLost, o, "LeaseLost before LeaseExpired")
	_, o = all[DeliveryStateAcknowledged].Acknowledge(lease, "", t0.Add(time.Hour))
	assert.Equal(t, OutcomeRepeated, o, "Repeated before LeaseExpired")
	_, o = leased.Acknowledge(lease, "", t0.Add(time.Minute))
	assert.Equal(t, OutcomeLeaseExpired, o)
	got, o := leased.Acknowledge(lease, "ok", t0.Add(time.Minute-time.Microsecond))
	assert.Equal(t, OutcomeApplied, o)
	assert.Equal(t, t0.Add(time.Minute-time.Microsecond).Add(DefaultPolicy().AckWindow), got.Ack.Deadline)
}

func TestMarkProcessedOutcomeOrder(t *testing.T) {
	all, _ := fixtures(t)
	acked := all[DeliveryStateAcknowledged]
	now := t0.Add(time.Hour)

	_, o := all[DeliveryStateProcessed].MarkProcessed(ownerA, nil, nil, "act-1", now)
	assert.Equal(t, OutcomeRepeated, o)
	_, o = all[DeliveryStateProcessed].MarkProcessed(ownerA, nil, nil, "act-2", now)
	assert.Equal(t, OutcomeEnded, o, "another action on a processed delivery")
	_, o = all[DeliveryStateProcessed].MarkProcessed(ownerB, nil, nil, "act-1", now)
	assert.Equal(t, OutcomeEnded, o, "another owner on a processed delivery")
	_, o = all[DeliveryStateLeased].MarkProcessed(ownerB, nil, nil, "act-1", now)
	assert.Equal(t, OutcomeWrongState, o, "WrongState before WrongOwner")
	_, o = acked.MarkProcessed(ownerB, FenceOf(1), FenceOf(5), "act-1", now)
	assert.Equal(t, OutcomeWrongOwner, o, "WrongOwner before FenceRejected")
	newIncarnation := Owner{Agent: ownerA.Agent, Incarnation: "2"}
	_, o = acked.MarkProcessed(newIncarnation, nil, nil, "act-1", now)
	assert.Equal(t, OutcomeWrongOwner, o, "only the acknowledging incarnation")
	unchanged, o := acked.MarkProcessed(ownerA, FenceOf(4), FenceOf(5), "act-1", now)
	assert.Equal(t, OutcomeFenceRejected, o)
	assert.Equal(t, acked, unchanged, "a rejected call writes nothing")
	got, o := acked.MarkProcessed(ownerA, FenceOf(5), FenceOf(5), "act-1", now)
	assert.Equal(t, OutcomeApplied, o, "an equal fence is accepted")
	assert.Equal(t, Fence(5), *got.Processing.Fence)
	assert.Nil(t, got.Lease)
	assert.Equal(t, now, got.EndedAt)
}

func TestRaiseFence(t *testing.T) {
	assert.Nil(t, RaiseFence(nil, nil))
	assert.Equal(t, Fence(3), *RaiseFence(nil, FenceOf(3)))
	assert.Equal(t, Fence(5), *RaiseFence(FenceOf(5), FenceOf(3)))
	assert.Equal(t, Fence(7), *RaiseFence(FenceOf(5), FenceOf(7)))
	assert.Equal(t, Fence(5), *RaiseFence(FenceOf(5), nil))
}

func TestMarkFailedRetriesWithBackoffThenGivesUp(t *testing.T) {
	d := NewDelivery(EnqueueRequest{ID: "d1", Target: "h", Policy: Policy{MaxAttempts: 2}}, DefaultPolicy(), t0)
	d, lease := d.Grant(ownerA, "t1", t0, time.Minute)
	d, o := d.MarkFailed(lease, FailureReason{Message: "flaky"}, t0.Add(time.Second))
	require.Equal(t, OutcomeApplied, o)
	assert.Equal(t, DeliveryStateOffered, d.State)
	wantAt := t0.Add(time.Second).Add(d.Policy.Backoff("d1", 1))
	assert.Equal(t, wantAt, d.AvailableAt)
	assert.False(t, d.Offerable(wantAt.Add(-time.Microsecond)))
	assert.True(t, d.Offerable(wantAt))

	_, o = d.MarkFailed(lease, FailureReason{Message: "flaky"}, t0.Add(2*time.Second))
	assert.Equal(t, OutcomeRepeated, o, "the same lease failing again is a repeat")
	_, o = d.Release(lease, t0.Add(2*time.Second))
	assert.Equal(t, OutcomeLeaseLost, o, "a different action on an ended lease is not a repeat")

	d, lease = d.Grant(ownerA, "t2", wantAt, time.Minute)
	d, o = d.MarkFailed(lease, FailureReason{Message: "flaky"}, wantAt)
	require.Equal(t, OutcomeApplied, o)
	assert.Equal(t, DeliveryStateFailed, d.State, "attempts used up")
	_, o = d.MarkFailed(lease, FailureReason{Message: "flaky"}, wantAt)
	assert.Equal(t, OutcomeEnded, o)
}

func TestReleaseGivesTheAttemptBack(t *testing.T) {
	all, lease := fixtures(t)
	d, o := all[DeliveryStateLeased].Release(lease, t0.Add(time.Second))
	require.Equal(t, OutcomeApplied, o)
	assert.Equal(t, 0, d.Attempts)
	assert.True(t, d.Offerable(t0.Add(time.Second)))
	_, o = d.Release(lease, t0.Add(time.Second))
	assert.Equal(t, OutcomeRepeated, o)
	_, o = all[DeliveryStateAcknowledged].Release(lease, t0.Add(time.Second))
	assert.Equal(t, OutcomeWrongState, o, "acknowledged work is never offered again")
}

func TestExpire(t *testing.T) {
	all, lease := fixtures(t)
	_, changed := all[DeliveryStateLeased].Expire(lease.ExpiresAt.Add(-time.Microsecond))
	assert.False(t, changed)
	d, changed := all[DeliveryStateLeased].Expire(lease.ExpiresAt)
	require.True(t, changed)
	assert.Equal(t, DeliveryStateOffered, d.State)
	assert.Equal(t, 1, d.Attempts, "the expired attempt stays counted")
	assert.Equal(t, FailureLeaseExpired, d.LastFailure.Kind)

	acked := all[DeliveryStateAcknowledged]
	d, changed = acked.Expire(acked.Ack.Deadline)
	require.True(t, changed)
	assert.Equal(t, DeliveryStateExpired, d.State)
	assert.Equal(t, CauseAcknowledgementLapsed, d.Cause.Kind)

	for _, s := range []DeliveryState{DeliveryStateOffered, DeliveryStateProcessed, DeliveryStateFailed, DeliveryStateExpired} {
		_, changed = all[s].Expire(t0.Add(1000 * time.Hour))
		assert.False(t, changed, s)
	}
}

func TestReclaim(t *testing.T) {
	all, _ := fixtures(t)
	leased := all[DeliveryStateLeased]
	next := Owner{Agent: ownerA.Agent, Incarnation: "2"}
	require.True(t, leased.HeldByOtherIncarnation(next))
	assert.False(t, leased.HeldByOtherIncarnation(ownerA))
	assert.False(t, leased.HeldByOtherIncarnation(ownerB))
	assert.False(t, all[DeliveryStateAcknowledged].HeldByOtherIncarnation(next), "acknowledged work stays")
	d := leased.Reclaim(next, t0.Add(time.Second))
	assert.Equal(t, DeliveryStateOffered, d.State)
	assert.Equal(t, 1, d.Attempts)
	assert.Equal(t, FailureReclaimed, d.LastFailure.Kind)
	assert.True(t, d.Offerable(t0.Add(time.Second)))
}

func TestSupersede(t *testing.T) {
	all, lease := fixtures(t)
	d, changed := all[DeliveryStateLeased].Supersede("host-2", Follow, t0.Add(time.Second))
	require.True(t, changed)
	assert.Equal(t, Target("host-2"), d.Target)
	assert.Equal(t, DeliveryStateOffered, d.State)
	assert.Equal(t, 0, d.Attempts, "revoked without counting the attempt")
	_, o := d.Acknowledge(lease, "", t0.Add(time.Second))
	assert.Equal(t, OutcomeLeaseLost, o)

	d, changed = all[DeliveryStateOffered].Supersede("host-2", LeaveBehind, t0.Add(time.Second))
	require.True(t, changed)
	assert.Equal(t, DeliveryStateExpired, d.State)
	assert.Equal(t, CauseSuperseded, d.Cause.Kind)

	_, changed = all[DeliveryStateAcknowledged].Supersede("host-2", Follow, t0)
	assert.False(t, changed, "acknowledged work closes normally")
}

func TestEnqueueAgain(t *testing.T) {
	req := EnqueueRequest{ID: "d1", Target: "h", Payload: nil}
	d := NewDelivery(req, DefaultPolicy(), t0)
	assert.Equal(t, OutcomeRepeated, d.EnqueueAgain(EnqueueRequest{ID: "d1", Target: "h", Payload: []byte{}}, DefaultPolicy()))
	assert.Equal(t, OutcomeRepeated, d.EnqueueAgain(EnqueueRequest{ID: "d1", Target: "h", Policy: DefaultPolicy()}, DefaultPolicy()),
		"policies compare resolved")
	assert.Equal(t, OutcomeConflict, d.EnqueueAgain(EnqueueRequest{ID: "d1", Target: "h2"}, DefaultPolicy()))
	assert.Equal(t, OutcomeConflict, d.EnqueueAgain(EnqueueRequest{ID: "d1", Target: "h", Payload: []byte("x")}, DefaultPolicy()))
	assert.Equal(t, OutcomeConflict, d.EnqueueAgain(EnqueueRequest{ID: "d1", Target: "h", Policy: Policy{MaxAttempts: 9}}, DefaultPolicy()))
}

func TestCloneSharesNothing(t *testing.T) {
	all, _ := fixtures(t)
	d := all[DeliveryStateProcessed]
	c := d.Clone()
	c.Payload[0] = 'y'
	c.Lease = nil
	c.Ack.Observation = "changed"
	assert.Equal(t, byte('x'), d.Payload[0])
	assert.Equal(t, "seen", d.Ack.Observation)
}

func TestBackoffIsCappedDeterministicAndJittered(t *testing.T) {
	p := DefaultPolicy()
	for attempt := 1; attempt < 40; attempt++ {
		b := p.Backoff("d1", attempt)
		assert.Equal(t, b, p.Backoff("d1", attempt), "deterministic")
		assert.LessOrEqual(t, b, p.BackoffMax)
		assert.GreaterOrEqual(t, b, p.BackoffBase/2)
	}
	spread := map[time.Duration]bool{}
	for i := range 20 {
		spread[p.Backoff(DeliveryID(string(rune('a'+i))), 3)] = true
	}
	assert.Greater(t, len(spread), 10, "jitter spreads different deliveries apart")
}

func TestRenew(t *testing.T) {
	all, lease := fixtures(t)
	d, o := all[DeliveryStateLeased].Renew(lease, lease.ExpiresAt.Add(-time.Microsecond), time.Hour)
	require.Equal(t, OutcomeApplied, o)
	assert.Equal(t, lease.ExpiresAt.Add(-time.Microsecond).Add(time.Hour), d.Lease.ExpiresAt)
	assert.Equal(t, d.Lease.ExpiresAt, d.AvailableAt, "a leased delivery is available again at its lease's expiry")
	assert.Equal(t, lease.Token, d.Lease.Token)
	assert.Equal(t, lease.Seq, d.Lease.Seq)
	assert.Equal(t, 1, d.Attempts, "a renewal is not an attempt")
	_, o = d.Acknowledge(lease, "", lease.ExpiresAt.Add(time.Minute))
	assert.Equal(t, OutcomeApplied, o, "the old lease value still names the renewed grant")

	_, o = all[DeliveryStateLeased].Renew(lease, lease.ExpiresAt, time.Hour)
	assert.Equal(t, OutcomeLeaseExpired, o, "a lease that ran out is not revived")
	_, o = all[DeliveryStateAcknowledged].Renew(lease, t0, time.Hour)
	assert.Equal(t, OutcomeWrongState, o)
	_, o = all[DeliveryStateProcessed].Renew(lease, t0, time.Hour)
	assert.Equal(t, OutcomeEnded, o)
	stale := lease
	stale.Token = "other"
	_, o = all[DeliveryStateLeased].Renew(stale, t0, time.Hour)
	assert.Equal(t, OutcomeLeaseLost, o)
}
