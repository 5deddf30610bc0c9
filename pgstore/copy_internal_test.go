package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger/internal/pgtest"
)

// TestEnqueueCopyTypes checks the binary form copyWriter.field writes for
// every column an enqueue copies against the column's type in a migrated
// schema: binary COPY takes no casts, so a bigint sent to an integer
// column fails every enqueue.
func TestEnqueueCopyTypes(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool)
	s, err := New(pool, WithSchema(schema))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, s.Migrate(ctx))

	columnType := func(t *testing.T, table, column string) string {
		var typ string
		require.NoError(t, pool.QueryRow(ctx,
			`SELECT data_type FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 AND column_name = $3`,
			schema, table, column).Scan(&typ), "%s.%s", table, column)
		return typ
	}
	// canonical names a type as information_schema does (timestamptz is
	// "timestamp with time zone"); "" (no type known) stays "".
	canonical := func(t *testing.T, typ string) string {
		if typ == "" {
			return ""
		}
		var name string
		require.NoError(t, pool.QueryRow(ctx, `SELECT format_type($1::regtype, NULL)`, typ).Scan(&name))
		return name
	}
	// The type each column's binary form is written as: sqlType's (the
	// bulk write's), with int4Columns written as integer.
	written := func(c column) string {
		if int4Columns[c.name] {
			return "integer"
		}
		return sqlType(c.ptr)
	}
	for table, cols := range map[string][]column{"deliveries": (&deliveryRow{}).columns(), "outbox_entries": (&outboxRow{}).columns()} {
		for _, c := range enqueueCopyColumns(cols) {
			require.Equal(t, columnType(t, table, c.name), canonical(t, written(c)), "%s.%s", table, c.name)
		}
		// The enqueue by arrays: the element type of every column's array
		// is the column's type (array_recv refuses any other).
		names, oids := enqueueColumns(cols)
		for i, name := range names {
			require.NotZero(t, oids[i], "%s.%s has no array form", table, name)
			require.Equal(t, columnType(t, table, name), canonical(t, sqlTypes[oids[i]]), "%s.%s, by arrays", table, name)
		}
		// What the enqueue writes after the row's columns.
		for name, want := range map[string]string{metadataColumn: "jsonb", "creation_implied": "boolean"} {
			require.Equal(t, want, columnType(t, table, name), "%s.%s", table, name)
		}
	}
}

// TestCopyWriterTimes checks timestamptz's binary form at the edges a
// time.Duration cannot span.
func TestCopyWriterTimes(t *testing.T) {
	for _, tc := range []struct {
		t    time.Time
		want int64
	}{
		{time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), 0},
		{time.Date(2000, 1, 1, 0, 0, 1, 500, time.UTC), 1_000_000},
		{time.Date(1999, 12, 31, 23, 59, 59, 999_999_000, time.UTC), -1},
		{time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC), 252_455_529_600_000_000},
		{time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), -63_082_281_600_000_000},
	} {
		w := &copyWriter{}
		w.timestamptz(tc.t)
		require.Len(t, w.buf, 12)
		got := int64(uint64(w.buf[4])<<56 | uint64(w.buf[5])<<48 | uint64(w.buf[6])<<40 | uint64(w.buf[7])<<32 |
			uint64(w.buf[8])<<24 | uint64(w.buf[9])<<16 | uint64(w.buf[10])<<8 | uint64(w.buf[11]))
		require.Equal(t, tc.want, got, "%v", tc.t)
	}
}
