package pgstore_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/pgstore"
)

// historyMoveFile is the migration that moves the history rows written
// before migration 0012 into their records.
const historyMoveFile = "migrations/0013_history_moved_into_records.sql"

// legacyHistorySQL gives every record of %[1]s that has none rows of the
// history table %[2]s for seq 1 to its version, as a build before
// migration 0012 wrote them: quotes and a newline in a reason, the
// creation's row with no from state, actor or reason.
const legacyHistorySQL = `
INSERT INTO %[2]s (id, seq, op, from_state, to_state, outcome, actor, reason, at)
SELECT r.id, s, CASE WHEN s = 1 THEN 'enqueue' ELSE 'step-' || s END,
	CASE WHEN s > 1 THEN 'state-' || (s - 1) END, 'state-' || s, 'applied',
	CASE WHEN s > 1 THEN 'agent/' || s END, CASE WHEN s = r.version THEN 'said "so"' || E'\n' || r.id END,
	r.created_at + make_interval(secs => s)
FROM %[1]s AS r, generate_series(1, r.version) AS s
WHERE r.history IS NULL AND NOT r.creation_implied`

// TestHistoryMoveOnALargeTable runs the move of migration 0013 over a
// table of a million terminal deliveries (200,000 outside make test/long)
// and 20,000 outbox entries, each with three history rows, while a writer
// applies transitions to records whose first entries are rows being
// moved. Afterwards the history tables are empty, every history reads as
// before, plus the writer's entries after them in seq order, and the
// writer went on throughout: a batch holds its records for a moment, not
// for the whole move.
func TestHistoryMoveOnALargeTable(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a table of 200,000 rows or more")
	}
	s, pool := newStore(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	schema := s.Schema()
	deliveries, outbox := pgx.Identifier{schema, "deliveries"}.Sanitize(), pgx.Identifier{schema, "outbox_entries"}.Sanitize()
	dhist, ohist := pgx.Identifier{schema, "delivery_history"}.Sanitize(), pgx.Identifier{schema, "outbox_entry_history"}.Sanitize()

	// Open deliveries among the terminal ones in ID order (done-00000001
	// and on), leased with their entries moved back into rows.
	n := largeTableRows()
	owner := ledger.Owner{Agent: "writer", Incarnation: "1"}
	var reqs []ledger.EnqueueRequest
	for i := 0; i < 200; i++ {
		reqs = append(reqs, ledger.EnqueueRequest{ID: ledger.DeliveryID(fmt.Sprintf("done-%08d-open", (i+1)*n/200)), Target: "open"})
	}
	_, err := s.EnqueueBatch(ctx, reqs, t0)
	require.NoError(t, err)
	lr, err := s.Lease(ctx, ledger.LeaseFilter{Targets: []ledger.Target{"open"}}, owner, t0, time.Hour, len(reqs))
	require.NoError(t, err)
	require.Len(t, lr.Leased, len(reqs))
	_, err = pool.Exec(ctx, fmt.Sprintf(`WITH moved AS (
		SELECT d.id, e FROM %[1]s AS d, jsonb_array_elements(d.history) AS e WHERE d.history IS NOT NULL
	)
	INSERT INTO %[2]s (id, seq, op, from_state, to_state, outcome, actor, reason, at)
	SELECT id, (e->>0)::bigint, e->>1, e->>2, e->>3, e->>4, e->>5, e->>6, (e->>7)::timestamptz FROM moved`, deliveries, dhist))
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "UPDATE "+deliveries+" SET history = NULL")
	require.NoError(t, err)

	pgstore.InsertTerminalDeliveries(ctx, t, pool, schema, n, t0)
	pgstore.InsertTerminalEntries(ctx, t, pool, schema, 20_000, t0)
	for _, tables := range [][2]string{{deliveries, dhist}, {outbox, ohist}} {
		_, err := pool.Exec(ctx, fmt.Sprintf(legacyHistorySQL, tables[0], tables[1]))
		require.NoError(t, err)
		_, err = pool.Exec(ctx, "ANALYZE "+tables[0]+"; ANALYZE "+tables[1])
		require.NoError(t, err)
	}
	var rows int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+dhist).Scan(&rows))
	require.Equal(t, 3*n+len(reqs), rows)

	// The histories before the move, of a sample and of the open ones.
	sample := []ledger.DeliveryID{"done-00000001", ledger.DeliveryID(fmt.Sprintf("done-%08d", n/2)), ledger.DeliveryID(fmt.Sprintf("done-%08d", n))}
	for _, l := range lr.Leased {
		sample = append(sample, l.Delivery.ID)
	}
	before := map[ledger.DeliveryID][]ledger.Transition{}
	for _, id := range sample {
		h, err := s.History(ctx, id)
		require.NoError(t, err)
		require.NotEmpty(t, h)
		before[id] = h
	}
	entry := ledger.OutboxEntryID("done-00012345")
	entryBefore, err := s.Outbox().EntryHistory(ctx, entry)
	require.NoError(t, err)
	require.Len(t, entryBefore, 3)

	// The writer renews the open deliveries' leases while the move runs,
	// as a migration of its own.
	move, err := os.ReadFile(historyMoveFile)
	require.NoError(t, err)
	w := startTransitionWriter(ctx, s, lr.Leased)
	from := time.Now()
	err = s.MigrateWith(ctx, fstest.MapFS{"0200_history_move.sql": {Data: move}})
	to := time.Now()
	writes, werr := w.stop()
	require.NoError(t, err)
	require.NoError(t, werr)
	require.NoError(t, checkWritersWentOn(writes, from, to))
	t.Logf("moved %d rows in %v beside %d writes", rows, to.Sub(from).Round(time.Millisecond), len(writes))

	for _, table := range []string{dhist, ohist} {
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&rows))
		require.Zero(t, rows, "%s is empty", table)
	}
	for _, id := range sample {
		h, err := s.History(ctx, id)
		require.NoError(t, err)
		d, err := s.Get(ctx, id)
		require.NoError(t, err)
		require.Len(t, h, int(d.Version), "%s: one entry per version", id)
		require.Equal(t, before[id], h[:len(before[id])], "%s: the moved entries read as before", id)
		for i, tr := range h {
			require.Equal(t, int64(i+1), tr.Seq, "%s: in seq order", id)
		}
	}
	entryAfter, err := s.Outbox().EntryHistory(ctx, entry)
	require.NoError(t, err)
	require.Equal(t, entryBefore, entryAfter)
}

// startTransitionWriter starts a writer on s that renews the leases of
// leased in turn, round and round, until stopped: each renewal a
// transition that appends an entry to a record whose earlier entries may
// be in the batch being moved.
func startTransitionWriter(ctx context.Context, s *pgstore.Store, leased []ledger.LeasedDelivery) *writer {
	return startWrites(func(n int) error {
		l := leased[n%len(leased)]
		res, err := s.RenewLease(ctx, l.Lease, t0.Add(time.Duration(n)*time.Millisecond), time.Hour)
		if err == nil && !res.Applied() {
			err = fmt.Errorf("renew %s: %s", l.Delivery.ID, res.Outcome)
		}
		return err
	})
}
