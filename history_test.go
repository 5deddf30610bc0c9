package ledger

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// deliveryChange is one applied transition of the state machine: the
// record before and after it, and the operation that made it.
type deliveryChange struct {
	name          string
	op            Operation
	before, after Delivery
	// from, to and reason are what the history entry must say.
	from, to DeliveryState
	reason   string
}

// deliveryChanges builds one applied transition of every kind through the
// state machine itself.
func deliveryChanges(t *testing.T) []deliveryChange {
	t.Helper()
	policy := Policy{MaxAttempts: 2, BackoffBase: time.Second, BackoffMax: time.Minute, AckWindow: time.Minute}
	offered := NewDelivery(EnqueueRequest{ID: "d1", Target: "host-1", Payload: []byte("x"), Policy: policy}, DefaultPolicy(), t0)
	leased, lease := offered.Grant(ownerA, "tok-1", t0, time.Minute)
	expiry := lease.ExpiresAt
	takenOver, _ := leased.Grant(ownerB, "tok-2", expiry, time.Minute)
	acked, o := leased.Acknowledge(lease, "seen", t0.Add(time.Second))
	require.Equal(t, OutcomeApplied, o)
	processedD, o := acked.MarkProcessed(ownerA, nil, nil, "done", t0.Add(2*time.Second))
	require.Equal(t, OutcomeApplied, o)
	failedOnce, o := leased.MarkFailed(lease, FailureReason{Message: "boom"}, t0.Add(time.Second))
	require.Equal(t, OutcomeApplied, o)
	// The same failure again, from the same owner at the same instant:
	// equal to the last one, and still a failure the history must name.
	leasedAgain, lease2 := failedOnce.Grant(ownerA, "tok-3", t0.Add(time.Second), time.Minute)
	failedTwice, o := leasedAgain.MarkFailed(lease2, FailureReason{Message: "boom"}, t0.Add(time.Second))
	require.Equal(t, OutcomeApplied, o)
	require.Equal(t, *failedOnce.LastFailure, *failedTwice.LastFailure, "the two failures are equal")
	permanent, o := leased.MarkFailed(lease, FailureReason{Message: "gone", Permanent: true}, t0.Add(time.Second))
	require.Equal(t, OutcomeApplied, o)
	released, o := leased.Release(lease, t0.Add(time.Second))
	require.Equal(t, OutcomeApplied, o)
	renewed, o := leased.Renew(lease, t0.Add(time.Second), time.Minute)
	require.Equal(t, OutcomeApplied, o)
	newIncarnation := Owner{Agent: ownerA.Agent, Incarnation: "2"}
	reclaimed := leased.Reclaim(newIncarnation, t0.Add(time.Second))
	sweptLease, changed := leased.Expire(expiry)
	require.True(t, changed)
	sweptAck, changed := acked.Expire(acked.Ack.Deadline)
	require.True(t, changed)
	abandoned, o := offered.Abandon(Cause{Kind: CauseQueueBounded, Detail: "queue full"}, t0.Add(time.Second))
	require.Equal(t, OutcomeApplied, o)
	bare, o := leased.Abandon(Cause{Kind: CauseCeremonyEnded}, t0.Add(time.Second))
	require.Equal(t, OutcomeApplied, o)
	moved, ok := leased.Supersede("host-2", Follow, t0.Add(time.Second))
	require.True(t, ok)
	left, ok := offered.Supersede("host-2", LeaveBehind, t0.Add(time.Second))
	require.True(t, ok)
	// An activation after a failure keeps the failure: the history must
	// not name it again.
	activated, o := failedOnce.RecordActivation(Activation{Result: ActivationDelivered}, t0.Add(2*time.Second))
	require.Equal(t, OutcomeApplied, o)
	return []deliveryChange{
		{"Lease", OpLease, offered, leased, DeliveryStateOffered, DeliveryStateLeased, ""},
		{"LeaseTakesOverAnExpiredLease", OpLease, leased, takenOver, DeliveryStateLeased, DeliveryStateLeased, "lease_expired: lease expired"},
		{"Acknowledge", OpAcknowledge, leased, acked, DeliveryStateLeased, DeliveryStateAcknowledged, ""},
		{"MarkProcessed", OpMarkProcessed, acked, processedD, DeliveryStateAcknowledged, DeliveryStateProcessed, ""},
		{"MarkFailed", OpMarkFailed, leased, failedOnce, DeliveryStateLeased, DeliveryStateOffered, "reported: boom"},
		{"MarkFailedAsBefore", OpMarkFailed, leasedAgain, failedTwice, DeliveryStateLeased, DeliveryStateFailed, "reported: boom"},
		{"MarkFailedPermanent", OpMarkFailed, leased, permanent, DeliveryStateLeased, DeliveryStateFailed, "reported: gone"},
		{"Release", OpRelease, leased, released, DeliveryStateLeased, DeliveryStateOffered, ""},
		{"RenewLease", OpRenewLease, leased, renewed, DeliveryStateLeased, DeliveryStateLeased, ""},
		{"Reclaim", OpReclaim, leased, reclaimed, DeliveryStateLeased, DeliveryStateOffered, "reclaimed: agent leased as incarnation 2"},
		{"ExpireLease", OpExpire, leased, sweptLease, DeliveryStateLeased, DeliveryStateOffered, "lease_expired: lease expired"},
		{"ExpireAcknowledgement", OpExpire, acked, sweptAck, DeliveryStateAcknowledged, DeliveryStateExpired,
			"acknowledgement_lapsed: not processed by " + acked.Ack.Deadline.Format(time.RFC3339Nano)},
		{"Abandon", OpAbandon, offered, abandoned, DeliveryStateOffered, DeliveryStateExpired, "queue_bounded: queue full"},
		{"CauseWithoutDetail", OpExpireCeremony, leased, bare, DeliveryStateLeased, DeliveryStateExpired, "ceremony_ended"},
		{"SupersedeFollow", OpSupersede, leased, moved, DeliveryStateLeased, DeliveryStateOffered, ""},
		{"SupersedeLeaveBehind", OpSupersede, offered, left, DeliveryStateOffered, DeliveryStateExpired, "superseded: replaced by host-2"},
		{"ActivationKeepsTheOldFailure", OpRecordActivation, failedOnce, activated, DeliveryStateOffered, DeliveryStateOffered, ""},
	}
}

