package ledgertest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// claimBatcher returns s as an OutboxBatchEnqueuer. Every conforming claim
// store offers batch enqueueing, so a store without it fails the suite.
func claimBatcher(t *testing.T, s ledger.ClaimStore) ledger.OutboxBatchEnqueuer {
	t.Helper()
	b, ok := s.(ledger.OutboxBatchEnqueuer)
	if !ok {
		t.Fatalf("%T does not implement ledger.OutboxBatchEnqueuer", s)
	}
	return b
}

// testOutboxEnqueueBatch checks OutboxBatchEnqueuer.EnqueueBatch: one
// result per envelope, in order, each as Enqueue would answer it; a key
// seen earlier in the batch is judged against the earlier envelope.
// Atomicity for errors is checked in Validation.
func testOutboxEnqueueBatch(t *testing.T, newStore NewClaimStoreFunc) {
	claimRun(t, "StoreOffersBatches", newStore, func(t *testing.T, s ledger.ClaimStore) {
		claimBatcher(t, s)
	})

	claimRun(t, "ResultsPerEnvelopeInOrder", newStore, func(t *testing.T, s ledger.ClaimStore) {
		same := claimEnqueue(t, s, "existing-same")
		other := claimEnqueue(t, s, "existing-other")
		changed := claimEnvelope("existing-other")
		changed.Kind = "kind-b"
		envs := []ledger.Envelope{
			claimEnvelope("new-1"),
			claimEnvelope("existing-same"),
			changed,
			claimEnvelope("new-2"),
		}
		res, err := claimBatcher(t, s).EnqueueBatch(t.Context(), envs)
		require.NoError(t, err)
		require.Len(t, res, len(envs))
		want := []ledger.Outcome{ledger.OutcomeApplied, ledger.OutcomeRepeated, ledger.OutcomeConflict, ledger.OutcomeApplied}
		for i, r := range res {
			require.Equal(t, want[i], r.Outcome, "result %d", i)
			require.Equal(t, ledger.OutboxEntryIDFor(envs[i].IdempotencyKey), r.Entry.ID, "result %d", i)
			claimRequireStored(t, s, r.Entry)
		}
		require.Equal(t, envs[0], res[0].Entry.Envelope)
		require.Equal(t, ledger.OutboxStatusPending, res[0].Entry.Status)
		require.Equal(t, int64(1), res[0].Entry.Version)
		claimRequireEntry(t, same, res[1].Entry, "a repeat writes nothing")
		claimRequireEntry(t, other, res[2].Entry, "a conflict writes nothing")
	})

	claimRun(t, "RepeatInsideBatchIsRepeated", newStore, func(t *testing.T, s ledger.ClaimStore) {
		env := claimEnvelope("twice")
		res, err := claimBatcher(t, s).EnqueueBatch(t.Context(), []ledger.Envelope{env, env})
		require.NoError(t, err)
		require.Len(t, res, 2)
		require.Equal(t, ledger.OutcomeApplied, res[0].Outcome)
		require.Equal(t, ledger.OutcomeRepeated, res[1].Outcome)
		claimRequireEntry(t, res[0].Entry, res[1].Entry)
		claimRequireStored(t, s, res[0].Entry)
	})

	claimRun(t, "ConflictInsideBatchKeepsTheFirst", newStore, func(t *testing.T, s ledger.ClaimStore) {
		first := claimEnvelope("twice")
		second := claimEnvelope("twice")
		second.Payload = []byte("a different payload")
		res, err := claimBatcher(t, s).EnqueueBatch(t.Context(), []ledger.Envelope{first, second})
		require.NoError(t, err)
		require.Len(t, res, 2)
		require.Equal(t, ledger.OutcomeApplied, res[0].Outcome)
		require.Equal(t, ledger.OutcomeConflict, res[1].Outcome)
		require.Equal(t, first, res[1].Entry.Envelope, "the conflict carries the entry as it stands")
		stored := claimFind(t, s, res[0].Entry.ID)
		require.Equal(t, first, stored.Envelope)
		require.Equal(t, int64(1), stored.Version)
	})

	claimRun(t, "BatchEntriesAreClaimable", newStore, func(t *testing.T, s ledger.ClaimStore) {
		envs := make([]ledger.Envelope, 0, 20)
		for i := range 20 {
			envs = append(envs, claimEnvelope("batch-"+string(rune('a'+i))))
		}
		res, err := claimBatcher(t, s).EnqueueBatch(t.Context(), envs)
		require.NoError(t, err)
		require.Len(t, res, len(envs))
		entries := make([]ledger.OutboxEntry, len(res))
		for i, r := range res {
			require.Equal(t, ledger.OutcomeApplied, r.Outcome)
			entries[i] = r.Entry
		}
		pending, err := s.FindPending(t.Context(), ledger.MaxLimit)
		require.NoError(t, err)
		require.Equal(t, claimPendingOrder(entries), claimEntryIDs(pending))
		claimed := claimPending(t, s, claimT0, ledger.MaxLimit)
		require.Equal(t, claimPendingOrder(entries), claimClaimedIDs(claimed))
	})
}
