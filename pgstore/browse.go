package pgstore

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// Compile-time checks that both stores offer the operators' reads.
var (
	_ ledger.EndedLister       = (*Store)(nil)
	_ ledger.OutboxLister      = (*Outbox)(nil)
	_ ledger.OutboxEndedLister = (*Outbox)(nil)
)

// This file is the reads behind operators' tools (see browse.go in the
// root package): listing outbox entries, listing deliveries in open states
// only, and reading what ended in a window of time. Every statement is
// bounded by its LIMIT and reaches its rows through an index that already
// exists, so it adds no upkeep to the transitions:
//
//   - A list without a state (or status) filter, or with a terminal one,
//     walks the primary key in ID order from the cursor and stops after
//     the page. A filter that few records match walks further for the
//     same page, up to the whole key when nothing matches.
//   - A list of open states only reads the partial indexes on open rows
//     (the ones Lease, Expire and the claims read) and sorts what they
//     hold: its cost grows with the work in hand, never with the ended
//     records beside it. Without this variant such a filter would walk
//     every ended record that sorts before the page.
//   - The ended reads walk deliveries_ended_idx / outbox_entries_ended_idx
//     (ended_at, id) backwards from the end of the window: an index of
//     ended rows that only retention and a record's end write.
//
// TestExplainConsoleReads checks the plans beside 1,000,000 ended rows.

// browseQueries holds the statements of this file for one schema.
type browseQueries struct {
	// listOpenDeliveries is queries.listDeliveries for a filter that names
	// open states only.
	listOpenDeliveries string
	// listEntries[openOnly] pages through outbox entries: $1 the cursor's
	// ID, $2 the providers, $3 the statuses (empty arrays match all), $4
	// the limit.
	listEntries [2]string
	// listEntriesByKey is listEntries[0] for the entry of one
	// idempotency key, $6, whose ID the key fixes, $5
	// (ledger.OutboxEntryIDFor: a redriven entry takes a new key), found
	// through the primary key.
	listEntriesByKey string
	// endedDeliveries and endedEntries read what ended in [$1, $2), latest
	// first, at most $3.
	endedDeliveries, endedEntries string
}

// openDeliveriesWhere says "an open state" in the words of the partial
// indexes on open deliveries, one arm per index, so that the planner can
// read them instead of the primary key: deliveries_offerable_idx holds
// the Offered and Leased rows, deliveries_ack_deadline_idx the
// Acknowledged ones.
const openDeliveriesWhere = `(state IN ('offered', 'leased') OR state = 'acknowledged')`

// openEntriesWhere is openDeliveriesWhere for the outbox (see migration
// 0008): outbox_entries_unclaimed_idx holds the unclaimed Pending rows,
// outbox_entries_unclaimed_due_idx the unclaimed scheduled ones, and
// outbox_entries_claimed_idx every claimed one, all open.
const openEntriesWhere = `((status = 'pending' AND claim_token IS NULL)
			OR (status IN ('retry_scheduled', 'deferred') AND claim_token IS NULL)
			OR claim_token IS NOT NULL)`

// listEntriesTemplate pages through outbox entries; %s is where the open
// variant adds openEntriesWhere.
const listEntriesTemplate = ` WHERE id > $1
			AND (cardinality($2::text[]) = 0 OR provider = ANY($2::text[]))
			AND (cardinality($3::text[]) = 0 OR status = ANY($3::text[]))%s
			ORDER BY id LIMIT $4`

func newBrowseQueries(schema string, dcols, ocols []string) browseQueries {
	s := pgx.Identifier{schema}.Sanitize()
	deliveries, outbox := s+".deliveries", s+".outbox_entries"
	selectEntries := "SELECT " + strings.Join(ocols, ", ") + " FROM " + outbox
	return browseQueries{
		listOpenDeliveries: "SELECT " + strings.Join(dcols, ", ") + " FROM " + deliveries + ` WHERE id > $1
			AND (cardinality($2::text[]) = 0 OR target = ANY($2::text[]))
			AND ($3::text IS NULL OR ceremony = $3::text)
			AND state = ANY($4::text[]) AND ` + openDeliveriesWhere + `
			ORDER BY id LIMIT $5`,
		listEntries: [2]string{
			selectEntries + strings.Replace(listEntriesTemplate, "%s", "", 1),
			selectEntries + strings.Replace(listEntriesTemplate, "%s", " AND "+openEntriesWhere, 1),
		},
		listEntriesByKey: selectEntries + strings.Replace(listEntriesTemplate, "%s", " AND id = $5 AND idempotency_key = $6", 1),
		endedDeliveries: "SELECT id, target, state, cause_kind, ended_at FROM " + deliveries +
			" WHERE ended_at >= $1 AND ended_at < $2 ORDER BY ended_at DESC, id DESC LIMIT $3",
		endedEntries: "SELECT id, provider, status, ended_at FROM " + outbox +
			" WHERE ended_at >= $1 AND ended_at < $2 ORDER BY ended_at DESC, id DESC LIMIT $3",
	}
}

