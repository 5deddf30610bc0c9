package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/leaseledger/ledger"
)

// This file is what a group transaction (group_tx.go) does alike for
// deliveries and outbox entries: lock and read the records its calls
// name, keep them as each call leaves them, and write back what changed
// with its history and count changes.

// recordKind is what a group transaction needs to read and write one
// kind of record, R: deliveries or outbox entries.
type recordKind[R any] struct {
	// lock is the locking read of a group's records by the IDs $1.
	lock string
	// scan reads the current row of rows into a record, keeping its
	// columns by ID in read for the write-back to compare with.
	scan    func(rows pgx.Rows, read map[string][]column) (R, error)
	id      func(R) string
	table   *bulkTable
	columns func(R) ([]column, error)
	// reuse returns a columns function that maps every record into one
	// row, for a caller that reads a row's columns only until its next
	// call: it allocates nothing per record (see cells).
	reuse func() func(R) ([]column, error)
	clone func(R) R
	// version is a record's version (settle.go).
	version func(R) int64
}

// lockOrder makes a locking read by IDs lock in ID order, as every
// sweep does: PostgreSQL sorts before it locks.
const lockOrder = " ORDER BY id FOR UPDATE"

// newDeliveryRecords is recordKind for the deliveries of schema.
func newDeliveryRecords(schema string, q *queries) *recordKind[ledger.Delivery] {
	return &recordKind[ledger.Delivery]{
		lock: q.deliveriesByID + lockOrder,
		scan: func(rows pgx.Rows, read map[string][]column) (ledger.Delivery, error) {
			r := new(deliveryRow)
			return scanRow(rows, r, read, r.delivery)
		},
		id:    func(d ledger.Delivery) string { return string(d.ID) },
		table: newBulkTable(pgx.Identifier{schema}.Sanitize()+".deliveries", (&deliveryRow{}).columns()),
		columns: func(d ledger.Delivery) ([]column, error) {
			r, err := newDeliveryRow(d)
			return r.columns(), err
		},
		reuse: func() func(ledger.Delivery) ([]column, error) {
			r, cs := new(deliveryRow), new(cells)
			cols := r.columns()
			return func(d ledger.Delivery) ([]column, error) {
				cs.reset()
				return cols, r.fill(d, cs)
			}
		},
		clone:   ledger.Delivery.Clone,
		version: deliveryVersion,
	}
}

// newEntryRecords is recordKind for the outbox entries of schema.
func newEntryRecords(schema string, q *queries) *recordKind[ledger.OutboxEntry] {
	return &recordKind[ledger.OutboxEntry]{
		lock: q.entriesByID + lockOrder,
		scan: func(rows pgx.Rows, read map[string][]column) (ledger.OutboxEntry, error) {
			r := new(outboxRow)
			return scanRow(rows, r, read, r.entry)
		},
		id:    func(e ledger.OutboxEntry) string { return string(e.ID) },
		table: newBulkTable(pgx.Identifier{schema}.Sanitize()+".outbox_entries", (&outboxRow{}).columns()),
		columns: func(e ledger.OutboxEntry) ([]column, error) {
			r, err := newOutboxRow(e)
			return r.columns(), err
		},
		reuse: func() func(ledger.OutboxEntry) ([]column, error) {
			r, cs := new(outboxRow), new(cells)
			cols := r.columns()
			return func(e ledger.OutboxEntry) ([]column, error) {
				cs.reset()
				return cols, r.fill(e, cs)
			}
		},
		clone:   ledger.OutboxEntry.Clone,
		version: entryVersion,
	}
}

// groupRecords are the records of one group transaction: as the calls
// decided so far left them, and what they changed.
type groupRecords[R any] struct {
	kind    *recordKind[R]
	byID    map[string]R
	read    map[string][]column // as read, for the write-back
	shared  map[string]bool     // named by several calls (see repeated)
	changes []change[R]
}

// lockRecords begins the group transaction and locks and reads the
// records that ids, the calls' records in arrival order, name.
func lockRecords[R any](ctx context.Context, c *groupConn, k *recordKind[R], ids []string) (*groupRecords[R], error) {
	g := &groupRecords[R]{kind: k, byID: map[string]R{}, read: map[string][]column{}, shared: repeated(ids)}
	err := c.lock(ctx, k.lock, ids, func(rows pgx.Rows) error {
		r, err := k.scan(rows, g.read)
		if err == nil {
			g.byID[k.id(r)] = r
		}
		return err
	})
	return g, err
}

// result is the record a call's result carries: r itself, unless other
// calls of the group name the same record, whose results must not share
// memory (a state machine step keeps what it does not change).
func (g *groupRecords[R]) result(id string, r R) R {
	if g.shared[id] {
		return g.kind.clone(r)
	}
	return r
}

// apply records ch, a transition a call applied, and returns the record
// the call's result carries.
func (g *groupRecords[R]) apply(ch change[R]) R {
	id := g.kind.id(ch.after)
	g.changes = append(g.changes, ch)
	g.byID[id] = ch.after
	return g.result(id, ch.after)
}

// counter is the count changes of one kind of record R: deliveryCounts
// or outboxCounts.
type counter[R any] interface {
	change(before, after *R)
	queue(b *pgx.Batch, q *queries, dropZeros bool)
}

// queueWrites adds the group's writes to w: every changed record once,
// as the last call left it, checked to write every row; the history
// entries, unless history is off; and, to go with the commit, the count
// changes.
func queueWrites[R any](s *Store, g *groupRecords[R], counts counter[R], w *groupWrites) error {
	bulk := newBulkWrite(g.kind.table, g.read, g.kind.columns, s.cfg.noHistory)
	for _, c := range g.changes {
		id := g.kind.id(c.after)
		counts.change(&c.before, &c.after)
		bulk.change(id, c.after, c.t)
	}
	if err := bulk.queue(w.b); err != nil {
		return err
	}
	counts.queue(w.counts, s.q, false)
	first := g.changes[0]
	id := g.kind.id(first.after)
	before, wrote := g.kind.version(first.before), g.byID[id]
	w.settle = func(ctx context.Context) commitVerdict {
		_, v := settleCommit(ctx, s, g.kind, id, before, wrote)
		return v
	}
	return nil
}

// repeated returns the IDs that occur more than once in ids: the records
// that several calls of a group share, whose results must not share
// memory (a state machine step keeps what it does not change).
func repeated(ids []string) map[string]bool {
	seen := make(map[string]bool, len(ids))
	var out map[string]bool
	for _, id := range ids {
		if seen[id] {
			if out == nil {
				out = map[string]bool{}
			}
			out[id] = true
		}
		seen[id] = true
	}
	return out
}

// scanRow scans the current row of rows into r, keeps the columns a
// write-back can write in read by ID, for it to compare with, and returns
// its record.
func scanRow[R any](rows pgx.Rows, r interface{ readColumns() []column }, read map[string][]column, record func() R) (R, error) {
	cols := r.readColumns()
	if err := rows.Scan(pointers(cols)...); err != nil {
		var zero R
		return zero, err
	}
	read[*cols[0].ptr.(*string)] = cols[:len(cols)-readOnlyColumns]
	return record(), nil
}
