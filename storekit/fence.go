package storekit

import (
	"fmt"
	"time"

	"github.com/leaseledger/ledger"
)

// FenceRejectedCause is the cause EndFenceRejected records: the refused
// fence, the highest accepted for target and the target, so the
// history says what happened without a log line.
func FenceRejectedCause(target ledger.Target, fence, highest ledger.Fence) ledger.Cause {
	return ledger.Cause{Kind: ledger.CauseFenceRejected,
		Detail: fmt.Sprintf("fence %d is lower than %d, the highest accepted for target %s", fence, highest, target)}
}

// EndFenceRejected is the transition of ledger.FenceRejecter.EndFenceRejected
// on d, whose target's highest accepted fence is highest (nil: none).
func (d Delivery) EndFenceRejected(owner ledger.Owner, fence ledger.Fence, highest *ledger.Fence, now time.Time) (ledger.Delivery, ledger.Outcome) {
	now = ledger.Normalize(now)
	switch {
	case d.State.Terminal():
		return ledger.Delivery(d), ledger.OutcomeEnded
	case d.State != ledger.DeliveryStateAcknowledged:
		return ledger.Delivery(d), ledger.OutcomeWrongState
	case d.Ack == nil || d.Ack.Owner != owner:
		return ledger.Delivery(d), ledger.OutcomeWrongOwner
	case highest == nil || fence >= *highest:
		return ledger.Delivery(d), ledger.OutcomeConflict
	}
	return d.Abandon(FenceRejectedCause(d.Target, fence, *highest), now)
}
