package ledgertest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// testClaimTokens checks that a claim token is a capability only the
// claiming worker holds: it comes back in the Claim that ClaimPending and
// ClaimRetryReady return, and in no entry a store hands out (FindByID,
// FindPending, FindRetryReady, the entry inside any result), nor in any
// JSON. A claim rebuilt from an entry someone read cannot act, and the
// store still recognises the worker's own repeated calls.
func testClaimTokens(t *testing.T, newStore NewClaimStoreFunc) {
	claimRun(t, "OnlyTheWorkersClaimCarriesTheToken", newStore, func(t *testing.T, s ledger.ClaimStore) {
		claimEnqueueN(t, s, "order", 2)
		got := claimPending(t, s, claimT0, 2)
		require.Len(t, got, 2)
		for _, ce := range got {
			require.NotEmpty(t, ce.Claim.Token)
			require.Empty(t, ce.Entry.Claim.Token)
			e := claimFind(t, s, ce.Entry.ID)
			require.NotNil(t, e.Claim, "FindByID shows who holds the claim")
			require.Equal(t, claimCanonClaim(claimWithoutToken(ce.Claim)), claimCanonClaim(*e.Claim))
		}
		pending, err := s.FindPending(t.Context(), 10)
		require.NoError(t, err)
		require.Len(t, pending, 2)
		for _, e := range pending {
			requireNoClaimToken(t, e)
			require.NotNil(t, e.Claim)
		}
		if l, ok := s.(ledger.OutboxLister); ok {
			page, err := l.ListEntries(t.Context(), ledger.OutboxListQuery{Limit: 10})
			require.NoError(t, err)
			require.Len(t, page.Entries, 2)
			for _, e := range page.Entries {
				requireNoClaimToken(t, e)
				require.NotNil(t, e.Claim, "ListEntries shows who holds the claim")
			}
		}
		// A retry claimed, then read through FindRetryReady once its claim
		// ran out (the claim stays on the entry until claimed again).
		next := claimAt(time.Second)
		res, err := s.MarkClaimFailed(t.Context(), got[0].Claim, claimTestError, &next)
		require.NoError(t, err)
		requireNoClaimToken(t, res.Entry)
		retry := claimRetry(t, s, claimAt(time.Second), 1)
		require.Len(t, retry, 1)
		ready, err := s.FindRetryReady(t.Context(), claimAt(time.Hour), 10)
		require.NoError(t, err)
		require.Len(t, ready, 1)
		requireNoClaimToken(t, ready[0])
		require.NotNil(t, ready[0].Claim)
	})

	claimRun(t, "NoResultCarriesAToken", newStore, func(t *testing.T, s ledger.ClaimStore) {
		ce := claimNew(t, s, "order-1", claimT0)
		noToken := func(what string) func(ledger.OutboxResult, error) {
			return func(res ledger.OutboxResult, err error) {
				t.Helper()
				require.NoError(t, err, what)
				requireNoClaimToken(t, res.Entry)
			}
		}
		noToken("repeated Enqueue")(s.Enqueue(t.Context(), claimEnvelope("order-1")))
		if r, ok := s.(ledger.ClaimRenewer); ok {
			noToken("RenewClaim")(r.RenewClaim(t.Context(), ce.Claim, claimAt(time.Second), claimLease))
		}
		noToken("ReleaseClaim")(s.ReleaseClaim(t.Context(), ce.Claim, "later"))
		noToken("repeated ReleaseClaim")(s.ReleaseClaim(t.Context(), ce.Claim, "later"))
		ce = claimOnlyPending(t, s, ce.Entry.ID, claimAt(2*time.Second))
		noToken("MarkClaimDelivered")(s.MarkClaimDelivered(t.Context(), ce.Claim, ledger.EmissionResult{ProviderRef: "ref"}))
		noToken("repeated MarkClaimDelivered")(s.MarkClaimDelivered(t.Context(), ce.Claim, ledger.EmissionResult{ProviderRef: "ref"}))

		ce = claimNew(t, s, "order-2", claimT0)
		in := ce.Entry.Clone()
		in.Status, in.NextAttemptAt = ledger.OutboxStatusDeferred, claimAt(time.Hour)
		noToken("SaveClaim")(s.SaveClaim(t.Context(), ce.Claim, in))
		saved := claimFind(t, s, ce.Entry.ID)
		saved.Status = ledger.OutboxStatusPending
		got, err := s.Save(t.Context(), saved)
		require.NoError(t, err)
		requireNoClaimToken(t, got)
		ce = claimOnlyPending(t, s, ce.Entry.ID, claimAt(3*time.Second))
		noToken("MarkClaimDeadLettered")(s.MarkClaimDeadLettered(t.Context(), ce.Claim, claimTestError, "gone"))
		if b, ok := s.(ledger.OutboxBatchEnqueuer); ok {
			rs, err := b.EnqueueBatch(t.Context(), []ledger.Envelope{claimEnvelope("order-1"), claimEnvelope("order-2")})
			require.NoError(t, err)
			for _, r := range rs {
				requireNoClaimToken(t, r.Entry)
			}
		}
	})

	claimRun(t, "ClaimRebuiltFromAnEntryCannotAct", newStore, func(t *testing.T, s ledger.ClaimStore) {
		ce := claimNew(t, s, "order-1", claimT0)
		held := claimFind(t, s, ce.Entry.ID)
		rebuilt := *held.Claim
		for name, call := range map[string]func() (ledger.OutboxResult, error){
			"MarkClaimDelivered": func() (ledger.OutboxResult, error) {
				return s.MarkClaimDelivered(t.Context(), rebuilt, ledger.EmissionResult{ProviderRef: "forged"})
			},
			"MarkClaimDeadLettered": func() (ledger.OutboxResult, error) {
				return s.MarkClaimDeadLettered(t.Context(), rebuilt, claimTestError, "forged")
			},
			"ReleaseClaim": func() (ledger.OutboxResult, error) { return s.ReleaseClaim(t.Context(), rebuilt, "forged") },
		} {
			res, err := call()
			if err != nil {
				require.ErrorIs(t, err, ledger.ErrInvalid, "%s under a rebuilt claim", name)
			} else {
				require.False(t, res.Applied(), "%s under a rebuilt claim must not apply", name)
			}
			claimRequireEntry(t, held, claimFind(t, s, held.ID), "a call under a rebuilt claim writes nothing")
		}
		res, err := s.MarkClaimDelivered(t.Context(), ce.Claim, ledger.EmissionResult{ProviderRef: "mine"})
		require.NoError(t, err)
		require.Equal(t, ledger.OutcomeApplied, res.Outcome, "the worker's own claim still acts")
	})

	claimRun(t, "JSONCarriesNoToken", newStore, func(t *testing.T, s ledger.ClaimStore) {
		claimEnqueueN(t, s, "order", 2)
		got := claimPending(t, s, claimT0, 2)
		require.Len(t, got, 2)
		released, err := s.ReleaseClaim(t.Context(), got[1].Claim, "later")
		require.NoError(t, err)
		pending, err := s.FindPending(t.Context(), 10)
		require.NoError(t, err)
		values := []any{got, got[0].Claim, claimFind(t, s, got[0].Entry.ID), released, pending}
		if l, ok := s.(ledger.OutboxLister); ok {
			page, err := l.ListEntries(t.Context(), ledger.OutboxListQuery{Limit: 10})
			require.NoError(t, err)
			values = append(values, page)
		}
		if h, ok := s.(ledger.OutboxHistorian); ok {
			hist, err := h.EntryHistory(t.Context(), got[1].Entry.ID)
			require.NoError(t, err)
			values = append(values, hist)
		}
		for _, v := range values {
			raw, err := json.Marshal(v)
			require.NoError(t, err)
			for _, ce := range got {
				require.NotContains(t, string(raw), string(ce.Claim.Token), "JSON never carries a token: %s", raw)
			}
		}
	})

	claimRun(t, "RepeatUnderAnEndedClaimIsStillRecognised", newStore, func(t *testing.T, s ledger.ClaimStore) {
		ce := claimNew(t, s, "order-1", claimT0)
		res, err := s.ReleaseClaim(t.Context(), ce.Claim, "later")
		require.NoError(t, err)
		require.Equal(t, ledger.OutcomeApplied, res.Outcome)
		e := claimFind(t, s, ce.Entry.ID)
		require.NotNil(t, e.EndedClaim, "the entry shows how its claim ended")
		require.Equal(t, ce.Claim.Seq, e.EndedClaim.Seq)
		require.Empty(t, e.EndedClaim.Token, "but not its token")
		again, err := s.ReleaseClaim(t.Context(), ce.Claim, "later")
		require.NoError(t, err)
		require.Equal(t, ledger.OutcomeRepeated, again.Outcome, "the store kept the token: the worker's repeat is recognised")
		claimRequireEntry(t, e, claimFind(t, s, e.ID), "a repeat writes nothing")
	})
}
