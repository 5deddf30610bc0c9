package ledgertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// claimCompletion is one call made under a claim, with what it must do to
// the entry when it applies.
type claimCompletion struct {
	name string
	do   func(t *testing.T, s ledger.ClaimStore, c ledger.Claim) (ledger.OutboxResult, error)
	// ends says whether the entry is terminal afterwards.
	ends bool
	// check checks the entry after the call applied to before under c.
	check func(t *testing.T, before, after ledger.OutboxEntry, c ledger.Claim)
}

var (
	claimTestResult = ledger.EmissionResult{ProviderRef: "provider-ref-1", Detail: "accepted"}
	claimTestError  = ledger.EmissionError{Code: "rate_limited", Message: "slow down"}
	claimRetryAt    = claimAt(time.Hour)
	claimDeferUntil = claimAt(10 * time.Minute)
)

// claimRequireEndedClaim requires e to be open with no claim, remembering
// that c was ended by op.
func claimRequireEndedClaim(t *testing.T, e ledger.OutboxEntry, c ledger.Claim, op ledger.Operation) {
	t.Helper()
	require.True(t, e.EndedAt.IsZero(), "the entry is still open")
	require.Nil(t, e.Claim, "the claim has ended")
	require.NotNil(t, e.EndedClaim, "an open entry remembers how its claim ended")
	require.Empty(t, e.EndedClaim.Token, "an entry handed out carries no ended claim's token")
	require.Equal(t, c.Seq, e.EndedClaim.Seq)
	require.Equal(t, op, e.EndedClaim.Op)
}

// claimCompletions lists every call made under a claim.
var claimCompletions = []claimCompletion{
	{
		name: "MarkClaimDelivered",
		do: func(t *testing.T, s ledger.ClaimStore, c ledger.Claim) (ledger.OutboxResult, error) {
			return s.MarkClaimDelivered(t.Context(), c, claimTestResult)
		},
		ends: true,
		check: func(t *testing.T, before, after ledger.OutboxEntry, _ ledger.Claim) {
			claimRequireTerminal(t, after, ledger.OutboxStatusDelivered)
			require.Equal(t, &claimTestResult, after.Result)
			require.Equal(t, before.Attempts, after.Attempts, "the claim already counted the attempt")
		},
	},
	{
		name: "MarkClaimFailedWithoutRetry",
		do: func(t *testing.T, s ledger.ClaimStore, c ledger.Claim) (ledger.OutboxResult, error) {
			return s.MarkClaimFailed(t.Context(), c, claimTestError, nil)
		},
		ends: true,
		check: func(t *testing.T, before, after ledger.OutboxEntry, _ ledger.Claim) {
			claimRequireTerminal(t, after, ledger.OutboxStatusFailed)
			require.Equal(t, &claimTestError, after.LastError)
			require.Equal(t, before.Attempts, after.Attempts)
		},
	},
	{
		name: "MarkClaimFailedWithRetry",
		do: func(t *testing.T, s ledger.ClaimStore, c ledger.Claim) (ledger.OutboxResult, error) {
			next := claimRetryAt
			return s.MarkClaimFailed(t.Context(), c, claimTestError, &next)
		},
		check: func(t *testing.T, before, after ledger.OutboxEntry, c ledger.Claim) {
			require.Equal(t, ledger.OutboxStatusRetryScheduled, after.Status)
			require.True(t, claimRetryAt.Equal(after.NextAttemptAt))
			require.Equal(t, &claimTestError, after.LastError)
			require.Equal(t, before.Attempts, after.Attempts)
			claimRequireEndedClaim(t, after, c, ledger.OpMarkFailed)
		},
	},
	{
		name: "MarkClaimDeadLettered",
		do: func(t *testing.T, s ledger.ClaimStore, c ledger.Claim) (ledger.OutboxResult, error) {
			return s.MarkClaimDeadLettered(t.Context(), c, claimTestError, "poison message")
		},
		ends: true,
		check: func(t *testing.T, before, after ledger.OutboxEntry, _ ledger.Claim) {
			claimRequireTerminal(t, after, ledger.OutboxStatusDeadLettered)
			require.Equal(t, &claimTestError, after.LastError)
			require.Equal(t, "poison message", after.DeadLetterReason)
			require.Equal(t, before.Attempts, after.Attempts)
		},
	},
	{
		name: "ReleaseClaim",
		do: func(t *testing.T, s ledger.ClaimStore, c ledger.Claim) (ledger.OutboxResult, error) {
			return s.ReleaseClaim(t.Context(), c, "shutting down")
		},
		check: func(t *testing.T, before, after ledger.OutboxEntry, c ledger.Claim) {
			require.Equal(t, before.Status, after.Status, "a release keeps the status")
			require.True(t, before.NextAttemptAt.Equal(after.NextAttemptAt), "a release keeps the schedule")
			require.Equal(t, before.Attempts-1, after.Attempts, "a release gives the attempt back")
			require.Equal(t, before.LastError, after.LastError)
			claimRequireEndedClaim(t, after, c, ledger.OpReleaseClaim)
		},
	},
	{
		name: "SaveClaimDeferred",
		do: func(t *testing.T, s ledger.ClaimStore, c ledger.Claim) (ledger.OutboxResult, error) {
			in, err := s.FindByID(t.Context(), c.EntryID)
			if err != nil {
				in = ledger.OutboxEntry{ID: c.EntryID}
			}
			in.Status = ledger.OutboxStatusDeferred
			in.NextAttemptAt = claimDeferUntil
			in.LastError = &claimTestError
			in.Attempts = 99                          // SaveClaim never writes Attempts
			in.Version = 1                            // nor checks Version: the claim is the guard
			in.Envelope = claimEnvelope("overridden") // nor changes the envelope
			return s.SaveClaim(t.Context(), c, in)
		},
		check: func(t *testing.T, before, after ledger.OutboxEntry, c ledger.Claim) {
			require.Equal(t, ledger.OutboxStatusDeferred, after.Status)
			require.True(t, claimDeferUntil.Equal(after.NextAttemptAt))
			require.Equal(t, &claimTestError, after.LastError)
			require.Equal(t, before.Attempts, after.Attempts, "SaveClaim keeps Attempts")
			require.Equal(t, before.Envelope, after.Envelope, "SaveClaim keeps the envelope")
			claimRequireEndedClaim(t, after, c, ledger.OpSaveClaim)
		},
	},
	{
		name: "SaveClaimDelivered",
		do: func(t *testing.T, s ledger.ClaimStore, c ledger.Claim) (ledger.OutboxResult, error) {
			in := ledger.OutboxEntry{ID: c.EntryID, Status: ledger.OutboxStatusDelivered, Result: &claimTestResult, Version: 1}
			return s.SaveClaim(t.Context(), c, in)
		},
		ends: true,
		check: func(t *testing.T, before, after ledger.OutboxEntry, _ ledger.Claim) {
			claimRequireTerminal(t, after, ledger.OutboxStatusDelivered)
			require.Equal(t, &claimTestResult, after.Result)
			require.Equal(t, before.Attempts, after.Attempts)
		},
	},
}

