package memstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// grantKey names one grant of one delivery.
type grantKey struct {
	id  ledger.DeliveryID
	seq int64
}

// workerLog is what one goroutine saw. Each goroutine writes only its own.
type workerLog struct {
	grants    []ledger.Lease
	ended     map[grantKey]time.Time // applied Release and MarkFailed, at their now
	released  map[ledger.DeliveryID]int
	acked     map[grantKey]bool
	reclaimed map[ledger.DeliveryID][]reclaimEvent
	err       error
}

// reclaimEvent is one delivery listed in LeaseResult.Reclaimed.
type reclaimEvent struct {
	at   time.Time
	by   ledger.Owner
	used bool
}

// TestConcurrentLeasing runs many goroutines leasing, acknowledging,
// processing, failing, releasing and sweeping one store, with two of them
// sharing an agent under different incarnations, then checks from their
// logs that no delivery was ever held by two unexpired leases, that
// attempts add up, and that the indexes still agree with the records.
func TestConcurrentLeasing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(WithDefaultPolicy(ledger.Policy{MaxAttempts: ledger.MaxAttemptsLimit, BackoffBase: time.Millisecond, BackoffMax: 4 * time.Millisecond, AckWindow: 20 * time.Millisecond}))
	// Few deliveries, topped up by the workers, so that they contend.
	const deliveries, workers, rounds = 20, 10, 300
	var reqs []ledger.EnqueueRequest
	for i := range deliveries {
		reqs = append(reqs, ledger.EnqueueRequest{ID: ledger.DeliveryID(fmt.Sprintf("d%03d", i)), Target: ledger.Target(fmt.Sprint("t", i%5)), Ceremony: "c"})
	}
	_, err := s.EnqueueBatch(ctx, reqs, t0)
	require.NoError(t, err)

	// A logical clock shared by every goroutine: each call takes the next
	// millisecond. Calls may reach the lock out of clock order, which is
	// exactly the disorder a store must survive.
	var tick atomic.Int64
	clock := func() time.Time { return t0.Add(time.Duration(tick.Add(1)) * time.Millisecond) }

	logs := make([]workerLog, workers+1)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lg := &logs[w]
			lg.ended, lg.released = map[grantKey]time.Time{}, map[ledger.DeliveryID]int{}
			lg.acked, lg.reclaimed = map[grantKey]bool{}, map[ledger.DeliveryID][]reclaimEvent{}
			owner := ledger.Owner{Agent: fmt.Sprint("agent", w), Incarnation: "1"}
			if w < 2 { // two live processes under one agent name
				owner = ledger.Owner{Agent: "shared", Incarnation: fmt.Sprint("inc", w)}
			}
			rng := rand.New(rand.NewPCG(uint64(w), 99))
			lg.err = runWorker(ctx, s, w, owner, rng, clock, rounds, lg)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range rounds {
			if _, err := s.Expire(ctx, clock()); err != nil {
				logs[workers].err = err
				return
			}
		}
	}()
	wg.Wait()

	grants := map[ledger.DeliveryID][]ledger.Lease{}
	ended := map[grantKey]time.Time{}
	released := map[ledger.DeliveryID]int{}
	acked := map[grantKey]bool{}
	reclaimed := map[ledger.DeliveryID][]reclaimEvent{}
	tokens := map[ledger.Token]bool{}
	for _, lg := range logs {
		require.NoError(t, lg.err)
		for _, l := range lg.grants {
			grants[l.DeliveryID] = append(grants[l.DeliveryID], l)
			require.False(t, tokens[l.Token], "token handed out twice")
			tokens[l.Token] = true
		}
		for k, v := range lg.ended {
			ended[k] = v
		}
		for id, n := range lg.released {
			released[id] += n
		}
		for k := range lg.acked {
			acked[k] = true
		}
		for id, ts := range lg.reclaimed {
			reclaimed[id] = append(reclaimed[id], ts...)
		}
	}
	require.Greater(t, len(tokens), deliveries, "the workers must actually have leased")

	for _, d := range snapshot(s) {
		gs := grants[d.ID]
		slices.SortFunc(gs, func(a, b ledger.Lease) int { return int(a.Seq - b.Seq) })
		require.Equal(t, int64(len(gs)), d.LeaseSeq, "%s: every grant was seen once", d.ID)
		for i := 1; i < len(gs); i++ {
			prev, cur := gs[i-1], gs[i]
			require.Equal(t, prev.Seq+1, cur.Seq, "%s: sequence", d.ID)
			require.False(t, acked[grantKey{d.ID, prev.Seq}], "%s: acknowledged work was leased again", d.ID)
			end := prev.ExpiresAt
			if at, ok := ended[grantKey{d.ID, prev.Seq}]; ok && at.Before(end) {
				end = at
			}
			if cur.GrantedAt.Before(end) {
				// Only the incarnation rule ends a lease without a time the
				// holder saw: pair the early end with a distinct reclaim of
				// this delivery by another incarnation of the holder's
				// agent, made at or before the new grant. (The reclaiming
				// call's now may precede prev's grant: calls reach the
				// lock out of clock order.)
				paired := false
				for j := range reclaimed[d.ID] {
					e := &reclaimed[d.ID][j]
					if !e.used && e.by.Agent == prev.Owner.Agent && e.by.Incarnation != prev.Owner.Incarnation && !e.at.After(cur.GrantedAt) {
						e.used, paired = true, true
						break
					}
				}
				require.True(t, paired, "%s: grant %d at %s while grant %d held until %s",
					d.ID, cur.Seq, cur.GrantedAt, prev.Seq, end)
			}
		}
		assert.Equal(t, len(gs)-released[d.ID], d.Attempts, "%s: attempts = grants - releases", d.ID)
		assert.LessOrEqual(t, d.Attempts, d.Policy.MaxAttempts, "%s", d.ID)
	}
	require.NoError(t, checkStore(s))
}