func TestDeliveryTransition(t *testing.T) {
	for _, c := range deliveryChanges(t) {
		t.Run(c.name, func(t *testing.T) {
			got := DeliveryTransition(c.op, &c.before, &c.after, "someone")
			assert.Equal(t, Transition{
				Op: c.op, From: string(c.from), To: string(c.to), Outcome: OutcomeApplied,
				Actor: "someone", Reason: c.reason, At: c.after.UpdatedAt,
			}, got)
		})
	}
}

func TestDeliveryTransitionOfACreation(t *testing.T) {
	d := NewDelivery(EnqueueRequest{ID: "d1", Target: "host-1"}, DefaultPolicy(), t0.Add(1234*time.Nanosecond))
	got := DeliveryTransition(OpEnqueue, nil, &d, "")
	assert.Equal(t, Transition{Op: OpEnqueue, To: string(DeliveryStateOffered), Outcome: OutcomeApplied, At: d.CreatedAt}, got)
	assert.Empty(t, got.From, "a creation comes from no state")
	assert.Zero(t, got.Seq, "the store numbers the entries")
}

// TestEveryAppliedTransitionBumpsVersionByOne is what lets a store number
// a record's history by its Version: a creation is version 1 and each
// applied transition, which writes one history entry, adds exactly one.
func TestEveryAppliedTransitionBumpsVersionByOne(t *testing.T) {
	d := NewDelivery(EnqueueRequest{ID: "d1", Target: "host-1"}, DefaultPolicy(), t0)
	assert.Equal(t, int64(1), d.Version)
	e := newEntry()
	assert.Equal(t, int64(1), e.Version)
	for _, c := range deliveryChanges(t) {
		assert.Equal(t, c.before.Version+1, c.after.Version, "delivery %s", c.name)
	}
	for _, c := range entryChanges(t) {
		assert.Equal(t, c.before.Version+1, c.after.Version, "entry %s", c.name)
	}
}

// entryChange is deliveryChange for outbox entries.
type entryChange struct {
	name          string
	op            Operation
	before, after OutboxEntry
	from, to      OutboxStatus
	reason        string
}

