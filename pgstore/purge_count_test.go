package pgstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/pgstore"
)

// TestCountPurgeableIsWhatPurgeDeletes counts, for several cutoffs, what
// the purge would delete, then purges and requires the same numbers.
func TestCountPurgeableIsWhatPurgeDeletes(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s, _ := newStore(t, fixedClock(t0))
	for i := range 5 {
		id := ledger.DeliveryID(fmt.Sprintf("d-%d", i))
		_, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: id, Target: "h"}, t0)
		require.NoError(t, err)
		if i < 4 {
			_, err = s.Abandon(ctx, id, ledger.Cause{Kind: "k"}, t0.Add(time.Duration(i)*time.Minute))
			require.NoError(t, err)
		}
	}
	for i := range 3 {
		res, err := s.Outbox().Enqueue(ctx, ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: fmt.Sprint(i)})
		require.NoError(t, err)
		if i < 2 {
			_, err = s.Outbox().MarkDelivered(ctx, res.Entry.ID, ledger.EmissionResult{})
			require.NoError(t, err)
		}
	}
	for _, c := range []struct {
		cutoff            time.Time
		deliveries, ended int64
	}{
		{t0, 0, 0},
		{t0.Add(90 * time.Second), 2, 2},
		{t0.Add(time.Hour), 4, 2},
	} {
		n, err := s.CountPurgeable(ctx, c.cutoff)
		require.NoError(t, err)
		require.Equal(t, c.deliveries, n, "deliveries before %s", c.cutoff)
		m, err := s.Outbox().CountPurgeable(ctx, c.cutoff)
		require.NoError(t, err)
		require.Equal(t, c.ended, m, "entries before %s", c.cutoff)
	}
	n, err := s.CountPurgeable(ctx, t0.Add(90*time.Second))
	require.NoError(t, err)
	purged, err := s.PurgeDeliveries(ctx, t0.Add(90*time.Second), ledger.MaxLimit)
	require.NoError(t, err)
	require.Equal(t, n, int64(purged), "the count is what the purge deletes")
	_, err = s.CountPurgeable(ctx, time.Time{})
	require.ErrorIs(t, err, ledger.ErrInvalid)
}

func TestSchemaVersionIsTheLastMigration(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s, _ := newStore(t)
	versions, err := s.MigrationStatus(ctx)
	require.NoError(t, err)
	require.Equal(t, versions[len(versions)-1].Version, pgstore.SchemaVersion())
	require.True(t, versions[len(versions)-1].Applied())
}