// listDeliveriesSQL returns the List statement for states: the variant
// over the open partial indexes when every state asked for is open, else
// the walk of the primary key.
func (q *queries) listDeliveriesSQL(states []ledger.DeliveryState) string {
	if openOnly(states, ledger.DeliveryState.Terminal) {
		return q.browse.listOpenDeliveries
	}
	return q.listDeliveries
}

// openOnly reports whether xs names at least one state and no terminal one.
func openOnly[S any](xs []S, terminal func(S) bool) bool {
	for _, x := range xs {
		if terminal(x) {
			return false
		}
	}
	return len(xs) > 0
}

// ListEntries returns one page of outbox entries in ID order (byte order),
// keyset paginated like Store.List (see ledger.OutboxLister). Errors:
// ErrInvalid, ctx.Err(), and database errors wrapped with the operation
// name.
func (o *Outbox) ListEntries(ctx context.Context, q ledger.OutboxListQuery) (ledger.OutboxPage, error) {
	s := o.s
	after, verr := storekit.ValidateOutboxList(q)
	if err := s.check(ctx, verr); err != nil {
		return ledger.OutboxPage{}, err
	}
	providers := append([]string{}, q.Providers...)
	statuses := make([]string, len(q.Statuses))
	for i, st := range q.Statuses {
		statuses[i] = string(st)
	}
	sql := s.q.browse.listEntries[b2i(openOnly(q.Statuses, ledger.OutboxStatus.Terminal))]
	args := []any{string(after), providers, statuses, q.Limit + 1}
	if q.IdempotencyKey != "" {
		// The key names one entry at most, whose ID it fixes.
		sql = s.q.browse.listEntriesByKey
		args = append(args, string(ledger.OutboxEntryIDFor(q.IdempotencyKey)), q.IdempotencyKey)
	}
	var page ledger.OutboxPage
	err := s.readIndexed(ctx, "list entries", func(db dbtx) error {
		rows, err := db.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		es, err := collectEntries(rows)
		if err != nil {
			return err
		}
		page = ledger.OutboxPage{Entries: es}
		if len(es) > q.Limit {
			page.Entries = es[:q.Limit]
			page.Next = storekit.EncodeOutboxCursor(es[q.Limit-1].ID)
		}
		return nil
	})
	if err != nil {
		return ledger.OutboxPage{}, err
	}
	page.Entries, _ = entriesOut(page.Entries, nil)
	return page, nil
}

// ListEnded returns the deliveries that ended in [q.Since, q.Until),
// latest first (see ledger.EndedLister), in one statement that reads at
// most q.Limit entries of deliveries_ended_idx. Errors as ListEntries.
func (s *Store) ListEnded(ctx context.Context, q ledger.EndedQuery) ([]ledger.DeliveryEnd, error) {
	if err := s.check(ctx, storekit.ValidateEnded(q)); err != nil {
		return nil, err
	}
	var ends []ledger.DeliveryEnd
	err := s.read(ctx, "list ended", func(db dbtx) error {
		rows, err := db.Query(ctx, s.q.browse.endedDeliveries, ledger.Normalize(q.Since), ledger.Normalize(q.Until), q.Limit)
		if err != nil {
			return err
		}
		ends, err = pgx.AppendRows([]ledger.DeliveryEnd{}, rows, func(row pgx.CollectableRow) (ledger.DeliveryEnd, error) {
			var e ledger.DeliveryEnd
			var cause *string
			var at time.Time
			if err := row.Scan(&e.ID, &e.Target, &e.State, &cause, &at); err != nil {
				return e, err
			}
			e.EndedAt = ledger.Normalize(at)
			if e.State == ledger.DeliveryStateExpired && cause != nil {
				e.Cause = ledger.CauseKind(*cause)
			}
			return e, nil
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return ends, nil
}

// ListEndedEntries returns the outbox entries that ended in [q.Since,
// q.Until), latest first (see ledger.OutboxEndedLister), in one statement
// that reads at most q.Limit entries of outbox_entries_ended_idx. Errors
// as ListEntries.
func (o *Outbox) ListEndedEntries(ctx context.Context, q ledger.EndedQuery) ([]ledger.EntryEnd, error) {
	s := o.s
	if err := s.check(ctx, storekit.ValidateEnded(q)); err != nil {
		return nil, err
	}
	var ends []ledger.EntryEnd
	err := s.read(ctx, "list ended entries", func(db dbtx) error {
		rows, err := db.Query(ctx, s.q.browse.endedEntries, ledger.Normalize(q.Since), ledger.Normalize(q.Until), q.Limit)
		if err != nil {
			return err
		}
		ends, err = pgx.AppendRows([]ledger.EntryEnd{}, rows, func(row pgx.CollectableRow) (ledger.EntryEnd, error) {
			var e ledger.EntryEnd
			var at time.Time
			if err := row.Scan(&e.ID, &e.Provider, &e.Status, &at); err != nil {
				return e, err
			}
			e.EndedAt = ledger.Normalize(at)
			return e, nil
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return ends, nil
}
