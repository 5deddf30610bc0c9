package ledgertest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// testOutboxStats checks ledger.OutboxStatsReporter: the counts by status,
// the depth of what the claims could hand out and the lag of the oldest of
// it, overall and by provider (ByProvider: only providers with a due
// entry). Every answer must equal what storekit.CountEntry gives over every
// entry read back with FindByID, and Depth must be what ClaimPending and
// ClaimRetryReady hand out. A store that does not implement
// OutboxStatsReporter skips the group: stats are optional.
//
// Pending entries are due from their CreatedAt, stamped by the store's own
// clock, so the expected times come from the scan, not from claimT0.
func testOutboxStats(t *testing.T, newStore NewClaimStoreFunc) {
	claimRun(t, "EmptyStore", newStore, claimStatsEmptyStore)
	claimRun(t, "CountsByStatus", newStore, claimStatsCountsByStatus)
	claimRun(t, "DepthAndLagOverTime", newStore, claimStatsDepthAndLagOverTime)
	claimRun(t, "DepthIsWhatClaimsHandOut", newStore, claimStatsDepthIsWhatClaimsHandOut)
	claimRun(t, "NothingDueHasNoLag", newStore, claimStatsNothingDueHasNoLag)
	claimRun(t, "QueueByProvider", newStore, claimStatsQueueByProvider)
	claimRun(t, "InvalidIsRejected", newStore, claimStatsInvalidIsRejected)
}

// claimStatsReporter returns s as an OutboxStatsReporter, skipping the
// test when it is not one.
func claimStatsReporter(t *testing.T, s ledger.ClaimStore) ledger.OutboxStatsReporter {
	t.Helper()
	r, ok := s.(ledger.OutboxStatsReporter)
	if !ok {
		t.Skipf("%T does not implement ledger.OutboxStatsReporter: stats are optional", s)
	}
	return r
}

// claimStats calls OutboxStats, requires no error and normalises the time
// it holds.
func claimStats(t *testing.T, s ledger.ClaimStore, now time.Time) ledger.OutboxStats {
	t.Helper()
	st, err := claimStatsReporter(t, s).OutboxStats(t.Context(), now)
	require.NoError(t, err, "OutboxStats at %s", now)
	if !st.OldestDueAt.IsZero() {
		st.OldestDueAt = ledger.Normalize(st.OldestDueAt)
	}
	for p, q := range st.ByProvider {
		q.OldestDueAt = ledger.Normalize(q.OldestDueAt)
		st.ByProvider[p] = q
	}
	return st
}

// claimScanStats counts, with the root's Count, the entries ids (every
// entry of the store) as FindByID returns them: what OutboxStats must
// answer.
func claimScanStats(t *testing.T, s ledger.ClaimStore, ids []ledger.OutboxEntryID, now time.Time) ledger.OutboxStats {
	t.Helper()
	want := storekit.NewOutboxStats()
	for _, id := range ids {
		e := claimCanon(claimFind(t, s, id))
		storekit.CountEntry(&want, &e, now)
	}
	storekit.FinishOutboxStats(&want, now)
	return want
}

// claimRequireStatsMatchScan requires OutboxStats to equal the scan at
// every now.
func claimRequireStatsMatchScan(t *testing.T, s ledger.ClaimStore, ids []ledger.OutboxEntryID, nows ...time.Time) {
	t.Helper()
	for _, now := range nows {
		require.Equal(t, claimScanStats(t, s, ids, now), claimStats(t, s, now), "OutboxStats at %s", now)
	}
}

func claimStatsEmptyStore(t *testing.T, s ledger.ClaimStore) {
	require.Equal(t, storekit.NewOutboxStats(), claimStats(t, s, claimT0), "every status present and zero, nothing else")
}

