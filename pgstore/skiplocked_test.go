package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/pgstore"
)

// lockWait bounds how long a lease or claim may take while another
// transaction holds a row lock: far more than the call needs, far less
// than the test's deadline. A call that waits for the lock fails with
// the context's error when it runs out.
const lockWait = 5 * time.Second

// holdRowLock starts a transaction of its own and makes lock run in it, a
// store call made through WithTx that locks a record's row; the lock is
// held until the test ends or release is called.
func holdRowLock(t *testing.T, pool *pgxpool.Pool, lock func(ctx context.Context, tx pgx.Tx) error) (release func()) {
	t.Helper()
	ctx := testContext(t)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, lock(ctx, tx))
	done := false
	release = func() {
		if !done {
			done = true
			require.NoError(t, tx.Rollback(context.WithoutCancel(ctx)))
		}
	}
	t.Cleanup(release)
	return release
}

// TestLeaseSkipsRowsLockedByAnotherTransaction: a transaction holding a
// delivery's row lock (a caller's own, through WithTx) must not make a
// lease wait: with every filter the lease returns the other deliveries
// within a bounded time, and the locked one once the lock is gone.
func TestLeaseSkipsRowsLockedByAnotherTransaction(t *testing.T) {
	s, pool := newStore(t)
	ctx := testContext(t)
	// "first" is the oldest, so a lease that waited for its lock would
	// wait before granting anything.
	for i, id := range []ledger.DeliveryID{"first", "second"} {
		_, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: id, Target: "host", Ceremony: "cer"}, t0.Add(time.Duration(i)*time.Second))
		require.NoError(t, err)
	}
	release := holdRowLock(t, pool, func(ctx context.Context, tx pgx.Tx) error {
		res, err := s.WithTx(tx).RecordActivation(ctx, "first", ledger.Activation{Result: ledger.ActivationDelivered}, t0)
		if err == nil {
			require.True(t, res.Applied())
		}
		return err
	})
	owner := ledger.Owner{Agent: "agent", Incarnation: "boot"}
	now := t0.Add(time.Minute)
	for name, filter := range map[string]ledger.LeaseFilter{
		"NoFilter":           {},
		"Targets":            {Targets: []ledger.Target{"host"}},
		"Ceremony":           {Ceremony: "cer"},
		"TargetsAndCeremony": {Targets: []ledger.Target{"host", "other"}, Ceremony: "cer"},
	} {
		lctx, cancel := context.WithTimeout(ctx, lockWait)
		res, err := s.Lease(lctx, filter, owner, now, time.Minute, 10)
		cancel()
		require.NoError(t, err, "%s: a lease must not wait behind another transaction's row lock", name)
		require.Len(t, res.Leased, 1, name)
		require.Equal(t, ledger.DeliveryID("second"), res.Leased[0].Delivery.ID, "%s: the unlocked delivery is granted", name)
		_, err = s.Release(ctx, res.Leased[0].Lease, now)
		require.NoError(t, err)
	}
	release()
	res, err := s.Lease(ctx, ledger.LeaseFilter{}, owner, now, time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, res.Leased, 2, "once the lock is gone both are offered")
}

// TestClaimsSkipRowsLockedByAnotherTransaction: ClaimPending and
// ClaimRetryReady, likewise, claim the entries nobody holds a lock on.
func TestClaimsSkipRowsLockedByAnotherTransaction(t *testing.T) {
	clock := t0
	s, pool := newStore(t, pgstore.WithClock(func() time.Time { return clock }))
	ctx := testContext(t)
	o := s.Outbox()
	enqueue := func(key string) ledger.OutboxEntry {
		t.Helper()
		res, err := o.Enqueue(ctx, ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: key})
		require.NoError(t, err)
		clock = clock.Add(time.Second) // "first-..." is the older of each pair
		return res.Entry
	}
	lockEntry := func(e ledger.OutboxEntry) func() {
		return holdRowLock(t, pool, func(ctx context.Context, tx pgx.Tx) error {
			_, err := o.WithTx(tx).Save(ctx, e) // the same fields: the write locks the row
			return err
		})
	}
	claim := func(name string, call func(context.Context, ledger.ClaimRequest) ([]ledger.ClaimedEntry, error), want ledger.OutboxEntryID) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, lockWait)
		defer cancel()
		got, err := call(cctx, ledger.ClaimRequest{Worker: "w", Now: t0.Add(time.Hour), LeaseDuration: time.Minute, Limit: 10})
		require.NoError(t, err, "%s must not wait behind another transaction's row lock", name)
		require.Len(t, got, 1, name)
		require.Equal(t, want, got[0].Entry.ID, "%s: the unlocked entry is claimed", name)
	}

	firstPending, secondPending := enqueue("first-pending"), enqueue("second-pending")
	releasePending := lockEntry(firstPending)
	claim("ClaimPending", o.ClaimPending, secondPending.ID)
	releasePending()

	var retry []ledger.OutboxEntry
	for _, key := range []string{"first-retry", "second-retry"} {
		e := enqueue(key)
		due := t0.Add(time.Duration(len(retry)) * time.Second)
		got, err := o.MarkFailed(ctx, e.ID, ledger.EmissionError{Message: "later"}, &due)
		require.NoError(t, err)
		retry = append(retry, got)
	}
	releaseRetry := lockEntry(retry[0])
	claim("ClaimRetryReady", o.ClaimRetryReady, retry[1].ID)
	releaseRetry()
	got, err := o.ClaimPending(ctx, ledger.ClaimRequest{Worker: "w", Now: t0.Add(time.Hour), LeaseDuration: time.Minute, Limit: 10})
	require.NoError(t, err)
	require.Len(t, got, 1, "once the lock is gone the locked entry is claimed")
	require.Equal(t, firstPending.ID, got[0].Entry.ID)
}
