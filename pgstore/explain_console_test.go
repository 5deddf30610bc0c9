package pgstore

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger/internal/pgtest"
)

// consoleEndedRows is how many ended records each table holds in
// TestExplainConsoleReads: the scale the console must stay fast at.
const consoleEndedRows = 1_000_000

// TestExplainConsoleReads runs, under EXPLAIN ANALYZE, every statement
// behind the pages of the operators' console (internal/console) and of
// ledgerctl's reads, beside 1,000,000 ended deliveries and 1,000,000 ended
// outbox entries (each with its creation in the history) and the few
// hundred open records of insertOpenRows. Each page makes one or two of
// these calls; each statement must reach its table through an index,
// never by a sequential scan, and read no more rows than its bound: the
// page size, the limit of an ended read, or the open records, whatever
// the ended ones beside them. Both the custom plan and the generic one
// that PostgreSQL may switch a cached statement to are checked.
func TestExplainConsoleReads(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 4,000,000 rows; skipped under -short")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool)
	s, err := New(pool, WithSchema(schema), WithClock(func() time.Time { return explainT0 }),
		WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	start := time.Now()
	// Deliveries and outbox entries are built on two connections at once:
	// each table with its history is a few statements of a million rows.
	errs := make(chan error, 2)
	for _, tb := range []struct{ records, history, first, fill string }{
		{"deliveries", "delivery_history", "offered", terminalDeliveriesSQL},
		{"outbox_entries", "outbox_entry_history", "pending", terminalEntriesSQL},
	} {
		go func() {
			records, history := pgx.Identifier{schema, tb.records}.Sanitize(), pgx.Identifier{schema, tb.history}.Sanitize()
			if _, err := pool.Exec(ctx, fmt.Sprintf(tb.fill, records), consoleEndedRows, explainT0); err != nil {
				errs <- fmt.Errorf("fill %s: %w", tb.records, err)
				return
			}
			_, err := pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (id, seq, op, to_state, outcome, at)
				SELECT id, 1, 'enqueue', $1, 'applied', created_at FROM %s`, history, records), tb.first)
			errs <- err
		}()
	}
	for range 2 {
		require.NoError(t, <-errs)
	}
	insertOpenRows(ctx, t, s)
	for _, table := range []string{"deliveries", "outbox_entries", "delivery_history", "outbox_entry_history", "delivery_counts", "outbox_counts"} {
		_, err := pool.Exec(ctx, "ANALYZE "+pgx.Identifier{schema, table}.Sanitize())
		require.NoError(t, err)
	}
	t.Logf("fixture built in %s", time.Since(start).Round(time.Millisecond))

	const (
		page      = 51   // a console page of 50, plus the row that says there is a next page
		endedRead = 2000 // the console's chart reads at most this many endings
		open      = 300  // open deliveries, and open outbox entries, in the fixture
	)
	now := explainT0.Add(time.Minute)
	hourAgo := now.Add(-time.Hour)
	q := s.q
	none := []string{}
	openStates := []string{"offered", "leased", "acknowledged"}
	openStatuses := []string{"pending", "retry_scheduled", "deferred"}
	type read struct {
		name  string
		sql   string
		args  []any
		table string
		// most is how many rows of table (and its indexes) the statement
		// may read.
		most float64
	}
	// Stats reads each open record a few times over (a count per partial
	// index) and the small counts tables, never the ended records.
	statsReads := 8.0 * open
	pages := []struct {
		name  string
		reads []read
	}{
		{"Overview", []read{
			{"Stats", q.stats[0][0], []any{now}, "deliveries", statsReads},
			{"ListEnded", q.browse.endedDeliveries, []any{hourAgo, now, endedRead}, "deliveries", endedRead},
		}},
		{"OverviewOfOneTarget", []read{
			{"StatsByTarget", q.stats[1][0], []any{now, "host-3"}, "deliveries", statsReads},
			{"ListEnded", q.browse.endedDeliveries, []any{hourAgo, now, endedRead}, "deliveries", endedRead},
		}},
		{"OutboxOverview", []read{
			{"OutboxStats", q.outboxStats, []any{now}, "outbox_entries", statsReads},
			{"ListEndedEntries", q.browse.endedEntries, []any{hourAgo, now, endedRead}, "outbox_entries", endedRead},
		}},
		{"Deliveries", []read{{"List", q.listDeliveries, []any{"", none, nil, none, page}, "deliveries", page}}},
		{"DeliveriesNextPage", []read{{"List", q.listDeliveries, []any{"done-00500000", none, nil, none, page}, "deliveries", page}}},
		// A third of the ended rows are failed: the walk of the primary
		// key reads about three rows for each one it returns.
		{"DeliveriesFailed", []read{{"List", q.listDeliveries, []any{"", none, nil, []string{"failed"}, page}, "deliveries", 4 * page}}},
		{"DeliveriesOffered", []read{{"ListOpen", q.browse.listOpenDeliveries, []any{"", none, nil, []string{"offered"}, page}, "deliveries", 2 * open}}},
		{"DeliveriesOpen", []read{{"ListOpen", q.browse.listOpenDeliveries, []any{"", none, nil, openStates, page}, "deliveries", 2 * open}}},
		{"DeliveriesOpenOfOneTarget", []read{{"ListOpen", q.browse.listOpenDeliveries, []any{"", []string{"host-3"}, nil, openStates, page}, "deliveries", 2 * open}}},
		{"DeliveriesOpenOfOneCeremony", []read{{"ListOpen", q.browse.listOpenDeliveries, []any{"", none, "ceremony-2", openStates, page}, "deliveries", 2 * open}}},
		{"Entries", []read{{"ListEntries", q.browse.listEntries[0], []any{"", none, none, page}, "outbox_entries", page}}},
		{"EntriesOfOneProvider", []read{{"ListEntries", q.browse.listEntries[0], []any{"", []string{"mail"}, none, page}, "outbox_entries", page}}},
		// The open entries are in three partial indexes (migration 0008),
		// which the planner may read once per arm of the filter, and a
		// claim leaves an entry behind in the index of unclaimed entries
		// until vacuum: the read is bounded by the open rows, not by
		// the ended ones.
		{"EntriesPending", []read{{"ListEntries", q.browse.listEntries[1], []any{"", none, []string{"pending"}, page}, "outbox_entries", 3*open + 10}}},
		{"EntriesOpen", []read{{"ListEntries", q.browse.listEntries[1], []any{"", none, openStatuses, page}, "outbox_entries", 3*open + 10}}},
		{"DeadLetters", []read{
			{"List", q.listDeliveries, []any{"", none, nil, []string{"failed", "expired"}, page}, "deliveries", 2 * page},
			// The entries' IDs are UUIDs, so the open ones sort among
			// the ended ones and the walk passes them too.
			{"ListEntries", q.browse.listEntries[0], []any{"", none, []string{"dead_lettered", "failed"}, page}, "outbox_entries", 2*page + open},
		}},
		{"Delivery", []read{
			{"Get", q.getDelivery, []any{"done-00000042"}, "deliveries", 1},
			{"History", q.deliveryHistory, []any{"done-00000042"}, "delivery_history", 1},
		}},
		{"Entry", []read{
			{"FindByID", q.getEntry, []any{"done-00000042"}, "outbox_entries", 1},
			{"EntryHistory", q.entryHistory, []any{"done-00000042"}, "outbox_entry_history", 1},
		}},
	}
	for _, p := range pages {
		t.Run(p.name, func(t *testing.T) {
			require.LessOrEqual(t, len(p.reads), 2, "a page makes at most two calls")
			for _, r := range p.reads {
				t.Run(r.name, func(t *testing.T) {
					for _, generic := range []bool{false, true} {
						plan := explainAnalyze(ctx, t, pool, r.sql, generic, r.args...)
						seq, reached, tree := inspectPlan(plan, r.table)
						require.Empty(t, seq, "generic %v: sequential scan of a main table: %s", generic, tree)
						require.True(t, reached, "generic %v: %s never scanned: %s", generic, r.table, tree)
						n := rowsRead(plan, r.table)
						t.Logf("generic %v: %v rows read: %s", generic, n, tree)
						require.LessOrEqual(t, n, r.most, "generic %v: rows of %s read: %s", generic, r.table, tree)
					}
				})
			}
		})
	}

	// The control: a filter that no page uses, on a column no index
	// holds, reads every row, so the bounds above can fail.
	t.Run("ControlUnindexedReadsEverything", func(t *testing.T) {
		sql := "SELECT id FROM " + pgx.Identifier{schema, "deliveries"}.Sanitize() + " WHERE attempts = $1 LIMIT 10"
		n := rowsRead(explainAnalyze(ctx, t, pool, sql, false, 99), "deliveries")
		require.Greater(t, n, float64(consoleEndedRows))
	})
}
