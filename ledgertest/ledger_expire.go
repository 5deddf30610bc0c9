package ledgertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// testExpire checks Ledger.Expire: expired leases go back to Offered (or
// Failed), lapsed acknowledgements end as Expired, nothing else moves.
func testExpire(t *testing.T, newLedger NewLedgerFunc) {
	runLedgerRules(t, newLedger, []ledgerRule{
		{"EmptyLedgerChangesNothing", expireEmptyLedger},
		{"ExpiredLeaseIsOfferedAgain", expireExpiredLeaseIsOfferedAgain},
		{"LateSweepKeepsTheOfferTime", expireLateSweepKeepsTheOfferTime},
		{"UnexpiredLeaseIsUntouched", expireUnexpiredLeaseIsUntouched},
		{"UsedUpAttemptsFail", expireUsedUpAttemptsFail},
		{"LapsedAcknowledgementExpires", expireLapsedAcknowledgement},
		{"ReturnsTheChangedIDsOnly", expireReturnsTheChangedIDsOnly},
	})
}

// expire sweeps at now and requires the changed IDs to be want.
func (f *ledgerFixture) expire(now time.Time, want ...ledger.DeliveryID) {
	f.t.Helper()
	res, err := f.l.Expire(f.ctx, now)
	require.NoError(f.t, err)
	require.Equal(f.t, len(want) > 0, res.Applied())
	if len(want) == 0 {
		require.Empty(f.t, res.Changed)
		return
	}
	require.Equal(f.t, want, res.Changed)
}

func expireEmptyLedger(t *testing.T, f *ledgerFixture) {
	f.expire(t0)
}

func expireExpiredLeaseIsOfferedAgain(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerA, t0)
	held := f.get("d-1")
	now := l.ExpiresAt
	f.expire(now, "d-1")
	d := f.requireState("d-1", ledger.DeliveryStateOffered)
	require.Equal(t, held.Version+1, d.Version)
	require.Equal(t, now, d.UpdatedAt)
	require.Equal(t, 1, d.Attempts, "an expired attempt stays counted")
	require.Nil(t, d.Lease)
	require.Equal(t, l.ExpiresAt, d.AvailableAt, "offered again from the moment the lease ran out")
	require.NotNil(t, d.LastFailure)
	require.Equal(t, ledger.FailureLeaseExpired, d.LastFailure.Kind)
	require.Equal(t, ownerA, d.LastFailure.Owner)
	require.Equal(t, l.ExpiresAt, d.LastFailure.At)

	f.notApplied(d, ledger.OutcomeLeaseLost)(f.l.MarkFailed(f.ctx, l, ledger.FailureReason{}, now))
	f.notApplied(d, ledger.OutcomeLeaseLost)(f.l.Release(f.ctx, l, now))
	f.notApplied(d, ledger.OutcomeLeaseLost)(f.l.Acknowledge(f.ctx, l, "", now))
	f.leaseOne("d-1", ownerB, now)
}

func expireLateSweepKeepsTheOfferTime(t *testing.T, f *ledgerFixture) {
	// A sweep long after the expiry offers the delivery from the moment
	// its lease ran out, not from the sweep, so it keeps its place in line.
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerA, t0)
	f.expire(l.ExpiresAt.Add(time.Hour), "d-1")
	require.Equal(t, l.ExpiresAt, f.requireState("d-1", ledger.DeliveryStateOffered).AvailableAt)
}

func expireUnexpiredLeaseIsUntouched(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerA, t0)
	held := f.get("d-1")
	f.expire(l.ExpiresAt.Add(-time.Microsecond))
	f.requireUnchanged(held)
}

func expireUsedUpAttemptsFail(t *testing.T, f *ledgerFixture) {
	r := req("d-1", "host-1")
	r.Policy.MaxAttempts = 1
	f.enqueue(r, t0)
	l := f.leaseOne("d-1", ownerA, t0)
	now := l.ExpiresAt.Add(time.Second)
	f.expire(now, "d-1")
	d := f.requireState("d-1", ledger.DeliveryStateFailed)
	require.Equal(t, now, d.EndedAt)
	require.Equal(t, 1, d.Attempts)
	require.Nil(t, d.Lease)
	require.NotNil(t, d.LastFailure)
	require.Equal(t, ledger.FailureLeaseExpired, d.LastFailure.Kind)
	f.notApplied(d, ledger.OutcomeEnded)(f.l.MarkFailed(f.ctx, l, ledger.FailureReason{}, now))
}

func expireLapsedAcknowledgement(t *testing.T, f *ledgerFixture) {
	f.acknowledged("d-1", "host-1", ownerA, t0)
	acked := f.get("d-1")
	deadline := acked.Ack.Deadline
	f.expire(deadline.Add(-time.Microsecond))
	f.requireUnchanged(acked)
	f.expire(deadline, "d-1")
	d := f.requireState("d-1", ledger.DeliveryStateExpired)
	require.NotNil(t, d.Cause)
	require.Equal(t, ledger.CauseAcknowledgementLapsed, d.Cause.Kind)
	require.Equal(t, deadline, d.EndedAt)
	require.Equal(t, acked.Ack, d.Ack, "the acknowledgement stays readable")
	require.Nil(t, d.Processing)
}

func expireReturnsTheChangedIDsOnly(t *testing.T, f *ledgerFixture) {
	// d-2 (lapsed acknowledgement) and d-5 (expired lease) change; the
	// offered, the unexpired and the terminal records do not.
	f.acknowledged("d-2", "host-1", ownerA, t0)
	f.acknowledged("d-4", "host-1", ownerA, t0)
	f.process("d-4", ownerA, nil, t0)
	f.enqueue(req("d-5", "host-1"), t0)
	f.leaseOne("d-5", ownerA, t0)
	f.enqueue(req("d-1", "host-1"), t0)
	f.lease(ledger.LeaseFilter{}, ownerB, t0, 24*time.Hour, 1) // d-1, held all day
	f.enqueue(req("d-3", "host-1"), t0)
	f.enqueue(req("d-6", "host-1"), t0)
	f.applied(f.get("d-6"), t0)(f.l.Abandon(f.ctx, "d-6", ledger.Cause{Kind: ledger.CauseQueueBounded}, t0))
	untouched := []ledger.Delivery{f.get("d-1"), f.get("d-3"), f.get("d-4"), f.get("d-6")}
	require.Equal(t, ledger.DeliveryStateLeased, untouched[0].State)

	now := f.get("d-2").Ack.Deadline
	f.expire(now, "d-2", "d-5")
	for _, d := range untouched {
		f.requireUnchanged(d)
	}
	f.requireState("d-2", ledger.DeliveryStateExpired)
	f.requireState("d-5", ledger.DeliveryStateOffered)

	// A second sweep at the same time, or later, finds nothing new.
	snapshot := f.all()
	f.expire(now)
	f.expire(now.Add(time.Minute))
	require.Equal(t, snapshot, f.all())
}
