package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// Compile-time checks that both stores record history.
var (
	_ ledger.Historian       = (*Store)(nil)
	_ ledger.OutboxHistorian = (*Outbox)(nil)
)

// This file records and reads the history of records (see
// migrations/0005_history_and_counts.sql). Every entry is built in Go by
// the root package (storekit.DeliveryTransition, storekit.EntryTransition)
// from the record before and after the change, so that both stores write
// the same histories, and inserted in the transaction of the change:
// queued in the pgx.Batch that writes the records back (one multi-row
// INSERT per batch, so no round trip of its own), folded into the INSERT
// of an enqueue, or, for the grants, which are one UPDATE in SQL, sent
// right after it.

// WithoutHistory switches history recording off for the Store and its
// Outbox: transitions then write no history row, and History and
// EntryHistory answer an empty (non-nil) slice for a record written
// meanwhile. The counts behind Stats are kept either way. A store that
// never reads its history saves the rows and the time to write them
// (about one row per transition; see the package documentation).
func WithoutHistory() Option {
	return func(c *config) { c.noHistory = true }
}

// how says which call made a change and for whom, for its history entry.
type how struct {
	op ledger.Operation
	// actor is Transition.Actor: an Owner.String, a claim worker, or
	// empty for a call made for nobody in particular.
	actor string
	// reason, when not nil, replaces the reason the root package finds:
	// ReleaseClaim records its caller's, which the entry does not keep.
	reason *string
	// holder, when set, takes the actor from the record instead: the
	// owner of its lease in force (AcknowledgeProcessed acts for the
	// owner the record holds, whatever its caller's lease says).
	holder bool
}

// change is one applied transition of a record (a delivery or an outbox
// entry): the record before and after it, and its history entry.
type change[R any] struct {
	before, after R
	t             ledger.Transition
}

// deliveryChange is one applied transition of a delivery.
type deliveryChange = change[ledger.Delivery]

// changeOf describes the change of a delivery from before to after made
// by h. Seq is the version after the change: every applied transition
// bumps Version by exactly one and a record starts at 1, so the entries
// of a record are numbered 1, 2, 3, ... as ledger.Transition asks.
func changeOf(h how, before, after ledger.Delivery) deliveryChange {
	actor := h.actor
	if h.holder && before.Lease != nil {
		actor = before.Lease.Owner.String()
	}
	t := storekit.DeliveryTransition(h.op, &before, &after, actor)
	t.Seq = after.Version
	if h.reason != nil {
		t.Reason = *h.reason
	}
	return deliveryChange{before: before, after: after, t: t}
}

// entryChange is one applied transition of an outbox entry.
type entryChange = change[ledger.OutboxEntry]

// entryChangeOf is changeOf for outbox entries.
func entryChangeOf(h how, before, after ledger.OutboxEntry) entryChange {
	t := storekit.EntryTransition(h.op, &before, &after, h.actor)
	t.Seq = after.Version
	if h.reason != nil {
		t.Reason = *h.reason
	}
	return entryChange{before: before, after: after, t: t}
}

// impliedCreation is the history entry of the creation of a record
// created in state first at created: storekit.DeliveryTransition (or
// EntryTransition) of OpEnqueue for the new record, numbered 1, which
// Enqueue does not store when history is on (migrations/0008). Every
// enqueue creates its record at version 1 in its first state, so the
// record holds all the entry says; a test ties the two together.
func impliedCreation(first string, created time.Time) ledger.Transition {
	return ledger.Transition{Seq: 1, Op: ledger.OpEnqueue, To: first, Outcome: ledger.OutcomeApplied, At: ledger.Normalize(created)}
}

// historyRows collects history entries column by column, for one INSERT
// ... SELECT FROM unnest(...) of them all (see insertHistorySQL).
type historyRows struct {
	ids, ops, froms, tos, outcomes, actors, reasons []string
	seqs                                            []int64
	ats                                             []time.Time
}

