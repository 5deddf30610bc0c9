package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/internal/pgtest"
	"github.com/leaseledger/ledger/storekit"
)

// This file proves that a bounded enqueue never reads the target's rows:
// on a target that holds explainBoundEnded ended deliveries and a queue
// of explainBoundQueue, the count of its queue and the read of its oldest
// offered deliveries go through deliveries_offerable_target_idx, the index
// of the queues by target, and the count stops after bound+MaxLimit
// entries of it. It also proves that the redrive statements reach the
// records through the index of ended records.

const (
	explainBoundEnded = 30_000
	explainBoundQueue = 3_000
	explainBound      = 10
)

func TestExplainBoundedQueueReadsOnlyTheQueue(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 60,000 rows; skipped under -short")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool)
	s, err := New(pool, WithSchema(schema), WithClock(func() time.Time { return explainT0 }),
		WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	deliveries := pgx.Identifier{schema, "deliveries"}.Sanitize()
	insertTerminalDeliveries(ctx, t, pool, schema, explainBoundEnded, explainT0)
	insertTerminalEntries(ctx, t, pool, schema, explainBoundEnded, explainT0)
	// Every ended delivery belongs to the bounded target: a plan that read
	// the target's rows would read them all.
	_, err = pool.Exec(ctx, "UPDATE "+deliveries+" SET target = 'bounded'")
	require.NoError(t, err)
	for b := 0; b < explainBoundQueue; b += ledger.MaxLimit {
		reqs := make([]ledger.EnqueueRequest, ledger.MaxLimit)
		for i := range reqs {
			reqs[i] = ledger.EnqueueRequest{ID: ledger.DeliveryID(fmt.Sprintf("queued-%05d", b+i)), Target: "bounded"}
		}
		_, err := s.EnqueueBatch(ctx, reqs, explainT0.Add(time.Duration(b)*time.Millisecond))
		require.NoError(t, err)
	}
	lr, err := s.Lease(ctx, ledger.LeaseFilter{}, explainOwner, explainT0.Add(time.Hour), time.Hour, 100)
	require.NoError(t, err)
	require.Len(t, lr.Leased, 100)
	for _, table := range []string{"deliveries", "outbox_entries"} {
		_, err := pool.Exec(ctx, "ANALYZE "+pgx.Identifier{schema, table}.Sanitize())
		require.NoError(t, err)
	}

	q := s.q
	limit := explainBound + ledger.MaxLimit
	states := []string{string(ledger.DeliveryStateFailed), string(ledger.DeliveryStateExpired)}
	statuses := []string{string(ledger.OutboxStatusFailed), string(ledger.OutboxStatusDeadLettered)}
	from := redriveArgs(storekit.RedrivePosition{}, explainT0, states, []string{"bounded"}, 100)
	cases := []struct {
		name, sql string
		args      []any
		table     string
		index     string // the index the statement must read through
	}{
		{"QueueLength", q.queueLength, []any{"bounded", limit}, "deliveries", "deliveries_offerable_target_idx"},
		{"OldestOffered", q.oldestOffered, []any{"bounded", 5}, "deliveries", "deliveries_offerable_target_idx"},
		{"RedrivableDeliveries", q.redrivableDeliveries, from, "deliveries", "deliveries_ended_idx"},
		{"RedrivableEntries", q.redrivableEntries, redriveArgs(storekit.RedrivePosition{}, explainT0, statuses, nil, 100), "outbox_entries", "outbox_entries_ended_idx"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Run("Custom", func(t *testing.T) {
				plan := explainCustom(ctx, t, pool, c.sql, c.args)
				checkPlan(t, plan, c.table)
				require.True(t, readsIndex(plan, c.index), "not read through %s: %s", c.index, plan.tree())
			})
			t.Run("Generic", func(t *testing.T) {
				plan := explainGeneric(ctx, t, pool, c.sql)
				checkPlan(t, plan, c.table)
				require.True(t, readsIndex(plan, c.index), "not read through %s: %s", c.index, plan.tree())
			})
		})
	}

	// Run, the count reads no more index entries than it may count, of a
	// queue three times longer, beside ten times as many ended rows.
	t.Run("QueueLengthStopsAtItsLimit", func(t *testing.T) {
		var out []byte
		require.NoError(t, pool.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+q.queueLength, "bounded", limit).Scan(&out))
		var plans []struct {
			Plan planNode `json:"Plan"`
		}
		require.NoError(t, json.Unmarshal(out, &plans))
		read := 0.0
		plans[0].Plan.walk(func(n planNode) {
			if n.RelationName == "deliveries" {
				read += (n.ActualRows + n.RemovedByFilter + n.RemovedByRecheck) * n.ActualLoops
			}
		})
		require.Positive(t, read, "the plan never reads deliveries: %s", plans[0].Plan.tree())
		require.LessOrEqual(t, read, float64(limit), "the count read past its limit: %s", plans[0].Plan.tree())
		var n int
		require.NoError(t, pool.QueryRow(ctx, q.queueLength, "bounded", limit).Scan(&n))
		require.Equal(t, limit, n)
	})
}

// readsIndex reports whether any node of plan reads index.
func readsIndex(plan planNode, index string) bool {
	found := false
	plan.walk(func(n planNode) { found = found || n.IndexName == index })
	return found
}
