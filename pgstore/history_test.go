package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/pgstore"
	"github.com/leaseledger/ledger/storekit"
)

// historyRows counts the history entries stored for id, or for every
// record when id is empty, straight from the tables: the rows of a
// history table ("delivery_history" or "outbox_entry_history") and the
// entries in the history column of its records (migrations/0012).
func historyRows(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema, table, id string) int {
	t.Helper()
	records := map[string]string{"delivery_history": "deliveries", "outbox_entry_history": "outbox_entries"}[table]
	require.NotEmpty(t, records, table)
	var n int
	require.NoError(t, pool.QueryRow(ctx, fmt.Sprintf(`SELECT (SELECT count(*) FROM %[1]q.%[2]q WHERE $1 = '' OR id = $1)
		+ (SELECT coalesce(sum(jsonb_array_length(history)), 0) FROM %[1]q.%[3]q WHERE $1 = '' OR id = $1)`,
		schema, table, records), id).Scan(&n))
	return n
}

// ops lists the operations of a history, for compact assertions.
func ops(ts []ledger.Transition) []ledger.Operation {
	out := make([]ledger.Operation, len(ts))
	for i, t := range ts {
		out[i] = t.Op
	}
	return out
}

func TestHistoryIsWrittenInTheTransitionsTransaction(t *testing.T) {
	owner := ledger.Owner{Agent: "agent", Incarnation: "boot-1"}
	other := ledger.Owner{Agent: "other", Incarnation: "boot-1"}

	t.Run("Deliveries", func(t *testing.T) {
		s, pool := newStore(t)
		ctx := testContext(t)
		_, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: "d1", Target: "host"}, t0)
		require.NoError(t, err)

		// Rolled back: the transitions and their history rows go together.
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		lr, err := s.WithTx(tx).Lease(ctx, ledger.LeaseFilter{}, owner, t0, time.Minute, 1)
		require.NoError(t, err)
		require.Len(t, lr.Leased, 1)
		ar, err := s.WithTx(tx).Acknowledge(ctx, lr.Leased[0].Lease, "seen", t0)
		require.NoError(t, err)
		require.True(t, ar.Applied())
		inside, err := s.WithTx(tx).History(ctx, "d1")
		require.NoError(t, err)
		require.Equal(t, []ledger.Operation{ledger.OpEnqueue, ledger.OpLease, ledger.OpAcknowledge}, ops(inside))
		outside, err := s.History(ctx, "d1")
		require.NoError(t, err)
		require.Equal(t, []ledger.Operation{ledger.OpEnqueue}, ops(outside), "uncommitted history is not visible to others")
		require.NoError(t, tx.Rollback(ctx))
		h, err := s.History(ctx, "d1")
		require.NoError(t, err)
		require.Equal(t, []ledger.Operation{ledger.OpEnqueue}, ops(h))
		// The creation is implied by the record: no row holds it.
		require.Equal(t, 0, historyRows(ctx, t, pool, s.Schema(), "delivery_history", "d1"))

		// Committed: one row per applied transition, none for a call that
		// did not apply (MarkProcessed by the wrong owner), and the call
		// that failed in its savepoint leaves the transaction usable.
		tx, err = pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		lr, err = s.WithTx(tx).Lease(ctx, ledger.LeaseFilter{}, owner, t0.Add(time.Second), time.Minute, 1)
		require.NoError(t, err)
		require.Len(t, lr.Leased, 1)
		ar, err = s.WithTx(tx).Acknowledge(ctx, lr.Leased[0].Lease, "seen", t0.Add(2*time.Second))
		require.NoError(t, err)
		require.True(t, ar.Applied())
		mr, err := s.WithTx(tx).MarkProcessed(ctx, "d1", other, nil, "act", t0.Add(3*time.Second))
		require.NoError(t, err)
		require.Equal(t, ledger.OutcomeWrongOwner, mr.Outcome)
		mr, err = s.WithTx(tx).MarkProcessed(ctx, "d1", owner, ledger.FenceOf(1), "act", t0.Add(4*time.Second))
		require.NoError(t, err)
		require.True(t, mr.Applied())
		require.NoError(t, tx.Commit(ctx))

		h, err = s.History(ctx, "d1")
		require.NoError(t, err)
		lease := lr.Leased[0].Lease
		require.Equal(t, []ledger.Transition{
			{Seq: 1, Op: ledger.OpEnqueue, To: "offered", Outcome: ledger.OutcomeApplied, At: t0},
			{Seq: 2, Op: ledger.OpLease, From: "offered", To: "leased", Outcome: ledger.OutcomeApplied, Actor: "agent/boot-1", At: lease.GrantedAt},
			{Seq: 3, Op: ledger.OpAcknowledge, From: "leased", To: "acknowledged", Outcome: ledger.OutcomeApplied, Actor: "agent/boot-1", At: t0.Add(2 * time.Second)},
			{Seq: 4, Op: ledger.OpMarkProcessed, From: "acknowledged", To: "processed", Outcome: ledger.OutcomeApplied, Actor: "agent/boot-1", At: t0.Add(4 * time.Second)},
		}, h)
		st, err := s.Stats(ctx, ledger.StatsFilter{}, t0.Add(time.Hour))
		require.NoError(t, err)
		require.Equal(t, int64(1), st.ByState[ledger.DeliveryStateProcessed], "the count moved with the commit")
	})

	t.Run("OutboxEntries", func(t *testing.T) {
		s, pool := newStore(t, fixedClock(t0))
		o := s.Outbox()
		ctx := testContext(t)
		er, err := o.Enqueue(ctx, ledger.Envelope{Provider: "mail", Kind: "welcome", IdempotencyKey: "k1"})
		require.NoError(t, err)
		id := er.Entry.ID
		req := ledger.ClaimRequest{Worker: "w1", Now: t0, LeaseDuration: time.Minute, Limit: 1}

		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		cs, err := o.WithTx(tx).ClaimPending(ctx, req)
		require.NoError(t, err)
		require.Len(t, cs, 1)
		cr, err := o.WithTx(tx).MarkClaimDelivered(ctx, cs[0].Claim, ledger.EmissionResult{ProviderRef: "r1"})
		require.NoError(t, err)
		require.True(t, cr.Applied())
		inside, err := o.WithTx(tx).EntryHistory(ctx, id)
		require.NoError(t, err)
		require.Equal(t, []ledger.Operation{ledger.OpEnqueue, ledger.OpClaim, ledger.OpMarkDelivered}, ops(inside))
		st, err := o.WithTx(tx).OutboxStats(ctx, t0)
		require.NoError(t, err)
		require.Equal(t, int64(1), st.ByStatus[ledger.OutboxStatusDelivered])
		require.NoError(t, tx.Rollback(ctx))

		h, err := o.EntryHistory(ctx, id)
		require.NoError(t, err)
		require.Equal(t, []ledger.Operation{ledger.OpEnqueue}, ops(h))
		require.Equal(t, 0, historyRows(ctx, t, pool, s.Schema(), "outbox_entry_history", string(id)))
		st, err = o.OutboxStats(ctx, t0)
		require.NoError(t, err)
		require.Zero(t, st.ByStatus[ledger.OutboxStatusDelivered], "the count rolled back with the transition")
		require.Equal(t, int64(1), st.ByStatus[ledger.OutboxStatusPending])

		tx, err = pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		cs, err = o.WithTx(tx).ClaimPending(ctx, req)
		require.NoError(t, err)
		require.Len(t, cs, 1)
		rr, err := o.WithTx(tx).ReleaseClaim(ctx, cs[0].Claim, "shutting down")
		require.NoError(t, err)
		require.True(t, rr.Applied())
		require.NoError(t, tx.Commit(ctx))
		h, err = o.EntryHistory(ctx, id)
		require.NoError(t, err)
		require.Equal(t, []ledger.Transition{
			{Seq: 1, Op: ledger.OpEnqueue, To: "pending", Outcome: ledger.OutcomeApplied, At: t0},
			{Seq: 2, Op: ledger.OpClaim, From: "pending", To: "pending", Outcome: ledger.OutcomeApplied, Actor: "w1", At: t0},
			{Seq: 3, Op: ledger.OpReleaseClaim, From: "pending", To: "pending", Outcome: ledger.OutcomeApplied, Actor: "w1", Reason: "shutting down", At: t0},
		}, h)
	})
}

