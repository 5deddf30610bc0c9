package ledgertest

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// testOutboxSave checks OutboxStore.Save, the optimistic write: it writes
// the mutable fields when Version matches and bumps Version; a stale
// Version or an ended entry is ErrConflict and writes nothing; an unknown
// ID is ErrNotFound.
func testOutboxSave(t *testing.T, newStore NewClaimStoreFunc) {
	claimRun(t, "MatchingVersionIsWritten", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := claimEnqueue(t, s, "order-1")
		in := e.Clone()
		in.Status = ledger.OutboxStatusRetryScheduled
		in.NextAttemptAt = claimAt(time.Hour)
		in.Attempts = 3
		in.LastError = &ledger.EmissionError{Code: "busy", Message: "provider busy"}
		in.DeadLetterReason = "not yet"
		got, err := s.Save(t.Context(), in)
		require.NoError(t, err)
		require.Equal(t, e.Version+1, got.Version, "a write bumps Version by one")
		require.Equal(t, ledger.OutboxStatusRetryScheduled, got.Status)
		require.True(t, claimAt(time.Hour).Equal(got.NextAttemptAt))
		require.Equal(t, 3, got.Attempts)
		require.Equal(t, in.LastError, got.LastError)
		require.Equal(t, "not yet", got.DeadLetterReason)
		require.True(t, got.EndedAt.IsZero())
		require.Equal(t, e.Envelope, got.Envelope)
		require.True(t, e.CreatedAt.Equal(got.CreatedAt))
		require.False(t, got.UpdatedAt.Before(e.UpdatedAt), "UpdatedAt never goes back")
		claimRequireStored(t, s, got)
	})

	claimRun(t, "OnlyMutableFieldsAreWritten", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := claimEnqueue(t, s, "order-1")
		in := e.Clone()
		in.Envelope = claimEnvelope("someone-else")
		in.CreatedAt = claimT0
		in.ClaimSeq = 7
		in.Claim = &ledger.Claim{EntryID: e.ID, Worker: "w", Token: "forged", Seq: 7, ClaimedAt: claimT0, ExpiresAt: claimAt(time.Hour)}
		got, err := s.Save(t.Context(), in)
		require.NoError(t, err)
		require.Equal(t, e.Envelope, got.Envelope, "Save never changes the envelope")
		require.True(t, e.CreatedAt.Equal(got.CreatedAt))
		require.Zero(t, got.ClaimSeq, "Save never grants a claim")
		require.Nil(t, got.Claim, "Save never grants a claim")
		claimRequireStored(t, s, got)
		require.Len(t, claimPending(t, s, claimT0, 10), 1, "the entry is still unclaimed")
	})

	claimRun(t, "StaleVersionIsConflict", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := claimEnqueue(t, s, "order-1")
		first := e.Clone()
		first.Status = ledger.OutboxStatusDeferred
		first.NextAttemptAt = claimAt(time.Minute)
		saved, err := s.Save(t.Context(), first)
		require.NoError(t, err)
		stale := e.Clone()
		stale.Status = ledger.OutboxStatusDelivered
		stale.Result = &ledger.EmissionResult{ProviderRef: "late"}
		_, err = s.Save(t.Context(), stale)
		require.ErrorIs(t, err, ledger.ErrConflict)
		claimRequireStored(t, s, saved)
	})

	claimRun(t, "FutureVersionIsConflict", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := claimEnqueue(t, s, "order-1")
		in := e.Clone()
		in.Version++
		in.Attempts = 5
		_, err := s.Save(t.Context(), in)
		require.ErrorIs(t, err, ledger.ErrConflict)
		claimRequireStored(t, s, e)
	})

	// A version the entry never had, zero from an entry built by hand or
	// negative, is a stale one, not bad input.
	claimRun(t, "VersionNeverHeldIsConflict", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := claimEnqueue(t, s, "order-1")
		for _, v := range []int64{0, -1} {
			in := e.Clone()
			in.Version = v
			in.Status = ledger.OutboxStatusDelivered
			_, err := s.Save(t.Context(), in)
			require.ErrorIs(t, err, ledger.ErrConflict, "version %d", v)
			require.NotErrorIs(t, err, ledger.ErrInvalid, "version %d", v)
			claimRequireStored(t, s, e)
		}
	})

	claimRun(t, "EndedEntryIsConflict", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := claimEnqueue(t, s, "order-1")
		ended, err := s.MarkDelivered(t.Context(), e.ID, ledger.EmissionResult{ProviderRef: "ref"})
		require.NoError(t, err)
		in := ended.Clone()
		in.Status = ledger.OutboxStatusPending
		in.Result = nil
		_, err = s.Save(t.Context(), in)
		require.ErrorIs(t, err, ledger.ErrConflict, "an ended entry stays ended")
		claimRequireStored(t, s, ended)
	})

	claimRun(t, "UnknownIDIsNotFound", newStore, func(t *testing.T, s ledger.ClaimStore) {
		claimEnqueue(t, s, "order-1")
		in := ledger.OutboxEntry{ID: ledger.OutboxEntryIDFor("missing"), Status: ledger.OutboxStatusPending, Version: 1}
		_, err := s.Save(t.Context(), in)
		require.ErrorIs(t, err, ledger.ErrNotFound)
		_, err = s.FindByID(t.Context(), in.ID)
		require.ErrorIs(t, err, ledger.ErrNotFound, "Save never creates an entry")
	})

	claimRun(t, "TerminalStatusEndsTheEntry", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := claimEnqueue(t, s, "order-1")
		in := e.Clone()
		in.Status = ledger.OutboxStatusDeadLettered
		in.LastError = &ledger.EmissionError{Code: "gone", Message: "recipient gone"}
		in.DeadLetterReason = "recipient gone"
		in.NextAttemptAt = claimAt(time.Hour)
		got, err := s.Save(t.Context(), in)
		require.NoError(t, err)
		claimRequireTerminal(t, got, ledger.OutboxStatusDeadLettered)
		require.Equal(t, "recipient gone", got.DeadLetterReason)
		claimRequireStored(t, s, got)
		again := got.Clone()
		_, err = s.Save(t.Context(), again)
		require.ErrorIs(t, err, ledger.ErrConflict, "even a save at the current version cannot touch an ended entry")
		claimRequireStored(t, s, got)
	})

	claimRun(t, "OpenStatusClearsNextAttemptAt", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := claimScheduled(t, s, "order-1", claimAt(time.Hour))
		in := e.Clone()
		in.Status = ledger.OutboxStatusPending
		in.NextAttemptAt = claimAt(2 * time.Hour)
		got, err := s.Save(t.Context(), in)
		require.NoError(t, err)
		require.Equal(t, ledger.OutboxStatusPending, got.Status)
		require.True(t, got.NextAttemptAt.IsZero(), "only scheduled entries have a NextAttemptAt")
		claimRequireStored(t, s, got)
	})

	claimRun(t, "NextAttemptAtIsNormalised", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := claimEnqueue(t, s, "order-1")
		in := e.Clone()
		in.Status = ledger.OutboxStatusDeferred
		in.NextAttemptAt = claimAt(time.Hour + 1234*time.Nanosecond).In(time.FixedZone("east", 5*3600))
		got, err := s.Save(t.Context(), in)
		require.NoError(t, err)
		require.Equal(t, ledger.Normalize(in.NextAttemptAt), got.NextAttemptAt)
		claimRequireStored(t, s, got)
	})

	claimRun(t, "SaveEndsTheClaimInForce", newStore, func(t *testing.T, s ledger.ClaimStore) {
		ce := claimNew(t, s, "order-1", claimT0)
		in := ce.Entry.Clone()
		in.Status = ledger.OutboxStatusPending
		got, err := s.Save(t.Context(), in)
		require.NoError(t, err)
		require.Nil(t, got.Claim, "an optimistic write takes the entry from its claimant")
		require.Equal(t, 1, got.Attempts, "Save writes the Attempts it is given")
		res, err := s.MarkClaimDelivered(t.Context(), ce.Claim, ledger.EmissionResult{})
		claimRequireUnapplied(t, s, got, res, err, ledger.OutcomeLeaseLost)
		again := claimOnlyPending(t, s, ce.Entry.ID, claimT0)
		require.Equal(t, int64(2), again.Claim.Seq, "the entry is claimable at once")
	})

	claimRun(t, "ConcurrentSavesAtOneVersionWriteOnce", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := claimEnqueue(t, s, "order-1")
		const writers = 8
		errs := make(chan error, writers)
		ctx := t.Context()
		for i := range writers {
			go func() {
				in := e.Clone()
				in.Attempts = i + 1
				_, err := s.Save(ctx, in)
				errs <- err
			}()
		}
		won := 0
		for range writers {
			select {
			case err := <-errs:
				if err == nil {
					won++
					continue
				}
				require.True(t, errors.Is(err, ledger.ErrConflict), "unexpected error %v", err)
			case <-time.After(30 * time.Second):
				t.Fatal("Save did not return within 30s")
			}
		}
		require.Equal(t, 1, won, "exactly one optimistic write wins a version")
		require.Equal(t, e.Version+1, claimFind(t, s, e.ID).Version)
	})
}
