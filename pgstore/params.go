package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// This file sends statements whose parameters are binary arrays written
// by the store: the enqueue of a small batch (enqueue_arrays.go) and the
// write of transitions decided on held records (held_tx.go). pgx would
// box every element of every array in an interface and look up an encode
// plan for it; the arrays here hold a handful of types, whose binary
// forms copyWriter writes a value at a time, so they go pre-encoded
// through pgconn.

// Element type OIDs of the arrays the store sends (the built-in types'
// fixed OIDs, pg_type.dat).
const (
	oidBool        = 16
	oidBytea       = 17
	oidInt8        = 20
	oidInt2        = 21
	oidInt4        = 23
	oidText        = 25
	oidTID         = 27
	oidTimestamptz = 1184
	oidJSONB       = 3802
)

// sqlTypes names the element types above in SQL.
var sqlTypes = map[uint32]string{
	oidBool: "boolean", oidBytea: "bytea", oidInt8: "bigint", oidInt2: "smallint", oidInt4: "integer",
	oidText: "text", oidTID: "tid", oidTimestamptz: "timestamptz", oidJSONB: "jsonb",
}

// typeOID is the OID of the SQL type named typ, one of sqlTypes'; 0 for
// another, which no array is written as (binArray.finish fails).
func typeOID(typ string) uint32 {
	for oid, name := range sqlTypes {
		if name == typ {
			return oid
		}
	}
	return 0
}

// arrayHeader is the size of a one-dimensional array's binary header:
// dimensions, flags, element type, then the dimension's length and lower
// bound (PostgreSQL's array_send).
const arrayHeader = 20

// binArray is one binary array parameter, written an element at a time:
// an element has the binary COPY format's field form (a length, -1 for
// NULL, then the value), so copyWriter writes it.
type binArray struct {
	w   copyWriter
	oid uint32
	n   int
}

// newBinArray starts an array of elements of type oid, with room for n
// of about perValue bytes each.
func newBinArray(oid uint32, n, perValue int) binArray {
	return binArray{w: copyWriter{buf: make([]byte, arrayHeader, arrayHeader+n*(4+perValue))}, oid: oid}
}

// value adds the row field c points at (as copyWriter.value writes it,
// an int64 as a bigint).
func (a *binArray) value(c column) {
	a.w.value(c.name, c.ptr, false)
	a.n++
}

// finish writes the header and returns the array.
func (a *binArray) finish() ([]byte, error) {
	if a.w.err != nil {
		return nil, a.w.err
	}
	if a.oid == 0 {
		return nil, errNoArrayType
	}
	h := a.w.buf[:0]
	h = binary.BigEndian.AppendUint32(h, 1) // one dimension
	h = binary.BigEndian.AppendUint32(h, 1) // may hold NULLs (a hint the server does not check)
	h = binary.BigEndian.AppendUint32(h, a.oid)
	h = binary.BigEndian.AppendUint32(h, uint32(a.n))
	binary.BigEndian.AppendUint32(h, 1) // lower bound
	return a.w.buf, nil
}

// errNoArrayType is the error of an array of a type the store does not
// write, which would be a bug.
var errNoArrayType = errors.New("pgstore: array of an unknown element type")

// arrayOf is the array of vs, elements of type oid of about perValue
// bytes each, which put writes.
func arrayOf[T any](oid uint32, vs []T, perValue int, put func(*copyWriter, T)) binArray {
	a := newBinArray(oid, len(vs), perValue)
	for _, v := range vs {
		put(&a.w, v)
	}
	a.n = len(vs)
	return a
}

func textArray(vs []string) binArray { return arrayOf(oidText, vs, 16, (*copyWriter).text) }
func int8Array(vs []int64) binArray  { return arrayOf(oidInt8, vs, 8, (*copyWriter).int8) }
func int2Array(vs []int16) binArray  { return arrayOf(oidInt2, vs, 2, (*copyWriter).int2) }