// runWorker is one goroutine's loop. It returns the first unexpected error
// or outcome instead of failing the test, because goroutines must not
// call t.Fatal.
func runWorker(ctx context.Context, s *Store, w int, owner ledger.Owner, rng *rand.Rand, clock func() time.Time, rounds int, lg *workerLog) error {
	for round := range rounds {
		if round%2 == 0 {
			id := ledger.DeliveryID(fmt.Sprintf("w%d-%03d", w, round))
			if _, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: id, Target: ledger.Target(fmt.Sprint("t", round%5)), Ceremony: "c"}, clock()); err != nil {
				return err
			}
		}
		var f ledger.LeaseFilter
		if rng.IntN(2) == 0 {
			f.Targets = []ledger.Target{ledger.Target(fmt.Sprint("t", rng.IntN(5))), ledger.Target(fmt.Sprint("t", rng.IntN(5)))}
		}
		now := clock()
		res, err := s.Lease(ctx, f, owner, now, time.Duration(1+rng.IntN(15))*time.Millisecond, 1+rng.IntN(3))
		if err != nil {
			return err
		}
		for _, id := range res.Reclaimed {
			lg.reclaimed[id] = append(lg.reclaimed[id], reclaimEvent{at: now, by: owner})
		}
		for _, ld := range res.Leased {
			l := ld.Lease
			if ld.Delivery.Lease == nil || ld.Delivery.Lease.Seq != l.Seq || ld.Delivery.Lease.Token != "" || l.Token == "" ||
				ld.Delivery.State != ledger.DeliveryStateLeased {
				return fmt.Errorf("%s: granted record does not hold its lease", l.DeliveryID)
			}
			lg.grants = append(lg.grants, l)
			k := grantKey{l.DeliveryID, l.Seq}
			switch rng.IntN(5) {
			case 0, 1:
				at := clock()
				r, err := s.Acknowledge(ctx, l, "", at)
				if err != nil {
					return err
				}
				if r.Applied() {
					lg.acked[k] = true
					if rng.IntN(2) == 0 {
						if _, err := s.MarkProcessed(ctx, l.DeliveryID, l.Owner, nil, "done", clock()); err != nil {
							return err
						}
					}
				}
			case 2:
				at := clock()
				r, err := s.MarkFailed(ctx, l, ledger.FailureReason{Message: "x"}, at)
				if err != nil {
					return err
				}
				if r.Applied() {
					lg.ended[k] = at
				}
			case 3:
				at := clock()
				r, err := s.Release(ctx, l, at)
				if err != nil {
					return err
				}
				if r.Applied() {
					lg.ended[k] = at
					lg.released[l.DeliveryID]++
				}
			}
			// case 4: hold the lease and let it run out.
		}
	}
	return nil
}
