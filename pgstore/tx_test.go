package pgstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

func TestWithTx(t *testing.T) {
	owner := ledger.Owner{Agent: "agent", Incarnation: "boot-1"}
	env := ledger.Envelope{Provider: "mail", Kind: "welcome", Payload: []byte("hi"), IdempotencyKey: "user-1/welcome"}
	claimReq := ledger.ClaimRequest{Worker: "w", Now: t0, LeaseDuration: time.Minute, Limit: 10}

	t.Run("RollbackLeavesNothing", func(t *testing.T) {
		s, pool := newStore(t)
		ctx := testContext(t)
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		r, err := s.WithTx(tx).Enqueue(ctx, ledger.EnqueueRequest{ID: "d1", Target: "host"}, t0)
		require.NoError(t, err)
		require.Equal(t, ledger.OutcomeApplied, r.Outcome)
		er, err := s.WithTx(tx).Outbox().Enqueue(ctx, env)
		require.NoError(t, err)
		require.Equal(t, ledger.OutcomeApplied, er.Outcome)
		// Inside the transaction the records are there.
		_, err = s.WithTx(tx).Get(ctx, "d1")
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(ctx))

		_, err = s.Get(ctx, "d1")
		require.ErrorIs(t, err, ledger.ErrNotFound)
		_, err = s.Outbox().FindByID(ctx, er.Entry.ID)
		require.ErrorIs(t, err, ledger.ErrNotFound)
		lr, err := s.Lease(ctx, ledger.LeaseFilter{}, owner, t0, time.Minute, 10)
		require.NoError(t, err)
		require.Empty(t, lr.Leased)
	})

	t.Run("CommitMakesWorkAvailable", func(t *testing.T) {
		s, pool := newStore(t)
		ctx := testContext(t)
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = s.WithTx(tx).Enqueue(ctx, ledger.EnqueueRequest{ID: "d1", Target: "host"}, t0)
		require.NoError(t, err)
		er, err := s.WithTx(tx).Outbox().Enqueue(ctx, env)
		require.NoError(t, err)

		// Not visible to others before the commit.
		lr, err := s.Lease(ctx, ledger.LeaseFilter{}, owner, t0, time.Minute, 10)
		require.NoError(t, err)
		require.Empty(t, lr.Leased)
		cs, err := s.Outbox().ClaimPending(ctx, claimReq)
		require.NoError(t, err)
		require.Empty(t, cs)

		require.NoError(t, tx.Commit(ctx))
		lr, err = s.Lease(ctx, ledger.LeaseFilter{}, owner, t0, time.Minute, 10)
		require.NoError(t, err)
		require.Len(t, lr.Leased, 1)
		require.Equal(t, ledger.DeliveryID("d1"), lr.Leased[0].Delivery.ID)
		cs, err = s.Outbox().ClaimPending(ctx, claimReq)
		require.NoError(t, err)
		require.Len(t, cs, 1)
		require.Equal(t, er.Entry.ID, cs[0].Entry.ID)
	})

	t.Run("TransitionsRollBackWithTheCaller", func(t *testing.T) {
		s, pool := newStore(t)
		ctx := testContext(t)
		_, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: "d1", Target: "host"}, t0)
		require.NoError(t, err)
		er, err := s.Outbox().Enqueue(ctx, env)
		require.NoError(t, err)
		before, err := s.Get(ctx, "d1")
		require.NoError(t, err)

		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		lr, err := s.WithTx(tx).Lease(ctx, ledger.LeaseFilter{}, owner, t0, time.Minute, 10)
		require.NoError(t, err)
		require.Len(t, lr.Leased, 1)
		cs, err := s.WithTx(tx).Outbox().ClaimPending(ctx, claimReq)
		require.NoError(t, err)
		require.Len(t, cs, 1)
		cr, err := s.WithTx(tx).Outbox().MarkClaimDelivered(ctx, cs[0].Claim, ledger.EmissionResult{ProviderRef: "r1"})
		require.NoError(t, err)
		require.True(t, cr.Applied())
		require.NoError(t, tx.Rollback(ctx))

		after, err := s.Get(ctx, "d1")
		require.NoError(t, err)
		require.Equal(t, before, after)
		e, err := s.Outbox().FindByID(ctx, er.Entry.ID)
		require.NoError(t, err)
		require.Equal(t, er.Entry, e)
	})

	t.Run("FailedCallLeavesTheTransactionUsable", func(t *testing.T) {
		s, pool := newStore(t)
		ctx := testContext(t)
		er, err := s.Outbox().Enqueue(ctx, env)
		require.NoError(t, err)
		_, err = s.Enqueue(ctx, ledger.EnqueueRequest{ID: "d1", Target: "host"}, t0)
		require.NoError(t, err)

		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		// A stale Save fails inside its savepoint...
		stale := er.Entry
		stale.Version = 99
		_, err = s.WithTx(tx).Outbox().Save(ctx, stale)
		require.ErrorIs(t, err, ledger.ErrConflict)
		// ...and a MarkProcessed that does not apply undoes the fence row
		// it created to lock the target.
		mr, err := s.WithTx(tx).MarkProcessed(ctx, "d1", owner, ledger.FenceOf(7), "act", t0)
		require.NoError(t, err)
		require.Equal(t, ledger.OutcomeWrongState, mr.Outcome)
		// The caller's transaction goes on and commits its own work.
		_, err = s.WithTx(tx).Enqueue(ctx, ledger.EnqueueRequest{ID: "d2", Target: "host"}, t0)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))

		_, err = s.Get(ctx, "d2")
		require.NoError(t, err)
		var fences int
		require.NoError(t, pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %q.target_fences`, s.Schema())).Scan(&fences))
		require.Zero(t, fences, "a call that does not apply writes no fence row")
	})

	t.Run("NilTxIsInvalid", func(t *testing.T) {
		s, _ := newStore(t)
		_, err := s.WithTx(nil).Get(testContext(t), "d1")
		require.ErrorIs(t, err, ledger.ErrInvalid)
		_, err = s.WithTx(nil).Outbox().FindPending(testContext(t), 1)
		require.ErrorIs(t, err, ledger.ErrInvalid)
	})
}
