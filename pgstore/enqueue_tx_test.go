package pgstore

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/internal/pgtest"
)

// TestEnqueueRoundTrips counts what an enqueue sends once its
// statements are prepared, with notifications on. A batch of new IDs
// takes one round trip: the statement over arrays, up to arrayEnqueueMax
// IDs, or a larger batch's COPY with its notification (enqueue_copy.go).
// When an ID is taken that trip writes nothing, and the call takes the
// careful path, two more: BEGIN with the reads, then ROLLBACK (every ID
// taken). Under a queue bound the careful path is the only one: three
// round trips when it inserts (BEGIN with the reads, the COPY, the
// notification with COMMIT) and one for the bound's checks. Bounds apply
// to deliveries only.
func TestEnqueueRoundTrips(t *testing.T) {
	for _, tc := range []struct {
		name               string
		opts               []Option
		size               int
		outboxFresh, fresh int64 // inserting, the outbox and deliveries
		outboxSeen, seen   int64 // every ID taken
	}{
		{name: "Arrays", size: 10, outboxFresh: 1, fresh: 1, outboxSeen: 3, seen: 3},
		{name: "ArraysOfOne", size: 1, outboxFresh: 1, fresh: 1, outboxSeen: 3, seen: 3},
		{name: "CopyOfALargeBatch", size: arrayEnqueueMax + 1, outboxFresh: 1, fresh: 1, outboxSeen: 3, seen: 3},
		{name: "CopyUnderABound", opts: []Option{WithQueueBound(1_000_000)}, size: 10, outboxFresh: 1, fresh: 4, outboxSeen: 3, seen: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, trips, ctx := tripStore(t, append(tc.opts, WithNotify(true))...)
			o := s.Outbox()
			batch := 0
			envs := func() []ledger.Envelope {
				batch++
				envs := make([]ledger.Envelope, tc.size)
				for i := range envs {
					envs[i] = ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: fmt.Sprintf("b%d-%d", batch, i)}
				}
				return envs
			}
			reqs := func() []ledger.EnqueueRequest {
				batch++
				reqs := make([]ledger.EnqueueRequest, tc.size)
				for i := range reqs {
					reqs[i] = ledger.EnqueueRequest{ID: ledger.DeliveryID(fmt.Sprintf("b%d-%d", batch, i)), Target: "host"}
				}
				return reqs
			}
			applied := func(outcomes ...ledger.Outcome) {
				t.Helper()
				for _, oc := range outcomes {
					require.Equal(t, ledger.OutcomeApplied, oc)
				}
			}
			last := tc.size - 1
			n := tripsOf(t, trips, func() {
				rs, err := o.EnqueueBatch(ctx, envs())
				require.NoError(t, err)
				applied(rs[0].Outcome, rs[last].Outcome)
			})
			require.EqualValues(t, tc.outboxFresh, n, "outbox EnqueueBatch")
			n = tripsOf(t, trips, func() {
				rs, err := s.EnqueueBatch(ctx, reqs(), groupT0)
				require.NoError(t, err)
				applied(rs[0].Outcome, rs[last].Outcome)
			})
			require.EqualValues(t, tc.fresh, n, "EnqueueBatch")

			again := envs()
			_, err := o.EnqueueBatch(ctx, again)
			require.NoError(t, err)
			n = tripsOf(t, trips, func() {
				rs, err := o.EnqueueBatch(ctx, again)
				require.NoError(t, err)
				require.Equal(t, ledger.OutcomeRepeated, rs[0].Outcome)
			})
			require.EqualValues(t, tc.outboxSeen, n, "outbox EnqueueBatch of taken keys")
			againReqs := reqs()
			_, err = s.EnqueueBatch(ctx, againReqs, groupT0)
			require.NoError(t, err)
			n = tripsOf(t, trips, func() {
				rs, err := s.EnqueueBatch(ctx, againReqs, groupT0)
				require.NoError(t, err)
				require.Equal(t, ledger.OutcomeRepeated, rs[0].Outcome)
			})
			require.EqualValues(t, tc.seen, n, "EnqueueBatch of taken IDs")
		})
	}
	t.Run("Single", func(t *testing.T) {
		s, trips, ctx := tripStore(t, WithNotify(true))
		k := 0
		n := tripsOf(t, trips, func() {
			k++
			r, err := s.Outbox().Enqueue(ctx, ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: fmt.Sprintf("one-%d", k)})
			require.NoError(t, err)
			require.Equal(t, ledger.OutcomeApplied, r.Outcome)
		})
		require.EqualValues(t, 1, n, "outbox Enqueue")
		n = tripsOf(t, trips, func() {
			k++
			r, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: ledger.DeliveryID(fmt.Sprintf("one-%d", k)), Target: "host"}, groupT0)
			require.NoError(t, err)
			require.Equal(t, ledger.OutcomeApplied, r.Outcome)
		})
		require.EqualValues(t, 1, n, "Enqueue")
	})
}

