package ledgertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// testOutboxBaseCompletions checks the base contract's completions,
// MarkDelivered, MarkFailed and MarkDeadLettered: they ignore claims, count
// an attempt when no claim is in force, answer an entry already in their
// end status unchanged, and answer ErrConflict for an entry that ended
// otherwise and ErrNotFound for an unknown ID.
func testOutboxBaseCompletions(t *testing.T, newStore NewClaimStoreFunc) {
	emissionErr := ledger.EmissionError{Code: "timeout", Message: "provider timed out"}

	claimRun(t, "MarkDeliveredEndsTheEntry", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := claimEnqueue(t, s, "order-1")
		result := ledger.EmissionResult{ProviderRef: "ref-1", Detail: "accepted"}
		got, err := s.MarkDelivered(t.Context(), e.ID, result)
		require.NoError(t, err)
		claimRequireTerminal(t, got, ledger.OutboxStatusDelivered)
		require.Equal(t, &result, got.Result)
		require.Equal(t, 1, got.Attempts, "a completion without a claim counts an attempt")
		require.Equal(t, e.Version+1, got.Version)
		require.Equal(t, e.Envelope, got.Envelope)
		claimRequireStored(t, s, got)
	})

	claimRun(t, "MarkFailedWithoutRetryFails", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := claimEnqueue(t, s, "order-1")
		got, err := s.MarkFailed(t.Context(), e.ID, emissionErr, nil)
		require.NoError(t, err)
		claimRequireTerminal(t, got, ledger.OutboxStatusFailed)
		require.Equal(t, &emissionErr, got.LastError)
		require.Equal(t, 1, got.Attempts)
		claimRequireStored(t, s, got)
	})

	claimRun(t, "RetryLongAgoIsDueNow", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := claimEnqueue(t, s, "order-1")
		longAgo := time.Date(1901, time.January, 1, 0, 0, 0, 0, time.UTC)
		got, err := s.MarkFailed(t.Context(), e.ID, emissionErr, &longAgo)
		require.NoError(t, err, "a nextRetry in the past, however far, means due now")
		require.Equal(t, ledger.OutboxStatusRetryScheduled, got.Status)
		ready, err := s.FindRetryReady(t.Context(), claimAt(0), 10)
		require.NoError(t, err)
		require.Equal(t, []ledger.OutboxEntryID{e.ID}, claimEntryIDs(ready))
	})

	claimRun(t, "MarkFailedWithRetrySchedules", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := claimEnqueue(t, s, "order-1")
		next := claimAt(time.Hour)
		got, err := s.MarkFailed(t.Context(), e.ID, emissionErr, &next)
		require.NoError(t, err)
		require.Equal(t, ledger.OutboxStatusRetryScheduled, got.Status)
		require.True(t, next.Equal(got.NextAttemptAt))
		require.True(t, got.EndedAt.IsZero(), "a scheduled entry is open")
		require.Equal(t, &emissionErr, got.LastError)
		require.Equal(t, 1, got.Attempts)
		claimRequireStored(t, s, got)
		ready, err := s.FindRetryReady(t.Context(), next.Add(-time.Microsecond), 10)
		require.NoError(t, err)
		require.Empty(t, ready)
		ready, err = s.FindRetryReady(t.Context(), next, 10)
		require.NoError(t, err)
		require.Equal(t, []ledger.OutboxEntryID{e.ID}, claimEntryIDs(ready))
	})

	claimRun(t, "MarkFailedPastRetryIsDueNow", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := claimEnqueue(t, s, "order-1")
		past := claimAt(-time.Hour)
		got, err := s.MarkFailed(t.Context(), e.ID, emissionErr, &past)
		require.NoError(t, err)
		require.Equal(t, ledger.OutboxStatusRetryScheduled, got.Status)
		ready, err := s.FindRetryReady(t.Context(), claimT0, 10)
		require.NoError(t, err)
		require.Equal(t, []ledger.OutboxEntryID{e.ID}, claimEntryIDs(ready))
		claimed := claimRetry(t, s, claimT0, 10)
		require.Equal(t, []ledger.OutboxEntryID{e.ID}, claimClaimedIDs(claimed))
	})

	claimRun(t, "MarkFailedNormalisesNextRetry", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := claimEnqueue(t, s, "order-1")
		next := claimAt(time.Hour + 789*time.Nanosecond).In(time.FixedZone("east", 3*3600))
		got, err := s.MarkFailed(t.Context(), e.ID, emissionErr, &next)
		require.NoError(t, err)
		require.Equal(t, ledger.Normalize(next), got.NextAttemptAt)
		claimRequireStored(t, s, got)
	})

	claimRun(t, "MarkFailedAgainCountsAnotherAttempt", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := claimScheduled(t, s, "order-1", claimT0)
		next := claimAt(time.Hour)
		got, err := s.MarkFailed(t.Context(), e.ID, emissionErr, &next)
		require.NoError(t, err)
		require.Equal(t, ledger.OutboxStatusRetryScheduled, got.Status)
		require.True(t, next.Equal(got.NextAttemptAt))
		require.Equal(t, 2, got.Attempts)
		require.Equal(t, e.Version+1, got.Version)
		claimRequireStored(t, s, got)
	})

	claimRun(t, "MarkDeadLetteredEndsTheEntry", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := claimScheduled(t, s, "order-1", claimT0)
		got, err := s.MarkDeadLettered(t.Context(), e.ID, emissionErr, "poison message")
		require.NoError(t, err)
		claimRequireTerminal(t, got, ledger.OutboxStatusDeadLettered)
		require.Equal(t, &emissionErr, got.LastError)
		require.Equal(t, "poison message", got.DeadLetterReason)
		require.Equal(t, 2, got.Attempts)
		claimRequireStored(t, s, got)
	})

	// Each base completion, applied twice, returns the ended entry
	// unchanged; applied after another end, it is ErrConflict.
	ends := []struct {
		name string
		do   func(t *testing.T, s ledger.ClaimStore, id ledger.OutboxEntryID) (ledger.OutboxEntry, error)
	}{
		{"MarkDelivered", func(t *testing.T, s ledger.ClaimStore, id ledger.OutboxEntryID) (ledger.OutboxEntry, error) {
			return s.MarkDelivered(t.Context(), id, ledger.EmissionResult{ProviderRef: "ref-" + string(id[:4])})
		}},
		{"MarkFailed", func(t *testing.T, s ledger.ClaimStore, id ledger.OutboxEntryID) (ledger.OutboxEntry, error) {
			return s.MarkFailed(t.Context(), id, ledger.EmissionError{Message: "failed " + string(id[:4])}, nil)
		}},
		{"MarkDeadLettered", func(t *testing.T, s ledger.ClaimStore, id ledger.OutboxEntryID) (ledger.OutboxEntry, error) {
			return s.MarkDeadLettered(t.Context(), id, ledger.EmissionError{Message: "dead"}, "reason "+string(id[:4]))
		}},
	}
	for _, first := range ends {
		for _, second := range ends {
			name := first.name + "Then" + second.name
			if first.name == second.name {
				name = first.name + "AgainIsUnchanged"
			} else {
				name += "IsConflict"
			}
			claimRun(t, name, newStore, func(t *testing.T, s ledger.ClaimStore) {
				e := claimEnqueue(t, s, "order-1")
				ended, err := first.do(t, s, e.ID)
				require.NoError(t, err)
				got, err := second.do(t, s, e.ID)
				if first.name == second.name {
					require.NoError(t, err)
					claimRequireEntry(t, ended, got, "a repeated end returns the entry unchanged")
				} else {
					require.ErrorIs(t, err, ledger.ErrConflict)
				}
				claimRequireStored(t, s, ended)
			})
		}
	}

	claimRun(t, "MarkFailedWithRetryOnEndedIsConflict", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := claimEnqueue(t, s, "order-1")
		ended, err := s.MarkFailed(t.Context(), e.ID, emissionErr, nil)
		require.NoError(t, err)
		next := claimAt(time.Hour)
		_, err = s.MarkFailed(t.Context(), e.ID, emissionErr, &next)
		require.ErrorIs(t, err, ledger.ErrConflict, "an ended entry is never scheduled again")
		claimRequireStored(t, s, ended)
	})

	for _, end := range ends {
		claimRun(t, end.name+"UnknownIsNotFound", newStore, func(t *testing.T, s ledger.ClaimStore) {
			claimEnqueue(t, s, "order-1")
			missing := ledger.OutboxEntryIDFor("missing")
			_, err := end.do(t, s, missing)
			require.ErrorIs(t, err, ledger.ErrNotFound)
			_, err = s.FindByID(t.Context(), missing)
			require.ErrorIs(t, err, ledger.ErrNotFound)
		})

		claimRun(t, end.name+"IgnoresTheClaimAndCountsItsAttemptOnce", newStore, func(t *testing.T, s ledger.ClaimStore) {
			ce := claimNew(t, s, "order-1", claimT0)
			got, err := end.do(t, s, ce.Entry.ID)
			require.NoError(t, err)
			require.True(t, got.Status.Terminal())
			require.Equal(t, 1, got.Attempts, "the claim already counted the attempt")
			claimRequireStored(t, s, got)
			res, err := s.MarkClaimDelivered(t.Context(), ce.Claim, ledger.EmissionResult{})
			claimRequireUnapplied(t, s, got, res, err, ledger.OutcomeEnded)
		})
	}

	claimRun(t, "MarkFailedWithRetryEndsTheClaim", newStore, func(t *testing.T, s ledger.ClaimStore) {
		ce := claimNew(t, s, "order-1", claimT0)
		next := claimAt(time.Hour)
		got, err := s.MarkFailed(t.Context(), ce.Entry.ID, emissionErr, &next)
		require.NoError(t, err)
		require.Equal(t, ledger.OutboxStatusRetryScheduled, got.Status)
		require.Nil(t, got.Claim)
		require.Equal(t, 1, got.Attempts)
		res, err := s.MarkClaimDelivered(t.Context(), ce.Claim, ledger.EmissionResult{})
		claimRequireUnapplied(t, s, got, res, err, ledger.OutcomeLeaseLost)
	})
}
