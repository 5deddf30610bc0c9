package ledgertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// testMarkFailed checks Ledger.MarkFailed: retry after the policy's
// backoff, fail for good when permanent or out of attempts, and the
// outcomes of a token that is not the one in force.
func testMarkFailed(t *testing.T, newLedger NewLedgerFunc) {
	runLedgerRules(t, newLedger, []ledgerRule{
		{"RetryIsOfferedAfterTheBackoff", failedRetryAfterBackoff},
		{"PermanentFailsAtOnce", failedPermanentFailsAtOnce},
		{"UsedUpAttemptsFail", failedUsedUpAttemptsFail},
		{"NeedsOnlyTheToken", failedNeedsOnlyTheToken},
		{"EarlierGrantIsLeaseLost", failedEarlierGrantIsLeaseLost},
		{"SameCallAgainIsRepeated", failedSameCallAgainIsRepeated},
		{"RepeatAfterFailingForGoodIsEnded", failedRepeatAfterFailingForGood},
		{"AcknowledgedIsWrongState", failedAcknowledgedIsWrongState},
		{"UnknownIDIsNotFound", failedUnknownIDIsNotFound},
	})
}

func failedRetryAfterBackoff(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerA, t0)
	now := at(time.Second)
	d := f.applied(f.get("d-1"), now)(f.l.MarkFailed(f.ctx, l, ledger.FailureReason{Message: "host busy"}, now))
	require.Equal(t, ledger.DeliveryStateOffered, d.State)
	require.Equal(t, 1, d.Attempts, "a failed attempt stays counted")
	require.Nil(t, d.Lease)
	require.True(t, d.EndedAt.IsZero())
	require.Equal(t, &ledger.Failure{Kind: ledger.FailureReported, Message: "host busy", Owner: ownerA, At: now}, d.LastFailure)

	backoff := d.Policy.Backoff("d-1", 1)
	require.Positive(t, backoff)
	require.Equal(t, now.Add(backoff), d.AvailableAt)
	f.requireNothingOffered(ledger.LeaseFilter{}, now.Add(backoff-time.Microsecond))
	l2 := f.leaseOne("d-1", ownerA, now.Add(backoff))
	require.Equal(t, int64(2), l2.Seq)

	// The second failure backs off by the policy's second step.
	now2 := now.Add(backoff + time.Second)
	d = f.applied(f.get("d-1"), now2)(f.l.MarkFailed(f.ctx, l2, ledger.FailureReason{Message: "again"}, now2))
	require.Equal(t, now2.Add(d.Policy.Backoff("d-1", 2)), d.AvailableAt)
}

func failedPermanentFailsAtOnce(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerA, t0)
	d := f.applied(f.get("d-1"), t0)(f.l.MarkFailed(f.ctx, l, ledger.FailureReason{Message: "bad request", Permanent: true}, t0))
	require.Equal(t, ledger.DeliveryStateFailed, d.State)
	require.Equal(t, t0, d.EndedAt)
	require.Nil(t, d.Lease)
	require.Equal(t, &ledger.Failure{Kind: ledger.FailureReported, Message: "bad request", Permanent: true, Owner: ownerA, At: t0}, d.LastFailure)
	f.requireNothingOffered(ledger.LeaseFilter{}, at(time.Hour))
}

func failedUsedUpAttemptsFail(t *testing.T, f *ledgerFixture) {
	r := req("d-1", "host-1")
	r.Policy.MaxAttempts = 2
	f.enqueue(r, t0)
	l1 := f.leaseOne("d-1", ownerA, t0)
	d := f.applied(f.get("d-1"), t0)(f.l.MarkFailed(f.ctx, l1, ledger.FailureReason{Message: "1"}, t0))
	require.Equal(t, ledger.DeliveryStateOffered, d.State)
	l2 := f.leaseOne("d-1", ownerA, d.AvailableAt)
	now := d.AvailableAt
	d = f.applied(f.get("d-1"), now)(f.l.MarkFailed(f.ctx, l2, ledger.FailureReason{Message: "2"}, now))
	require.Equal(t, ledger.DeliveryStateFailed, d.State)
	require.Equal(t, 2, d.Attempts)
	require.Equal(t, now, d.EndedAt)
	require.Equal(t, "2", d.LastFailure.Message)
}