// TestEnqueueByArraysKeepsAGenericPlan: the statements over arrays are
// planned once per connection, not with every call. PostgreSQL keeps
// planning a prepared statement anew while its generic plan looks
// dearer than the custom ones; the outbox's, which numbers a batch's
// entries from the sequence, did so while it counted the rows with
// generate_series, whose generic estimate is a thousand rows: a tenth
// of a millisecond of planning per call. (pg_prepared_statements counts
// plans from PostgreSQL 14 on.)
func TestEnqueueByArraysKeepsAGenericPlan(t *testing.T) {
	s, _, ctx := tripStore(t, WithNotify(true))
	var version int
	require.NoError(t, s.pool.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version))
	if version < 140000 {
		t.Logf("PostgreSQL %d counts no plans; the statements run, as the other tests show", version)
		return
	}
	for i := range 12 {
		envs := make([]ledger.Envelope, 5)
		reqs := make([]ledger.EnqueueRequest, 5)
		for k := range envs {
			envs[k] = ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: fmt.Sprintf("g%d-%d", i, k)}
			reqs[k] = ledger.EnqueueRequest{ID: ledger.DeliveryID(fmt.Sprintf("g%d-%d", i, k)), Target: "host"}
		}
		_, err := s.Outbox().EnqueueBatch(ctx, envs)
		require.NoError(t, err)
		_, err = s.EnqueueBatch(ctx, reqs, groupT0)
		require.NoError(t, err)
	}
	for _, st := range []arrayStatement{s.q.enqueueEntries[1][1], s.q.enqueueDeliveries[1]} {
		var generic, custom int64
		// The pool has one connection: the one that prepared them.
		require.NoError(t, s.pool.QueryRow(ctx, "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = $1",
			st.name).Scan(&generic, &custom))
		require.LessOrEqual(t, custom, int64(5), "custom plans of %s", st.sql)
		require.Positive(t, generic, "generic plans of %s", st.sql)
	}
}

// TestEnqueueInEveryQueryExecMode: the enqueue by arrays sends its
// statement prepared under a name only when the pool caches statements;
// unnamed in the other extended-protocol modes (as through a PgBouncer
// without prepared statements); and a pool of the simple protocol
// enqueues by COPY. Each enqueues, and reads back, what it was given.
func TestEnqueueInEveryQueryExecMode(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			cfg, err := pgxpool.ParseConfig(pgtest.DSN(t))
			require.NoError(t, err)
			cfg.ConnConfig.DefaultQueryExecMode = mode
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			s, err := New(pool, WithSchema(pgtest.Schema(t, pool)), WithNotify(true))
			require.NoError(t, err)
			require.NoError(t, s.Migrate(ctx))
			envs := []ledger.Envelope{
				{Provider: "p", Kind: "k", IdempotencyKey: "a", Payload: []byte{0, 1, 2}, Metadata: ledger.Metadata{"m": "1"}},
				{Provider: "p", Kind: "k", IdempotencyKey: "b"},
			}
			rs, err := s.Outbox().EnqueueBatch(ctx, envs)
			require.NoError(t, err)
			for i, r := range rs {
				require.Equal(t, ledger.OutcomeApplied, r.Outcome)
				got, err := s.Outbox().FindByID(ctx, r.Entry.ID)
				require.NoError(t, err)
				require.Equal(t, r.Entry, got, "entry %d as enqueued", i)
			}
			reqs := []ledger.EnqueueRequest{{ID: "d-1", Target: "host", Payload: []byte("x")}, {ID: "d-2", Target: "host"}}
			drs, err := s.EnqueueBatch(ctx, reqs, groupT0)
			require.NoError(t, err)
			for i, r := range drs {
				require.Equal(t, ledger.OutcomeApplied, r.Outcome)
				got, err := s.Get(ctx, r.Delivery.ID)
				require.NoError(t, err)
				require.Equal(t, r.Delivery, got, "delivery %d as enqueued", i)
			}
			// Again: every ID taken, answered from the records.
			rs, err = s.Outbox().EnqueueBatch(ctx, envs)
			require.NoError(t, err)
			require.Equal(t, ledger.OutcomeRepeated, rs[0].Outcome)
			drs, err = s.EnqueueBatch(ctx, reqs, groupT0)
			require.NoError(t, err)
			require.Equal(t, ledger.OutcomeRepeated, drs[1].Outcome)
		})
	}
}
