package ledgertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// claimSource is one of the two claim calls, with a way to make an entry
// it can claim.
type claimSource struct {
	name  string
	claim func(t *testing.T, s ledger.ClaimStore, req ledger.ClaimRequest) []ledger.ClaimedEntry
	// ready makes an entry for key that the call can claim from claimT0+at.
	ready func(t *testing.T, s ledger.ClaimStore, key string, at time.Duration) ledger.OutboxEntry
	// order returns the IDs of entries in the order the call claims them.
	order func(entries []ledger.OutboxEntry) []ledger.OutboxEntryID
}

// claimSources are ClaimPending (pending entries, oldest first),
// ClaimRetryReady (scheduled entries, earliest first) and ClaimDue (both,
// the scheduled ones first).
var claimSources = []claimSource{
	{
		name: "ClaimPending",
		claim: func(t *testing.T, s ledger.ClaimStore, req ledger.ClaimRequest) []ledger.ClaimedEntry {
			t.Helper()
			got, err := s.ClaimPending(t.Context(), req)
			require.NoError(t, err)
			return got
		},
		ready: func(t *testing.T, s ledger.ClaimStore, key string, _ time.Duration) ledger.OutboxEntry {
			t.Helper()
			return claimEnqueue(t, s, key)
		},
		order: claimPendingOrder,
	},
	{
		name: "ClaimRetryReady",
		claim: func(t *testing.T, s ledger.ClaimStore, req ledger.ClaimRequest) []ledger.ClaimedEntry {
			t.Helper()
			got, err := s.ClaimRetryReady(t.Context(), req)
			require.NoError(t, err)
			return got
		},
		ready: func(t *testing.T, s ledger.ClaimStore, key string, at time.Duration) ledger.OutboxEntry {
			t.Helper()
			// Alternate the two scheduled statuses: both are claimable.
			if key[len(key)-1]%2 == 0 {
				return claimDeferred(t, s, key, claimAt(at))
			}
			return claimScheduled(t, s, key, claimAt(at))
		},
		order: claimRetryOrder,
	},
	{
		name: "ClaimDue",
		claim: func(t *testing.T, s ledger.ClaimStore, req ledger.ClaimRequest) []ledger.ClaimedEntry {
			t.Helper()
			got, err := claimDuer(t, s).ClaimDue(t.Context(), req)
			require.NoError(t, err)
			return got
		},
		ready: func(t *testing.T, s ledger.ClaimStore, key string, at time.Duration) ledger.OutboxEntry {
			t.Helper()
			// Alternate pending and scheduled entries: both are due.
			if key[len(key)-1]%2 == 0 {
				return claimEnqueue(t, s, key)
			}
			return claimScheduled(t, s, key, claimAt(at))
		},
		order: claimDueOrder,
	},
}

// claimDuer returns s as a ledger.DueClaimer. Every claim store we ship
// implements it, so a store without it fails the suite.
func claimDuer(t *testing.T, s ledger.ClaimStore) ledger.DueClaimer {
	t.Helper()
	d, ok := s.(ledger.DueClaimer)
	if !ok {
		t.Fatalf("%T does not implement ledger.DueClaimer", s)
	}
	return d
}

// claimDueOrder returns the IDs of entries in ClaimDue order: the
// scheduled ones as ClaimRetryReady takes them, then the pending ones as
// ClaimPending does.
func claimDueOrder(entries []ledger.OutboxEntry) []ledger.OutboxEntryID {
	var retry, pending []ledger.OutboxEntry
	for _, e := range entries {
		if e.Status.Scheduled() {
			retry = append(retry, e)
		} else {
			pending = append(pending, e)
		}
	}
	return append(claimRetryOrder(retry), claimPendingOrder(pending)...)
}

// testClaim checks ClaimPending, ClaimRetryReady and ClaimDue: claims are exclusive
// until they expire, come in delivery order, respect the limit, count an
// attempt, carry a new token and the next sequence number, and an expired
// claim can be taken over at exactly its ExpiresAt.
func testClaim(t *testing.T, newStore NewClaimStoreFunc) {
	for _, src := range claimSources {
		testClaimSource(t, newStore, src)
	}
	testClaimSelection(t, newStore)
}

