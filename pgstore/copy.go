package pgstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaseledger/ledger"
)

// This file writes an enqueue's new rows in PostgreSQL's binary COPY
// format itself, straight from the row structs' fields, and sends them
// with one COPY. pgx's CopyFrom takes every value boxed in an interface
// and looks up an encode plan for it, which cost an outbox batch of 1,000
// about a fifth of its client CPU; the enqueue's columns are a fixed set
// of a handful of types, whose binary forms are a few lines each.
//
// The binary format (PostgreSQL's "COPY" reference, "Binary Format"): a
// signature and two 32-bit words, then per row a 16-bit field count and
// per field a 32-bit length (-1 for NULL) and the value in its type's
// binary send/receive form, then a 16-bit -1.

// copySignature starts every binary COPY stream: the signature, a flags
// word (no OIDs) and an empty header extension.
var copySignature = []byte("PGCOPY\n\377\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00")

// int4Columns are the columns of integer (not bigint) type among those an
// enqueue copies; their row fields are int64, but binary COPY must send
// exactly four bytes. TestEnqueueCopyTypes checks every copied column's
// type against the migrated schema.
var int4Columns = map[string]bool{"attempts": true, "max_attempts": true, "activations": true}

// postgresEpochUnix is 2000-01-01 UTC in Unix seconds: timestamptz's
// binary form counts microseconds from there.
const postgresEpochUnix = 946684800

// copyWriter builds one binary COPY stream.
type copyWriter struct {
	buf []byte
	err error
}

func newCopyWriter(rows, perRow int) *copyWriter {
	w := &copyWriter{buf: make([]byte, 0, len(copySignature)+rows*perRow+2)}
	w.buf = append(w.buf, copySignature...)
	return w
}

// row starts a row of n fields.
func (w *copyWriter) row(n int) { w.buf = binary.BigEndian.AppendUint16(w.buf, uint16(n)) }

func (w *copyWriter) null() { w.buf = binary.BigEndian.AppendUint32(w.buf, 0xFFFFFFFF) }

func (w *copyWriter) bytes(b []byte) {
	w.buf = binary.BigEndian.AppendUint32(w.buf, uint32(len(b)))
	w.buf = append(w.buf, b...)
}

func (w *copyWriter) text(s string) {
	w.buf = binary.BigEndian.AppendUint32(w.buf, uint32(len(s)))
	w.buf = append(w.buf, s...)
}

func (w *copyWriter) int8(v int64) {
	w.buf = binary.BigEndian.AppendUint32(w.buf, 8)
	w.buf = binary.BigEndian.AppendUint64(w.buf, uint64(v))
}

func (w *copyWriter) int4(v int64) {
	w.buf = binary.BigEndian.AppendUint32(w.buf, 4)
	w.buf = binary.BigEndian.AppendUint32(w.buf, uint32(int32(v)))
}

func (w *copyWriter) int2(v int16) {
	w.buf = binary.BigEndian.AppendUint32(w.buf, 2)
	w.buf = binary.BigEndian.AppendUint16(w.buf, uint16(v))
}

func (w *copyWriter) boolean(v bool) {
	w.buf = binary.BigEndian.AppendUint32(w.buf, 1)
	if v {
		w.buf = append(w.buf, 1)
	} else {
		w.buf = append(w.buf, 0)
	}
}

// timestamptz writes t as microseconds since 2000-01-01 UTC; the ledger's
// times are normalized to microseconds (ledger.Normalize) before they get
// here, as every other write of a time sends them.
// (Not t.Sub: a Duration spans only 292 years either way.)
func (w *copyWriter) timestamptz(t time.Time) {
	w.int8((t.Unix()-postgresEpochUnix)*1_000_000 + int64(t.Nanosecond()/1000))
}

// jsonb writes v as jsonb: a version byte (1) and the JSON text.
func (w *copyWriter) jsonb(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		w.fail(err)
		return
	}
	w.buf = binary.BigEndian.AppendUint32(w.buf, uint32(len(b)+1))
	w.buf = append(w.buf, 1)
	w.buf = append(w.buf, b...)
}

func (w *copyWriter) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

// copyFields are the columns of a scratch row as an enqueue writes them
// (enqueueCopyColumns), each with whether it is an integer column: the
// rows of one call are copied into the scratch row and written through
// them in turn, so that no row builds its list of columns or looks its
// types up.
type copyFields struct {
	cols []column
	int4 []bool
}

// newCopyFields returns the copyFields of cols, a scratch row's columns.
func newCopyFields(cols []column) copyFields {
	cols = enqueueCopyColumns(cols)
	f := copyFields{cols: cols, int4: make([]bool, len(cols))}
	for i, c := range cols {
		f.int4[i] = int4Columns[c.name]
	}
	return f
}

// fields writes the fields f's scratch row holds.
func (w *copyWriter) fields(f copyFields) {
	for i, c := range f.cols {
		w.value(c.name, c.ptr, f.int4[i])
	}
}

// value writes the row field ptr points at, of the column name (for an
// error); an int64 as an integer when int4, else as a bigint.
func (w *copyWriter) value(name string, ptr any, int4 bool) {
	switch p := ptr.(type) {
	case *string:
		w.text(*p)
	case **string:
		if *p == nil {
			w.null()
		} else {
			w.text(**p)
		}
	case *[]byte:
		if *p == nil {
			w.null()
		} else {
			w.bytes(*p)
		}
	case *int64:
		if int4 {
			w.int4(*p)
		} else {
			w.int8(*p)
		}
	case **int64:
		switch {
		case *p == nil:
			w.null()
		case int4:
			w.int4(**p)
		default:
			w.int8(**p)
		}
	case **bool:
		if *p == nil {
			w.null()
		} else {
			w.boolean(**p)
		}
	case *time.Time:
		w.timestamptz(*p)
	case **time.Time:
		if *p == nil {
			w.null()
		} else {
			w.timestamptz(**p)
		}
	default:
		w.fail(fmt.Errorf("pgstore: no binary form for column %s (%T)", name, ptr))
	}
}

// metadata writes a record's metadata column: NULL when it has none, as
// metadataParam sends it.
func (w *copyWriter) metadata(md ledger.Metadata) {
	if len(md) == 0 {
		w.null()
		return
	}
	w.jsonb(map[string]string(md))
}

// finish ends the stream and returns it.
func (w *copyWriter) finish() ([]byte, error) {
	w.buf = binary.BigEndian.AppendUint16(w.buf, 0xFFFF)
	return w.buf, w.err
}

// copyStatement is the COPY of columns into table, in binary form.
func copyStatement(table pgx.Identifier, columns []string) string {
	quoted := make([]string, len(columns))
	for i, c := range columns {
		quoted[i] = pgx.Identifier{c}.Sanitize()
	}
	return "COPY " + table.Sanitize() + " (" + strings.Join(quoted, ", ") + ") FROM STDIN BINARY"
}

// copyBinary sends the rows w holds, n of them, into table's columns on
// tx's connection.
func copyBinary(ctx context.Context, tx pgx.Tx, table pgx.Identifier, columns []string, w *copyWriter, n int) error {
	if n == 0 {
		return nil
	}
	data, err := w.finish()
	if err != nil {
		return err
	}
	tag, err := tx.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(data), copyStatement(table, columns))
	if err != nil {
		return copyFailed(err, table)
	}
	if tag.RowsAffected() != int64(n) {
		return fmt.Errorf("copied %d rows of %d", tag.RowsAffected(), n)
	}
	return nil
}
