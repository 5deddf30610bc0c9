package ledgertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// testCompleteClaims checks ledger.ClaimCompleter: a batch of claim
// completions answers each as its own call would, in order, and a
// malformed one writes nothing at all.
func testCompleteClaims(t *testing.T, newStore NewClaimStoreFunc) {
	claimRun(t, "EachAsItsCall", newStore, completeEachAsItsCall)
	claimRun(t, "StaleClaimsAnswerAsTheirCalls", newStore, completeStaleAnswerAsTheirCalls)
	claimRun(t, "OneEntryTwiceInOrder", newStore, completeOneEntryTwiceInOrder)
	claimRun(t, "InvalidWritesNothing", newStore, completeInvalidWritesNothing)
}

// claimCompleter returns s as a ledger.ClaimCompleter. Every claim store
// we ship implements it, so a store without it fails the suite.
func claimCompleter(t *testing.T, s ledger.ClaimStore) ledger.ClaimCompleter {
	t.Helper()
	c, ok := s.(ledger.ClaimCompleter)
	if !ok {
		t.Fatalf("%T does not implement ledger.ClaimCompleter", s)
	}
	return c
}

// batchCompletions are one of each completion, made for claim.
func batchCompletions(claims []ledger.Claim) []ledger.ClaimCompletion {
	retry := claimRetryAt
	deferred := ledger.OutboxEntry{ID: claims[5].EntryID, Status: ledger.OutboxStatusDeferred, NextAttemptAt: claimDeferUntil, LastError: &claimTestError}
	return []ledger.ClaimCompletion{
		{Claim: claims[0], Op: ledger.OpMarkDelivered, Result: claimTestResult},
		{Claim: claims[1], Op: ledger.OpMarkFailed, Error: claimTestError},
		{Claim: claims[2], Op: ledger.OpMarkFailed, Error: claimTestError, NextRetry: &retry},
		{Claim: claims[3], Op: ledger.OpMarkDeadLettered, Error: claimTestError, Reason: "poison message"},
		{Claim: claims[4], Op: ledger.OpReleaseClaim, Reason: "shutting down"},
		{Claim: claims[5], Op: ledger.OpSaveClaim, Entry: deferred},
	}
}

// singleCompletion makes c with the ClaimStore call its Op names.
func singleCompletion(t *testing.T, s ledger.ClaimStore, c ledger.ClaimCompletion) (ledger.OutboxResult, error) {
	t.Helper()
	ctx := t.Context()
	switch c.Op {
	case ledger.OpMarkDelivered:
		return s.MarkClaimDelivered(ctx, c.Claim, c.Result)
	case ledger.OpMarkFailed:
		return s.MarkClaimFailed(ctx, c.Claim, c.Error, c.NextRetry)
	case ledger.OpMarkDeadLettered:
		return s.MarkClaimDeadLettered(ctx, c.Claim, c.Error, c.Reason)
	case ledger.OpReleaseClaim:
		return s.ReleaseClaim(ctx, c.Claim, c.Reason)
	case ledger.OpSaveClaim:
		return s.SaveClaim(ctx, c.Claim, c.Entry)
	}
	t.Fatalf("no call for op %s", c.Op)
	return ledger.OutboxResult{}, nil
}

// anonymous returns e without what names it, so that the entries of two
// keys that went through the same calls compare equal.
func anonymous(e ledger.OutboxEntry) ledger.OutboxEntry {
	e = claimCanon(e)
	e.ID, e.Envelope = "", ledger.Envelope{}
	// The outbox's completions are stamped with the store's clock, which
	// may be the wall clock: the twins were completed moments apart.
	e.CreatedAt, e.UpdatedAt = time.Time{}, time.Time{}
	if !e.EndedAt.IsZero() {
		e.EndedAt = time.Unix(0, 0)
	}
	if e.Claim != nil {
		e.Claim.EntryID = ""
	}
	if e.EndedClaim != nil {
		e.EndedClaim.At = time.Time{}
	}
	return e
}

// completeEachAsItsCall: twin entries, claimed alike, completed one by
// one with each call and all at once with CompleteClaims, end alike, and
// the batch answers each as the call did.
func completeEachAsItsCall(t *testing.T, s ledger.ClaimStore) {
	var singles, batched []ledger.Claim
	for _, key := range []string{"a", "b", "c", "d", "e", "f"} {
		singles = append(singles, claimNew(t, s, "single-"+key, claimT0).Claim)
		batched = append(batched, claimNew(t, s, "batch-"+key, claimT0).Claim)
	}
	var want []ledger.OutboxResult
	for _, c := range batchCompletions(singles) {
		res, err := singleCompletion(t, s, c)
		require.NoError(t, err)
		require.True(t, res.Applied(), "%s", c.Op)
		want = append(want, res)
	}
	cs := batchCompletions(batched)
	got, err := claimCompleter(t, s).CompleteClaims(t.Context(), cs)
	require.NoError(t, err)
	require.Len(t, got, len(cs))
	for i := range cs {
		require.Equal(t, want[i].Outcome, got[i].Outcome, "%s", cs[i].Op)
		require.Equal(t, anonymous(want[i].Entry), anonymous(got[i].Entry), "%s: the batch does what the call does", cs[i].Op)
		claimRequireStored(t, s, got[i].Entry)
	}
}