// exercise runs every kind of transition of both contracts on s: each
// record it leaves went through several, by every path that writes (the
// single-record transitions, Lease with its reclaims, the sweeps, the
// batch enqueues, the claims and their completions, the base outbox
// calls). It returns the IDs of the records.
func exercise(ctx context.Context, t *testing.T, s *pgstore.Store) ([]ledger.DeliveryID, []ledger.OutboxEntryID) {
	t.Helper()
	a1 := ledger.Owner{Agent: "a", Incarnation: "1"}
	a2 := ledger.Owner{Agent: "a", Incarnation: "2"}
	var ids []ledger.DeliveryID
	var reqs []ledger.EnqueueRequest
	for i := range 8 {
		id := ledger.DeliveryID(fmt.Sprintf("d%d", i))
		ids = append(ids, id)
		reqs = append(reqs, ledger.EnqueueRequest{ID: id, Target: ledger.Target(fmt.Sprintf("h%d", i%2)), Ceremony: "c1", Policy: ledger.Policy{MaxAttempts: 3}})
	}
	_, err := s.EnqueueBatch(ctx, reqs[1:], t0)
	require.NoError(t, err)
	_, err = s.Enqueue(ctx, reqs[0], t0)
	require.NoError(t, err)
	lr, err := s.Lease(ctx, ledger.LeaseFilter{}, a1, t0, time.Minute, 8)
	require.NoError(t, err)
	require.Len(t, lr.Leased, 8)
	leases := map[ledger.DeliveryID]ledger.Lease{}
	for _, l := range lr.Leased {
		leases[l.Delivery.ID] = l.Lease
	}
	now := t0.Add(time.Second)
	applied := func(r ledger.DeliveryResult, err error) {
		t.Helper()
		require.NoError(t, err)
		require.True(t, r.Applied(), r.Outcome)
	}
	applied(s.RenewLease(ctx, leases["d0"], now, time.Minute))
	applied(s.Acknowledge(ctx, leases["d0"], "seen", now))
	applied(s.MarkProcessed(ctx, "d0", a1, nil, "act", now))
	applied(s.MarkFailed(ctx, leases["d1"], ledger.FailureReason{Message: "boom"}, now))
	applied(s.Release(ctx, leases["d2"], now))
	applied(s.RecordActivation(ctx, "d3", ledger.Activation{Result: ledger.ActivationDelivered}, now))
	applied(s.Acknowledge(ctx, leases["d4"], "seen", now))
	// d3 and d5..d7 are still leased by a1: a2 takes them back, then
	// leases again.
	lr, err = s.Lease(ctx, ledger.LeaseFilter{Targets: []ledger.Target{"h1"}}, a2, now, time.Minute, 8)
	require.NoError(t, err)
	require.Len(t, lr.Reclaimed, 4)
	require.NotEmpty(t, lr.Leased)
	later := now.Add(10 * time.Minute)
	_, err = s.Expire(ctx, later) // leases ran out, d4's acknowledgement lapsed
	require.NoError(t, err)
	applied(s.Abandon(ctx, "d2", ledger.Cause{Kind: ledger.CauseQueueBounded}, later))
	_, err = s.Supersede(ctx, "h0", "h9", ledger.Follow, later)
	require.NoError(t, err)
	_, err = s.ExpireCeremony(ctx, "c1", ledger.Cause{Kind: ledger.CauseCeremonyEnded}, later)
	require.NoError(t, err)

	o := s.Outbox()
	var keys []ledger.Envelope
	for i := range 5 {
		keys = append(keys, ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: fmt.Sprintf("k%d", i)})
	}
	_, err = o.EnqueueBatch(ctx, keys[1:])
	require.NoError(t, err)
	er, err := o.Enqueue(ctx, keys[0])
	require.NoError(t, err)
	var entries []ledger.OutboxEntryID
	for _, env := range keys {
		entries = append(entries, ledger.OutboxEntryIDFor(env.IdempotencyKey))
	}
	cs, err := o.ClaimPending(ctx, ledger.ClaimRequest{Worker: "w", Now: t0, LeaseDuration: time.Minute, Limit: 4})
	require.NoError(t, err)
	require.Len(t, cs, 4)
	done := func(r ledger.OutboxResult, err error) {
		t.Helper()
		require.NoError(t, err)
		require.True(t, r.Applied(), r.Outcome)
	}
	retry := t0.Add(time.Minute)
	done(o.RenewClaim(ctx, cs[0].Claim, t0, time.Minute))
	done(o.MarkClaimFailed(ctx, cs[0].Claim, ledger.EmissionError{Code: "503"}, &retry))
	done(o.MarkClaimDelivered(ctx, cs[1].Claim, ledger.EmissionResult{ProviderRef: "r"}))
	done(o.ReleaseClaim(ctx, cs[2].Claim, "bye"))
	e := cs[3].Entry
	e.Status = ledger.OutboxStatusDeferred
	e.NextAttemptAt = retry
	done(o.SaveClaim(ctx, cs[3].Claim, e))
	rc, err := o.ClaimRetryReady(ctx, ledger.ClaimRequest{Worker: "w", Now: retry, LeaseDuration: time.Minute, Limit: 4})
	require.NoError(t, err)
	require.NotEmpty(t, rc)
	done(o.MarkClaimDeadLettered(ctx, rc[0].Claim, ledger.EmissionError{Code: "400"}, "poison"))
	cur, err := o.FindByID(ctx, er.Entry.ID)
	require.NoError(t, err)
	cur.Attempts = 2
	_, err = o.Save(ctx, cur)
	require.NoError(t, err)
	_, err = o.MarkFailed(ctx, er.Entry.ID, ledger.EmissionError{Message: "no"}, nil)
	require.NoError(t, err)
	_, err = o.MarkDelivered(ctx, entries[3], ledger.EmissionResult{}) // released above
	require.NoError(t, err)
	return ids, entries
}

