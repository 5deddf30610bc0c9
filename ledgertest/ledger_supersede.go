package ledgertest

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// testSupersede checks Ledger.Supersede in both modes: offered and leased
// work follows the replacement or ends; acknowledged work stays and closes
// normally.
func testSupersede(t *testing.T, newLedger NewLedgerFunc) {
	runLedgerRules(t, newLedger, []ledgerRule{
		{"Follow/MovesOfferedAndLeasedWork", supersedeFollowMoves},
		{"Follow/RevokesLeasesWithoutCountingTheAttempt", supersedeFollowRevokesLeases},
		{"Follow/AcknowledgedStaysAndCanBeProcessed", supersedeFollowAcknowledgedStays},
		{"LeaveBehind/EndsOfferedAndLeasedWork", supersedeLeaveBehindEnds},
		{"LeaveBehind/AcknowledgedStaysAndCanBeProcessed", supersedeLeaveBehindAcknowledgedStays},
		{"NothingToMoveChangesNothing", supersedeNothingToMove},
	})
}

// supersedeFixture enqueues on host-old one delivery per state
// (s-offered, s-leased held by ownerB, s-acked held by ownerA, s-done) and
// x-other on host-other. It returns the lease of s-leased.
func (f *ledgerFixture) supersedeFixture() ledger.Lease {
	f.t.Helper()
	f.acknowledged("s-acked", "host-old", ownerA, t0)
	f.acknowledged("s-done", "host-old", ownerA, t0)
	f.process("s-done", ownerA, nil, t0)
	f.enqueue(req("s-leased", "host-old"), t0)
	leased := f.leaseOne("s-leased", ownerB, t0)
	f.enqueue(req("s-offered", "host-old"), t0)
	f.enqueue(req("x-other", "host-other"), t0)
	return leased
}

// supersede calls Supersede and requires its lists to be moved and ended,
// in ID order.
func (f *ledgerFixture) supersede(mode ledger.FollowMode, now time.Time, moved, ended []ledger.DeliveryID) {
	f.t.Helper()
	res, err := f.l.Supersede(f.ctx, "host-old", "host-new", mode, now)
	require.NoError(f.t, err)
	require.True(f.t, slices.Equal(moved, res.Moved), "moved: want %v in ID order, got %v", moved, res.Moved)
	require.True(f.t, slices.Equal(ended, res.Ended), "ended: want %v in ID order, got %v", ended, res.Ended)
	require.Equal(f.t, len(moved)+len(ended) > 0, res.Applied())
}

func supersedeFollowMoves(t *testing.T, f *ledgerFixture) {
	f.supersedeFixture()
	offered := f.get("s-offered")
	untouched := []ledger.Delivery{f.get("s-acked"), f.get("s-done"), f.get("x-other")}
	now := at(time.Second)
	f.supersede(ledger.Follow, now, []ledger.DeliveryID{"s-leased", "s-offered"}, nil)

	d := f.requireState("s-offered", ledger.DeliveryStateOffered)
	require.Equal(t, ledger.Target("host-new"), d.Target)
	require.Equal(t, offered.AvailableAt, d.AvailableAt)
	require.Equal(t, offered.Version+1, d.Version)
	require.Equal(t, now, d.UpdatedAt)
	for _, u := range untouched {
		f.requireUnchanged(u)
	}

	f.requireNothingOffered(ledger.LeaseFilter{Targets: []ledger.Target{"host-old"}}, now)
	got := f.leaseIDs(ledger.LeaseFilter{Targets: []ledger.Target{"host-new"}}, ownerA, now, 10)
	require.Equal(t, []ledger.DeliveryID{"s-offered", "s-leased"}, got, "moved work is leased under the replacement")
}

func supersedeFollowRevokesLeases(t *testing.T, f *ledgerFixture) {
	r := req("d-1", "host-old")
	r.Policy.MaxAttempts = 1
	f.enqueue(r, t0)
	l := f.leaseOne("d-1", ownerB, t0)
	now := at(time.Second)
	f.supersede(ledger.Follow, now, []ledger.DeliveryID{"d-1"}, nil)

	d := f.requireState("d-1", ledger.DeliveryStateOffered)
	require.Equal(t, ledger.Target("host-new"), d.Target)
	require.Zero(t, d.Attempts, "a revoked lease gives its attempt back")
	require.Nil(t, d.Lease)
	require.Equal(t, now, d.AvailableAt)
	f.notApplied(d, ledger.OutcomeLeaseLost)(f.l.Acknowledge(f.ctx, l, "", now))
	f.notApplied(d, ledger.OutcomeLeaseLost)(f.l.MarkFailed(f.ctx, l, ledger.FailureReason{}, now))
	f.notApplied(d, ledger.OutcomeLeaseLost)(f.l.Release(f.ctx, l, now))
	// With its attempt given back, the single allowed attempt is still there.
	l2 := f.leaseOne("d-1", ownerA, now)
	require.Equal(t, int64(2), l2.Seq)
}

func supersedeFollowAcknowledgedStays(t *testing.T, f *ledgerFixture) {
	f.supersedeFixture()
	acked := f.get("s-acked")
	f.supersede(ledger.Follow, at(time.Second), []ledger.DeliveryID{"s-leased", "s-offered"}, nil)
	f.requireUnchanged(acked)
	require.Equal(t, ledger.Target("host-old"), acked.Target)
	f.process("s-acked", ownerA, nil, at(2*time.Second))
}

func supersedeLeaveBehindEnds(t *testing.T, f *ledgerFixture) {
	leased := f.supersedeFixture()
	untouched := []ledger.Delivery{f.get("s-acked"), f.get("s-done"), f.get("x-other")}
	now := at(time.Second)
	f.supersede(ledger.LeaveBehind, now, nil, []ledger.DeliveryID{"s-leased", "s-offered"})
	for _, id := range []ledger.DeliveryID{"s-leased", "s-offered"} {
		d := f.requireState(id, ledger.DeliveryStateExpired)
		require.NotNil(t, d.Cause, id)
		require.Equal(t, ledger.CauseSuperseded, d.Cause.Kind, id)
		require.Equal(t, ledger.Target("host-old"), d.Target, "work left behind stays with its target")
		require.Equal(t, now, d.EndedAt, id)
		require.Nil(t, d.Lease, id)
	}
	for _, u := range untouched {
		f.requireUnchanged(u)
	}
	f.notApplied(f.get("s-leased"), ledger.OutcomeEnded)(f.l.Acknowledge(f.ctx, leased, "", now))
	f.notApplied(f.get("s-leased"), ledger.OutcomeEnded)(f.l.Release(f.ctx, leased, now))
	f.requireNothingOffered(ledger.LeaseFilter{Targets: []ledger.Target{"host-old", "host-new"}}, at(time.Hour))
}

func supersedeLeaveBehindAcknowledgedStays(t *testing.T, f *ledgerFixture) {
	f.supersedeFixture()
	acked := f.get("s-acked")
	f.supersede(ledger.LeaveBehind, at(time.Second), nil, []ledger.DeliveryID{"s-leased", "s-offered"})
	f.requireUnchanged(acked)
	f.process("s-acked", ownerA, nil, at(2*time.Second))
}

func supersedeNothingToMove(t *testing.T, f *ledgerFixture) {
	f.acknowledged("s-acked", "host-old", ownerA, t0)
	f.enqueue(req("x-other", "host-other"), t0)
	snapshot := f.all()
	f.supersede(ledger.Follow, at(time.Second), nil, nil)
	f.supersede(ledger.LeaveBehind, at(time.Second), nil, nil)
	require.Equal(t, snapshot, f.all())
}