// testClaimSource runs the rules both claim calls share.
func testClaimSource(t *testing.T, newStore NewClaimStoreFunc, src claimSource) {
	claimRun(t, src.name+"/EmptyStoreClaimsNothing", newStore, func(t *testing.T, s ledger.ClaimStore) {
		require.Empty(t, src.claim(t, s, claimRequest(claimT0, 10)))
	})

	claimRun(t, src.name+"/GrantsAndCountsAnAttempt", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := src.ready(t, s, "order-1", 0)
		req := claimRequest(claimT0, 10)
		got := src.claim(t, s, req)
		require.Len(t, got, 1)
		require.Equal(t, e.ID, got[0].Entry.ID)
		claimRequireClaim(t, s, got[0], req, 1)
		require.Equal(t, e.Attempts+1, got[0].Entry.Attempts, "each claim counts an attempt")
		require.Equal(t, e.Status, got[0].Entry.Status, "a claim does not change the status")
		require.Equal(t, e.Version+1, got[0].Entry.Version)
		require.Equal(t, e.Envelope, got[0].Entry.Envelope)
	})

	claimRun(t, src.name+"/DeliveryOrder", newStore, func(t *testing.T, s ledger.ClaimStore) {
		var entries []ledger.OutboxEntry
		for i, key := range []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8"} {
			entries = append(entries, src.ready(t, s, key, time.Duration(-i/2)*time.Second))
		}
		want := src.order(entries)
		got := src.claim(t, s, claimRequest(claimT0, ledger.MaxLimit))
		require.Equal(t, want, claimClaimedIDs(got))
	})

	claimRun(t, src.name+"/RespectsTheLimit", newStore, func(t *testing.T, s ledger.ClaimStore) {
		var entries []ledger.OutboxEntry
		for _, key := range []string{"k0", "k1", "k2", "k3", "k4"} {
			entries = append(entries, src.ready(t, s, key, 0))
		}
		want := src.order(entries)
		first := src.claim(t, s, claimRequest(claimT0, 2))
		require.Equal(t, want[:2], claimClaimedIDs(first))
		second := src.claim(t, s, claimRequest(claimT0, 2))
		require.Equal(t, want[2:4], claimClaimedIDs(second), "the next call skips claimed entries")
		third := src.claim(t, s, claimRequest(claimT0, 2))
		require.Equal(t, want[4:], claimClaimedIDs(third))
		require.Empty(t, src.claim(t, s, claimRequest(claimT0, 2)))
	})

	claimRun(t, src.name+"/ClaimedEntryIsNotClaimedAgain", newStore, func(t *testing.T, s ledger.ClaimStore) {
		src.ready(t, s, "order-1", 0)
		got := src.claim(t, s, claimRequest(claimT0, 10))
		require.Len(t, got, 1)
		for _, now := range []time.Time{claimT0, claimAt(claimLease / 2), claimAt(claimLease - time.Microsecond)} {
			again := src.claim(t, s, ledger.ClaimRequest{Worker: "worker-b", Now: now, LeaseDuration: claimLease, Limit: 10})
			require.Empty(t, again, "a claim in force at %s is exclusive", now)
		}
		claimRequireStored(t, s, got[0].Entry)
	})

	claimRun(t, src.name+"/ExpiredClaimIsTakenOverAtExpiresAt", newStore, func(t *testing.T, s ledger.ClaimStore) {
		src.ready(t, s, "order-1", 0)
		first := src.claim(t, s, claimRequest(claimT0, 10))
		require.Len(t, first, 1)
		expires := first[0].Claim.ExpiresAt
		req := ledger.ClaimRequest{Worker: "worker-b", Now: expires, LeaseDuration: 2 * claimLease, Limit: 10}
		second := src.claim(t, s, req)
		require.Len(t, second, 1, "a claim has run out at now == ExpiresAt")
		claimRequireClaim(t, s, second[0], req, 2)
		require.NotEqual(t, first[0].Claim.Token, second[0].Claim.Token, "every claim has a new token")
		require.Equal(t, first[0].Entry.Attempts+1, second[0].Entry.Attempts, "the new claim counts an attempt")

		res, err := s.MarkClaimDelivered(t.Context(), first[0].Claim, ledger.EmissionResult{})
		claimRequireUnapplied(t, s, second[0].Entry, res, err, ledger.OutcomeLeaseLost)
		res, err = s.ReleaseClaim(t.Context(), first[0].Claim, "late")
		claimRequireUnapplied(t, s, second[0].Entry, res, err, ledger.OutcomeLeaseLost)
		res, err = s.MarkClaimDelivered(t.Context(), second[0].Claim, ledger.EmissionResult{ProviderRef: "ref"})
		claimRequireApplied(t, s, second[0].Entry, res, err)
	})

	claimRun(t, src.name+"/TokensAndSequenceAcrossClaims", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := src.ready(t, s, "order-1", 0)
		tokens := map[ledger.Token]bool{}
		now := claimT0
		for seq := int64(1); seq <= 5; seq++ {
			got := src.claim(t, s, claimRequest(now, 1))
			require.Len(t, got, 1, "claim %d", seq)
			require.Equal(t, seq, got[0].Claim.Seq, "the sequence grows by one per claim")
			require.Equal(t, e.Attempts+int(seq), got[0].Entry.Attempts, "each claim counts an attempt")
			require.False(t, tokens[got[0].Claim.Token], "token reused")
			tokens[got[0].Claim.Token] = true
			now = got[0].Claim.ExpiresAt
		}
	})

	claimRun(t, src.name+"/NormalisesNowAndDuration", newStore, func(t *testing.T, s ledger.ClaimStore) {
		src.ready(t, s, "order-1", 0)
		req := ledger.ClaimRequest{
			Worker:        claimWorker,
			Now:           claimAt(1234 * time.Nanosecond).In(time.FixedZone("east", 9*3600)),
			LeaseDuration: claimLease + 999*time.Nanosecond,
			Limit:         10,
		}
		got := src.claim(t, s, req)
		require.Len(t, got, 1)
		claimRequireClaim(t, s, got[0], req, 1)
		require.Equal(t, ledger.Normalize(req.Now), got[0].Claim.ClaimedAt)
		require.Equal(t, ledger.Normalize(req.Now).Add(claimLease), got[0].Claim.ExpiresAt)
	})

	claimRun(t, src.name+"/ReturnsCopies", newStore, func(t *testing.T, s ledger.ClaimStore) {
		src.ready(t, s, "order-1", 0)
		got := src.claim(t, s, claimRequest(claimT0, 10))
		require.Len(t, got, 1)
		want := claimCanon(got[0].Entry)
		got[0].Entry.Envelope.Payload[0] ^= 0xff
		got[0].Entry.Claim.Token = "changed by the caller"
		claimRequireStored(t, s, want)
	})
}

