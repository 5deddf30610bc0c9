package pgstore

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// Compile-time checks that both stores record history.
var (
	_ ledger.Historian       = (*Store)(nil)
	_ ledger.OutboxHistorian = (*Outbox)(nil)
)

// This file records and reads the history of records (see
// migrations/0012_history_in_the_record.sql). Every entry is built in Go
// by the store kit (storekit.DeliveryTransition, storekit.EntryTransition)
// from the record before and after the change, so that both stores write
// the same histories, and appended to the record's history column by the
// UPDATE that writes the change (historyAppend): no row, index entry or
// statement of its own. The grants, which are one UPDATE in SQL, build
// the same entry there. The entry of a record's creation is implied by
// the record (migrations/0008). Entries written before migration 0012 are
// rows of the history tables, which History reads beside the column.

// WithoutHistory switches history recording off for the Store and its
// Outbox: transitions then append no history entry, and History and
// EntryHistory answer an empty (non-nil) slice for a record written
// meanwhile. The counts behind Stats are kept either way. A store that
// never reads its history saves the entries' bytes in every record and
// in the WAL (about a hundred bytes per transition; see the package
// documentation).
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
	return deliveryChange{before: before, after: after, t: transitionOf(h, before, after)}
}

// transitionOf is the history entry of changeOf's change, alone.
func transitionOf(h how, before, after ledger.Delivery) ledger.Transition {
	actor := h.actor
	if h.holder && before.Lease != nil {
		actor = before.Lease.Owner.String()
	}
	t := storekit.DeliveryTransition(h.op, &before, &after, actor)
	t.Seq = after.Version
	if h.reason != nil {
		t.Reason = *h.reason
	}
	return t
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

// historyLog collects the history entries that one write appends to its
// records (see migrations/0012), by record: each record's entries as the
// text of a JSON array, in the order they were added. A log made for a
// store with history off collects nothing.
type historyLog struct {
	off  bool
	byID map[string][]byte
}

// newHistoryLog returns an empty log, which collects nothing when off.
func newHistoryLog(off bool) *historyLog {
	return &historyLog{off: off}
}

// add appends t to the entries of record id.
func (l *historyLog) add(id string, t ledger.Transition) {
	if l.off {
		return
	}
	if l.byID == nil {
		l.byID = map[string][]byte{}
	}
	l.byID[id] = appendEntry(l.byID[id], t)
}

// of returns the entries of record id, nil when there are none: the
// parameter that appends them to the record's history (historyAppend).
func (l *historyLog) of(id string) *string {
	b, ok := l.byID[id]
	if !ok {
		return nil
	}
	s := string(b)
	return &s
}

// entryParam is the parameter that appends the single entry t to its
// record's history, or nil when history is off.
func entryParam(off bool, t ledger.Transition) *string {
	if off {
		return nil
	}
	s := string(appendEntry(nil, t))
	return &s
}

// historyAppend is the SET clause that appends the entries of the
// parameter p (text, a JSON array, or NULL for none) to the history of
// the row aliased as alias ("" for an unaliased table).
func historyAppend(alias, p string) string {
	col := "history"
	if alias != "" {
		col = alias + ".history"
	}
	return fmt.Sprintf("history = CASE WHEN %[2]s IS NULL THEN %[1]s ELSE coalesce(%[1]s, '[]'::jsonb) || %[2]s::jsonb END", col, p)
}

// entrySize is room for a typical entry, so that one is written without
// growing its buffer.
const entrySize = 160

// entryTime is the layout of an entry's time: microseconds, as
// PostgreSQL keeps them, and an offset, as PostgreSQL writes one.
const entryTime = "2006-01-02T15:04:05.999999Z07:00"

// appendEntry appends t to buf, a JSON array of entries or empty, as the
// array [seq, op, from, to, outcome, actor, reason, at] whose empty from,
// actor and reason are null.
func appendEntry(buf []byte, t ledger.Transition) []byte {
	if len(buf) == 0 {
		buf = append(make([]byte, 0, entrySize), '[')
	} else {
		buf[len(buf)-1] = ','
	}
	buf = append(buf, '[')
	buf = strconv.AppendInt(buf, t.Seq, 10)
	for i, s := range [...]string{string(t.Op), t.From, t.To, string(t.Outcome), t.Actor, t.Reason} {
		buf = append(buf, ',')
		if s == "" && (i == 1 || i == 4 || i == 5) {
			buf = append(buf, "null"...)
			continue
		}
		buf = appendJSONString(buf, s)
	}
	buf = append(buf, ',')
	buf = append(buf, jsonTime(t.At)...)
	return append(buf, ']', ']')
}

// leaseEntryArgs are the parts of a lease's history entry that do not
// come from the row, as JSON text, for leaseTemplate's $10 to $13: the
// operation; the new state, the outcome and the actor; the time; the
// reason of a grant over an expired lease.
func leaseEntryArgs(actor string, now time.Time, reason string) [4]string {
	return [4]string{
		jsonText(string(ledger.OpLease)),
		jsonText(string(ledger.DeliveryStateLeased)) + "," + jsonText(string(ledger.OutcomeApplied)) + "," + jsonOptText(actor),
		jsonTime(now),
		jsonOptText(reason),
	}
}

// claimEntryArgs are the parts of a claim's history entry that do not
// come from the row, as JSON text, for claimTemplate's $6 and $7: the
// operation; the outcome, the actor, the reason (none) and the time.
func claimEntryArgs(worker string, now time.Time) [2]string {
	return [2]string{
		jsonText(string(ledger.OpClaim)),
		jsonText(string(ledger.OutcomeApplied)) + "," + jsonOptText(worker) + ",null," + jsonTime(now),
	}
}

// jsonText is s as a JSON string.
func jsonText(s string) string { return string(appendJSONString(nil, s)) }

// jsonOptText is jsonText, or null for "", as an entry holds an empty
// actor or reason.
func jsonOptText(s string) string {
	if s == "" {
		return "null"
	}
	return jsonText(s)
}

// jsonTime is t as an entry holds it.
func jsonTime(t time.Time) string {
	return `"` + ledger.Normalize(t).Format(entryTime) + `"`
}

// appendJSONString appends s as a JSON string. Bytes outside ASCII go as
// they are: PostgreSQL checks the encoding, as it does for text.
func appendJSONString(buf []byte, s string) []byte {
	const hex = "0123456789abcdef"
	buf = append(buf, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			buf = append(buf, '\\', c)
		case c < 0x20:
			buf = append(buf, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			buf = append(buf, c)
		}
	}
	return append(buf, '"')
}

// parseEntries reads the history column of a record: a JSON array of
// entries as appendEntry writes them, and as the grant statements build
// them in SQL.
func parseEntries(raw []byte) ([]ledger.Transition, error) {
	if raw == nil {
		return nil, nil
	}
	var entries [][8]json.RawMessage
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("pgstore: history: %w", err)
	}
	out := make([]ledger.Transition, 0, len(entries))
	for _, e := range entries {
		var (
			t      ledger.Transition
			fields [6]*string
			at     string
		)
		err := json.Unmarshal(e[0], &t.Seq)
		for i := range fields {
			if err == nil {
				err = json.Unmarshal(e[i+1], &fields[i])
			}
		}
		if err == nil {
			err = json.Unmarshal(e[7], &at)
		}
		if err != nil {
			return nil, fmt.Errorf("pgstore: history entry: %w", err)
		}
		when, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			return nil, fmt.Errorf("pgstore: history entry: %w", err)
		}
		t.Op, t.From, t.To = ledger.Operation(deref(fields[0])), deref(fields[1]), deref(fields[2])
		t.Outcome, t.Actor, t.Reason = ledger.Outcome(deref(fields[3])), deref(fields[4]), deref(fields[5])
		t.At = ledger.Normalize(when)
		out = append(out, t)
	}
	return out, nil
}

