package ledgertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// testMarkProcessed checks Ledger.MarkProcessed: only from Acknowledged,
// only by the acknowledging owner, fenced per target, and the precedence
// Repeated, Ended, WrongState, WrongOwner, FenceRejected.
func testMarkProcessed(t *testing.T, newLedger NewLedgerFunc) {
	runLedgerRules(t, newLedger, []ledgerRule{
		{"ClosesAnAcknowledgedDelivery", processedClosesAcknowledged},
		{"UnknownIDIsNotFound", processedUnknownIDIsNotFound},
		{"OnlyFromAcknowledged", processedOnlyFromAcknowledged},
		{"OnlyTheAcknowledgingOwner", processedOnlyTheAcknowledgingOwner},
		{"SameCallAgainIsRepeated", processedSameCallAgainIsRepeated},
		{"OtherTerminalIsEnded", processedOtherTerminalIsEnded},
		{"LateProcessingBeforeTheSweepIsAccepted", processedLateBeforeTheSweep},
		{"Fence/LowerIsRejected", processedFenceLowerIsRejected},
		{"Fence/EqualIsAccepted", processedFenceEqualIsAccepted},
		{"Fence/HigherRaisesTheMark", processedFenceHigherRaisesTheMark},
		{"Fence/NilAlwaysPasses", processedFenceNilAlwaysPasses},
		{"Fence/IsPerTarget", processedFenceIsPerTarget},
		{"Fence/CallsThatDoNotApplyLeaveTheMark", processedFenceNotAppliedLeavesTheMark},
		{"Precedence", processedPrecedence},
	})
}

// process calls MarkProcessed for owner with fence and requires OutcomeApplied.
func (f *ledgerFixture) process(id ledger.DeliveryID, owner ledger.Owner, fence *ledger.Fence, now time.Time) ledger.Delivery {
	f.t.Helper()
	return f.applied(f.get(id), now)(f.l.MarkProcessed(f.ctx, id, owner, fence, "action-"+ledger.ActionRef(id), now))
}

// processedExpect calls MarkProcessed and requires the given outcome,
// which must not apply.
func (f *ledgerFixture) processedExpect(want ledger.Outcome, id ledger.DeliveryID, owner ledger.Owner, fence *ledger.Fence, now time.Time) {
	f.t.Helper()
	before := ledger.Delivery{ID: id}
	if want != ledger.OutcomeNotFound {
		before = f.get(id)
	}
	f.notApplied(before, want)(f.l.MarkProcessed(f.ctx, id, owner, fence, "action-"+ledger.ActionRef(id), now))
}

func processedClosesAcknowledged(t *testing.T, f *ledgerFixture) {
	f.acknowledged("d-1", "host-1", ownerA, t0)
	acked := f.get("d-1")
	now := at(time.Second)
	d := f.applied(acked, now)(f.l.MarkProcessed(f.ctx, "d-1", ownerA, ledger.FenceOf(3), "sent-email", now))
	require.Equal(t, ledger.DeliveryStateProcessed, d.State)
	require.Equal(t, &ledger.Processing{Action: "sent-email", Fence: ledger.FenceOf(3), At: now}, d.Processing)
	require.Equal(t, now, d.EndedAt)
	require.Equal(t, acked.Ack, d.Ack, "the acknowledgement stays readable")
	require.Equal(t, 1, d.Attempts)

	f.acknowledged("d-2", "host-1", ownerA, t0)
	d2 := f.process("d-2", ownerA, nil, now)
	require.Nil(t, d2.Processing.Fence)
}

func processedUnknownIDIsNotFound(t *testing.T, f *ledgerFixture) {
	f.processedExpect(ledger.OutcomeNotFound, "d-unknown", ownerA, nil, t0)
	f.processedExpect(ledger.OutcomeNotFound, "d-unknown", ownerA, ledger.FenceOf(1), t0)
}

func processedOnlyFromAcknowledged(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	f.processedExpect(ledger.OutcomeWrongState, "d-1", ownerA, nil, t0)
	f.leaseOne("d-1", ownerA, t0)
	f.processedExpect(ledger.OutcomeWrongState, "d-1", ownerA, nil, t0)
}

func processedOnlyTheAcknowledgingOwner(t *testing.T, f *ledgerFixture) {
	f.acknowledged("d-1", "host-1", ownerA, t0)
	f.processedExpect(ledger.OutcomeWrongOwner, "d-1", ownerB, nil, t0)
	f.processedExpect(ledger.OutcomeWrongOwner, "d-1", ownerA2, nil, t0)
	f.process("d-1", ownerA, nil, t0)
}