func failedNeedsOnlyTheToken(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerA, t0)
	late := l.ExpiresAt.Add(time.Minute) // expired, but nobody took it over
	d := f.applied(f.get("d-1"), late)(f.l.MarkFailed(f.ctx, l, ledger.FailureReason{Message: "slow"}, late))
	require.Equal(t, ledger.DeliveryStateOffered, d.State)
	require.Equal(t, late.Add(d.Policy.Backoff("d-1", 1)), d.AvailableAt)
}

func failedEarlierGrantIsLeaseLost(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l1 := f.leaseOne("d-1", ownerA, t0)
	f.leaseOne("d-1", ownerB, l1.ExpiresAt)
	f.notApplied(f.get("d-1"), ledger.OutcomeLeaseLost)(f.l.MarkFailed(f.ctx, l1, ledger.FailureReason{}, l1.ExpiresAt))
	forged := l1
	forged.Token = storekit.NewToken()
	f.notApplied(f.get("d-1"), ledger.OutcomeLeaseLost)(f.l.MarkFailed(f.ctx, forged, ledger.FailureReason{}, l1.ExpiresAt))
}

func failedSameCallAgainIsRepeated(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerA, t0)
	f.applied(f.get("d-1"), t0)(f.l.MarkFailed(f.ctx, l, ledger.FailureReason{Message: "x"}, t0))
	retrying := f.get("d-1")
	f.notApplied(retrying, ledger.OutcomeRepeated)(f.l.MarkFailed(f.ctx, l, ledger.FailureReason{Message: "x"}, at(time.Second)))
	// Giving the same lease up another way is not a repeat: the lease is gone.
	f.notApplied(retrying, ledger.OutcomeLeaseLost)(f.l.Release(f.ctx, l, at(time.Second)))
	f.notApplied(retrying, ledger.OutcomeLeaseLost)(f.l.Acknowledge(f.ctx, l, "", at(time.Second)))
	// Once the delivery is leased again, the old lease is lost.
	f.leaseOne("d-1", ownerB, retrying.AvailableAt)
	f.notApplied(f.get("d-1"), ledger.OutcomeLeaseLost)(f.l.MarkFailed(f.ctx, l, ledger.FailureReason{Message: "x"}, retrying.AvailableAt))
}

func failedRepeatAfterFailingForGood(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerA, t0)
	f.applied(f.get("d-1"), t0)(f.l.MarkFailed(f.ctx, l, ledger.FailureReason{Permanent: true}, t0))
	f.notApplied(f.get("d-1"), ledger.OutcomeEnded)(f.l.MarkFailed(f.ctx, l, ledger.FailureReason{Permanent: true}, at(time.Second)))
	f.notApplied(f.get("d-1"), ledger.OutcomeEnded)(f.l.Release(f.ctx, l, at(time.Second)))
}

func failedAcknowledgedIsWrongState(t *testing.T, f *ledgerFixture) {
	l := f.acknowledged("d-1", "host-1", ownerA, t0)
	f.notApplied(f.get("d-1"), ledger.OutcomeWrongState)(f.l.MarkFailed(f.ctx, l, ledger.FailureReason{Message: "x"}, at(time.Second)))
	f.notApplied(f.get("d-1"), ledger.OutcomeWrongState)(f.l.MarkFailed(f.ctx, l, ledger.FailureReason{Permanent: true}, at(time.Second)))
}

func failedUnknownIDIsNotFound(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerA, t0)
	l.DeliveryID = "d-unknown"
	f.notApplied(ledger.Delivery{ID: "d-unknown"}, ledger.OutcomeNotFound)(f.l.MarkFailed(f.ctx, l, ledger.FailureReason{}, t0))
}