func entryChanges(t *testing.T) []entryChange {
	t.Helper()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	emissionErr := EmissionError{Code: "timeout", Message: "provider timed out"}
	pending := newEntry()
	claimed, claim := pending.Grant("w1", "tok-1", t0, time.Minute)
	next := at(time.Hour)
	retry, o := claimed.MarkClaimFailed(claim, emissionErr, &next, at(time.Second))
	require.Equal(t, OutcomeApplied, o)
	// The provider answers the same again: the history still says why.
	reclaimed, claim2 := retry.Grant("w1", "tok-2", next, time.Minute)
	retryAgain, o := reclaimed.MarkClaimFailed(claim2, emissionErr, &next, at(time.Second))
	require.Equal(t, OutcomeApplied, o)
	require.Equal(t, *retry.LastError, *retryAgain.LastError)
	dead, o := reclaimed.MarkClaimDeadLettered(claim2, emissionErr, "poison message", at(2*time.Second))
	require.Equal(t, OutcomeApplied, o)
	deadNoReason, err := pending.MarkDeadLettered(emissionErr, "", at(time.Second))
	require.NoError(t, err)
	baseFailed, err := pending.MarkFailed(EmissionError{Message: "gone"}, nil, at(time.Second))
	require.NoError(t, err)
	delivered, o := claimed.MarkClaimDelivered(claim, EmissionResult{ProviderRef: "ref"}, at(time.Second))
	require.Equal(t, OutcomeApplied, o)
	released, o := claimed.ReleaseClaim(claim, at(time.Second))
	require.Equal(t, OutcomeApplied, o)
	renewed, o := claimed.RenewClaim(claim, at(time.Second), time.Minute)
	require.Equal(t, OutcomeApplied, o)
	// Deferring an entry keeps its last error: the history must not name
	// it again.
	in := retry
	in.Status, in.NextAttemptAt = OutboxStatusDeferred, at(2*time.Hour)
	deferred, err := retry.Save(in, at(time.Second))
	require.NoError(t, err)
	in = claimed
	in.Status, in.NextAttemptAt, in.LastError = OutboxStatusDeferred, at(2*time.Hour), &EmissionError{Code: "429"}
	savedClaim, o := claimed.SaveClaim(claim, in, at(time.Second))
	require.Equal(t, OutcomeApplied, o)
	return []entryChange{
		{"Claim", OpClaim, pending, claimed, OutboxStatusPending, OutboxStatusPending, ""},
		{"MarkClaimFailed", OpMarkFailed, claimed, retry, OutboxStatusPending, OutboxStatusRetryScheduled, "timeout: provider timed out"},
		{"MarkClaimFailedAsBefore", OpMarkFailed, reclaimed, retryAgain, OutboxStatusRetryScheduled, OutboxStatusRetryScheduled, "timeout: provider timed out"},
		{"MarkClaimDeadLettered", OpMarkDeadLettered, reclaimed, dead, OutboxStatusRetryScheduled, OutboxStatusDeadLettered, "poison message"},
		{"DeadLetteredWithoutReason", OpMarkDeadLettered, pending, deadNoReason, OutboxStatusPending, OutboxStatusDeadLettered, "timeout: provider timed out"},
		{"BaseMarkFailedWithoutCode", OpMarkFailed, pending, baseFailed, OutboxStatusPending, OutboxStatusFailed, "gone"},
		{"MarkClaimDelivered", OpMarkDelivered, claimed, delivered, OutboxStatusPending, OutboxStatusDelivered, ""},
		{"ReleaseClaim", OpReleaseClaim, claimed, released, OutboxStatusPending, OutboxStatusPending, ""},
		{"RenewClaim", OpRenewClaim, claimed, renewed, OutboxStatusPending, OutboxStatusPending, ""},
		{"SaveKeepsTheOldError", OpSave, retry, deferred, OutboxStatusRetryScheduled, OutboxStatusDeferred, ""},
		{"SaveClaimWithAnError", OpSaveClaim, claimed, savedClaim, OutboxStatusPending, OutboxStatusDeferred, "429"},
	}
}

func TestEntryTransition(t *testing.T) {
	for _, c := range entryChanges(t) {
		t.Run(c.name, func(t *testing.T) {
			got := EntryTransition(c.op, &c.before, &c.after, "w1")
			assert.Equal(t, Transition{
				Op: c.op, From: string(c.from), To: string(c.to), Outcome: OutcomeApplied,
				Actor: "w1", Reason: c.reason, At: c.after.UpdatedAt,
			}, got)
		})
	}
}

func TestEntryTransitionOfACreation(t *testing.T) {
	e := newEntry()
	got := EntryTransition(OpEnqueue, nil, &e, "")
	assert.Equal(t, Transition{Op: OpEnqueue, To: string(OutboxStatusPending), Outcome: OutcomeApplied, At: e.CreatedAt}, got)
}

func TestJoinReason(t *testing.T) {
	for _, c := range []struct{ kind, detail, want string }{
		{"", "", ""}, {"k", "", "k"}, {"", "d", "d"}, {"k", "d", "k: d"},
	} {
		assert.Equal(t, c.want, joinReason(c.kind, c.detail))
	}
}
