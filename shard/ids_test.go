package shard_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/memstore"
	"github.com/leaseledger/ledger/shard"
)

// Both stores answer the ID look-up in one call.
var (
	_ shard.DeliveryIDFinder = (*memstore.Store)(nil)
	_ shard.EntryIDFinder    = (*memstore.Outbox)(nil)
)

// countingStore is a memstore that counts the look-ups a sharded enqueue
// makes of it.
type countingStore struct {
	*memstore.Store
	gets, finds atomic.Int64
}

func (s *countingStore) Get(ctx context.Context, id ledger.DeliveryID) (ledger.Delivery, error) {
	s.gets.Add(1)
	return s.Store.Get(ctx, id)
}

func (s *countingStore) FindDeliveryIDs(ctx context.Context, ids []ledger.DeliveryID) ([]ledger.DeliveryID, error) {
	s.finds.Add(1)
	return s.Store.FindDeliveryIDs(ctx, ids)
}

// getOnly hides FindDeliveryIDs: a store of the contract alone.
type getOnly struct{ ledger.Ledger }

func TestEnqueueLooksIDsUpInOneCallPerShard(t *testing.T) {
	stores := []*countingStore{{Store: memstore.New()}, {Store: memstore.New()}, {Store: memstore.New()}}
	l, err := shard.New([]ledger.Ledger{stores[0], stores[1], stores[2]}, shard.WithPlacement(placed))
	require.NoError(t, err)
	enqueue(t, l, "d-1", "t0-a", t0)
	for _, s := range stores {
		s.finds.Store(0)
	}

	// A batch of ten for targets on shards 1 and 2: each shard is asked
	// once for the IDs it is not home to, none of them by Get.
	var reqs []ledger.EnqueueRequest
	for i := range 10 {
		target := ledger.Target([]string{"t1-a", "t2-a"}[i%2])
		reqs = append(reqs, ledger.EnqueueRequest{ID: ledger.DeliveryID("b-" + string(rune('a'+i))), Target: target})
	}
	reqs = append(reqs, ledger.EnqueueRequest{ID: "d-1", Target: "t2-a", Payload: []byte("d-1")})
	res, err := l.EnqueueBatch(t.Context(), reqs, t0)
	require.NoError(t, err)
	require.Equal(t, ledger.OutcomeConflict, res[len(res)-1].Outcome, "the ID shard 0 holds is found there")
	for i, s := range stores {
		require.Equal(t, int64(1), s.finds.Load(), "shard %d asked once", i)
		require.Zero(t, s.gets.Load(), "shard %d read no record", i)
	}

	// One Enqueue asks the two other shards, once each.
	require.Equal(t, ledger.OutcomeConflict, enqueue(t, l, "d-1", "t1-a", t0).Outcome)
	require.Equal(t, []int64{2, 1, 2}, []int64{stores[0].finds.Load(), stores[1].finds.Load(), stores[2].finds.Load()})
}

func TestEnqueueLooksIDsUpByGetOnAStoreWithoutTheFinder(t *testing.T) {
	ls := []ledger.Ledger{getOnly{memstore.New()}, getOnly{memstore.New()}, getOnly{memstore.New()}}
	l, err := shard.New(ls, shard.WithPlacement(placed))
	require.NoError(t, err)
	enqueue(t, l, "d-1", "t0-a", t0)
	require.Equal(t, ledger.OutcomeConflict, enqueue(t, l, "d-1", "t1-a", t0).Outcome)
	res, err := l.EnqueueBatch(t.Context(), []ledger.EnqueueRequest{
		{ID: "d-2", Target: "t1-a"}, {ID: "d-1", Target: "t2-a", Payload: []byte("d-1")}, {ID: "d-1", Target: "t0-a", Payload: []byte("d-1")},
	}, t0)
	require.NoError(t, err)
	require.Equal(t, []ledger.Outcome{ledger.OutcomeApplied, ledger.OutcomeConflict, ledger.OutcomeRepeated},
		[]ledger.Outcome{res[0].Outcome, res[1].Outcome, res[2].Outcome})
}
