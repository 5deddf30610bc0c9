package ledger

import (
	"context"
	"time"
)

// Purger is implemented by ledgers that can delete ended deliveries, for
// retention. Detect it with a type assertion. Purging is an explicit,
// separate operation: no transition ever deletes a record.
//
// PurgeDeliveries deletes up to limit terminal deliveries whose EndedAt is
// before olderThan, oldest EndedAt first, and returns how many it deleted.
// Open deliveries are never touched, whatever their age. Call it again
// until it returns fewer than limit; each call is one bounded unit of work.
type Purger interface {
	PurgeDeliveries(ctx context.Context, olderThan time.Time, limit int) (int, error)
}

// OutboxPurger is Purger for outbox entries: PurgeEntries deletes up to
// limit terminal entries whose EndedAt is before olderThan, oldest first,
// and never an open one.
type OutboxPurger interface {
	PurgeEntries(ctx context.Context, olderThan time.Time, limit int) (int, error)
}