// claimTakeOver claims entry id at claimT0, lets that claim run out and
// claims it again; it returns both grants.
func claimTakeOver(t *testing.T, s ledger.ClaimStore, id ledger.OutboxEntryID) (first, second ledger.ClaimedEntry) {
	t.Helper()
	first = claimOnlyPending(t, s, id, claimT0)
	second = claimOnlyPending(t, s, id, first.Claim.ExpiresAt)
	return first, second
}

// testClaimCompletions checks every call made under a claim: Applied under
// the claim in force (expired or not), LeaseLost under any other claim,
// Ended on a terminal entry whatever the claim, Repeated for a repeat of a
// call that left the entry open, NotFound for an unknown entry; a call that
// does not apply writes nothing and returns the entry as it stands.
func testClaimCompletions(t *testing.T, newStore NewClaimStoreFunc) {
	for _, cc := range claimCompletions {
		testClaimCompletion(t, newStore, cc)
	}
	testClaimCompletionEffects(t, newStore)
}

// testClaimCompletion runs the outcome rules for one completion.
func testClaimCompletion(t *testing.T, newStore NewClaimStoreFunc, cc claimCompletion) {
	claimRun(t, cc.name+"/AppliesUnderTheClaimInForce", newStore, func(t *testing.T, s ledger.ClaimStore) {
		ce := claimNew(t, s, "order-1", claimT0)
		res, err := cc.do(t, s, ce.Claim)
		after := claimRequireApplied(t, s, ce.Entry, res, err)
		cc.check(t, ce.Entry, after, ce.Claim)
	})

	claimRun(t, cc.name+"/AppliesUnderARetryClaim", newStore, func(t *testing.T, s ledger.ClaimStore) {
		claimScheduled(t, s, "order-1", claimT0)
		got := claimRetry(t, s, claimT0, 10)
		require.Len(t, got, 1)
		res, err := cc.do(t, s, got[0].Claim)
		after := claimRequireApplied(t, s, got[0].Entry, res, err)
		cc.check(t, got[0].Entry, after, got[0].Claim)
	})

	claimRun(t, cc.name+"/ExpiredClaimNobodyTookOverStillApplies", newStore, func(t *testing.T, s ledger.ClaimStore) {
		// A claim that ran out decades ago, by any clock: completions carry
		// no now and need only the token.
		old := time.Date(1971, time.January, 1, 0, 0, 0, 0, time.UTC)
		claimEnqueue(t, s, "order-1")
		got, err := s.ClaimPending(t.Context(), ledger.ClaimRequest{Worker: claimWorker, Now: old, LeaseDuration: time.Second, Limit: 1})
		require.NoError(t, err)
		require.Len(t, got, 1)
		res, err := cc.do(t, s, got[0].Claim)
		after := claimRequireApplied(t, s, got[0].Entry, res, err)
		cc.check(t, got[0].Entry, after, got[0].Claim)
	})

	claimRun(t, cc.name+"/StaleClaimIsLeaseLost", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := claimEnqueue(t, s, "order-1")
		first, second := claimTakeOver(t, s, e.ID)
		res, err := cc.do(t, s, first.Claim)
		claimRequireUnapplied(t, s, second.Entry, res, err, ledger.OutcomeLeaseLost)
	})

	for _, bad := range []struct {
		name   string
		change func(*ledger.Claim)
	}{
		{"WrongTokenIsLeaseLost", func(c *ledger.Claim) { c.Token = "not-the-token" }},
		{"WrongSeqIsLeaseLost", func(c *ledger.Claim) { c.Seq++ }},
		// A seq no claim has is a claim that does not match, not bad input.
		{"ZeroSeqIsLeaseLost", func(c *ledger.Claim) { c.Seq = 0 }},
		{"NegativeSeqIsLeaseLost", func(c *ledger.Claim) { c.Seq = -1 }},
		{"HandMadeClaimIsLeaseLost", func(c *ledger.Claim) { *c = ledger.Claim{EntryID: c.EntryID, Token: "guess"} }},
	} {
		claimRun(t, cc.name+"/"+bad.name, newStore, func(t *testing.T, s ledger.ClaimStore) {
			ce := claimNew(t, s, "order-1", claimT0)
			c := ce.Claim
			bad.change(&c)
			res, err := cc.do(t, s, c)
			claimRequireUnapplied(t, s, ce.Entry, res, err, ledger.OutcomeLeaseLost)
		})
	}

	claimRun(t, cc.name+"/AnotherEntrysClaimIsLeaseLost", newStore, func(t *testing.T, s ledger.ClaimStore) {
		claimEnqueueN(t, s, "order", 2)
		got := claimPending(t, s, claimT0, 10)
		require.Len(t, got, 2)
		a, b := got[0], got[1]
		require.Equal(t, a.Claim.Seq, b.Claim.Seq)
		forged := b.Claim
		forged.EntryID = a.Entry.ID
		res, err := cc.do(t, s, forged)
		claimRequireUnapplied(t, s, a.Entry, res, err, ledger.OutcomeLeaseLost)
		claimRequireStored(t, s, b.Entry)
	})

	claimRun(t, cc.name+"/UnclaimedEntryIsLeaseLost", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := claimEnqueue(t, s, "order-1")
		forged := ledger.Claim{EntryID: e.ID, Worker: claimWorker, Token: storekit.NewToken(), Seq: 1, ClaimedAt: claimT0, ExpiresAt: claimAt(claimLease)}
		res, err := cc.do(t, s, forged)
		claimRequireUnapplied(t, s, e, res, err, ledger.OutcomeLeaseLost)
	})

	claimRun(t, cc.name+"/EndedEntryIsEnded", newStore, func(t *testing.T, s ledger.ClaimStore) {
		ce := claimNew(t, s, "order-1", claimT0)
		ended, err := s.MarkDelivered(t.Context(), ce.Entry.ID, ledger.EmissionResult{ProviderRef: "by the host"})
		require.NoError(t, err)
		res, err := cc.do(t, s, ce.Claim)
		claimRequireUnapplied(t, s, ended, res, err, ledger.OutcomeEnded)
	})

	claimRun(t, cc.name+"/StaleClaimOnEndedEntryIsEnded", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := claimEnqueue(t, s, "order-1")
		first, second := claimTakeOver(t, s, e.ID)
		end, err := s.MarkClaimDeadLettered(t.Context(), second.Claim, claimTestError, "gone")
		ended := claimRequireApplied(t, s, second.Entry, end, err)
		res, err := cc.do(t, s, first.Claim)
		claimRequireUnapplied(t, s, ended, res, err, ledger.OutcomeEnded)
	})

	claimRun(t, cc.name+"/UnknownEntryIsNotFound", newStore, func(t *testing.T, s ledger.ClaimStore) {
		claimNew(t, s, "order-1", claimT0)
		missing := ledger.Claim{EntryID: ledger.OutboxEntryIDFor("missing"), Worker: claimWorker, Token: storekit.NewToken(), Seq: 1}
		res, err := cc.do(t, s, missing)
		require.NoError(t, err)
		require.Equal(t, ledger.OutcomeNotFound, res.Outcome)
		require.False(t, res.Applied())
		require.Equal(t, ledger.OutboxEntry{}, res.Entry, "NotFound carries the zero entry")
		_, err = s.FindByID(t.Context(), missing.EntryID)
		require.ErrorIs(t, err, ledger.ErrNotFound, "nothing was created")
	})

	repeat := ledger.OutcomeRepeated
	if cc.ends {
		repeat = ledger.OutcomeEnded
	}
	claimRun(t, cc.name+"/RepeatIs"+string(claimTitle(repeat)), newStore, func(t *testing.T, s ledger.ClaimStore) {
		ce := claimNew(t, s, "order-1", claimT0)
		res, err := cc.do(t, s, ce.Claim)
		after := claimRequireApplied(t, s, ce.Entry, res, err)
		res, err = cc.do(t, s, ce.Claim)
		claimRequireUnapplied(t, s, after, res, err, repeat)
	})

	if !cc.ends {
		claimRun(t, cc.name+"/AfterAnotherCallEndedTheClaimIsLeaseLost", newStore, func(t *testing.T, s ledger.ClaimStore) {
			ce := claimNew(t, s, "order-1", claimT0)
			var res ledger.OutboxResult
			var err error
			if cc.name == "ReleaseClaim" {
				next := claimRetryAt
				res, err = s.MarkClaimFailed(t.Context(), ce.Claim, claimTestError, &next)
			} else {
				res, err = s.ReleaseClaim(t.Context(), ce.Claim, "")
			}
			after := claimRequireApplied(t, s, ce.Entry, res, err)
			res, err = cc.do(t, s, ce.Claim)
			claimRequireUnapplied(t, s, after, res, err, ledger.OutcomeLeaseLost)
		})
	}
}

