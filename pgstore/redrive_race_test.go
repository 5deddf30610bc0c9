package pgstore_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/pgstore"
)

// redriveRounds and redriveRacers size TestConcurrentRedrivesWithoutHistory:
// with the original read without its lock, most rounds of 8 racers give
// one of them a write-back that finds the row changed.
const (
	redriveRounds = 4
	redriveRacers = 8
)

// TestConcurrentRedrivesWithoutHistory races redrives of one record on a
// store that keeps no history. With history on, the history table's key
// stops a second write of the original's redrive; without it, only the
// original's row lock does: every call but one must wait for it, find
// the record redriven and answer Repeated, none an error.
func TestConcurrentRedrivesWithoutHistory(t *testing.T) {
	t.Parallel()
	t.Run("Delivery", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t, pgstore.WithoutHistory())
		ctx := testContext(t)
		owner := ledger.Owner{Agent: "agent", Incarnation: "boot-1"}
		for round := range redriveRounds {
			id := ledger.DeliveryID(fmt.Sprintf("d-%d", round))
			_, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: id, Target: "host-1", Payload: []byte("p"),
				Policy: ledger.Policy{MaxAttempts: 1, BackoffBase: time.Second, BackoffMax: time.Second, AckWindow: time.Minute}}, t0)
			require.NoError(t, err)
			leased, err := s.Lease(ctx, ledger.LeaseFilter{Targets: []ledger.Target{"host-1"}}, owner, t0, time.Minute, 1)
			require.NoError(t, err)
			require.Len(t, leased.Leased, 1)
			res, err := s.MarkFailed(ctx, leased.Leased[0].Lease, ledger.FailureReason{Message: "gone", Permanent: true}, t0)
			require.NoError(t, err)
			require.True(t, res.Applied())
			outcomes, errs := race(func(i int) (ledger.Outcome, error) {
				r, err := s.Redrive(ctx, ledger.RedriveRequest{ID: id}, t0.Add(time.Duration(i+1)*time.Millisecond))
				return r.Outcome, err
			})
			require.Empty(t, errs, "round %d", round)
			require.Equal(t, map[ledger.Outcome]int{ledger.OutcomeApplied: 1, ledger.OutcomeRepeated: redriveRacers - 1}, outcomes, "round %d", round)
		}
	})
	t.Run("Entry", func(t *testing.T) {
		t.Parallel()
		s, _ := newStore(t, pgstore.WithoutHistory(), fixedClock(t0))
		o := s.Outbox()
		ctx := testContext(t)
		for round := range redriveRounds {
			e, err := o.Enqueue(ctx, ledger.Envelope{Provider: "p", Kind: "k", Payload: []byte("p"), IdempotencyKey: fmt.Sprintf("k-%d", round)})
			require.NoError(t, err)
			_, err = o.MarkDeadLettered(ctx, e.Entry.ID, ledger.EmissionError{Code: "550", Message: "gone"}, "permanent")
			require.NoError(t, err)
			outcomes, errs := race(func(int) (ledger.Outcome, error) {
				r, err := o.RedriveEntry(ctx, ledger.RedriveEntryRequest{ID: e.Entry.ID})
				return r.Outcome, err
			})
			require.Empty(t, errs, "round %d", round)
			require.Equal(t, map[ledger.Outcome]int{ledger.OutcomeApplied: 1, ledger.OutcomeRepeated: redriveRacers - 1}, outcomes, "round %d", round)
		}
	})
}

// race runs call redriveRacers times at once and collects the outcomes
// and errors.
func race(call func(i int) (ledger.Outcome, error)) (map[ledger.Outcome]int, []error) {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		outcomes = map[ledger.Outcome]int{}
		errs     []error
		start    = make(chan struct{})
	)
	for i := range redriveRacers {
		wg.Go(func() {
			<-start
			o, err := call(i)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			outcomes[o]++
		})
	}
	close(start)
	wg.Wait()
	return outcomes, errs
}
