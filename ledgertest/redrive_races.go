package ledgertest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// redriveRacers is how many callers redrive one record at once in the
// race rules below: operators clicking in two tabs, or two hosts running
// the same redrive by filter.
const redriveRacers = 16

// redriveConcurrentMakesOneRecord: many callers redriving one failed
// delivery at once make one new delivery; one answer is Applied and every
// other Repeated, all naming that delivery.
func redriveConcurrentMakesOneRecord(t *testing.T, f *ledgerFixture) {
	f.failedAt("d-1", "host-1", t0)
	r := f.redriver()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		problems []error
		outcomes = map[ledger.Outcome]int{}
		made     = map[ledger.DeliveryID]int{}
	)
	for i := range redriveRacers {
		wg.Go(func() {
			res, err := r.Redrive(f.ctx, ledger.RedriveRequest{ID: "d-1"}, at(time.Duration(i+1)*time.Millisecond))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				problems = append(problems, fmt.Errorf("redrive %d: %w", i, err))
				return
			}
			outcomes[res.Outcome]++
			made[res.Redriven.ID]++
		})
	}
	wg.Wait()
	require.Empty(t, problems)
	require.Equal(t, map[ledger.Outcome]int{ledger.OutcomeApplied: 1, ledger.OutcomeRepeated: redriveRacers - 1}, outcomes)
	require.Equal(t, map[ledger.DeliveryID]int{storekit.RedriveID("d-1"): redriveRacers}, made, "every answer names the one new delivery")
	require.Len(t, f.all(), 2, "one new delivery beside the original")
	original := f.get("d-1")
	require.Equal(t, ledger.DeliveryStateFailed, original.State, "the original keeps its end")
	require.Equal(t, storekit.RedriveID("d-1"), original.RedrivenTo)
	require.Equal(t, ledger.DeliveryStateOffered, f.get(storekit.RedriveID("d-1")).State)
}

// claimRedriveConcurrentMakesOneEntry is redriveConcurrentMakesOneRecord
// for a dead-lettered outbox entry.
func claimRedriveConcurrentMakesOneEntry(t *testing.T, s ledger.ClaimStore) {
	dead := claimDeadLettered(t, s, "k-1")
	r := claimRedriver(t, s)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		problems []error
		outcomes = map[ledger.Outcome]int{}
		made     = map[ledger.OutboxEntryID]int{}
	)
	for i := range redriveRacers {
		wg.Go(func() {
			res, err := r.RedriveEntry(t.Context(), ledger.RedriveEntryRequest{ID: dead.ID})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				problems = append(problems, fmt.Errorf("redrive %d: %w", i, err))
				return
			}
			outcomes[res.Outcome]++
			made[res.Redriven.ID]++
		})
	}
	wg.Wait()
	require.Empty(t, problems)
	require.Equal(t, map[ledger.Outcome]int{ledger.OutcomeApplied: 1, ledger.OutcomeRepeated: redriveRacers - 1}, outcomes)
	newID := ledger.OutboxEntryIDFor(storekit.RedriveKey("k-1"))
	require.Equal(t, map[ledger.OutboxEntryID]int{newID: redriveRacers}, made, "every answer names the one new entry")
	original := claimFind(t, s, dead.ID)
	require.Equal(t, ledger.OutboxStatusDeadLettered, original.Status, "the original keeps its end")
	require.Equal(t, newID, original.RedrivenTo)
	require.Equal(t, ledger.OutboxStatusPending, claimFind(t, s, newID).Status)
}
