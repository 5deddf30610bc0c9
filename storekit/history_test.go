package storekit

import (
	"testing"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// deliveryChange is one applied transition of the state machine: the
// record before and after it, and the operation that made it.
type deliveryChange struct {
	name          string
	op            ledger.Operation
	before, after ledger.Delivery
	// from, to and reason are what the history entry must say.
	from, to ledger.DeliveryState
	reason   string
}

// deliveryChanges builds one applied transition of every kind through the
// state machine itself.
func deliveryChanges(t *testing.T) []deliveryChange {
	t.Helper()
	policy := ledger.Policy{MaxAttempts: 2, BackoffBase: time.Second, BackoffMax: time.Minute, AckWindow: time.Minute}
	offered := NewDelivery(ledger.EnqueueRequest{ID: "d1", Target: "host-1", Payload: []byte("x"), Policy: policy}, ledger.DefaultPolicy(), t0)
	leased, lease := Delivery(offered).Grant(ownerA, "tok-1", t0, time.Minute)
	expiry := lease.ExpiresAt
	takenOver, _ := Delivery(leased).Grant(ownerB, "tok-2", expiry, time.Minute)
	acked, o := Delivery(leased).Acknowledge(lease, "seen", t0.Add(time.Second))
	require.Equal(t, ledger.OutcomeApplied, o)
	processedD, o := Delivery(acked).MarkProcessed(ownerA, nil, nil, "done", t0.Add(2*time.Second))
	require.Equal(t, ledger.OutcomeApplied, o)
	failedOnce, o := Delivery(leased).MarkFailed(lease, ledger.FailureReason{Message: "boom"}, t0.Add(time.Second))
	require.Equal(t, ledger.OutcomeApplied, o)
	// The same failure again, from the same owner at the same instant:
	// equal to the last one, and still a failure the history must name.
	leasedAgain, lease2 := Delivery(failedOnce).Grant(ownerA, "tok-3", t0.Add(time.Second), time.Minute)
	failedTwice, o := Delivery(leasedAgain).MarkFailed(lease2, ledger.FailureReason{Message: "boom"}, t0.Add(time.Second))
	require.Equal(t, ledger.OutcomeApplied, o)
	require.Equal(t, *failedOnce.LastFailure, *failedTwice.LastFailure, "the two failures are equal")
	permanent, o := Delivery(leased).MarkFailed(lease, ledger.FailureReason{Message: "gone", Permanent: true}, t0.Add(time.Second))
	require.Equal(t, ledger.OutcomeApplied, o)
	released, o := Delivery(leased).Release(lease, t0.Add(time.Second))
	require.Equal(t, ledger.OutcomeApplied, o)
	renewed, o := Delivery(leased).Renew(lease, t0.Add(time.Second), time.Minute)
	require.Equal(t, ledger.OutcomeApplied, o)
	newIncarnation := ledger.Owner{Agent: ownerA.Agent, Incarnation: "2"}
	reclaimed := Delivery(leased).Reclaim(newIncarnation, t0.Add(time.Second))
	sweptLease, changed := Delivery(leased).Expire(expiry)
	require.True(t, changed)
	sweptAck, changed := Delivery(acked).Expire(acked.Ack.Deadline)
	require.True(t, changed)
	abandoned, o := Delivery(offered).Abandon(ledger.Cause{Kind: ledger.CauseQueueBounded, Detail: "queue full"}, t0.Add(time.Second))
	require.Equal(t, ledger.OutcomeApplied, o)
	bare, o := Delivery(leased).Abandon(ledger.Cause{Kind: ledger.CauseCeremonyEnded}, t0.Add(time.Second))
	require.Equal(t, ledger.OutcomeApplied, o)
	moved, ok := Delivery(leased).Supersede("host-2", ledger.Follow, t0.Add(time.Second))
	require.True(t, ok)
	left, ok := Delivery(offered).Supersede("host-2", ledger.LeaveBehind, t0.Add(time.Second))
	require.True(t, ok)
	// An activation after a failure keeps the failure: the history must
	// not name it again.
	activated, o := Delivery(failedOnce).RecordActivation(ledger.Activation{Result: ledger.ActivationDelivered}, t0.Add(2*time.Second))
	require.Equal(t, ledger.OutcomeApplied, o)
	return []deliveryChange{
		{"Lease", ledger.OpLease, offered, leased, ledger.DeliveryStateOffered, ledger.DeliveryStateLeased, ""},
		{"LeaseTakesOverAnExpiredLease", ledger.OpLease, leased, takenOver, ledger.DeliveryStateLeased, ledger.DeliveryStateLeased, "lease_expired: lease expired"},
		{"Acknowledge", ledger.OpAcknowledge, leased, acked, ledger.DeliveryStateLeased, ledger.DeliveryStateAcknowledged, ""},
		{"MarkProcessed", ledger.OpMarkProcessed, acked, processedD, ledger.DeliveryStateAcknowledged, ledger.DeliveryStateProcessed, ""},
		{"MarkFailed", ledger.OpMarkFailed, leased, failedOnce, ledger.DeliveryStateLeased, ledger.DeliveryStateOffered, "reported: boom"},
		{"MarkFailedAsBefore", ledger.OpMarkFailed, leasedAgain, failedTwice, ledger.DeliveryStateLeased, ledger.DeliveryStateFailed, "reported: boom"},
		{"MarkFailedPermanent", ledger.OpMarkFailed, leased, permanent, ledger.DeliveryStateLeased, ledger.DeliveryStateFailed, "reported: gone"},
		{"Release", ledger.OpRelease, leased, released, ledger.DeliveryStateLeased, ledger.DeliveryStateOffered, ""},
		{"RenewLease", ledger.OpRenewLease, leased, renewed, ledger.DeliveryStateLeased, ledger.DeliveryStateLeased, ""},
		{"Reclaim", ledger.OpReclaim, leased, reclaimed, ledger.DeliveryStateLeased, ledger.DeliveryStateOffered, "reclaimed: agent leased as incarnation 2"},
		{"ExpireLease", ledger.OpExpire, leased, sweptLease, ledger.DeliveryStateLeased, ledger.DeliveryStateOffered, "lease_expired: lease expired"},
		{"ExpireAcknowledgement", ledger.OpExpire, acked, sweptAck, ledger.DeliveryStateAcknowledged, ledger.DeliveryStateExpired,
			"acknowledgement_lapsed: not processed by " + acked.Ack.Deadline.Format(time.RFC3339Nano)},
		{"Abandon", ledger.OpAbandon, offered, abandoned, ledger.DeliveryStateOffered, ledger.DeliveryStateExpired, "queue_bounded: queue full"},
		{"CauseWithoutDetail", ledger.OpExpireCeremony, leased, bare, ledger.DeliveryStateLeased, ledger.DeliveryStateExpired, "ceremony_ended"},
		{"SupersedeFollow", ledger.OpSupersede, leased, moved, ledger.DeliveryStateLeased, ledger.DeliveryStateOffered, ""},
		{"SupersedeLeaveBehind", ledger.OpSupersede, offered, left, ledger.DeliveryStateOffered, ledger.DeliveryStateExpired, "superseded: replaced by host-2"},
		{"ActivationKeepsTheOldFailure", ledger.OpRecordActivation, failedOnce, activated, ledger.DeliveryStateOffered, ledger.DeliveryStateOffered, ""},
	}
}

func TestDeliveryTransition(t *testing.T) {
	for _, c := range deliveryChanges(t) {
		t.Run(c.name, func(t *testing.T) {
			got := DeliveryTransition(c.op, &c.before, &c.after, "someone")
			assert.Equal(t, ledger.Transition{
				Op: c.op, From: string(c.from), To: string(c.to), Outcome: ledger.OutcomeApplied,
				Actor: "someone", Reason: c.reason, At: c.after.UpdatedAt,
			}, got)
		})
	}
}

func TestDeliveryTransitionOfACreation(t *testing.T) {
	d := NewDelivery(ledger.EnqueueRequest{ID: "d1", Target: "host-1"}, ledger.DefaultPolicy(), t0.Add(1234*time.Nanosecond))
	got := DeliveryTransition(ledger.OpEnqueue, nil, &d, "")
	assert.Equal(t, ledger.Transition{Op: ledger.OpEnqueue, To: string(ledger.DeliveryStateOffered), Outcome: ledger.OutcomeApplied, At: d.CreatedAt}, got)
	assert.Empty(t, got.From, "a creation comes from no state")
	assert.Zero(t, got.Seq, "the store numbers the entries")
}

// TestEveryAppliedTransitionBumpsVersionByOne is what lets a store number
// a record's history by its Version: a creation is version 1 and each
// applied transition, which writes one history entry, adds exactly one.
func TestEveryAppliedTransitionBumpsVersionByOne(t *testing.T) {
	d := NewDelivery(ledger.EnqueueRequest{ID: "d1", Target: "host-1"}, ledger.DefaultPolicy(), t0)
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
	op            ledger.Operation
	before, after ledger.OutboxEntry
	from, to      ledger.OutboxStatus
	reason        string
}

func entryChanges(t *testing.T) []entryChange {
	t.Helper()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	emissionErr := ledger.EmissionError{Code: "timeout", Message: "provider timed out"}
	pending := newEntry()
	claimed, claim := OutboxEntry(pending).Grant("w1", "tok-1", t0, time.Minute)
	next := at(time.Hour)
	retry, o := OutboxEntry(claimed).MarkClaimFailed(claim, emissionErr, &next, at(time.Second))
	require.Equal(t, ledger.OutcomeApplied, o)
	// The provider answers the same again: the history still says why.
	reclaimed, claim2 := OutboxEntry(retry).Grant("w1", "tok-2", next, time.Minute)
	retryAgain, o := OutboxEntry(reclaimed).MarkClaimFailed(claim2, emissionErr, &next, at(time.Second))
	require.Equal(t, ledger.OutcomeApplied, o)
	require.Equal(t, *retry.LastError, *retryAgain.LastError)
	dead, o := OutboxEntry(reclaimed).MarkClaimDeadLettered(claim2, emissionErr, "poison message", at(2*time.Second))
	require.Equal(t, ledger.OutcomeApplied, o)
	deadNoReason, err := OutboxEntry(pending).MarkDeadLettered(emissionErr, "", at(time.Second))
	require.NoError(t, err)
	baseFailed, err := OutboxEntry(pending).MarkFailed(ledger.EmissionError{Message: "gone"}, nil, at(time.Second))
	require.NoError(t, err)
	delivered, o := OutboxEntry(claimed).MarkClaimDelivered(claim, ledger.EmissionResult{ProviderRef: "ref"}, at(time.Second))
	require.Equal(t, ledger.OutcomeApplied, o)
	released, o := OutboxEntry(claimed).ReleaseClaim(claim, at(time.Second))
	require.Equal(t, ledger.OutcomeApplied, o)
	renewed, o := OutboxEntry(claimed).RenewClaim(claim, at(time.Second), time.Minute)
	require.Equal(t, ledger.OutcomeApplied, o)
	// Deferring an entry keeps its last error: the history must not name
	// it again.
	in := retry
	in.Status, in.NextAttemptAt = ledger.OutboxStatusDeferred, at(2*time.Hour)
	deferred, err := OutboxEntry(retry).Save(in, at(time.Second))
	require.NoError(t, err)
	in = claimed
	in.Status, in.NextAttemptAt, in.LastError = ledger.OutboxStatusDeferred, at(2*time.Hour), &ledger.EmissionError{Code: "429"}
	savedClaim, o := OutboxEntry(claimed).SaveClaim(claim, in, at(time.Second))
	require.Equal(t, ledger.OutcomeApplied, o)
	return []entryChange{
		{"Claim", ledger.OpClaim, pending, claimed, ledger.OutboxStatusPending, ledger.OutboxStatusPending, ""},
		{"MarkClaimFailed", ledger.OpMarkFailed, claimed, retry, ledger.OutboxStatusPending, ledger.OutboxStatusRetryScheduled, "timeout: provider timed out"},
		{"MarkClaimFailedAsBefore", ledger.OpMarkFailed, reclaimed, retryAgain, ledger.OutboxStatusRetryScheduled, ledger.OutboxStatusRetryScheduled, "timeout: provider timed out"},
		{"MarkClaimDeadLettered", ledger.OpMarkDeadLettered, reclaimed, dead, ledger.OutboxStatusRetryScheduled, ledger.OutboxStatusDeadLettered, "poison message"},
		{"DeadLetteredWithoutReason", ledger.OpMarkDeadLettered, pending, deadNoReason, ledger.OutboxStatusPending, ledger.OutboxStatusDeadLettered, "timeout: provider timed out"},
		{"BaseMarkFailedWithoutCode", ledger.OpMarkFailed, pending, baseFailed, ledger.OutboxStatusPending, ledger.OutboxStatusFailed, "gone"},
		{"MarkClaimDelivered", ledger.OpMarkDelivered, claimed, delivered, ledger.OutboxStatusPending, ledger.OutboxStatusDelivered, ""},
		{"ReleaseClaim", ledger.OpReleaseClaim, claimed, released, ledger.OutboxStatusPending, ledger.OutboxStatusPending, ""},
		{"RenewClaim", ledger.OpRenewClaim, claimed, renewed, ledger.OutboxStatusPending, ledger.OutboxStatusPending, ""},
		{"SaveKeepsTheOldError", ledger.OpSave, retry, deferred, ledger.OutboxStatusRetryScheduled, ledger.OutboxStatusDeferred, ""},
		{"SaveClaimWithAnError", ledger.OpSaveClaim, claimed, savedClaim, ledger.OutboxStatusPending, ledger.OutboxStatusDeferred, "429"},
	}
}

func TestEntryTransition(t *testing.T) {
	for _, c := range entryChanges(t) {
		t.Run(c.name, func(t *testing.T) {
			got := EntryTransition(c.op, &c.before, &c.after, "w1")
			assert.Equal(t, ledger.Transition{
				Op: c.op, From: string(c.from), To: string(c.to), Outcome: ledger.OutcomeApplied,
				Actor: "w1", Reason: c.reason, At: c.after.UpdatedAt,
			}, got)
		})
	}
}

func TestEntryTransitionOfACreation(t *testing.T) {
	e := newEntry()
	got := EntryTransition(ledger.OpEnqueue, nil, &e, "")
	assert.Equal(t, ledger.Transition{Op: ledger.OpEnqueue, To: string(ledger.OutboxStatusPending), Outcome: ledger.OutcomeApplied, At: e.CreatedAt}, got)
}

func TestJoinReason(t *testing.T) {
	for _, c := range []struct{ kind, detail, want string }{
		{"", "", ""}, {"k", "", "k"}, {"", "d", "d"}, {"k", "d", "k: d"},
	} {
		assert.Equal(t, c.want, joinReason(c.kind, c.detail))
	}
}