func processedSameCallAgainIsRepeated(t *testing.T, f *ledgerFixture) {
	f.acknowledged("d-1", "host-1", ownerA, t0)
	f.process("d-1", ownerA, ledger.FenceOf(5), t0)
	done := f.get("d-1")
	f.notApplied(done, ledger.OutcomeRepeated)(f.l.MarkProcessed(f.ctx, "d-1", ownerA, ledger.FenceOf(5), "action-d-1", at(time.Second)))
	f.notApplied(done, ledger.OutcomeRepeated)(f.l.MarkProcessed(f.ctx, "d-1", ownerA, nil, "action-d-1", at(time.Second)))
	// A different action, or another owner, is not the same call.
	f.notApplied(done, ledger.OutcomeEnded)(f.l.MarkProcessed(f.ctx, "d-1", ownerA, nil, "other-action", at(time.Second)))
	f.notApplied(done, ledger.OutcomeEnded)(f.l.MarkProcessed(f.ctx, "d-1", ownerB, nil, "action-d-1", at(time.Second)))
	f.notApplied(done, ledger.OutcomeEnded)(f.l.MarkProcessed(f.ctx, "d-1", ownerA2, nil, "action-d-1", at(time.Second)))
}

func processedOtherTerminalIsEnded(t *testing.T, f *ledgerFixture) {
	f.acknowledged("d-abandoned", "host-1", ownerA, t0)
	f.applied(f.get("d-abandoned"), t0)(f.l.Abandon(f.ctx, "d-abandoned", ledger.Cause{Kind: ledger.CauseBindingRevoked}, t0))
	f.processedExpect(ledger.OutcomeEnded, "d-abandoned", ownerA, nil, at(time.Second))

	f.acknowledged("d-lapsed", "host-1", ownerA, t0)
	deadline := f.get("d-lapsed").Ack.Deadline
	sweep, err := f.l.Expire(f.ctx, deadline)
	require.NoError(t, err)
	require.Equal(t, []ledger.DeliveryID{"d-lapsed"}, sweep.Changed)
	f.processedExpect(ledger.OutcomeEnded, "d-lapsed", ownerA, nil, deadline)

	f.enqueue(req("d-failed", "host-1"), t0)
	l := f.leaseOne("d-failed", ownerA, t0)
	f.applied(f.get("d-failed"), t0)(f.l.MarkFailed(f.ctx, l, ledger.FailureReason{Permanent: true}, t0))
	f.processedExpect(ledger.OutcomeEnded, "d-failed", ownerA, nil, at(time.Second))
}

func processedLateBeforeTheSweep(t *testing.T, f *ledgerFixture) {
	f.acknowledged("d-1", "host-1", ownerA, t0)
	late := f.get("d-1").Ack.Deadline.Add(time.Hour)
	f.process("d-1", ownerA, nil, late)
}

func processedFenceLowerIsRejected(t *testing.T, f *ledgerFixture) {
	f.acknowledged("d-1", "host-1", ownerA, t0)
	f.acknowledged("d-2", "host-1", ownerA, t0)
	f.process("d-1", ownerA, ledger.FenceOf(5), t0)
	f.processedExpect(ledger.OutcomeFenceRejected, "d-2", ownerA, ledger.FenceOf(4), t0)
	f.processedExpect(ledger.OutcomeFenceRejected, "d-2", ownerA, ledger.FenceOf(0), t0)
	f.requireState("d-2", ledger.DeliveryStateAcknowledged)
}

func processedFenceEqualIsAccepted(t *testing.T, f *ledgerFixture) {
	f.acknowledged("d-1", "host-1", ownerA, t0)
	f.acknowledged("d-2", "host-1", ownerA, t0)
	f.process("d-1", ownerA, ledger.FenceOf(5), t0)
	f.process("d-2", ownerA, ledger.FenceOf(5), t0)
}

func processedFenceHigherRaisesTheMark(t *testing.T, f *ledgerFixture) {
	for _, id := range []ledger.DeliveryID{"d-1", "d-2", "d-3", "d-4"} {
		f.acknowledged(id, "host-1", ownerA, t0)
	}
	f.process("d-1", ownerA, ledger.FenceOf(5), t0)
	f.process("d-2", ownerA, ledger.FenceOf(7), t0)
	f.processedExpect(ledger.OutcomeFenceRejected, "d-3", ownerA, ledger.FenceOf(6), t0)
	f.processedExpect(ledger.OutcomeFenceRejected, "d-3", ownerA, ledger.FenceOf(5), t0)
	f.process("d-3", ownerA, ledger.FenceOf(7), t0)
	f.process("d-4", ownerA, ledger.FenceOf(1<<62), t0)
}