// claimStatsMix enqueues one entry in each situation: pending and claimed
// until claimAt(claimLease), pending, due for a retry an hour ago and in an
// hour, deferred for half an hour, and ended in each terminal status.
func claimStatsMix(t *testing.T, s ledger.ClaimStore) []ledger.OutboxEntryID {
	t.Helper()
	ctx := t.Context()
	entries := []ledger.OutboxEntry{
		claimNew(t, s, "p-claimed", claimT0).Entry, // first: the only one to claim
		claimEnqueue(t, s, "p-free"),
		claimScheduled(t, s, "r-due", claimAt(-time.Hour)),
		claimScheduled(t, s, "r-later", claimAt(time.Hour)),
		claimDeferred(t, s, "x-deferred", claimAt(30*time.Minute)),
		claimDelivered(t, s, "z-delivered"),
	}
	e := claimEnqueue(t, s, "z-failed")
	_, err := s.MarkFailed(ctx, e.ID, ledger.EmissionError{Message: "gone"}, nil)
	require.NoError(t, err)
	entries = append(entries, e)
	e = claimEnqueue(t, s, "z-dead")
	_, err = s.MarkDeadLettered(ctx, e.ID, ledger.EmissionError{Message: "poison"}, "poison message")
	require.NoError(t, err)
	entries = append(entries, e)
	return claimEntryIDs(entries)
}

func claimStatsCountsByStatus(t *testing.T, s ledger.ClaimStore) {
	ids := claimStatsMix(t, s)
	st := claimStats(t, s, claimT0)
	require.Equal(t, map[ledger.OutboxStatus]int64{
		ledger.OutboxStatusPending: 2, ledger.OutboxStatusRetryScheduled: 2, ledger.OutboxStatusDeferred: 1,
		ledger.OutboxStatusDelivered: 1, ledger.OutboxStatusFailed: 1, ledger.OutboxStatusDeadLettered: 1,
	}, st.ByStatus)
	require.Equal(t, int64(2), st.Depth, "p-free and r-due; p-claimed is held")
	claimRequireStatsMatchScan(t, s, ids, claimT0, claimAt(claimLease), claimAt(30*time.Minute), claimAt(time.Hour))
}

func claimStatsDepthAndLagOverTime(t *testing.T, s ledger.ClaimStore) {
	ids := claimStatsMix(t, s)
	for _, tc := range []struct {
		now   time.Time
		depth int64
	}{
		{claimT0, 2}, // p-free, r-due
		{claimAt(claimLease - time.Microsecond), 2}, // p-claimed still held
		{claimAt(claimLease), 3},                    // its claim ran out
		{claimAt(30 * time.Minute), 4},              // x-deferred is due
		{claimAt(time.Hour), 5},                     // r-later too
	} {
		st := claimStats(t, s, tc.now)
		require.Equal(t, tc.depth, st.Depth, "Depth at %s", tc.now)
		require.Equal(t, claimScanStats(t, s, ids, tc.now), st, "OutboxStats at %s", tc.now)
		require.False(t, st.OldestDueAt.IsZero())
	}
}

func claimStatsDepthIsWhatClaimsHandOut(t *testing.T, s ledger.ClaimStore) {
	ids := claimStatsMix(t, s)
	now := claimAt(time.Hour)
	st := claimStats(t, s, now)
	require.Equal(t, claimScanStats(t, s, ids, now), st)
	got := len(claimPending(t, s, now, ledger.MaxLimit)) + len(claimRetry(t, s, now, ledger.MaxLimit))
	require.Equal(t, st.Depth, int64(got), "Depth is what the claims hand out")
	after := claimStats(t, s, now)
	require.Zero(t, after.Depth, "everything due is claimed now")
	require.Zero(t, after.Lag)
	require.True(t, after.OldestDueAt.IsZero())
	claimRequireStatsMatchScan(t, s, ids, now, now.Add(claimLease))
}

func claimStatsNothingDueHasNoLag(t *testing.T, s ledger.ClaimStore) {
	claimNew(t, s, "p-claimed", claimT0)
	claimScheduled(t, s, "r-later", claimAt(time.Hour))
	claimDelivered(t, s, "z-delivered")
	st := claimStats(t, s, claimT0)
	require.Zero(t, st.Depth)
	require.Zero(t, st.Lag)
	require.True(t, st.OldestDueAt.IsZero())
	require.Equal(t, int64(1), st.ByStatus[ledger.OutboxStatusPending])
}

