package ledger

import (
	"context"
	"time"
)

// This file is what happens to a delivery whose processing was refused
// for a stale fence. MarkProcessed that answers FenceRejected writes
// nothing (a call that does not apply never does), so the delivery stays
// Acknowledged and, left alone, ends only when its acknowledgement
// deadline lapses, with a cause that hides what happened. Its end is
// therefore a call of its own, made by the owner that was refused.

// FenceRejecter is implemented by ledgers that can end a delivery whose
// processing was refused for a stale fence. Detect it with a type
// assertion; the dispatch package's Worker calls it after every
// FenceRejected answer when its ledger has it.
//
// EndFenceRejected ends the Acknowledged delivery id as Expired with
// cause CauseFenceRejected (storekit.FenceRejectedCause), when owner acknowledged
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