// finishArrays finishes as, one parameter each.
func finishArrays(as []binArray) ([][]byte, error) {
	vals := make([][]byte, len(as))
	for i := range as {
		v, err := as[i].finish()
		if err != nil {
			return nil, err
		}
		vals[i] = v
	}
	return vals, nil
}

// arrayFormats are the parameter formats of an array statement: its
// arrays binary, the scalars after them (a sequence's name, a channel's)
// text.
func arrayFormats(arrays, scalars int) []int16 {
	f := make([]int16, arrays+scalars)
	for i := range arrays {
		f[i] = 1
	}
	return f
}

// arrayStatement is one statement of a store sent with binary arrays:
// its text, and the name it is prepared under.
type arrayStatement struct {
	sql, name string
}

func newArrayStatement(sql string) arrayStatement {
	sum := sha256.Sum256([]byte(sql))
	return arrayStatement{sql: sql, name: "leaseledger_" + hex.EncodeToString(sum[:12])}
}

// arraySender sends the statements of binary arrays of one store: how
// the pool's connections run statements, and their tracer, read once
// from the pool's configuration (pgx copies a configuration with every
// read of it, its TLS settings and runtime parameters included).
type arraySender struct {
	// prepare: the connections cache their statements (pgx's default),
	// so an array statement is prepared once per connection.
	prepare bool
	// simple: the pool runs the simple protocol, which sends no binary
	// parameter; the enqueue then goes by COPY.
	simple bool
	tracer pgx.QueryTracer
}

// arraySenders makes a store's arraySender when it first sends arrays:
// New takes any *pgxpool.Pool without touching it, and a pool that
// NewWithConfig did not make has no configuration to read.
type arraySenders struct {
	once sync.Once
	pool *pgxpool.Pool
	a    arraySender
}

func (l *arraySenders) get() arraySender {
	l.once.Do(func() {
		cc := l.pool.Config().ConnConfig
		tracer, _ := cc.Tracer.(pgx.QueryTracer)
		l.a = arraySender{
			prepare: cc.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement,
			simple:  cc.DefaultQueryExecMode == pgx.QueryExecModeSimpleProtocol,
			tracer:  tracer,
		}
	})
	return l.a
}

// exec sends st with params (in formats) on conn and reads its whole
// answer, up to ReadyForQuery: as an implicit transaction of its own,
// committed at the Sync that ends it. The statement is prepared once per
// connection, under its name, when the connections cache their
// statements; in the pool's other modes it goes unnamed, parsed with
// every call, as the store's other statements then do (as behind a
// PgBouncer without prepared statement support), the parameters' types
// taken from the casts. An error returned is one of the Prepare, which
// sends no Execute: nothing was written.
//
// The tracer (pgx.QueryTracer) sees the statement as a query, with the
// arrays as its arguments, as it sees every other statement of the
// store: pgconn, which sends it, knows no tracer.
func (a arraySender) exec(ctx context.Context, conn *pgx.Conn, st arrayStatement, params [][]byte, formats []int16) (*pgconn.Result, error) {
	if a.tracer != nil {
		args := make([]any, len(params))
		for i, p := range params {
			args[i] = p
		}
		ctx = a.tracer.TraceQueryStart(ctx, conn, pgx.TraceQueryStartData{SQL: st.sql, Args: args})
	}
	res, err := a.send(ctx, conn, st, params, formats)
	if a.tracer != nil {
		end := pgx.TraceQueryEndData{Err: err}
		if res != nil {
			end.CommandTag, end.Err = res.CommandTag, res.Err
		}
		a.tracer.TraceQueryEnd(ctx, conn, end)
	}
	return res, err
}

func (a arraySender) send(ctx context.Context, conn *pgx.Conn, st arrayStatement, params [][]byte, formats []int16) (*pgconn.Result, error) {
	if a.prepare {
		if _, err := conn.Prepare(ctx, st.name, st.sql); err != nil {
			return nil, err
		}
		return conn.PgConn().ExecPrepared(ctx, st.name, params, formats, nil).Read(), nil
	}
	return conn.PgConn().ExecParams(ctx, st.sql, params, nil, formats, nil).Read(), nil
}
