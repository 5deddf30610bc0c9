package pgstore

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaseledger/ledger"
)

// This file writes the records a group changed back in one statement:
// UPDATE ... FROM unnest(one array per column), setting only the columns
// that changed in some record of the group. Against one UPDATE per record
// it saves the server a statement per record, and against writing every
// column it saves encoding, sending and decoding the columns no call of
// the group touched (the payload first of all).

// bulkTable is one table's bulk UPDATE statements, one per set of
// changed columns, built when first needed.
type bulkTable struct {
	table string
	names []string // column names, id first (see row.go)
	types []string // their SQL types; "" for a type sqlType does not know

	mu     sync.Mutex
	byMask map[uint64]string
	held   map[uint64]arrayStatement // heldStatement's
}

// historyBit in a mask of columns stands for the history column
// (migrations/0012), which a write appends to rather than sets: its
// statement takes one more array, the entries to append to each row
// (historyLog.of). Tables have fewer columns than it takes to reach it.
const historyBit = uint64(1) << 63

// maxBulkStatements bounds the statements a bulkTable keeps: the sets of
// columns the state machine's transitions change are few, and a mix of
// calls in one group only unions them, so the bound is only a guard.
const maxBulkStatements = 256

func newBulkTable(table string, cols []column) *bulkTable {
	t := &bulkTable{table: table, names: columnNames(cols), byMask: map[uint64]string{}, held: map[uint64]arrayStatement{}}
	for _, c := range cols {
		t.types = append(t.types, sqlType(c.ptr))
	}
	return t
}

// statement returns the UPDATE of the columns in mask (bit j: column j):
// $1 the IDs, each once, $2 the versions read under the rows' locks,
// then one array per column in mask, in column order, then, when mask has
// historyBit, the history entries to append. The rows are found
// from the arrays through the primary key (unnestIDs says why), whatever
// the planner believes of the table's size.
//
// A row whose version moved under its lock is not written, and that is a
// bug (or someone editing the table by hand): the statement then fails,
// and its transaction with it, by dividing by zero, the one error plain
// SQL raises on demand (a constant 1 / 0 would fail at planning, so the
// divisor is the comparison of the rows written with the IDs given). The
// check is the server's, not the client's, because the group's COMMIT
// goes in the same pipeline (groupAttempt): the client reads the
// statement's answer only after the server has reached the COMMIT.
func (t *bulkTable) statement(mask uint64) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if sql, ok := t.byMask[mask]; ok {
		return sql
	}
	params := []string{"$1::text[]", "$2::bigint[]"}
	aliases := []string{"id", "read_version"}
	var sets []string
	for j, name := range t.names {
		if mask&(1<<j) == 0 {
			continue
		}
		params = append(params, fmt.Sprintf("$%d::%s[]", len(params)+1, t.types[j]))
		aliases = append(aliases, name)
		sets = append(sets, name+" = u."+name)
	}
	if mask&historyBit != 0 {
		params = append(params, fmt.Sprintf("$%d::text[]", len(params)+1))
		aliases = append(aliases, "hist")
		sets = append(sets, historyAppend("t", "u.hist"))
	}
	sql := "WITH written AS (UPDATE " + t.table + " AS t SET " + strings.Join(sets, ", ") +
		" FROM " + unnestIDs(params, aliases) +
		" WHERE t.id = u.id AND t.version = u.read_version RETURNING 1)" +
		" SELECT 1 / (count(*) = pg_catalog.cardinality($1::text[]))::int FROM written"
	if len(t.byMask) < maxBulkStatements {
		t.byMask[mask] = sql
	}
	return sql
}

// bulkWrite collects the changes of one group to the records of one
// table: per record, its row as read and as the group's last change left
// it, and the history entries of every change. A record changed twice is
// written once.
type bulkWrite[R any] struct {
	t    *bulkTable
	row  func(R) ([]column, error)
	ids  []string
	read map[string][]column // the rows as the group read them
	last map[string]R
	hist *historyLog
}

// newBulkWrite starts the write-back of the rows read, which row maps
// records to, appending history entries unless noHistory.
func newBulkWrite[R any](t *bulkTable, read map[string][]column, row func(R) ([]column, error), noHistory bool) *bulkWrite[R] {
	return &bulkWrite[R]{t: t, row: row, read: read, last: map[string]R{}, hist: newHistoryLog(noHistory)}
}

// change records after, which transition t made, as the new state of
// record id, which was read.
func (w *bulkWrite[R]) change(id string, after R, t ledger.Transition) {
	w.hist.add(id, t)
	if _, seen := w.last[id]; !seen {
		w.ids = append(w.ids, id)
	}
	w.last[id] = after
}

