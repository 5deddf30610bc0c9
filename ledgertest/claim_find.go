package ledgertest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// testOutboxFind checks the readers: FindByID in any status, FindPending
// (oldest first, then in enqueue order, claimed or not, bounded) and
// FindRetryReady (scheduled entries due at or before now, earliest first,
// bounded).
func testOutboxFind(t *testing.T, newStore NewClaimStoreFunc) {
	claimRun(t, "FindByIDUnknownIsNotFound", newStore, func(t *testing.T, s ledger.ClaimStore) {
		claimEnqueue(t, s, "order-1")
		_, err := s.FindByID(t.Context(), ledger.OutboxEntryIDFor("missing"))
		require.ErrorIs(t, err, ledger.ErrNotFound)
	})

	claimRun(t, "FindByIDReturnsAnyStatus", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := claimEnqueue(t, s, "order-1")
		ended, err := s.MarkDeadLettered(t.Context(), e.ID, ledger.EmissionError{Message: "bad"}, "poison")
		require.NoError(t, err)
		claimRequireStored(t, s, ended)
	})

	claimRun(t, "FindPendingEmptyStore", newStore, func(t *testing.T, s ledger.ClaimStore) {
		got, err := s.FindPending(t.Context(), 10)
		require.NoError(t, err)
		require.Empty(t, got)
	})

	claimRun(t, "FindPendingOldestFirst", newStore, func(t *testing.T, s ledger.ClaimStore) {
		entries := claimEnqueueN(t, s, "order", 12)
		got, err := s.FindPending(t.Context(), ledger.MaxLimit)
		require.NoError(t, err)
		require.Equal(t, claimPendingOrder(entries), claimEntryIDs(got), "CreatedAt, then enqueue order")
		for _, e := range got {
			claimRequireStored(t, s, e)
		}
	})

	// A batch shares one CreatedAt in both stores; single enqueues made in
	// a quick loop may or may not share one. Either way entries come in
	// the order they were enqueued, not in the order of their hashed IDs.
	claimRun(t, "FindPending/SameInstantInEnqueueOrder", newStore, func(t *testing.T, s ledger.ClaimStore) {
		entries := claimEnqueueKeys(t, s, claimUnsortedKeys(t, "order", 9))
		for _, key := range claimUnsortedKeys(t, "single", 9) {
			entries = append(entries, claimEnqueue(t, s, key))
		}
		want := claimEntryIDs(entries)
		for _, limit := range []int{1, 5, len(want), ledger.MaxLimit} {
			got, err := s.FindPending(t.Context(), limit)
			require.NoError(t, err)
			require.Equal(t, want[:min(limit, len(want))], claimEntryIDs(got), "limit %d: enqueue order", limit)
		}
	})

	// Batches larger than a store's small-batch path (pgstore copies
	// them in), fresh or with some keys taken, keep envelope order too;
	// a taken key keeps its place from its first enqueue.
	claimRun(t, "FindPending/LargeBatchesInEnqueueOrder", newStore, func(t *testing.T, s ledger.ClaimStore) {
		first := claimEnqueueKeys(t, s, claimUnsortedKeys(t, "large", 300))
		keys := claimUnsortedKeys(t, "mixed", 300)
		envs := make([]ledger.Envelope, 0, len(keys)+50)
		for i, key := range keys {
			envs = append(envs, claimEnvelope(key))
			if i%6 == 0 { // a key of the first batch, taken
				envs = append(envs, claimEnvelope(fmt.Sprintf("large-%d", i/6+1)))
			}
		}
		res, err := claimBatcher(t, s).EnqueueBatch(t.Context(), envs)
		require.NoError(t, err)
		require.Len(t, res, len(envs))
		want := first
		for i, r := range res {
			if strings.HasPrefix(envs[i].IdempotencyKey, "large-") {
				require.Equal(t, ledger.OutcomeRepeated, r.Outcome, "enqueue %q again", envs[i].IdempotencyKey)
				continue
			}
			require.Equal(t, ledger.OutcomeApplied, r.Outcome, "enqueue %q", envs[i].IdempotencyKey)
			want = append(want, r.Entry)
		}
		got, err := s.FindPending(t.Context(), ledger.MaxLimit)
		require.NoError(t, err)
		require.Len(t, got, 600)
		require.Equal(t, claimPendingOrder(want), claimEntryIDs(got), "CreatedAt, then enqueue order")
	})

	claimRun(t, "FindPendingRespectsLimit", newStore, func(t *testing.T, s ledger.ClaimStore) {
		entries := claimEnqueueN(t, s, "order", 7)
		want := claimPendingOrder(entries)
		for _, limit := range []int{1, 3, 7, 8} {
			got, err := s.FindPending(t.Context(), limit)
			require.NoError(t, err)
			require.Equal(t, want[:min(limit, len(want))], claimEntryIDs(got), "limit %d", limit)
		}
	})

	claimRun(t, "FindPendingOnlyPendingClaimedOrNot", newStore, func(t *testing.T, s ledger.ClaimStore) {
		claimed := claimNew(t, s, "claimed", claimT0)
		free := claimEnqueue(t, s, "free")
		claimScheduled(t, s, "scheduled", claimT0)
		claimDeferred(t, s, "deferred", claimT0)
		done := claimEnqueue(t, s, "done")
		_, err := s.MarkDelivered(t.Context(), done.ID, ledger.EmissionResult{})
		require.NoError(t, err)
		got, err := s.FindPending(t.Context(), ledger.MaxLimit)
		require.NoError(t, err)
		require.Equal(t, claimPendingOrder([]ledger.OutboxEntry{claimed.Entry, free}), claimEntryIDs(got))
	})

	claimRun(t, "FindRetryReadyDueAtOrBeforeNow", newStore, func(t *testing.T, s ledger.ClaimStore) {
		a := claimScheduled(t, s, "a", claimAt(1*time.Minute))
		b := claimDeferred(t, s, "b", claimAt(2*time.Minute))
		c := claimScheduled(t, s, "c", claimAt(3*time.Minute))
		claimEnqueue(t, s, "pending")
		failed := claimEnqueue(t, s, "failed")
		_, err := s.MarkFailed(t.Context(), failed.ID, ledger.EmissionError{Message: "no"}, nil)
		require.NoError(t, err)
		for _, tc := range []struct {
			now  time.Time
			want []ledger.OutboxEntry
		}{
			{claimT0, nil},
			{claimAt(time.Minute - time.Microsecond), nil},
			{claimAt(time.Minute), []ledger.OutboxEntry{a}},
			{claimAt(2*time.Minute - time.Microsecond), []ledger.OutboxEntry{a}},
			{claimAt(2 * time.Minute), []ledger.OutboxEntry{a, b}},
			{claimAt(time.Hour), []ledger.OutboxEntry{a, b, c}},
		} {
			got, err := s.FindRetryReady(t.Context(), tc.now, ledger.MaxLimit)
			require.NoError(t, err)
			require.Equal(t, claimEntryIDs(tc.want), claimEntryIDs(got), "at %s", tc.now)
		}
	})

	claimRun(t, "FindRetryReadyAnyZoneAndPrecision", newStore, func(t *testing.T, s ledger.ClaimStore) {
		a := claimScheduled(t, s, "a", claimAt(time.Minute))
		// A now in another zone and finer than a microsecond compares as its
		// normalised instant.
		early := claimAt(time.Minute - 999*time.Nanosecond).In(time.FixedZone("west", -7*3600))
		got, err := s.FindRetryReady(t.Context(), early, 10)
		require.NoError(t, err)
		require.Empty(t, got)
		due := claimAt(time.Minute + 999*time.Nanosecond).In(time.FixedZone("west", -7*3600))
		got, err = s.FindRetryReady(t.Context(), due, 10)
		require.NoError(t, err)
		require.Equal(t, []ledger.OutboxEntryID{a.ID}, claimEntryIDs(got))
	})

	claimRun(t, "FindRetryReadyEarliestFirstThenID", newStore, func(t *testing.T, s ledger.ClaimStore) {
		var entries []ledger.OutboxEntry
		for i, key := range []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"} {
			// Pairs share a due time, so the ID breaks ties; later keys are
			// due earlier, so creation order is not the answer.
			at := claimAt(time.Duration(10-i/2) * time.Second)
			if i%3 == 0 {
				entries = append(entries, claimDeferred(t, s, key, at))
			} else {
				entries = append(entries, claimScheduled(t, s, key, at))
			}
		}
		got, err := s.FindRetryReady(t.Context(), claimAt(time.Hour), ledger.MaxLimit)
		require.NoError(t, err)
		require.Equal(t, claimRetryOrder(entries), claimEntryIDs(got))
		for _, e := range got {
			claimRequireStored(t, s, e)
		}
	})

	claimRun(t, "FindRetryReadyRespectsLimit", newStore, func(t *testing.T, s ledger.ClaimStore) {
		var entries []ledger.OutboxEntry
		for i, key := range []string{"k0", "k1", "k2", "k3", "k4"} {
			entries = append(entries, claimScheduled(t, s, key, claimAt(time.Duration(5-i)*time.Second)))
		}
		want := claimRetryOrder(entries)
		for _, limit := range []int{1, 2, 5, 6} {
			got, err := s.FindRetryReady(t.Context(), claimAt(time.Hour), limit)
			require.NoError(t, err)
			require.Equal(t, want[:min(limit, len(want))], claimEntryIDs(got), "limit %d", limit)
		}
	})

	claimRun(t, "FindRetryReadyIncludesClaimedEntries", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := claimScheduled(t, s, "a", claimT0)
		claimed := claimRetry(t, s, claimT0, 10)
		require.Len(t, claimed, 1)
		got, err := s.FindRetryReady(t.Context(), claimT0, 10)
		require.NoError(t, err)
		require.Equal(t, []ledger.OutboxEntryID{e.ID}, claimEntryIDs(got), "a reader sees due entries, claimed or not")
		claimRequireEntry(t, claimed[0].Entry, got[0])
	})
}
