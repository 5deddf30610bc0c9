package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// Compile-time checks that both stores offer retention.
var (
	_ ledger.Purger       = (*Store)(nil)
	_ ledger.OutboxPurger = (*Outbox)(nil)
)

// purgeTemplate deletes up to $2 rows of table %[1]s that ended before $1,
// oldest ended_at first, then id, in one statement, together with any
// history rows in %[2]s (written before migrations/0012), and returns the columns %[3]s of the deleted
// rows, from which the caller takes them off the terminal counts. ended_at
// IS NOT NULL is ledger's Terminal (a CHECK constraint ties the two), so
// the predicate mirrors storekit.Delivery.Purgeable and storekit.OutboxEntry.Purgeable, and
// it matches the partial indexes of migrations/0004_purge_index.sql. SKIP
// LOCKED leaves a row another call holds to the next purge rather than
// waiting for it: a purge is retention, never urgent, and must not stall
// behind live work.
//
// The picked ids go through ARRAY(...), not id IN (SELECT ...): with IN,
// the generic plan PostgreSQL switches a cached statement to cannot see
// the limit and joins the picks to a sequential scan of the whole table
// (explain_test.go caught it); an array is computed once and looked up
// through the primary key whatever the plan. The history rows are found
// the same way, through the prefix of their primary key.
const purgeTemplate = `WITH gone AS (
	DELETE FROM %[1]s WHERE id = ANY(ARRAY(
		SELECT id FROM %[1]s
		WHERE ended_at IS NOT NULL AND ended_at < $1
		ORDER BY ended_at, id
		LIMIT $2
		FOR UPDATE SKIP LOCKED))
	RETURNING %[3]s
), history AS (
	DELETE FROM %[2]s WHERE id = ANY(ARRAY(SELECT id FROM gone))
)
SELECT %[3]s FROM gone`

// purgeSQL returns the purge statement for table in schema, which deletes
// the rows of history too and returns the columns cols. It is built here
// rather than in newQueries (query.go) so that retention stays in one
// file; the text is the same on every call, so pgx's statement cache
// still prepares it once per connection.
func purgeSQL(schema, table, history, cols string) string {
	return fmt.Sprintf(purgeTemplate, pgx.Identifier{schema, table}.Sanitize(), pgx.Identifier{schema, history}.Sanitize(), cols)
}

// purgeDeliveriesSQL and purgeEntriesSQL are the two purge statements.
func purgeDeliveriesSQL(schema string) string {
	return purgeSQL(schema, "deliveries", "delivery_history", "id, target, ceremony, state, cause_kind")
}

func purgeEntriesSQL(schema string) string {
	return purgeSQL(schema, "outbox_entries", "outbox_entry_history", "id, status")
}

// PurgeDeliveries deletes up to limit terminal deliveries that ended before
// olderThan (storekit.Delivery.Purgeable), oldest EndedAt first, then by ID,
// in one transaction, and returns how many it deleted. Their history goes
// with them, and they are taken off the counts behind Stats. Open
// deliveries are never deleted, whatever their age, and the per-target
// fences stay. A row another transaction holds locked is
// skipped, so a call may delete fewer than limit while purgeable rows
// remain; the next call takes them. A purged ID is free again: a later
// Enqueue of it creates a new record. Errors: ErrInvalid (a zero
// olderThan, or limit outside 1..ledger.MaxLimit), ctx.Err(), and
// database errors wrapped with the operation name.
func (s *Store) PurgeDeliveries(ctx context.Context, olderThan time.Time, limit int) (int, error) {
	if err := s.check(ctx, storekit.ValidatePurge(olderThan, limit)); err != nil {
		return 0, err
	}
	return s.purge(ctx, "purge deliveries", purgeDeliveriesSQL(s.cfg.schema), olderThan, limit,
		func(rows pgx.Rows, b *pgx.Batch) (int, error) {
			counts := deliveryCounts{}
			n := 0
			for rows.Next() {
				var id, target, state string
				var ceremony, cause *string
				if err := rows.Scan(&id, &target, &ceremony, &state, &cause); err != nil {
					return 0, err
				}
				d := ledger.Delivery{ID: ledger.DeliveryID(id), Target: ledger.Target(target),
					Ceremony: ledger.CeremonyID(deref(ceremony)), State: ledger.DeliveryState(state)}
				if cause != nil {
					d.Cause = &ledger.Cause{Kind: ledger.CauseKind(*cause)}
				}
				counts.add(&d, -1)
				n++
			}
			if err := rows.Err(); err != nil {
				return 0, err
			}
			counts.queue(b, s.q, true)
			return n, nil
		})
}

// PurgeEntries deletes up to limit terminal outbox entries that ended
// before olderThan (storekit.OutboxEntry.Purgeable), oldest EndedAt first,
// then by ID, as Store.PurgeDeliveries does, and returns how many it
// deleted. Open entries, claimed or not, are never deleted. A purged
// idempotency key is free again: a later Enqueue of it creates a new
// entry, with a new place in the enqueue order. Errors as
// Store.PurgeDeliveries.
func (o *Outbox) PurgeEntries(ctx context.Context, olderThan time.Time, limit int) (int, error) {
	if err := o.s.check(ctx, storekit.ValidatePurge(olderThan, limit)); err != nil {
		return 0, err
	}
	s := o.s
	return s.purge(ctx, "purge entries", purgeEntriesSQL(s.cfg.schema), olderThan, limit,
		func(rows pgx.Rows, b *pgx.Batch) (int, error) {
			counts := outboxCounts{}
			n := 0
			for rows.Next() {
				var id, status string
				if err := rows.Scan(&id, &status); err != nil {
					return 0, err
				}
				counts.add(&ledger.OutboxEntry{ID: ledger.OutboxEntryID(id), Status: ledger.OutboxStatus(status)}, -1)
				n++
			}
			if err := rows.Err(); err != nil {
				return 0, err
			}
			counts.queue(b, s.q, true)
			return n, nil
		})
}

// purge runs one purge statement in a transaction of its own (a savepoint
// under WithTx), retried like every call: uncount reads the deleted rows,
// counts them and queues the change of the terminal counts (which removes
// the count rows that reach zero), sent in a second round trip.
func (s *Store) purge(ctx context.Context, op, query string, olderThan time.Time, limit int,
	uncount func(rows pgx.Rows, b *pgx.Batch) (int, error)) (int, error) {
	olderThan = ledger.Normalize(olderThan)
	var n int
	err := s.inTx(ctx, op, func(tx pgx.Tx) (bool, error) {
		n = 0 // a retried attempt starts again
		if err := s.indexesFirst(ctx, tx); err != nil {
			return false, err
		}
		rows, err := tx.Query(ctx, query, olderThan, limit)
		if err != nil {
			return false, err
		}
		defer rows.Close()
		b := &pgx.Batch{}
		deleted, err := uncount(rows, b)
		if err != nil {
			return false, err
		}
		rows.Close()
		if _, err := execBatch(ctx, tx, b); err != nil {
			return false, err
		}
		n = deleted
		return n > 0, nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}
