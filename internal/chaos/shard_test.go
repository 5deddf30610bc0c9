package chaos

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/memstore"
	"github.com/leaseledger/ledger/shard"
)

// TestChaosShardedMemstore runs the in-memory scenario over a ledger and
// an outbox spread over three memstores (shard.New, shard.NewOutbox),
// with the same faults and the same checker: the routing must lose
// nothing, hold nothing twice and explain every end, as one store does.
func TestChaosShardedMemstore(t *testing.T) {
	p := runParams(false)
	r := newRun(t, p, newShared())
	ctx := t.Context()
	var ls []ledger.Ledger
	var os []ledger.ClaimStore
	for range 3 {
		s := memstore.New(memstore.WithClock(r.sh.now))
		ls, os = append(ls, s), append(os, s.Outbox())
	}
	l, err := shard.New(ls)
	require.NoError(t, err)
	o, err := shard.NewOutbox(os)
	require.NoError(t, err)
	b := backend{deliveries: l, entries: o}

	clean := r.newWorker("clean", false)
	clean.main = b
	r.setup(ctx, clean)
	workers := make([]*worker, p.Workers)
	for i := range workers {
		workers[i] = r.newWorker(fmt.Sprintf("w%02d", i), true)
		workers[i].main = b
	}
	r.chaos(ctx, workers)
	r.drain(ctx, clean)

	calls := r.log.history()
	r.verify(calls, readFinal(ctx, t, b, entryIDs(calls)), checkOptions{planned: p.Items})
	if !testing.Short() {
		require.Positive(t, r.faults.get(faultCrashHolder), "no holder crashed")
		require.Positive(t, r.faults.get(faultCancel), "no call was cancelled")
	}
}
