package storekit

import (
	"time"

	"github.com/leaseledger/ledger"
)

// Purgeable reports whether PurgeDeliveries may delete d: it ended before
// olderThan.
func (d Delivery) Purgeable(olderThan time.Time) bool {
	return d.State.Terminal() && d.EndedAt.Before(ledger.Normalize(olderThan))
}

// Purgeable reports whether PurgeEntries may delete e: it ended before
// olderThan.
func (e OutboxEntry) Purgeable(olderThan time.Time) bool {
	return e.Status.Terminal() && e.EndedAt.Before(ledger.Normalize(olderThan))
}