// History returns the transitions of delivery id, oldest first (see
// ledger.Historian), in one statement that reads the record's history
// column and any rows of the history table together. With WithoutHistory, or for a record written
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

// history runs a history query (readHistory): no row means no such
// record; one row whose seq is NULL, a record without rows in the history
// table. The entries in the record's own history column follow those
// rows, which were written before migrations/0012, and the whole is put
// in seq order. When the record's creation is implied (see
// impliedCreation), its entry comes first, made from the record: a
// record is created in state first.
func (s *Store) history(ctx context.Context, op, query, id, first string) ([]ledger.Transition, error) {
	var out []ledger.Transition
	err := s.read(ctx, op, func(db dbtx) error {
		rows, err := db.Query(ctx, query, id)
		if err != nil {
			return err
		}
		defer rows.Close()
		var (
			found   bool
			own     []byte
			implied bool
			created time.Time
		)
		out = []ledger.Transition{}
		for rows.Next() {
			found = true
			var (
				seq                                      *int64
				operation, from, to, outcome, actor, why *string
				at                                       *time.Time
			)
			if err := rows.Scan(&own, &seq, &operation, &from, &to, &outcome, &actor, &why, &at, &implied, &created); err != nil {
				return err
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
		entries, err := parseEntries(own)
		if err != nil {
			return err
		}
		out = append(out, entries...)
		slices.SortStableFunc(out, func(a, b ledger.Transition) int { return cmp.Compare(a.Seq, b.Seq) })
		if implied {
			out = slices.Insert(out, 0, impliedCreation(first, created))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