func (h *historyRows) add(id string, t ledger.Transition) {
	h.ids = append(h.ids, id)
	h.seqs = append(h.seqs, t.Seq)
	h.ops = append(h.ops, string(t.Op))
	h.froms = append(h.froms, t.From)
	h.tos = append(h.tos, t.To)
	h.outcomes = append(h.outcomes, string(t.Outcome))
	h.actors = append(h.actors, t.Actor)
	h.reasons = append(h.reasons, t.Reason)
	h.ats = append(h.ats, t.At)
}

// arrays returns the collected rows as binary arrays, in the order of
// historyColumns.
func (h *historyRows) arrays() []binArray {
	return []binArray{textArray(h.ids), int8Array(h.seqs), textArray(h.ops), textArray(h.froms), textArray(h.tos),
		textArray(h.outcomes), textArray(h.actors), textArray(h.reasons), timeArray(h.ats)}
}

// queue adds the INSERT of the collected rows to b, if there are any.
func (h *historyRows) queue(b *pgx.Batch, sql string) {
	if len(h.ids) == 0 {
		return
	}
	b.Queue(sql, h.ids, h.seqs, h.ops, h.froms, h.tos, h.outcomes, h.actors, h.reasons, h.ats)
}

// History returns the transitions of delivery id, oldest first (see
// ledger.Historian), in one statement that reads the record's key and its
// history rows together. With WithoutHistory, or for a record written
// only while history was off, the answer is an empty, non-nil slice.
// Errors: ErrInvalid for a malformed ID, ErrNotFound for an unknown (or
// purged) one, ctx.Err(), and database errors wrapped with the operation.
func (s *Store) History(ctx context.Context, id ledger.DeliveryID) ([]ledger.Transition, error) {
	if err := s.check(ctx, storekit.ValidateGet(string(id))); err != nil {
		return nil, err
	}
	return s.history(ctx, "history", s.q.deliveryHistory, string(id), string(ledger.DeliveryStateOffered))
}

// EntryHistory returns the transitions of outbox entry id, oldest first,
// as Store.History does for deliveries.
func (o *Outbox) EntryHistory(ctx context.Context, id ledger.OutboxEntryID) ([]ledger.Transition, error) {
	if err := o.s.check(ctx, storekit.ValidateGet(string(id))); err != nil {
		return nil, err
	}
	return o.s.history(ctx, "entry history", o.s.q.entryHistory, string(id), string(ledger.OutboxStatusPending))
}

// history runs a history query: no row means no such record; one row
// whose seq is NULL, a record without history rows. When the record's
// creation is implied (see impliedCreation), its entry comes first,
// made from the record: a record is created in state first.
func (s *Store) history(ctx context.Context, op, query, id, first string) ([]ledger.Transition, error) {
	var out []ledger.Transition
	err := s.read(ctx, op, func(db dbtx) error {
		rows, err := db.Query(ctx, query, id)
		if err != nil {
			return err
		}
		defer rows.Close()
		found := false
		out = []ledger.Transition{}
		for rows.Next() {
			found = true
			var (
				seq                                      *int64
				operation, from, to, outcome, actor, why *string
				at                                       *time.Time
				implied                                  bool
				created                                  time.Time
			)
			if err := rows.Scan(&seq, &operation, &from, &to, &outcome, &actor, &why, &at, &implied, &created); err != nil {
				return err
			}
			if implied && len(out) == 0 {
				out = append(out, impliedCreation(first, created))
			}
			if seq == nil {
				continue // the record, without history rows
			}
			out = append(out, ledger.Transition{
				Seq:     *seq,
				Op:      ledger.Operation(deref(operation)),
				From:    deref(from),
				To:      deref(to),
				Outcome: ledger.Outcome(deref(outcome)),
				Actor:   deref(actor),
				Reason:  deref(why),
				At:      fromOptTime(at),
			})
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if !found {
			return ledger.ErrNotFound
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