func processedFenceNilAlwaysPasses(t *testing.T, f *ledgerFixture) {
	f.acknowledged("d-1", "host-1", ownerA, t0)
	f.acknowledged("d-2", "host-1", ownerA, t0)
	f.acknowledged("d-3", "host-1", ownerA, t0)
	f.process("d-1", ownerA, ledger.FenceOf(9), t0)
	f.process("d-2", ownerA, nil, t0)
	// A nil fence neither passes as zero nor lowers the mark.
	f.processedExpect(ledger.OutcomeFenceRejected, "d-3", ownerA, ledger.FenceOf(8), t0)
	f.process("d-3", ownerA, ledger.FenceOf(9), t0)
}

func processedFenceIsPerTarget(t *testing.T, f *ledgerFixture) {
	f.acknowledged("d-1", "host-1", ownerA, t0)
	f.acknowledged("d-2", "host-2", ownerA, t0)
	f.acknowledged("d-3", "host-1", ownerA, t0)
	f.process("d-1", ownerA, ledger.FenceOf(100), t0)
	f.process("d-2", ownerA, ledger.FenceOf(1), t0)
	f.processedExpect(ledger.OutcomeFenceRejected, "d-3", ownerA, ledger.FenceOf(99), t0)
}

func processedFenceNotAppliedLeavesTheMark(t *testing.T, f *ledgerFixture) {
	// host-1's mark is 5. Calls that do not apply, each carrying fence 100,
	// must not raise it: afterwards a fence of 5 is still accepted.
	f.acknowledged("d-1", "host-1", ownerA, t0)
	f.acknowledged("d-wrong-owner", "host-1", ownerA, t0)
	f.acknowledged("d-ended", "host-1", ownerA, t0)
	f.acknowledged("d-last", "host-1", ownerA, t0)
	f.applied(f.get("d-ended"), t0)(f.l.Abandon(f.ctx, "d-ended", ledger.Cause{Kind: ledger.CauseQueueBounded}, t0))
	f.enqueue(req("d-offered", "host-1"), t0)
	f.process("d-1", ownerA, ledger.FenceOf(5), t0)

	hundred := ledger.FenceOf(100)
	f.notApplied(f.get("d-1"), ledger.OutcomeRepeated)(f.l.MarkProcessed(f.ctx, "d-1", ownerA, hundred, "action-d-1", t0))
	f.processedExpect(ledger.OutcomeEnded, "d-ended", ownerA, hundred, t0)
	f.processedExpect(ledger.OutcomeWrongState, "d-offered", ownerA, hundred, t0)
	f.processedExpect(ledger.OutcomeWrongOwner, "d-wrong-owner", ownerB, hundred, t0)
	f.processedExpect(ledger.OutcomeNotFound, "d-unknown", ownerA, hundred, t0)
	f.processedExpect(ledger.OutcomeFenceRejected, "d-last", ownerA, ledger.FenceOf(4), t0)

	f.process("d-last", ownerA, ledger.FenceOf(5), t0)
	f.process("d-wrong-owner", ownerA, ledger.FenceOf(5), t0)
}

func processedPrecedence(t *testing.T, f *ledgerFixture) {
	f.acknowledged("d-done", "host-1", ownerA, t0)
	f.acknowledged("d-high", "host-1", ownerA, t0)
	f.acknowledged("d-acked", "host-1", ownerA, t0)
	f.process("d-done", ownerA, ledger.FenceOf(5), t0)
	f.process("d-high", ownerA, ledger.FenceOf(10), t0)

	// Repeated beats FenceRejected: the same call again, now below the mark.
	f.notApplied(f.get("d-done"), ledger.OutcomeRepeated)(f.l.MarkProcessed(f.ctx, "d-done", ownerA, ledger.FenceOf(5), "action-d-done", t0))
	// Ended beats WrongOwner and FenceRejected.
	f.processedExpect(ledger.OutcomeEnded, "d-done", ownerB, ledger.FenceOf(1), t0)
	// WrongOwner beats FenceRejected.
	f.processedExpect(ledger.OutcomeWrongOwner, "d-acked", ownerB, ledger.FenceOf(1), t0)

	// WrongState beats WrongOwner and FenceRejected.
	f.enqueue(req("d-leased", "host-1"), t0)
	f.leaseOne("d-leased", ownerA, t0)
	f.processedExpect(ledger.OutcomeWrongState, "d-leased", ownerB, ledger.FenceOf(1), t0)
	f.processedExpect(ledger.OutcomeWrongState, "d-leased", ownerA, ledger.FenceOf(1), t0)
}
