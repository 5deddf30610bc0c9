package ledgertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// testEndFenceRejected checks ledger.FenceRejecter: a delivery whose
// processing was refused for a stale fence ends at once, as Expired with
// cause fence_rejected naming both fences, recorded as an abandon by the
// refused owner; only then, only by that owner, and never raising the
// target's fence. A ledger that does not implement FenceRejecter skips
// the group.
func testEndFenceRejected(t *testing.T, newLedger NewLedgerFunc) {
	runLedgerRules(t, newLedger, []ledgerRule{
		{"EndsWithItsOwnCause", fenceRejectedEndsWithItsOwnCause},
		{"OnlyAStaleFence", fenceRejectedOnlyAStaleFence},
		{"OnlyTheAcknowledgingOwner", fenceRejectedOnlyTheOwner},
		{"OnlyAcknowledged", fenceRejectedOnlyAcknowledged},
		{"InvalidIsRejected", fenceRejectedInvalid},
	})
}

// fenceRejecter returns the ledger as a FenceRejecter, skipping the test
// when it is not one.
func (f *ledgerFixture) fenceRejecter() ledger.FenceRejecter {
	f.t.Helper()
	r, ok := f.l.(ledger.FenceRejecter)
	if !ok {
		f.t.Skipf("%T does not implement ledger.FenceRejecter", f.l)
	}
	return r
}

// staleFence acknowledges d-1 and d-2 on host-1 for ownerA and processes
// d-1 with fence 7, so that fence 5 is stale for d-2.
func (f *ledgerFixture) staleFence() {
	f.t.Helper()
	f.acknowledged("d-1", "host-1", ownerA, t0)
	f.acknowledged("d-2", "host-1", ownerA, t0)
	f.process("d-1", ownerA, ledger.FenceOf(7), t0)
	f.processedExpect(ledger.OutcomeFenceRejected, "d-2", ownerA, ledger.FenceOf(5), t0)
}

func fenceRejectedEndsWithItsOwnCause(t *testing.T, f *ledgerFixture) {
	r := f.fenceRejecter()
	f.staleFence()
	now := at(time.Second)
	d := f.applied(f.get("d-2"), now)(r.EndFenceRejected(f.ctx, "d-2", ownerA, 5, now))
	require.Equal(t, ledger.DeliveryStateExpired, d.State)
	want := storekit.FenceRejectedCause("host-1", 5, 7)
	require.Equal(t, &want, d.Cause)
	require.Contains(t, want.Detail, "5")
	require.Contains(t, want.Detail, "7")
	require.Equal(t, now, d.EndedAt)
	if _, ok := f.l.(ledger.Historian); ok {
		h := f.history("d-2")
		last := h[len(h)-1]
		require.Equal(t, ledger.OpAbandon, last.Op)
		require.Equal(t, ownerA.String(), last.Actor, "the refused owner ended it")
		require.Equal(t, string(ledger.CauseFenceRejected)+": "+want.Detail, last.Reason)
	}
	// Again: it has ended.
	f.notApplied(f.get("d-2"), ledger.OutcomeEnded)(r.EndFenceRejected(f.ctx, "d-2", ownerA, 5, at(2*time.Second)))
	// The target's mark is still 7: 7 is accepted, 6 is not.
	f.acknowledged("d-3", "host-1", ownerA, t0)
	f.processedExpect(ledger.OutcomeFenceRejected, "d-3", ownerA, ledger.FenceOf(6), now)
	f.process("d-3", ownerA, ledger.FenceOf(7), now)
}

func fenceRejectedOnlyAStaleFence(t *testing.T, f *ledgerFixture) {
	r := f.fenceRejecter()
	f.staleFence()
	for _, fence := range []ledger.Fence{7, 8} {
		f.notApplied(f.get("d-2"), ledger.OutcomeConflict)(r.EndFenceRejected(f.ctx, "d-2", ownerA, fence, t0))
	}
	// A target with no fence accepted yet rejects none.
	f.acknowledged("d-9", "host-2", ownerA, t0)
	f.notApplied(f.get("d-9"), ledger.OutcomeConflict)(r.EndFenceRejected(f.ctx, "d-9", ownerA, 0, t0))
	f.requireState("d-9", ledger.DeliveryStateAcknowledged)
	f.process("d-2", ownerA, ledger.FenceOf(7), t0)
}

func fenceRejectedOnlyTheOwner(t *testing.T, f *ledgerFixture) {
	r := f.fenceRejecter()
	f.staleFence()
	f.notApplied(f.get("d-2"), ledger.OutcomeWrongOwner)(r.EndFenceRejected(f.ctx, "d-2", ownerB, 5, t0))
	f.requireState("d-2", ledger.DeliveryStateAcknowledged)
}

func fenceRejectedOnlyAcknowledged(t *testing.T, f *ledgerFixture) {
	r := f.fenceRejecter()
	f.staleFence()
	f.enqueue(req("d-3", "host-1"), t0)
	f.notApplied(f.get("d-3"), ledger.OutcomeWrongState)(r.EndFenceRejected(f.ctx, "d-3", ownerA, 5, t0))
	f.leaseOne("d-3", ownerA, t0)
	f.notApplied(f.get("d-3"), ledger.OutcomeWrongState)(r.EndFenceRejected(f.ctx, "d-3", ownerA, 5, t0))
	f.notApplied(f.get("d-1"), ledger.OutcomeEnded)(r.EndFenceRejected(f.ctx, "d-1", ownerA, 5, t0))
	f.notApplied(ledger.Delivery{ID: "d-none"}, ledger.OutcomeNotFound)(r.EndFenceRejected(f.ctx, "d-none", ownerA, 5, t0))
}

func fenceRejectedInvalid(t *testing.T, f *ledgerFixture) {
	r := f.fenceRejecter()
	f.staleFence()
	before := f.get("d-2")
	for _, call := range []func() (ledger.DeliveryResult, error){
		func() (ledger.DeliveryResult, error) { return r.EndFenceRejected(f.ctx, "", ownerA, 5, t0) },
		func() (ledger.DeliveryResult, error) { return r.EndFenceRejected(f.ctx, "d-2", ledger.Owner{}, 5, t0) },
		func() (ledger.DeliveryResult, error) { return r.EndFenceRejected(f.ctx, "d-2", ownerA, -1, t0) },
		func() (ledger.DeliveryResult, error) { return r.EndFenceRejected(f.ctx, "d-2", ownerA, 5, time.Time{}) },
	} {
		_, err := call()
		requireInvalid(t, err)
	}
	require.Equal(t, before, f.get("d-2"))
}
