package pgstore_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/internal/pgtest"
	"github.com/leaseledger/ledger/pgstore"
)

// TestManyProcessesNeverShareWork plays several worker processes, each
// with its own pool and store on the same schema, leasing and claiming at
// once: every delivery and entry must be handed out exactly once.
func TestManyProcessesNeverShareWork(t *testing.T) {
	const processes, workers, items = 3, 3, 300
	first, _ := newStore(t)
	ctx := testContext(t)
	reqs := make([]ledger.EnqueueRequest, items)
	envs := make([]ledger.Envelope, items)
	for i := range reqs {
		reqs[i] = ledger.EnqueueRequest{ID: ledger.DeliveryID(fmt.Sprintf("d%04d", i)), Target: ledger.Target(fmt.Sprintf("h%d", i%4))}
		envs[i] = ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: fmt.Sprintf("e%04d", i)}
	}
	_, err := first.EnqueueBatch(ctx, reqs, t0)
	require.NoError(t, err)
	_, err = first.Outbox().EnqueueBatch(ctx, envs)
	require.NoError(t, err)

	stores := make([]*pgstore.Store, processes)
	for i := range stores {
		cfg, err := pgxpool.ParseConfig(pgtest.DSN(t))
		require.NoError(t, err)
		cfg.ConnConfig.RuntimeParams["search_path"] = ""
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		stores[i], err = pgstore.New(pool, pgstore.WithSchema(first.Schema()))
		require.NoError(t, err)
	}

	var mu sync.Mutex
	leased := map[ledger.DeliveryID]int{}
	claimed := map[ledger.OutboxEntryID]int{}
	var errs []error
	var wg sync.WaitGroup
	for p, s := range stores {
		for w := range workers {
			owner := ledger.Owner{Agent: fmt.Sprintf("agent-%d-%d", p, w), Incarnation: "1"}
			wg.Go(func() {
				// Bounded: each round takes at least one item or ends.
				for range items {
					lr, err := s.Lease(ctx, ledger.LeaseFilter{}, owner, t0, time.Hour, 7)
					cs, cerr := s.Outbox().ClaimPending(ctx, ledger.ClaimRequest{Worker: owner.Agent, Now: t0, LeaseDuration: time.Hour, Limit: 7})
					mu.Lock()
					if err != nil || cerr != nil {
						errs = append(errs, err, cerr)
						mu.Unlock()
						return
					}
					for _, ld := range lr.Leased {
						leased[ld.Delivery.ID]++
					}
					for _, c := range cs {
						claimed[c.Entry.ID]++
					}
					mu.Unlock()
					if len(lr.Leased) == 0 && len(cs) == 0 {
						return
					}
				}
			})
		}
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, leased, items)
	require.Len(t, claimed, items)
	for id, n := range leased {
		require.Equal(t, 1, n, "delivery %s leased %d times", id, n)
	}
	for id, n := range claimed {
		require.Equal(t, 1, n, "entry %s claimed %d times", id, n)
	}
}