// completeStaleAnswerAsTheirCalls: a claim taken over, an entry that
// ended, an unknown one and a repeat answer in a batch what their calls
// answer, and write nothing; the batch's other completions apply.
func completeStaleAnswerAsTheirCalls(t *testing.T, s ledger.ClaimStore) {
	lost := claimNew(t, s, "lost", claimT0)
	taken := claimOnlyPending(t, s, lost.Entry.ID, lost.Claim.ExpiresAt) // the claim ran out and was taken over
	ended := claimNew(t, s, "ended", claimT0)
	released := claimNew(t, s, "released", claimT0)
	fine := claimNew(t, s, "fine", claimT0)
	res, err := s.MarkClaimDelivered(t.Context(), ended.Claim, claimTestResult)
	require.NoError(t, err)
	endedEntry := res.Entry
	res, err = s.ReleaseClaim(t.Context(), released.Claim, "back")
	require.NoError(t, err)
	releasedEntry := res.Entry
	unknown := fine.Claim
	unknown.EntryID = ledger.OutboxEntryIDFor("never-enqueued")

	got, err := claimCompleter(t, s).CompleteClaims(t.Context(), []ledger.ClaimCompletion{
		{Claim: lost.Claim, Op: ledger.OpMarkDelivered, Result: claimTestResult},
		{Claim: ended.Claim, Op: ledger.OpMarkFailed, Error: claimTestError},
		{Claim: released.Claim, Op: ledger.OpReleaseClaim, Reason: "back"},
		{Claim: unknown, Op: ledger.OpMarkDelivered},
		{Claim: fine.Claim, Op: ledger.OpMarkDelivered, Result: claimTestResult},
	})
	require.NoError(t, err)
	require.Len(t, got, 5)
	claimRequireUnapplied(t, s, taken.Entry, got[0], nil, ledger.OutcomeLeaseLost)
	claimRequireUnapplied(t, s, endedEntry, got[1], nil, ledger.OutcomeEnded)
	claimRequireUnapplied(t, s, releasedEntry, got[2], nil, ledger.OutcomeRepeated)
	require.Equal(t, ledger.OutboxResult{Outcome: ledger.OutcomeNotFound}, got[3])
	claimRequireTerminal(t, claimRequireApplied(t, s, fine.Entry, got[4], nil), ledger.OutboxStatusDelivered)
}

// completeOneEntryTwiceInOrder: two completions of one claim in a batch
// apply in order: the first applies, the second finds the entry ended.
func completeOneEntryTwiceInOrder(t *testing.T, s ledger.ClaimStore) {
	ce := claimNew(t, s, "twice", claimT0)
	got, err := claimCompleter(t, s).CompleteClaims(t.Context(), []ledger.ClaimCompletion{
		{Claim: ce.Claim, Op: ledger.OpMarkDelivered, Result: claimTestResult},
		{Claim: ce.Claim, Op: ledger.OpReleaseClaim, Reason: "too late"},
	})
	require.NoError(t, err)
	require.Equal(t, ledger.OutcomeApplied, got[0].Outcome)
	require.Equal(t, ledger.OutcomeEnded, got[1].Outcome)
	done := claimFind(t, s, ce.Entry.ID)
	claimRequireTerminal(t, done, ledger.OutboxStatusDelivered)
	claimRequireEntry(t, done, got[1].Entry, "the second answer carries the entry as the first left it")
}

// completeInvalidWritesNothing: a malformed completion fails the whole
// batch with ErrInvalid, and its valid completions write nothing either.
func completeInvalidWritesNothing(t *testing.T, s ledger.ClaimStore) {
	ce := claimNew(t, s, "valid", claimT0)
	for name, bad := range map[string]ledger.ClaimCompletion{
		"unknown op":      {Claim: ce.Claim, Op: ledger.OpClaim},
		"no op":           {Claim: ce.Claim},
		"empty token":     {Claim: ledger.Claim{EntryID: ce.Claim.EntryID, Seq: ce.Claim.Seq}, Op: ledger.OpMarkDelivered},
		"NUL in message":  {Claim: ce.Claim, Op: ledger.OpMarkFailed, Error: ledger.EmissionError{Message: "a\x00b"}},
		"zero next retry": {Claim: ce.Claim, Op: ledger.OpMarkFailed, NextRetry: &time.Time{}},
	} {
		_, err := claimCompleter(t, s).CompleteClaims(t.Context(), []ledger.ClaimCompletion{
			{Claim: ce.Claim, Op: ledger.OpMarkDelivered, Result: claimTestResult},
			bad,
		})
		require.ErrorIs(t, err, ledger.ErrInvalid, name)
		claimRequireStored(t, s, ce.Entry)
	}
	_, err := claimCompleter(t, s).CompleteClaims(t.Context(), nil)
	require.ErrorIs(t, err, ledger.ErrInvalid, "an empty batch")
}