// claimTitle returns an outcome as a subtest name part: "repeated" -> "Repeated".
func claimTitle(o ledger.Outcome) string {
	if o == "" {
		return ""
	}
	b := []byte(o)
	if b[0] >= 'a' && b[0] <= 'z' {
		b[0] -= 'a' - 'A'
	}
	return string(b)
}

// testClaimCompletionEffects checks what the open-ended completions leave
// behind for the next claim.
func testClaimCompletionEffects(t *testing.T, newStore NewClaimStoreFunc) {
	claimRun(t, "ReleaseClaim/EntryIsClaimableAtOnce", newStore, func(t *testing.T, s ledger.ClaimStore) {
		ce := claimNew(t, s, "order-1", claimT0)
		res, err := s.ReleaseClaim(t.Context(), ce.Claim, "")
		claimRequireApplied(t, s, ce.Entry, res, err)
		req := claimRequest(claimT0, 10)
		got := claimPending(t, s, claimT0, 10)
		require.Len(t, got, 1, "a released entry is claimable before the old claim's expiry")
		claimRequireClaim(t, s, got[0], req, 2)
		require.Equal(t, 1, got[0].Entry.Attempts, "the released attempt was given back")
	})

	claimRun(t, "ReleaseClaim/RetryEntryIsClaimableAtOnce", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := claimScheduled(t, s, "order-1", claimT0)
		got := claimRetry(t, s, claimT0, 10)
		require.Len(t, got, 1)
		res, err := s.ReleaseClaim(t.Context(), got[0].Claim, "")
		after := claimRequireApplied(t, s, got[0].Entry, res, err)
		require.Equal(t, ledger.OutboxStatusRetryScheduled, after.Status)
		require.True(t, e.NextAttemptAt.Equal(after.NextAttemptAt))
		require.Equal(t, e.Attempts, after.Attempts)
		again := claimRetry(t, s, claimT0, 10)
		require.Len(t, again, 1)
		require.Equal(t, int64(2), again[0].Claim.Seq)
		require.Equal(t, e.Attempts+1, again[0].Entry.Attempts)
	})

	claimRun(t, "MarkClaimFailed/RetryIsClaimableOnceDue", newStore, func(t *testing.T, s ledger.ClaimStore) {
		ce := claimNew(t, s, "order-1", claimT0)
		next := claimRetryAt
		res, err := s.MarkClaimFailed(t.Context(), ce.Claim, claimTestError, &next)
		claimRequireApplied(t, s, ce.Entry, res, err)
		require.Empty(t, claimPending(t, s, next, 10), "a scheduled entry is not pending")
		require.Empty(t, claimRetry(t, s, next.Add(-time.Microsecond), 10), "not before NextAttemptAt")
		got := claimRetry(t, s, next, 10)
		require.Len(t, got, 1)
		claimRequireClaim(t, s, got[0], claimRequest(next, 10), 2)
		require.Equal(t, 2, got[0].Entry.Attempts)
	})

	claimRun(t, "MarkClaimFailed/PastRetryIsDueNow", newStore, func(t *testing.T, s ledger.ClaimStore) {
		ce := claimNew(t, s, "order-1", claimT0)
		past := claimAt(-time.Hour)
		res, err := s.MarkClaimFailed(t.Context(), ce.Claim, claimTestError, &past)
		claimRequireApplied(t, s, ce.Entry, res, err)
		require.Len(t, claimRetry(t, s, claimT0, 10), 1)
	})

	claimRun(t, "SaveClaim/DeferredIsClaimableOnceDue", newStore, func(t *testing.T, s ledger.ClaimStore) {
		ce := claimNew(t, s, "order-1", claimT0)
		in := ce.Entry.Clone()
		in.Status = ledger.OutboxStatusDeferred
		in.NextAttemptAt = claimDeferUntil
		res, err := s.SaveClaim(t.Context(), ce.Claim, in)
		claimRequireApplied(t, s, ce.Entry, res, err)
		early := claimDeferUntil.Add(-time.Microsecond)
		ready, err := s.FindRetryReady(t.Context(), early, 10)
		require.NoError(t, err)
		require.Empty(t, ready)
		require.Empty(t, claimRetry(t, s, early, 10), "a deferred entry waits for NextAttemptAt")
		require.Empty(t, claimPending(t, s, claimDeferUntil, 10), "a deferred entry is not pending")
		got := claimRetry(t, s, claimDeferUntil, 10)
		require.Len(t, got, 1)
		require.Equal(t, ledger.OutboxStatusDeferred, got[0].Entry.Status)
		require.Equal(t, int64(2), got[0].Claim.Seq)
	})

	claimRun(t, "SaveClaim/PendingIsClaimableAtOnce", newStore, func(t *testing.T, s ledger.ClaimStore) {
		ce := claimNew(t, s, "order-1", claimT0)
		in := ce.Entry.Clone()
		in.LastError = &claimTestError
		res, err := s.SaveClaim(t.Context(), ce.Claim, in)
		after := claimRequireApplied(t, s, ce.Entry, res, err)
		claimRequireEndedClaim(t, after, ce.Claim, ledger.OpSaveClaim)
		require.Len(t, claimPending(t, s, claimT0, 10), 1)
	})

	claimRun(t, "ConcurrentCompletionsApplyOnce", newStore, func(t *testing.T, s ledger.ClaimStore) {
		ce := claimNew(t, s, "order-1", claimT0)
		type answer struct {
			res ledger.OutboxResult
			err error
		}
		answers := make(chan answer, 2*len(claimCompletions))
		for i := range cap(answers) {
			cc := claimCompletions[i%len(claimCompletions)]
			go func() {
				res, err := cc.do(t, s, ce.Claim)
				answers <- answer{res, err}
			}()
		}
		applied := 0
		for range cap(answers) {
			select {
			case a := <-answers:
				require.NoError(t, a.err)
				if a.res.Applied() {
					applied++
					continue
				}
				assert.Contains(t, []ledger.Outcome{ledger.OutcomeEnded, ledger.OutcomeLeaseLost, ledger.OutcomeRepeated}, a.res.Outcome)
			case <-time.After(30 * time.Second):
				t.Fatal("completions did not return within 30s")
			}
		}
		require.Equal(t, 1, applied, "one claim ends once")
		require.Equal(t, ce.Entry.Version+1, claimFind(t, s, ce.Entry.ID).Version)
	})
}