// claimEnqueueFor enqueues a new entry for key to provider.
func claimEnqueueFor(t *testing.T, s ledger.ClaimStore, provider, key string) ledger.OutboxEntry {
	t.Helper()
	env := claimEnvelope(key)
	env.Provider = provider
	res, err := s.Enqueue(t.Context(), env)
	require.NoError(t, err)
	require.Equal(t, ledger.OutcomeApplied, res.Outcome, "enqueue %q", key)
	return res.Entry
}

// claimStatsQueueByProvider pins ByProvider: per provider, the entries the
// claims could hand out at now, the oldest due time among them and its
// lag; a retry not yet due, a claim in force and an ended entry are never
// counted, and a provider with nothing due has no entry.
func claimStatsQueueByProvider(t *testing.T, s ledger.ClaimStore) {
	ctx := t.Context()
	// sms: one pending claimed until claimAt(claimLease), one retry due
	// two hours ago.
	sClaimed := claimEnqueueFor(t, s, "sms", "s-claimed")
	claimOnlyPending(t, s, sClaimed.ID, claimT0)
	sDue := claimEnqueueFor(t, s, "sms", "s-due")
	retryAt := claimAt(-2 * time.Hour)
	_, err := s.MarkFailed(ctx, sDue.ID, ledger.EmissionError{Message: "busy"}, &retryAt)
	require.NoError(t, err)
	// mail: one pending, one retry due an hour ago, one in an hour.
	mFree := claimEnqueueFor(t, s, "mail", "m-free")
	ids := []ledger.OutboxEntryID{sClaimed.ID, sDue.ID, mFree.ID}
	for key, next := range map[string]time.Time{"m-due": claimAt(-time.Hour), "m-later": claimAt(time.Hour)} {
		e := claimEnqueueFor(t, s, "mail", key)
		ids = append(ids, e.ID)
		_, err := s.MarkFailed(ctx, e.ID, ledger.EmissionError{Message: "busy"}, &next)
		require.NoError(t, err)
	}
	// push: ended only.
	pDone := claimEnqueueFor(t, s, "push", "p-done")
	_, err = s.MarkFailed(ctx, pDone.ID, ledger.EmissionError{Message: "gone"}, nil)
	require.NoError(t, err)
	ids = append(ids, pDone.ID)

	mailOldest := ledger.Normalize(mFree.CreatedAt)
	if hourAgo := claimAt(-time.Hour); hourAgo.Before(mailOldest) {
		mailOldest = hourAgo
	}
	type q = ledger.ProviderQueueStats
	for _, c := range []struct {
		now       time.Time
		mail, sms int64
	}{
		{claimT0, 2, 1},
		{claimAt(claimLease - time.Microsecond), 2, 1},
		{claimAt(claimLease), 2, 2},
		{claimAt(time.Hour), 3, 2},
	} {
		st := claimStats(t, s, c.now)
		now := ledger.Normalize(c.now)
		require.Equal(t, map[string]q{
			"mail": {Depth: c.mail, OldestDueAt: mailOldest, Lag: max(now.Sub(mailOldest), 0)},
			"sms":  {Depth: c.sms, OldestDueAt: retryAt, Lag: now.Sub(retryAt)},
		}, st.ByProvider, "ByProvider at %s", c.now)
		require.Equal(t, c.mail+c.sms, st.Depth, "the providers' depths add up to Depth")
	}
	claimRequireStatsMatchScan(t, s, ids, claimT0, claimAt(claimLease), claimAt(time.Hour))
}

func claimStatsInvalidIsRejected(t *testing.T, s ledger.ClaimStore) {
	r := claimStatsReporter(t, s)
	for _, now := range []time.Time{{}, storekit.MaxTime().Add(time.Second), storekit.MinTime().Add(-time.Second)} {
		_, err := r.OutboxStats(t.Context(), now)
		requireInvalid(t, err)
	}
	_, err := r.OutboxStats(nilContext(), claimT0)
	requireInvalid(t, err)
	_, err = r.OutboxStats(cancelledContext(t), claimT0)
	require.ErrorIs(t, err, context.Canceled)
}
