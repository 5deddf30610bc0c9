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

	written := func(c column) string {
		switch c.ptr.(type) {
		case *string, **string:
			return "text"
		case *[]byte:
			return "bytea"
		case *int64, **int64:
			if int4Columns[c.name] {
				return "integer"
			}
			return "bigint"
		case **bool:
			return "boolean"
		case *time.Time, **time.Time:
			return "timestamp with time zone"
		}
		return "no binary form"
	}
	for table, cols := range map[string][]column{"deliveries": (&deliveryRow{}).columns(), "outbox_entries": (&outboxRow{}).columns()} {
		for _, c := range enqueueCopyColumns(cols) {
			var typ string
			require.NoError(t, pool.QueryRow(ctx,
				`SELECT data_type FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 AND column_name = $3`,
				schema, table, c.name).Scan(&typ), "%s.%s", table, c.name)
			require.Equal(t, typ, written(c), "%s.%s", table, c.name)
		}
		// What the enqueue writes after the row's columns.
		for name, want := range map[string]string{metadataColumn: "jsonb", "creation_implied": "boolean"} {
			var typ string
			require.NoError(t, pool.QueryRow(ctx,
				`SELECT data_type FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 AND column_name = $3`,
				schema, table, name).Scan(&typ))
			require.Equal(t, want, typ, "%s.%s", table, name)
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
