package pgstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// TestHistoryIsKeptInTheRecord: the transitions of a store with history
// on write no row of the history tables; their entries are in the
// records' own column (migrations/0012), one per transition after the
// creation, which the record implies. (TestHistoryRecordsEveryPath reads
// the same records' histories back.)
func TestHistoryIsKeptInTheRecord(t *testing.T) {
	s, pool := newStore(t, fixedClock(t0))
	ctx := testContext(t)
	ids, entries := exercise(ctx, t, s)
	for _, table := range []string{"delivery_history", "outbox_entry_history"} {
		var n int
		require.NoError(t, pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %q.%q`, s.Schema(), table)).Scan(&n))
		require.Zero(t, n, table)
	}
	for _, id := range ids {
		d, err := s.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, int(d.Version)-1, historyRows(ctx, t, pool, s.Schema(), "delivery_history", string(id)), "delivery %s", id)
	}
	for _, id := range entries {
		e, err := s.Outbox().FindByID(ctx, id)
		require.NoError(t, err)
		require.Equal(t, int(e.Version)-1, historyRows(ctx, t, pool, s.Schema(), "outbox_entry_history", string(id)), "entry %s", id)
	}
}

// TestHistoryMergesRowsWrittenBeforeTheRecordKeptIt: a record whose early
// transitions are rows of the history table, as a build before
// migrations/0012 wrote them, and whose later ones are in its own column,
// has one history in seq order, the same as if all were in one place.
func TestHistoryMergesRowsWrittenBeforeTheRecordKeptIt(t *testing.T) {
	s, pool := newStore(t)
	ctx := testContext(t)
	owner := ledger.Owner{Agent: "agent", Incarnation: "boot-1"}
	_, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: "d1", Target: "host"}, t0)
	require.NoError(t, err)
	lr, err := s.Lease(ctx, ledger.LeaseFilter{}, owner, t0, time.Minute, 1)
	require.NoError(t, err)
	require.Len(t, lr.Leased, 1)
	ar, err := s.Acknowledge(ctx, lr.Leased[0].Lease, "seen \"quoted\"\n", t0.Add(time.Second))
	require.NoError(t, err)
	require.True(t, ar.Applied())
	want, err := s.History(ctx, "d1")
	require.NoError(t, err)
	require.Len(t, want, 3)

	// Move the record's entries into the history table, as they stood
	// before the migration, then apply one more transition.
	schema := s.Schema()
	_, err = pool.Exec(ctx, fmt.Sprintf(`WITH moved AS (
		SELECT d.id, e FROM %[1]q.deliveries AS d, jsonb_array_elements(d.history) AS e WHERE d.id = 'd1'
	)
	INSERT INTO %[1]q.delivery_history (id, seq, op, from_state, to_state, outcome, actor, reason, at)
	SELECT id, (e->>0)::bigint, e->>1, e->>2, e->>3, e->>4, e->>5, e->>6, (e->>7)::timestamptz FROM moved`, schema))
	require.NoError(t, err)
	_, err = pool.Exec(ctx, fmt.Sprintf(`UPDATE %q.deliveries SET history = NULL WHERE id = 'd1'`, schema))
	require.NoError(t, err)
	got, err := s.History(ctx, "d1")
	require.NoError(t, err)
	require.Equal(t, want, got, "the rows read as the column did")

	mr, err := s.MarkProcessed(ctx, "d1", owner, ledger.FenceOf(1), "act", t0.Add(2*time.Second))
	require.NoError(t, err)
	require.True(t, mr.Applied())
	got, err = s.History(ctx, "d1")
	require.NoError(t, err)
	require.Len(t, got, 4)
	require.Equal(t, want, got[:3])
	require.Equal(t, ledger.Transition{Seq: 4, Op: ledger.OpMarkProcessed, From: "acknowledged", To: "processed",
		Outcome: ledger.OutcomeApplied, Actor: "agent/boot-1", At: t0.Add(2 * time.Second)}, got[3])
}

// TestHistoryKeepsAnyReason: a reason with quotes, backslashes, control
// characters and text outside ASCII goes into the record's history and
// comes back as it was.
func TestHistoryKeepsAnyReason(t *testing.T) {
	s, _ := newStore(t, fixedClock(t0))
	ctx := testContext(t)
	o := s.Outbox()
	er, err := o.Enqueue(ctx, ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: "k1"})
	require.NoError(t, err)
	cs, err := o.ClaimPending(ctx, ledger.ClaimRequest{Worker: "w\"1", Now: t0, LeaseDuration: time.Minute, Limit: 1})
	require.NoError(t, err)
	require.Len(t, cs, 1)
	reason := "back \"soon\" \\ \x01\t\n é 日本 \u2028 }]"
	rr, err := o.ReleaseClaim(ctx, cs[0].Claim, reason)
	require.NoError(t, err)
	require.True(t, rr.Applied())
	h, err := o.EntryHistory(ctx, er.Entry.ID)
	require.NoError(t, err)
	require.Len(t, h, 3)
	require.Equal(t, "w\"1", h[1].Actor)
	require.Equal(t, reason, h[2].Reason)
}
