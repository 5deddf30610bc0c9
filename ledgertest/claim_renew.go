package ledgertest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// claimRenewer returns s as a ledger.ClaimRenewer. Every claim store we
// ship implements it, so a store without it fails the suite.
func claimRenewer(t *testing.T, s ledger.ClaimStore) ledger.ClaimRenewer {
	t.Helper()
	r, ok := s.(ledger.ClaimRenewer)
	if !ok {
		t.Fatalf("%T does not implement ledger.ClaimRenewer", s)
	}
	return r
}

// claimRenew calls RenewClaim on s.
func claimRenew(t *testing.T, s ledger.ClaimStore, c ledger.Claim, now time.Time, d time.Duration) (ledger.OutboxResult, error) {
	t.Helper()
	return claimRenewer(t, s).RenewClaim(t.Context(), c, now, d)
}

// claimRequireRenewed requires an applied renewal of before's claim at now
// for d: the same claim (worker, token, sequence, claim time) expiring at
// the normalised now plus d, stamped with now, and nothing else changed.
func claimRequireRenewed(t *testing.T, s ledger.ClaimStore, before ledger.OutboxEntry, now time.Time, d time.Duration, res ledger.OutboxResult, err error) ledger.OutboxEntry {
	t.Helper()
	after := claimRequireApplied(t, s, before, res, err)
	require.NotNil(t, before.Claim, "only a claimed entry renews")
	want := before.Clone()
	renewedClaim := claimCanonClaim(*before.Claim)
	renewedClaim.ExpiresAt = ledger.Normalize(now).Add(d.Truncate(time.Microsecond))
	want.Claim = &renewedClaim
	want.UpdatedAt = ledger.Normalize(now)
	want.Version = before.Version + 1
	claimRequireEntry(t, want, after, "a renewal moves the claim's expiry and stamps UpdatedAt with now; nothing else changes")
	return after
}

