package ledgertest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// testOutboxStats checks ledger.OutboxStatsReporter: the counts by status,
// the depth of what the claims could hand out and the lag of the oldest of
// it. Every answer must equal what ledger.OutboxStats.Count gives over every
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
	return st
}

// claimScanStats counts, with the root's Count, the entries ids (every
// entry of the store) as FindByID returns them: what OutboxStats must
// answer.
func claimScanStats(t *testing.T, s ledger.ClaimStore, ids []ledger.OutboxEntryID, now time.Time) ledger.OutboxStats {
	t.Helper()
	want := ledger.NewOutboxStats()
	for _, id := range ids {
		e := claimCanon(claimFind(t, s, id))
		want.Count(&e, now)
	}
	want.Finish(now)
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
	require.Equal(t, ledger.NewOutboxStats(), claimStats(t, s, claimT0), "every status present and zero, nothing else")
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

func claimStatsInvalidIsRejected(t *testing.T, s ledger.ClaimStore) {
	r := claimStatsReporter(t, s)
	for _, now := range []time.Time{{}, ledger.MaxTime().Add(time.Second), ledger.MinTime().Add(-time.Second)} {
		_, err := r.OutboxStats(t.Context(), now)
		requireInvalid(t, err)
	}
	_, err := r.OutboxStats(nilContext(), claimT0)
	requireInvalid(t, err)
	_, err = r.OutboxStats(cancelledContext(t), claimT0)
	require.ErrorIs(t, err, context.Canceled)
}
