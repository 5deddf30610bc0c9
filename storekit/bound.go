package storekit

import (
	"fmt"
	"time"

	"github.com/leaseledger/ledger"
)

// Queued reports whether d counts against its target's bound: Offered or
// Leased.
func (d Delivery) Queued() bool {
	return d.State == ledger.DeliveryStateOffered || d.State == ledger.DeliveryStateLeased
}

// QueueOverflow returns how many of a target's Offered deliveries a call
// that added to its queue abandons, when queued deliveries (the new ones
// included) are Offered or Leased and bound applies: queued minus bound,
// at most ledger.MaxLimit (a queue that was over its bound before, after a
// ledger.Follow supersession or a lowered bound, comes back under it over
// several calls), and 0 when bound is 0.
func QueueOverflow(queued, bound int) int {
	if bound <= 0 || queued <= bound {
		return 0
	}
	return min(queued-bound, ledger.MaxLimit)
}

// QueueBoundedCause is the cause a bound ends a delivery with.
func QueueBoundedCause(bound int) ledger.Cause {
	return ledger.Cause{Kind: ledger.CauseQueueBounded, Detail: fmt.Sprintf("its target's queue was over its bound of %d", bound)}
}

// BoundQueue ends d, one of the oldest Offered deliveries of a target
// whose queue is over bound, as Expired with QueueBoundedCause(bound): it
// is Abandon with that cause, recorded as ledger.OpAbandon. It answers
// ledger.OutcomeWrongState, and changes nothing, unless d is Offered.
func (d Delivery) BoundQueue(bound int, now time.Time) (ledger.Delivery, ledger.Outcome) {
	if d.State != ledger.DeliveryStateOffered {
		return ledger.Delivery(d), ledger.OutcomeWrongState
	}
	return d.Abandon(QueueBoundedCause(bound), now)
}