// testClaimSelection checks which entries each claim call takes.
func testClaimSelection(t *testing.T, newStore NewClaimStoreFunc) {
	claimRun(t, "ClaimPending/OnlyPendingEntries", newStore, func(t *testing.T, s ledger.ClaimStore) {
		pending := claimEnqueue(t, s, "pending")
		claimScheduled(t, s, "scheduled", claimAt(-time.Hour))
		claimDeferred(t, s, "deferred", claimAt(-time.Hour))
		delivered := claimEnqueue(t, s, "delivered")
		_, err := s.MarkDelivered(t.Context(), delivered.ID, ledger.EmissionResult{})
		require.NoError(t, err)
		failed := claimEnqueue(t, s, "failed")
		_, err = s.MarkFailed(t.Context(), failed.ID, ledger.EmissionError{}, nil)
		require.NoError(t, err)
		got := claimPending(t, s, claimAt(time.Hour), ledger.MaxLimit)
		require.Equal(t, []ledger.OutboxEntryID{pending.ID}, claimClaimedIDs(got))
	})

	// Every entry of one EnqueueBatch may share one CreatedAt (both stores
	// stamp a batch with one clock reading), and entry IDs are hashes of
	// the keys: the claims must still come first in, first out, within one
	// call (the order of the result) and across calls (which entries a
	// limited call takes).
	claimRun(t, "ClaimPending/BatchIsClaimedInEnqueueOrder", newStore, func(t *testing.T, s ledger.ClaimStore) {
		entries := claimEnqueueKeys(t, s, claimUnsortedKeys(t, "order", 9))
		want := claimEntryIDs(entries)
		first := claimPending(t, s, claimT0, 4)
		require.Equal(t, want[:4], claimClaimedIDs(first), "the first four enqueued, in enqueue order")
		rest := claimPending(t, s, claimT0, ledger.MaxLimit)
		require.Equal(t, want[4:], claimClaimedIDs(rest), "the rest, in enqueue order")
	})

	claimRun(t, "ClaimRetryReady/OnlyDueScheduledEntries", newStore, func(t *testing.T, s ledger.ClaimStore) {
		claimEnqueue(t, s, "pending")
		a := claimScheduled(t, s, "a", claimAt(1*time.Minute))
		b := claimDeferred(t, s, "b", claimAt(2*time.Minute))
		claimScheduled(t, s, "c", claimAt(3*time.Minute))
		claimDeferred(t, s, "d", claimAt(4*time.Minute))
		ended := claimScheduled(t, s, "ended", claimT0)
		_, err := s.MarkDeadLettered(t.Context(), ended.ID, ledger.EmissionError{}, "poison")
		require.NoError(t, err)

		require.Empty(t, claimRetry(t, s, claimAt(time.Minute-time.Microsecond), 10), "not due before NextAttemptAt")
		got := claimRetry(t, s, claimAt(2*time.Minute), 10)
		require.Equal(t, []ledger.OutboxEntryID{a.ID, b.ID}, claimClaimedIDs(got), "due at or before now, earliest first")
		require.Equal(t, ledger.OutboxStatusRetryScheduled, got[0].Entry.Status)
		require.Equal(t, ledger.OutboxStatusDeferred, got[1].Entry.Status)
		require.True(t, a.NextAttemptAt.Equal(got[0].Entry.NextAttemptAt), "a claim keeps NextAttemptAt")
	})

	claimRun(t, "ClaimRetryReady/BoundaryAtNextAttemptAt", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := claimDeferred(t, s, "order-1", claimAt(time.Hour))
		require.Empty(t, claimRetry(t, s, claimAt(time.Hour-time.Microsecond), 10))
		got := claimRetry(t, s, claimAt(time.Hour), 10)
		require.Equal(t, []ledger.OutboxEntryID{e.ID}, claimClaimedIDs(got), "due at now == NextAttemptAt")
	})

	// ClaimDue is ClaimRetryReady and then ClaimPending in one call: the
	// due retries come first, earliest due first, whatever the age of
	// the pending entries, and the limit spans both.
	claimRun(t, "ClaimDue/RetryReadyFirstThenPending", newStore, func(t *testing.T, s ledger.ClaimStore) {
		p1 := claimEnqueue(t, s, "pending-1")
		p2 := claimEnqueue(t, s, "pending-2")
		r2 := claimDeferred(t, s, "retry-2", claimAt(2*time.Minute))
		r1 := claimScheduled(t, s, "retry-1", claimAt(time.Minute))
		notDue := claimScheduled(t, s, "not-due", claimAt(time.Hour))
		ended := claimScheduled(t, s, "ended", claimT0)
		_, err := s.MarkDeadLettered(t.Context(), ended.ID, ledger.EmissionError{}, "poison")
		require.NoError(t, err)

		due := claimDuer(t, s)
		// Claims that outlast the test, so that none is taken over.
		req := ledger.ClaimRequest{Worker: claimWorker, Now: claimAt(5 * time.Minute), LeaseDuration: 2 * time.Hour, Limit: 3}
		got, err := due.ClaimDue(t.Context(), req)
		require.NoError(t, err)
		require.Equal(t, []ledger.OutboxEntryID{r1.ID, r2.ID, p1.ID}, claimClaimedIDs(got))
		for _, ce := range got {
			claimRequireClaim(t, s, ce, req, 1)
		}
		got, err = due.ClaimDue(t.Context(), req)
		require.NoError(t, err)
		require.Equal(t, []ledger.OutboxEntryID{p2.ID}, claimClaimedIDs(got), "the rest; nothing not yet due, nothing ended")
		req.Now = claimAt(time.Hour)
		got, err = due.ClaimDue(t.Context(), req)
		require.NoError(t, err)
		require.Equal(t, []ledger.OutboxEntryID{notDue.ID}, claimClaimedIDs(got), "due at now == NextAttemptAt")
	})

	claimRun(t, "ClaimsFromBothCallsAreExclusive", newStore, func(t *testing.T, s ledger.ClaimStore) {
		claimEnqueue(t, s, "pending")
		claimScheduled(t, s, "scheduled", claimT0)
		p := claimPending(t, s, claimT0, 10)
		r := claimRetry(t, s, claimT0, 10)
		require.Len(t, p, 1)
		require.Len(t, r, 1)
		require.Empty(t, claimPending(t, s, claimAt(time.Second), 10))
		require.Empty(t, claimRetry(t, s, claimAt(time.Second), 10))
	})
}
