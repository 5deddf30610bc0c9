package pgstore

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/internal/pgtest"
)

// TestExplainReclaimWithManyLeasesHeld runs the incarnation rule's lookup
// (queries.reclaimable), which every Lease runs, under EXPLAIN ANALYZE on
// a table where one agent's incarnation holds most of the rows, as a busy
// worker does: the planner then thinks the agent's leases are everywhere,
// and the lookup must still read none of them when the holder itself
// leases, with a custom plan and with a generic one. The same check on a
// table of mostly terminal rows is part of TestExplainHotQueriesUseIndexes.
func TestExplainReclaimWithManyLeasesHeld(t *testing.T) {
	if testing.Short() {
		t.Skip("leases 2,250 deliveries; skipped under -short")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool)
	s, err := New(pool, WithSchema(schema), WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))

	const held = 1_500
	holder := ledger.Owner{Agent: "agent-1", Incarnation: "boot-5"}
	other := ledger.Owner{Agent: "agent-2", Incarnation: "boot-1"}
	reqs := make([]ledger.EnqueueRequest, 0, ledger.MaxLimit)
	for i := range 2 * held {
		reqs = append(reqs, ledger.EnqueueRequest{ID: ledger.DeliveryID(fmt.Sprintf("d-%05d", i)), Target: "host"})
		if len(reqs) == cap(reqs) {
			_, err := s.EnqueueBatch(ctx, reqs, explainT0)
			require.NoError(t, err)
			reqs = reqs[:0]
		}
	}
	for _, o := range []struct {
		owner ledger.Owner
		n     int
	}{{holder, held}, {other, held / 2}} {
		for n := o.n; n > 0; {
			r, err := s.Lease(ctx, ledger.LeaseFilter{}, o.owner, explainT0, time.Hour, min(n, ledger.MaxLimit))
			require.NoError(t, err)
			require.NotEmpty(t, r.Leased)
			n -= len(r.Leased)
		}
	}
	_, err = pool.Exec(ctx, "ANALYZE "+pgx.Identifier{schema, "deliveries"}.Sanitize())
	require.NoError(t, err)
	checkReclaimReads(ctx, t, pool, s.q.reclaimable, holder, held)
}

// checkReclaimReads checks that the reclaim statement, run for holder's
// agent with a custom and a generic plan, reads none of the rows when
// holder's own incarnation asks, and exactly the held ones (up to a sweep
// batch) when incarnations sorting before and after holder's ask, which
// shows the count works.
func checkReclaimReads(ctx context.Context, t *testing.T, pool *pgxpool.Pool, sql string, holder ledger.Owner, held int) {
	t.Helper()
	for _, generic := range []bool{false, true} {
		read := func(incarnation string) float64 {
			plan := explainAnalyze(ctx, t, pool, sql, generic, "", sweepBatchSize, holder.Agent, incarnation)
			t.Logf("generic %v, incarnation %s: %s", generic, incarnation, plan.tree())
			return rowsRead(plan, "deliveries")
		}
		require.Zero(t, read(holder.Incarnation), "generic %v: the calling incarnation's own leases were read", generic)
		for _, other := range []string{"boot-0", "boot-9"} {
			require.GreaterOrEqual(t, read(other), float64(min(held, sweepBatchSize)), "generic %v: %s", generic, other)
		}
	}
}

// explainAnalyze runs sql with args under EXPLAIN (ANALYZE) in a
// transaction it rolls back, so the locks and writes it makes are undone;
// with generic, as the generic plan PostgreSQL may switch a cached
// prepared statement to.
func explainAnalyze(ctx context.Context, t *testing.T, pool *pgxpool.Pool, sql string, generic bool, args ...any) planNode {
	t.Helper()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "DEALLOCATE ALL") }()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	mode := "force_custom_plan"
	if generic {
		mode = "force_generic_plan"
	}
	_, err = tx.Exec(ctx, "SET LOCAL plan_cache_mode = "+mode)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "PREPARE explain_analyze AS "+sql)
	require.NoError(t, err)
	params := make([]string, len(args))
	for i := range params {
		params[i] = fmt.Sprintf("$%d", i+1)
	}
	var out []byte
	// The simple protocol puts the arguments into EXECUTE as literals.
	require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE explain_analyze("+strings.Join(params, ", ")+")",
		append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...).Scan(&out))
	return decodePlan(t, out)
}

// rowsRead returns how many rows the scans of plan on table and its
// indexes read, those they returned and those they read and dropped.
func rowsRead(plan planNode, table string) float64 {
	var n float64
	plan.walk(func(p planNode) {
		if strings.Contains(p.NodeType, "Scan") && (p.RelationName == table || strings.HasPrefix(p.IndexName, table+"_")) {
			n += (p.ActualRows + p.RemovedByFilter + p.RemovedByRecheck) * p.ActualLoops
		}
	})
	return n
}
