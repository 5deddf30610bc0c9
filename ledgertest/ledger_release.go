package ledgertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// testRelease checks Ledger.Release: the attempt is given back and the
// delivery is offerable at once.
func testRelease(t *testing.T, newLedger NewLedgerFunc) {
	runLedgerRules(t, newLedger, []ledgerRule{
		{"GivesTheAttemptBack", releaseGivesTheAttemptBack},
		{"NeedsOnlyTheToken", releaseNeedsOnlyTheToken},
		{"SameCallAgainIsRepeated", releaseSameCallAgainIsRepeated},
		{"EarlierGrantIsLeaseLost", releaseEarlierGrantIsLeaseLost},
		{"AcknowledgedIsWrongState", releaseAcknowledgedIsWrongState},
		{"TerminalIsEnded", releaseTerminalIsEnded},
		{"UnknownIDIsNotFound", releaseUnknownIDIsNotFound},
	})
}

func releaseGivesTheAttemptBack(t *testing.T, f *ledgerFixture) {
	r := req("d-1", "host-1")
	r.Policy.MaxAttempts = 1
	f.enqueue(r, t0)
	l := f.leaseOne("d-1", ownerA, t0)
	now := at(time.Second)
	d := f.applied(f.get("d-1"), now)(f.l.Release(f.ctx, l, now))
	require.Equal(t, ledger.DeliveryStateOffered, d.State)
	require.Zero(t, d.Attempts, "a released attempt is not counted")
	require.Nil(t, d.Lease)
	require.Nil(t, d.LastFailure, "a release is not a failure")
	require.Equal(t, now, d.AvailableAt)
	require.Equal(t, int64(1), d.LeaseSeq)

	// Offerable at once, even with a single attempt allowed.
	l2 := f.leaseOne("d-1", ownerB, now)
	require.Equal(t, int64(2), l2.Seq)
	require.Equal(t, 1, f.get("d-1").Attempts)
}

func releaseNeedsOnlyTheToken(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerA, t0)
	late := l.ExpiresAt.Add(time.Hour)
	d := f.applied(f.get("d-1"), late)(f.l.Release(f.ctx, l, late))
	require.Equal(t, ledger.DeliveryStateOffered, d.State)
	require.Zero(t, d.Attempts)
}

func releaseSameCallAgainIsRepeated(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerA, t0)
	f.applied(f.get("d-1"), t0)(f.l.Release(f.ctx, l, t0))
	released := f.get("d-1")
	f.notApplied(released, ledger.OutcomeRepeated)(f.l.Release(f.ctx, l, at(time.Second)))
	f.notApplied(released, ledger.OutcomeLeaseLost)(f.l.MarkFailed(f.ctx, l, ledger.FailureReason{}, at(time.Second)))
}

func releaseEarlierGrantIsLeaseLost(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l1 := f.leaseOne("d-1", ownerA, t0)
	f.applied(f.get("d-1"), t0)(f.l.Release(f.ctx, l1, t0))
	f.leaseOne("d-1", ownerB, t0)
	held := f.get("d-1")
	// Once leased again, even the repeat of the release is stale.
	f.notApplied(held, ledger.OutcomeLeaseLost)(f.l.Release(f.ctx, l1, t0))
	forged := *held.Lease
	forged.Token = storekit.NewToken()
	f.notApplied(held, ledger.OutcomeLeaseLost)(f.l.Release(f.ctx, forged, t0))
}

func releaseAcknowledgedIsWrongState(t *testing.T, f *ledgerFixture) {
	l := f.acknowledged("d-1", "host-1", ownerA, t0)
	f.notApplied(f.get("d-1"), ledger.OutcomeWrongState)(f.l.Release(f.ctx, l, at(time.Second)))
}

func releaseTerminalIsEnded(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerA, t0)
	f.applied(f.get("d-1"), t0)(f.l.Abandon(f.ctx, "d-1", ledger.Cause{Kind: ledger.CauseQueueBounded}, t0))
	f.notApplied(f.get("d-1"), ledger.OutcomeEnded)(f.l.Release(f.ctx, l, at(time.Second)))
	forged := l
	forged.Token = storekit.NewToken()
	f.notApplied(f.get("d-1"), ledger.OutcomeEnded)(f.l.Release(f.ctx, forged, at(time.Second)))
}

func releaseUnknownIDIsNotFound(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerA, t0)
	l.DeliveryID = "d-unknown"
	f.notApplied(ledger.Delivery{ID: "d-unknown"}, ledger.OutcomeNotFound)(f.l.Release(f.ctx, l, t0))
}