// queue adds the UPDATE to b, checked by the server to write every row
// (see bulkTable.statement).
func (w *bulkWrite[R]) queue(b *pgx.Batch) error {
	afters := make([][]column, len(w.ids))
	var mask uint64
	version := len(w.t.names) - 1 // the last column (see row.go)
	for i, id := range w.ids {
		var err error
		if afters[i], err = w.row(w.last[id]); err != nil {
			return err
		}
		before := w.read[id]
		for j := 1; j < len(afters[i]); j++ {
			if mask&(1<<j) == 0 && !sameValue(before[j].ptr, afters[i][j].ptr) {
				mask |= 1 << j
			}
		}
	}
	mask |= 1 << version // always written; it is the guard of the next write
	versions := make([]int64, len(w.ids))
	for i, id := range w.ids {
		versions[i] = *w.read[id][version].ptr.(*int64)
	}
	args := []any{w.ids, versions}
	for j := 1; j < len(w.t.names); j++ {
		if mask&(1<<j) == 0 {
			continue
		}
		a := newColumnArray(afters[0][j].ptr, len(w.ids))
		for i := range afters {
			a.add(afters[i][j].ptr)
		}
		args = append(args, a.value())
	}
	if len(w.hist.byID) > 0 {
		mask |= historyBit
		hist := make([]*string, len(w.ids))
		for i, id := range w.ids {
			hist[i] = w.hist.of(id)
		}
		args = append(args, hist)
	}
	b.Queue(w.t.statement(mask), args...)
	return nil
}

// sqlType names the SQL type of a row field (a column's pointer); ""
// for a type it does not know, which makes the statement fail (and the
// group fall back to single calls). A test checks every column.
func sqlType(ptr any) string {
	switch ptr.(type) {
	case *string, **string:
		return "text"
	case *[]byte:
		return "bytea"
	case *int64, **int64:
		return "bigint"
	case **bool:
		return "boolean"
	case *time.Time, **time.Time:
		return "timestamptz"
	}
	return ""
}

// sameValue reports whether two row fields of one column (pointers of
// one type) hold the same value; false for a type it does not know, so
// that such a column is always written.
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case *string:
		return *x == *b.(*string)
	case **string:
		return samePtr(*x, *b.(**string), func(p, q string) bool { return p == q })
	case *[]byte:
		return bytes.Equal(*x, *b.(*[]byte)) && (*x == nil) == (*b.(*[]byte) == nil)
	case *int64:
		return *x == *b.(*int64)
	case **int64:
		return samePtr(*x, *b.(**int64), func(p, q int64) bool { return p == q })
	case **bool:
		return samePtr(*x, *b.(**bool), func(p, q bool) bool { return p == q })
	case *time.Time:
		return x.Equal(*b.(*time.Time))
	case **time.Time:
		return samePtr(*x, *b.(**time.Time), time.Time.Equal)
	}
	return false
}

func samePtr[T any](p, q *T, eq func(T, T) bool) bool {
	if p == nil || q == nil {
		return p == q
	}
	return eq(*p, *q)
}

// columnArray collects one column of many rows, as the array of a bulk
// UPDATE parameter.
type columnArray interface {
	add(ptr any)
	value() any
}

type typedArray[T any] struct{ v []T }

func (a *typedArray[T]) add(ptr any) { a.v = append(a.v, *ptr.(*T)) }
func (a *typedArray[T]) value() any  { return a.v }

// newColumnArray returns an empty array for n values of the column whose
// field ptr points at.
func newColumnArray(ptr any, n int) columnArray {
	switch ptr.(type) {
	case *string:
		return &typedArray[string]{make([]string, 0, n)}
	case **string:
		return &typedArray[*string]{make([]*string, 0, n)}
	case *[]byte:
		return &typedArray[[]byte]{make([][]byte, 0, n)}
	case *int64:
		return &typedArray[int64]{make([]int64, 0, n)}
	case **int64:
		return &typedArray[*int64]{make([]*int64, 0, n)}
	case **bool:
		return &typedArray[*bool]{make([]*bool, 0, n)}
	case *time.Time:
		return &typedArray[time.Time]{make([]time.Time, 0, n)}
	case **time.Time:
		return &typedArray[*time.Time]{make([]*time.Time, 0, n)}
	}
	return &unknownArray{}
}

// unknownArray stands for a column of a type sqlType does not know: the
// statement has no SQL type for it and fails, so no value is needed.
type unknownArray struct{}

func (*unknownArray) add(any)    {}
func (*unknownArray) value() any { return nil }