func TestHistoryRecordsEveryPath(t *testing.T) {
	s, _ := newStore(t, fixedClock(t0))
	ctx := testContext(t)
	ids, entries := exercise(ctx, t, s)
	// Every applied transition bumps Version by one and writes one row
	// numbered by it, so a record's history is exactly 1..Version.
	for _, id := range ids {
		d, err := s.Get(ctx, id)
		require.NoError(t, err)
		h, err := s.History(ctx, id)
		require.NoError(t, err)
		require.Len(t, h, int(d.Version), "delivery %s", id)
		for i, tr := range h {
			require.Equal(t, int64(i+1), tr.Seq, "delivery %s", id)
		}
		require.Equal(t, string(d.State), h[len(h)-1].To, "delivery %s", id)
		require.Equal(t, d.UpdatedAt, h[len(h)-1].At, "delivery %s", id)
	}
	for _, id := range entries {
		e, err := s.Outbox().FindByID(ctx, id)
		require.NoError(t, err)
		h, err := s.Outbox().EntryHistory(ctx, id)
		require.NoError(t, err)
		require.Len(t, h, int(e.Version), "entry %s", id)
		require.Equal(t, string(e.Status), h[len(h)-1].To, "entry %s", id)
	}
}

func TestWithoutHistoryWritesNone(t *testing.T) {
	s, pool := newStore(t, fixedClock(t0), pgstore.WithoutHistory())
	ctx := testContext(t)
	ids, entries := exercise(ctx, t, s)
	require.Zero(t, historyRows(ctx, t, pool, s.Schema(), "delivery_history", ""))
	require.Zero(t, historyRows(ctx, t, pool, s.Schema(), "outbox_entry_history", ""))
	for _, id := range ids {
		h, err := s.History(ctx, id)
		require.NoError(t, err)
		require.NotNil(t, h)
		require.Empty(t, h)
	}
	for _, id := range entries {
		h, err := s.Outbox().EntryHistory(ctx, id)
		require.NoError(t, err)
		require.NotNil(t, h)
		require.Empty(t, h)
	}
	// The counts are kept all the same.
	st, err := s.Stats(ctx, ledger.StatsFilter{}, t0)
	require.NoError(t, err)
	require.Equal(t, int64(1), st.ByState[ledger.DeliveryStateProcessed])
	ost, err := s.Outbox().OutboxStats(ctx, t0)
	require.NoError(t, err)
	require.Equal(t, int64(2), ost.ByStatus[ledger.OutboxStatusDelivered])
}

