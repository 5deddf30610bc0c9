package ledgertest

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// testClaimRaces runs the named races of the outbox; see ledger_races.go
// for what a named race is.
func testClaimRaces(t *testing.T, newStore NewClaimStoreFunc) {
	claimRun(t, "IdempotentEnqueueFrom16Goroutines", newStore, claimRaceIdempotentEnqueue)
}

// claimRaceIdempotentEnqueue: one idempotency key enqueued by 16 goroutines
// at once is written once: exactly one Applied, 15 Repeated, one entry
// that every caller sees.
func claimRaceIdempotentEnqueue(t *testing.T, s ledger.ClaimStore) {
	ctx := t.Context()
	for r := range raceIdempotentRounds {
		env := claimEnvelope(fmt.Sprintf("idem-%03d", r))
		results := make([]ledger.OutboxResult, raceIdempotentCallers)
		errs := make([]error, raceIdempotentCallers)
		fns := make([]func(), raceIdempotentCallers)
		for c := range raceIdempotentCallers {
			fns[c] = func() { results[c], errs[c] = s.Enqueue(ctx, env) }
		}
		raceTogether(t, fns...)
		counts := map[ledger.Outcome]int{}
		for c := range raceIdempotentCallers {
			require.NoError(t, errs[c], "round %d: caller %d", r, c)
			counts[results[c].Outcome]++
		}
		require.Equal(t, map[ledger.Outcome]int{ledger.OutcomeApplied: 1, ledger.OutcomeRepeated: raceIdempotentCallers - 1}, counts, "round %d", r)
		stored := claimFind(t, s, ledger.OutboxEntryIDFor(env.IdempotencyKey))
		require.Equal(t, int64(1), stored.Version, "round %d: written once", r)
		for c := range raceIdempotentCallers {
			claimRequireEntry(t, stored, results[c].Entry, "round %d: caller %d must see the one entry", r, c)
		}
		pending, err := s.FindPending(ctx, ledger.MaxLimit)
		require.NoError(t, err)
		require.Len(t, pending, r+1, "round %d: one entry per key", r)
	}
}