// testRenewClaim checks ClaimRenewer.RenewClaim, the claim heartbeat: it
// moves the expiry of the claim in force and nothing else, needs the
// current claim and now before its expiry, and a renewed entry is not
// claimed by anyone else before its new expiry.
func testRenewClaim(t *testing.T, newStore NewClaimStoreFunc) {
	claimRun(t, "ExtendsTheClaimKeepingTokenAndSeq", newStore, func(t *testing.T, s ledger.ClaimStore) {
		ce := claimNew(t, s, "order-1", claimT0)
		// Sub-microsecond parts of now and of the duration are dropped.
		now := claimAt(30*time.Second + 123*time.Nanosecond)
		d := 2*time.Minute + 456*time.Nanosecond
		res, err := claimRenew(t, s, ce.Claim, now, d)
		after := claimRequireRenewed(t, s, ce.Entry, now, d, res, err)

		// The worker keeps working under the claim it was handed: past the
		// old expiry it renews again, then completes with the same value.
		later := ce.Claim.ExpiresAt.Add(time.Second)
		res, err = claimRenew(t, s, ce.Claim, later, claimLease)
		after = claimRequireRenewed(t, s, after, later, claimLease, res, err)
		res, err = s.MarkClaimDelivered(t.Context(), ce.Claim, claimTestResult)
		done := claimRequireApplied(t, s, after, res, err)
		claimRequireTerminal(t, done, ledger.OutboxStatusDelivered)
	})

	claimRun(t, "LastInstantRenews", newStore, func(t *testing.T, s ledger.ClaimStore) {
		ce := claimNew(t, s, "order-1", claimT0)
		now := ce.Claim.ExpiresAt.Add(-time.Microsecond) // the last instant the claim is valid
		res, err := claimRenew(t, s, ce.Claim, now, claimLease)
		claimRequireRenewed(t, s, ce.Entry, now, claimLease, res, err)
	})

	claimRun(t, "ExpiredClaimIsNotRevived", newStore, func(t *testing.T, s ledger.ClaimStore) {
		ce := claimNew(t, s, "order-1", claimT0)
		res, err := claimRenew(t, s, ce.Claim, ce.Claim.ExpiresAt, claimLease)
		claimRequireUnapplied(t, s, ce.Entry, res, err, ledger.OutcomeLeaseExpired)
		res, err = claimRenew(t, s, ce.Claim, ce.Claim.ExpiresAt.Add(time.Hour), claimLease)
		claimRequireUnapplied(t, s, ce.Entry, res, err, ledger.OutcomeLeaseExpired)
		// The entry is claimable at the old expiry, as if no renewal was tried.
		again := claimOnlyPending(t, s, ce.Entry.ID, ce.Claim.ExpiresAt)
		require.Equal(t, ce.Claim.Seq+1, again.Claim.Seq)
	})

	claimRun(t, "RenewedClaimIsNotClaimedUntilTheNewExpiry", newStore, func(t *testing.T, s ledger.ClaimStore) {
		ce := claimNew(t, s, "order-1", claimT0)
		now := claimAt(30 * time.Second)
		res, err := claimRenew(t, s, ce.Claim, now, 2*time.Minute)
		after := claimRequireRenewed(t, s, ce.Entry, now, 2*time.Minute, res, err)
		newExpiry := after.Claim.ExpiresAt
		require.Empty(t, claimPending(t, s, ce.Claim.ExpiresAt, 10), "the old expiry no longer applies")
		require.Empty(t, claimPending(t, s, newExpiry.Add(-time.Microsecond), 10))
		claimRequireStored(t, s, after)
		req := claimRequest(newExpiry, 10)
		got := claimPending(t, s, newExpiry, 10)
		require.Len(t, got, 1)
		claimRequireClaim(t, s, got[0], req, ce.Claim.Seq+1)
		require.Equal(t, 2, got[0].Entry.Attempts)
	})

	claimRun(t, "RenewedRetryClaimIsNotClaimedUntilTheNewExpiry", newStore, func(t *testing.T, s ledger.ClaimStore) {
		claimScheduled(t, s, "order-1", claimT0)
		got := claimRetry(t, s, claimT0, 10)
		require.Len(t, got, 1)
		ce := got[0]
		now := claimAt(30 * time.Second)
		res, err := claimRenew(t, s, ce.Claim, now, 2*time.Minute)
		after := claimRequireRenewed(t, s, ce.Entry, now, 2*time.Minute, res, err)
		newExpiry := after.Claim.ExpiresAt
		require.Empty(t, claimRetry(t, s, ce.Claim.ExpiresAt, 10), "the old expiry no longer applies")
		require.Empty(t, claimRetry(t, s, newExpiry.Add(-time.Microsecond), 10))
		claimRequireStored(t, s, after)
		again := claimRetry(t, s, newExpiry, 10)
		require.Len(t, again, 1)
		claimRequireClaim(t, s, again[0], claimRequest(newExpiry, 10), ce.Claim.Seq+1)
	})

	claimRun(t, "StaleClaimIsLeaseLost", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := claimEnqueue(t, s, "order-1")
		first, second := claimTakeOver(t, s, e.ID)
		now := first.Claim.ExpiresAt.Add(time.Second) // within the current claim
		res, err := claimRenew(t, s, first.Claim, now, claimLease)
		claimRequireUnapplied(t, s, second.Entry, res, err, ledger.OutcomeLeaseLost)

		for _, change := range []func(*ledger.Claim){
			func(c *ledger.Claim) { c.Token = storekit.NewToken() },
			func(c *ledger.Claim) { c.Seq++ },
			func(c *ledger.Claim) { c.Token = first.Claim.Token },
		} {
			c := second.Claim
			change(&c)
			res, err := claimRenew(t, s, c, now, claimLease)
			claimRequireUnapplied(t, s, second.Entry, res, err, ledger.OutcomeLeaseLost)
		}

		// A claim given back is not renewed either, not even as a repeat.
		res, err = s.ReleaseClaim(t.Context(), second.Claim, "")
		released := claimRequireApplied(t, s, second.Entry, res, err)
		res, err = claimRenew(t, s, second.Claim, now, claimLease)
		claimRequireUnapplied(t, s, released, res, err, ledger.OutcomeLeaseLost)

		// Nor is a claim on an entry that was never claimed.
		free := claimEnqueue(t, s, "order-2")
		forged := ledger.Claim{EntryID: free.ID, Worker: claimWorker, Token: storekit.NewToken(), Seq: 1, ClaimedAt: claimT0, ExpiresAt: claimAt(claimLease)}
		res, err = claimRenew(t, s, forged, claimT0, claimLease)
		claimRequireUnapplied(t, s, free, res, err, ledger.OutcomeLeaseLost)
	})

	claimRun(t, "TerminalIsEnded", newStore, func(t *testing.T, s ledger.ClaimStore) {
		ce := claimNew(t, s, "order-1", claimT0)
		res, err := s.MarkClaimDelivered(t.Context(), ce.Claim, claimTestResult)
		ended := claimRequireApplied(t, s, ce.Entry, res, err)
		res, err = claimRenew(t, s, ce.Claim, claimAt(time.Second), claimLease)
		claimRequireUnapplied(t, s, ended, res, err, ledger.OutcomeEnded)

		// Ended by the base contract, which ignores the claim.
		ce = claimNew(t, s, "order-2", claimT0)
		dead, err := s.MarkDeadLettered(t.Context(), ce.Entry.ID, claimTestError, "gone")
		require.NoError(t, err)
		res, err = claimRenew(t, s, ce.Claim, claimAt(time.Second), claimLease)
		claimRequireUnapplied(t, s, dead, res, err, ledger.OutcomeEnded)
	})

	claimRun(t, "UnknownIsNotFound", newStore, func(t *testing.T, s ledger.ClaimStore) {
		ce := claimNew(t, s, "order-1", claimT0)
		missing := ce.Claim
		missing.EntryID = ledger.OutboxEntryIDFor("missing")
		res, err := claimRenew(t, s, missing, claimAt(time.Second), claimLease)
		require.NoError(t, err)
		require.Equal(t, ledger.OutcomeNotFound, res.Outcome)
		require.False(t, res.Applied())
		require.Equal(t, ledger.OutboxEntry{}, res.Entry, "NotFound carries the zero entry")
		_, err = s.FindByID(t.Context(), missing.EntryID)
		require.ErrorIs(t, err, ledger.ErrNotFound, "nothing was created")
		claimRequireStored(t, s, ce.Entry)
	})

	claimRun(t, "NotAnAttempt", newStore, func(t *testing.T, s ledger.ClaimStore) {
		ce := claimNew(t, s, "order-1", claimT0)
		entry := ce.Entry
		now := claimT0
		for range 5 {
			now = now.Add(30 * time.Second)
			res, err := claimRenew(t, s, ce.Claim, now, claimLease)
			entry = claimRequireRenewed(t, s, entry, now, claimLease, res, err)
			require.Equal(t, 1, entry.Attempts, "a renewal does not count an attempt")
			require.Equal(t, ce.Claim.Seq, entry.ClaimSeq, "a renewal is not a claim")
		}
		// A release gives back the one attempt the claim counted.
		res, err := s.ReleaseClaim(t.Context(), ce.Claim, "")
		released := claimRequireApplied(t, s, entry, res, err)
		require.Equal(t, 0, released.Attempts)
	})

	claimRun(t, "Precedence", newStore, func(t *testing.T, s ledger.ClaimStore) {
		// Ended beats LeaseLost and LeaseExpired: a stale claim on an ended
		// entry, after it ran out.
		e := claimEnqueue(t, s, "order-ended")
		first, second := claimTakeOver(t, s, e.ID)
		res, err := s.MarkClaimDelivered(t.Context(), second.Claim, claimTestResult)
		ended := claimRequireApplied(t, s, second.Entry, res, err)
		res, err = claimRenew(t, s, first.Claim, first.Claim.ExpiresAt, claimLease)
		claimRequireUnapplied(t, s, ended, res, err, ledger.OutcomeEnded)

		// LeaseLost beats LeaseExpired: a forged token on a claim that ran
		// out and that nobody took over.
		ce := claimNew(t, s, "order-open", claimT0)
		forged := ce.Claim
		forged.Token = storekit.NewToken()
		res, err = claimRenew(t, s, forged, ce.Claim.ExpiresAt, claimLease)
		claimRequireUnapplied(t, s, ce.Entry, res, err, ledger.OutcomeLeaseLost)
	})

	claimRun(t, "InvalidIsRejected", newStore, func(t *testing.T, s ledger.ClaimStore) {
		r := claimRenewer(t, s)
		f := newClaimFixture(t, s)
		renew := func(ctx context.Context, c ledger.Claim, now time.Time, d time.Duration) error {
			_, err := r.RenewClaim(ctx, c, now, d)
			return err
		}
		valid := claimAt(time.Second) // the fixture's claim is in force
		cases := claimJoin(
			claimBadClaims(func(ctx context.Context, f claimFixture, c ledger.Claim) error {
				return renew(ctx, c, valid, claimLease)
			}),
			claimBadEach("ClaimWorker", claimBadOptionalNames, func(ctx context.Context, f claimFixture, v string) error {
				c := f.claim
				c.Worker = v
				return renew(ctx, c, valid, claimLease)
			}),
			claimBadTimeCases("Now", func(ctx context.Context, f claimFixture, now time.Time) error {
				return renew(ctx, f.claim, now, claimLease)
			}),
		)
		for _, d := range []struct {
			name  string
			value time.Duration
		}{
			{"Zero", 0},
			{"Negative", -time.Second},
			{"BelowMicrosecond", 999 * time.Nanosecond},
			{"OverMax", ledger.MaxLeaseDuration + time.Microsecond},
		} {
			cases = append(cases, claimBadCase{"Duration" + d.name, func(ctx context.Context, f claimFixture) error {
				return renew(ctx, f.claim, valid, d.value)
			}})
		}
		cases = append(cases, claimBadCase{"NilContext", func(_ context.Context, f claimFixture) error {
			var nilCtx context.Context
			return renew(nilCtx, f.claim, valid, claimLease)
		}})
		ids := []ledger.OutboxEntryID{f.claimed.ID, f.free.ID, f.retry.ID}
		for _, bc := range cases {
			t.Run(bc.name, func(t *testing.T) {
				before := claimSnapshot(t, s, ids...)
				requireInvalid(t, bc.call(t.Context(), f))
				require.Equal(t, before, claimSnapshot(t, s, ids...), "a rejected call writes nothing")
			})
		}
		t.Run("CancelledContext", func(t *testing.T) {
			before := claimSnapshot(t, s, ids...)
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			require.ErrorIs(t, renew(ctx, f.claim, valid, claimLease), context.Canceled)
			require.Equal(t, before, claimSnapshot(t, s, ids...), "a cancelled call writes nothing")
		})
		// The same call with a live context applies: the cases above were
		// rejected for their one malformed argument, not for the fixture.
		res, err := r.RenewClaim(t.Context(), f.claim, valid, claimLease)
		require.NoError(t, err)
		require.Equal(t, ledger.OutcomeApplied, res.Outcome)
	})
}
