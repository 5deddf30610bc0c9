package ledger

import (
	"context"
	"fmt"
	"time"
)

// This file is what happens to a delivery whose processing was refused
// for a stale fence. MarkProcessed that answers FenceRejected writes
// nothing (a call that does not apply never does), so the delivery stays
// Acknowledged and, left alone, ends only when its acknowledgement
// deadline lapses, with a cause that hides what happened. Its end is
// therefore a call of its own, made by the owner that was refused.

// CauseFenceRejected ends a delivery whose owner's MarkProcessed was
// refused for a fence lower than the highest accepted for its target
// (see FenceRejecter). Its detail names both fences.
const CauseFenceRejected CauseKind = "fence_rejected"

// FenceRejecter is implemented by ledgers that can end a delivery whose
// processing was refused for a stale fence. Detect it with a type
// assertion; the dispatch package's Worker calls it after every
// FenceRejected answer when its ledger has it.
//
// EndFenceRejected ends the Acknowledged delivery id as Expired with
// cause CauseFenceRejected (FenceRejectedCause), when owner acknowledged
// it and fence is still lower than the highest fence accepted for its
// target, which it reads as MarkProcessed does. It is recorded in the
// history as an abandon by owner. Outcomes, first match wins: NotFound,
// Ended, WrongState (not acknowledged), WrongOwner, Conflict (fence is
// not lower than the highest accepted: MarkProcessed would take it, so
// there is nothing to end), then Applied. Like every call that does not
// apply, one that does not writes nothing. Errors: ErrInvalid,
// ctx.Err(), store errors.
type FenceRejecter interface {
	EndFenceRejected(ctx context.Context, id DeliveryID, owner Owner, fence Fence, now time.Time) (DeliveryResult, error)
}

// FenceRejectedCause is the cause EndFenceRejected records: the refused
// fence, the highest accepted for target and the target, so the
// history says what happened without a log line.
func FenceRejectedCause(target Target, fence, highest Fence) Cause {
	return Cause{Kind: CauseFenceRejected,
		Detail: fmt.Sprintf("fence %d is lower than %d, the highest accepted for target %s", fence, highest, target)}
}

// EndFenceRejected is the transition of FenceRejecter.EndFenceRejected
// on d, whose target's highest accepted fence is highest (nil: none).
func (d Delivery) EndFenceRejected(owner Owner, fence Fence, highest *Fence, now time.Time) (Delivery, Outcome) {
	now = Normalize(now)
	switch {
	case d.State.Terminal():
		return d, OutcomeEnded
	case d.State != DeliveryStateAcknowledged:
		return d, OutcomeWrongState
	case d.Ack == nil || d.Ack.Owner != owner:
		return d, OutcomeWrongOwner
	case highest == nil || fence >= *highest:
		return d, OutcomeConflict
	}
	return d.Abandon(FenceRejectedCause(d.Target, fence, *highest), now)
}

// ValidateEndFenceRejected checks the arguments of EndFenceRejected.
func ValidateEndFenceRejected(id DeliveryID, owner Owner, fence Fence, now time.Time) error {
	return ValidateMarkProcessed(id, owner, &fence, "fence_rejected", now)
}
