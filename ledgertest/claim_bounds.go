package ledgertest

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// testClaimBounds checks the numeric bounds of the outbox at the bound and
// one past it: a count a caller sets (Save's Attempts) is at most
// ledger.MaxCount, beyond it ErrInvalid naming the field with nothing
// written; no claim or completion takes a count past it, and an entry at
// the bound is still claimed and completed; versions and claim sequence
// numbers of any int64 value are only stale, never an error.
func testClaimBounds(t *testing.T, newStore NewClaimStoreFunc) {
	// saveAttempts saves the entry of key with attempts n and status st.
	saveAttempts := func(t *testing.T, s ledger.ClaimStore, key string, n int, st ledger.OutboxStatus) ledger.OutboxEntry {
		t.Helper()
		e := claimEnqueue(t, s, key)
		e.Attempts, e.Status = n, st
		if st.Scheduled() {
			e.NextAttemptAt = claimT0
		}
		got, err := s.Save(t.Context(), e)
		require.NoError(t, err)
		require.Equal(t, n, got.Attempts)
		claimRequireStored(t, s, got)
		return got
	}

	claimRun(t, "AttemptsAtMaxCountAreSaved", newStore, func(t *testing.T, s ledger.ClaimStore) {
		saveAttempts(t, s, "order-1", ledger.MaxCount, ledger.OutboxStatusPending)
	})

	claimRun(t, "AttemptsPastMaxCountAreInvalid", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := claimEnqueue(t, s, "order-1")
		for _, n := range []int{ledger.MaxCount + 1, math.MaxInt} {
			in := e.Clone()
			in.Attempts = n
			_, err := s.Save(t.Context(), in)
			requireInvalid(t, err)
			var inv *ledger.InvalidError
			require.ErrorAs(t, err, &inv)
			require.Equal(t, "attempts", inv.Field, "the error names the field")
			claimRequireStored(t, s, e)
		}
		// A claim of the entry still works: nothing was written.
		claimOnlyPending(t, s, e.ID, claimT0)
	})

	claimRun(t, "ClaimPendingAtMaxCountSaturates", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := saveAttempts(t, s, "order-1", ledger.MaxCount, ledger.OutboxStatusPending)
		claimEnqueue(t, s, "order-2")
		got := claimPending(t, s, claimT0, 10)
		require.Len(t, got, 2, "an entry at the bound neither fails the claim nor stops the entries behind it")
		ce := got[0]
		require.Equal(t, e.ID, ce.Entry.ID)
		require.Equal(t, ledger.MaxCount, ce.Entry.Attempts, "the count stays at the bound")
		require.Equal(t, e.ClaimSeq+1, ce.Claim.Seq, "the claim is granted")
		require.Equal(t, e.Version+1, ce.Entry.Version)
		claimRequireStored(t, s, ce.Entry)
		res, err := s.MarkClaimDelivered(t.Context(), ce.Claim, ledger.EmissionResult{ProviderRef: "ref"})
		require.NoError(t, err)
		require.Equal(t, ledger.OutcomeApplied, res.Outcome, "and it completes")
		require.Equal(t, ledger.MaxCount, res.Entry.Attempts)
	})

	claimRun(t, "ClaimPendingOneBelowMaxCountReachesIt", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := saveAttempts(t, s, "order-1", ledger.MaxCount-1, ledger.OutboxStatusPending)
		ce := claimOnlyPending(t, s, e.ID, claimT0)
		require.Equal(t, ledger.MaxCount, ce.Entry.Attempts)
		claimRequireStored(t, s, ce.Entry)
		// Taken over after the claim expired: still at the bound.
		again := claimOnlyPending(t, s, e.ID, ce.Claim.ExpiresAt)
		require.Equal(t, ledger.MaxCount, again.Entry.Attempts)
		require.Equal(t, ce.Claim.Seq+1, again.Claim.Seq)
	})

	claimRun(t, "ClaimRetryReadyAtMaxCountSaturates", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := saveAttempts(t, s, "order-1", ledger.MaxCount, ledger.OutboxStatusRetryScheduled)
		got := claimRetry(t, s, claimT0, 10)
		require.Len(t, got, 1)
		require.Equal(t, e.ID, got[0].Entry.ID)
		require.Equal(t, ledger.MaxCount, got[0].Entry.Attempts)
		claimRequireStored(t, s, got[0].Entry)
	})

	claimRun(t, "BaseCompletionAtMaxCountSaturates", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := saveAttempts(t, s, "order-1", ledger.MaxCount, ledger.OutboxStatusPending)
		next := claimAt(time.Hour)
		got, err := s.MarkFailed(t.Context(), e.ID, claimTestError, &next)
		require.NoError(t, err)
		require.Equal(t, ledger.MaxCount, got.Attempts, "a completion without a claim counts an attempt, up to the bound")
		require.Equal(t, e.Version+1, got.Version)
		claimRequireStored(t, s, got)
		done, err := s.MarkDelivered(t.Context(), e.ID, ledger.EmissionResult{})
		require.NoError(t, err)
		require.Equal(t, ledger.MaxCount, done.Attempts)
	})

	claimRun(t, "ReleaseClaimAtMaxCountGivesOneBack", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := saveAttempts(t, s, "order-1", ledger.MaxCount, ledger.OutboxStatusPending)
		ce := claimOnlyPending(t, s, e.ID, claimT0)
		res, err := s.ReleaseClaim(t.Context(), ce.Claim, "")
		require.NoError(t, err)
		require.Equal(t, ledger.OutcomeApplied, res.Outcome)
		require.Equal(t, ledger.MaxCount-1, res.Entry.Attempts, "a release gives one attempt back, as anywhere")
		claimRequireStored(t, s, res.Entry)
	})

	claimRun(t, "VersionOfAnyInt64IsOnlyStale", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := claimEnqueue(t, s, "order-1")
		for _, v := range []int64{math.MaxInt64, math.MinInt64, -1, 0} {
			in := e.Clone()
			in.Version = v
			in.Status = ledger.OutboxStatusDelivered
			_, err := s.Save(t.Context(), in)
			require.ErrorIs(t, err, ledger.ErrConflict, "version %d", v)
			claimRequireStored(t, s, e)
		}
	})

	claimRun(t, "ClaimSeqAtInt64BoundsIsLeaseLost", newStore, func(t *testing.T, s ledger.ClaimStore) {
		ce := claimNew(t, s, "order-1", claimT0)
		for _, seq := range []int64{math.MaxInt64, math.MinInt64} {
			c := ce.Claim
			c.Seq = seq
			res, err := s.MarkClaimDelivered(t.Context(), c, ledger.EmissionResult{})
			require.NoError(t, err)
			require.Equal(t, ledger.OutcomeLeaseLost, res.Outcome, "seq %d", seq)
			claimRequireEntry(t, ce.Entry, claimFind(t, s, ce.Entry.ID), "nothing written")
		}
	})
}
