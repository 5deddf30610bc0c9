package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// countEndedSQL counts the rows of table %s that ended before $1: what a
// purge with that cutoff and no limit would delete. It reads the index of
// ended records (migrations/0004) up to the cutoff, so its cost grows with
// what it counts, never with open work.
const countEndedSQL = "SELECT count(*) FROM %s WHERE ended_at IS NOT NULL AND ended_at < $1"

// CountPurgeable returns how many deliveries PurgeDeliveries with
// olderThan would delete, called until it deletes no more: the terminal
// deliveries that ended before olderThan (storekit.Delivery.Purgeable). It
// deletes nothing; it answers a dry run (ledgerctl purge -dry-run).
// Errors: ErrInvalid for a zero olderThan, ctx.Err(), and database errors
// wrapped with the operation.
func (s *Store) CountPurgeable(ctx context.Context, olderThan time.Time) (int64, error) {
	return s.countEnded(ctx, "count purgeable deliveries", "deliveries", olderThan)
}

// CountPurgeable returns how many outbox entries PurgeEntries with
// olderThan would delete, as Store.CountPurgeable does for deliveries.
func (o *Outbox) CountPurgeable(ctx context.Context, olderThan time.Time) (int64, error) {
	return o.s.countEnded(ctx, "count purgeable entries", "outbox_entries", olderThan)
}

func (s *Store) countEnded(ctx context.Context, op, table string, olderThan time.Time) (int64, error) {
	if err := s.check(ctx, storekit.ValidateTime("older than", olderThan)); err != nil {
		return 0, err
	}
	sql := countSQL(s.cfg.schema, table)
	var n int64
	err := s.readIndexed(ctx, op, func(db dbtx) error {
		return db.QueryRow(ctx, sql, ledger.Normalize(olderThan)).Scan(&n)
	})
	return n, err
}

// countSQL returns countEndedSQL for table in schema.
func countSQL(schema, table string) string {
	return fmt.Sprintf(countEndedSQL, pgx.Identifier{schema, table}.Sanitize())
}