func TestHistoryGoesWithThePurge(t *testing.T) {
	s, pool := newStore(t, fixedClock(t0))
	ctx := testContext(t)
	ids, entries := exercise(ctx, t, s)
	n, err := s.PurgeDeliveries(ctx, storekit.MaxTime(), ledger.MaxLimit)
	require.NoError(t, err)
	require.Positive(t, n)
	m, err := s.Outbox().PurgeEntries(ctx, storekit.MaxTime(), ledger.MaxLimit)
	require.NoError(t, err)
	require.Positive(t, m)
	kept := 0
	for _, id := range ids {
		d, err := s.Get(ctx, id)
		if err != nil {
			require.ErrorIs(t, err, ledger.ErrNotFound)
			_, err = s.History(ctx, id)
			require.ErrorIs(t, err, ledger.ErrNotFound)
			require.Zero(t, historyRows(ctx, t, pool, s.Schema(), "delivery_history", string(id)), "purged %s", id)
			continue
		}
		kept++
		require.False(t, d.State.Terminal())
		// Every transition has its row but the creation, which the record implies.
		require.Equal(t, int(d.Version)-1, historyRows(ctx, t, pool, s.Schema(), "delivery_history", string(id)))
	}
	require.Equal(t, len(ids)-n, kept)
	for _, id := range entries {
		if _, err := s.Outbox().FindByID(ctx, id); err == nil {
			continue
		}
		_, err = s.Outbox().EntryHistory(ctx, id)
		require.ErrorIs(t, err, ledger.ErrNotFound)
		require.Zero(t, historyRows(ctx, t, pool, s.Schema(), "outbox_entry_history", string(id)))
	}
	// A purged ID is free again, and its new record's history starts anew.
	_, err = s.Enqueue(ctx, ledger.EnqueueRequest{ID: "d0", Target: "h0"}, t0)
	require.NoError(t, err)
	h, err := s.History(ctx, "d0")
	require.NoError(t, err)
	require.Equal(t, []ledger.Operation{ledger.OpEnqueue}, ops(h))
	require.Equal(t, int64(1), h[0].Seq)
}

func TestHistoryRejects(t *testing.T) {
	s, _ := newStore(t)
	ctx := testContext(t)
	_, err := s.History(ctx, "nope")
	require.ErrorIs(t, err, ledger.ErrNotFound)
	_, err = s.Outbox().EntryHistory(ctx, "nope")
	require.ErrorIs(t, err, ledger.ErrNotFound)
	for _, bad := range []string{"", "a\x00b", string([]byte{0xff})} {
		_, err = s.History(ctx, ledger.DeliveryID(bad))
		require.ErrorIs(t, err, ledger.ErrInvalid, "%q", bad)
		_, err = s.Outbox().EntryHistory(ctx, ledger.OutboxEntryID(bad))
		require.ErrorIs(t, err, ledger.ErrInvalid, "%q", bad)
	}
	_, err = s.WithTx(nil).History(ctx, "d1")
	require.ErrorIs(t, err, ledger.ErrInvalid)
}
