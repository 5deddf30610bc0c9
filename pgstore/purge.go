package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaseledger/ledger"
)

// Compile-time checks that both stores offer retention.
var (
	_ ledger.Purger       = (*Store)(nil)
	_ ledger.OutboxPurger = (*Outbox)(nil)
)

// purgeTemplate deletes up to $2 rows of table %[1]s that ended before $1,
// oldest ended_at first, then id, in one statement. ended_at IS NOT NULL
// is ledger's Terminal (a CHECK constraint ties the two), so the predicate
// mirrors Delivery.Purgeable and OutboxEntry.Purgeable, and it matches the
// partial indexes of migrations/0004_purge_index.sql. SKIP LOCKED leaves
// a row another call holds to the next purge rather than waiting for it:
// a purge is retention, never urgent, and must not stall behind live work.
//
// The picked ids go through ARRAY(...), not id IN (SELECT ...): with IN,
// the generic plan PostgreSQL switches a cached statement to cannot see
// the limit and joins the picks to a sequential scan of the whole table
// (explain_test.go caught it); an array is computed once and looked up
// through the primary key whatever the plan.
const purgeTemplate = `DELETE FROM %[1]s WHERE id = ANY(ARRAY(
	SELECT id FROM %[1]s
	WHERE ended_at IS NOT NULL AND ended_at < $1
	ORDER BY ended_at, id
	LIMIT $2
	FOR UPDATE SKIP LOCKED))`

// purgeSQL returns the purge statement for table in schema. It is built
// here rather than in newQueries (query.go) so that retention stays in one
// file; the text is the same on every call, so pgx's statement cache
// still prepares it once per connection.
func purgeSQL(schema, table string) string {
	return fmt.Sprintf(purgeTemplate, pgx.Identifier{schema, table}.Sanitize())
}

// PurgeDeliveries deletes up to limit terminal deliveries that ended before
// olderThan (ledger.Delivery.Purgeable), oldest EndedAt first, then by ID,
// in one statement and one transaction, and returns how many it deleted.
// Open deliveries are never deleted, whatever their age, and the
// per-target fences stay. A row another transaction holds locked is
// skipped, so a call may delete fewer than limit while purgeable rows
// remain; the next call takes them. A purged ID is free again: a later
// Enqueue of it creates a new record. Errors: ErrInvalid (a zero
// olderThan, or limit outside 1..ledger.MaxLimit), ctx.Err(), and
// database errors wrapped with the operation name.
func (s *Store) PurgeDeliveries(ctx context.Context, olderThan time.Time, limit int) (int, error) {
	if err := s.check(ctx, ledger.ValidatePurge(olderThan, limit)); err != nil {
		return 0, err
	}
	return s.purge(ctx, "purge deliveries", purgeSQL(s.cfg.schema, "deliveries"), olderThan, limit)
}

// PurgeEntries deletes up to limit terminal outbox entries that ended
// before olderThan (ledger.OutboxEntry.Purgeable), oldest EndedAt first,
// then by ID, as Store.PurgeDeliveries does, and returns how many it
// deleted. Open entries, claimed or not, are never deleted. A purged
// idempotency key is free again: a later Enqueue of it creates a new
// entry, with a new place in the enqueue order. Errors as
// Store.PurgeDeliveries.
func (o *Outbox) PurgeEntries(ctx context.Context, olderThan time.Time, limit int) (int, error) {
	if err := o.s.check(ctx, ledger.ValidatePurge(olderThan, limit)); err != nil {
		return 0, err
	}
	return o.s.purge(ctx, "purge entries", purgeSQL(o.s.cfg.schema, "outbox_entries"), olderThan, limit)
}

// purge runs one purge statement in a transaction of its own (a savepoint
// under WithTx), retried like every call.
func (s *Store) purge(ctx context.Context, op, query string, olderThan time.Time, limit int) (int, error) {
	olderThan = ledger.Normalize(olderThan)
	var n int
	err := s.inTx(ctx, op, func(tx pgx.Tx) (bool, error) {
		n = 0 // a retried attempt starts again
		tag, err := tx.Exec(ctx, query, olderThan, limit)
		if err != nil {
			return false, err
		}
		n = int(tag.RowsAffected())
		return n > 0, nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}
