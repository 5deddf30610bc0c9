package ledgertest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// testListEndedEntries checks ledger.OutboxEndedLister, as testListEnded
// checks deliveries. The base completions stamp EndedAt from the store's
// own clock, so the windows are computed from the entries read back.
func testListEndedEntries(t *testing.T, newStore NewClaimStoreFunc) {
	claimRun(t, "OpenEntriesHaveNotEnded", newStore, endedEntriesOpen)
	claimRun(t, "WindowLatestFirstAsFindByIDShows", newStore, endedEntriesWindow)
	claimRun(t, "InvalidIsRejected", newStore, endedEntriesInvalid)
}

// claimEndedLister returns s as an OutboxEndedLister, skipping the test
// when it is not one.
func claimEndedLister(t *testing.T, s ledger.ClaimStore) ledger.OutboxEndedLister {
	t.Helper()
	l, ok := s.(ledger.OutboxEndedLister)
	if !ok {
		t.Skipf("%T does not implement ledger.OutboxEndedLister: it is optional", s)
	}
	return l
}

// claimEnded calls ListEndedEntries and requires no error.
func claimEnded(t *testing.T, s ledger.ClaimStore, q ledger.EndedQuery) []ledger.EntryEnd {
	t.Helper()
	got, err := claimEndedLister(t, s).ListEndedEntries(t.Context(), q)
	require.NoError(t, err, "ListEndedEntries %+v", q)
	require.LessOrEqual(t, len(got), q.Limit)
	for i := range got {
		got[i].EndedAt = ledger.Normalize(got[i].EndedAt)
	}
	return got
}

func endedEntriesOpen(t *testing.T, s ledger.ClaimStore) {
	claimEnqueue(t, s, "open")
	claimScheduled(t, s, "retry", claimT0)
	got := claimEnded(t, s, ledger.EndedQuery{Since: storekit.MinTime(), Until: storekit.MaxTime(), Limit: 10})
	require.Empty(t, got)
}

func endedEntriesWindow(t *testing.T, s ledger.ClaimStore) {
	byStatus := claimEveryStatus(t, s)
	var ends []ledger.EntryEnd
	for _, id := range byStatus {
		if end, ok := claimFind(t, s, id).End(); ok {
			end.EndedAt = ledger.Normalize(end.EndedAt)
			ends = append(ends, end)
		}
	}
	require.Len(t, ends, 3)
	slices.SortFunc(ends, func(a, b ledger.EntryEnd) int {
		return storekit.CompareEnded(a.EndedAt, string(a.ID), b.EndedAt, string(b.ID))
	})
	latest, earliest := ends[0].EndedAt, ends[len(ends)-1].EndedAt
	window := ledger.EndedQuery{Since: earliest, Until: latest.Add(time.Microsecond), Limit: 10}
	require.Equal(t, ends, claimEnded(t, s, window), "every ending, latest first, as FindByID shows it")

	window.Limit = 2
	require.Equal(t, ends[:2], claimEnded(t, s, window), "the limit keeps the latest endings")

	after := ledger.EndedQuery{Since: latest.Add(time.Microsecond), Until: latest.Add(time.Hour), Limit: 10}
	require.Empty(t, claimEnded(t, s, after))
	before := ledger.EndedQuery{Since: earliest.Add(-time.Hour), Until: earliest, Limit: 10}
	require.Empty(t, claimEnded(t, s, before), "an ending at Until is outside the window")
}

func endedEntriesInvalid(t *testing.T, s ledger.ClaimStore) {
	l := claimEndedLister(t, s)
	for _, q := range []ledger.EndedQuery{
		{Until: claimAt(time.Hour), Limit: 10},
		{Since: claimT0, Until: claimT0, Limit: 10},
		{Since: claimT0, Until: claimAt(time.Hour), Limit: -1},
		{Since: claimT0, Until: claimAt(time.Hour), Limit: ledger.MaxEndedLimit + 1},
	} {
		_, err := l.ListEndedEntries(t.Context(), q)
		requireInvalid(t, err)
	}
	ok := ledger.EndedQuery{Since: claimT0, Until: claimAt(time.Hour), Limit: 10}
	_, err := l.ListEndedEntries(nilContext(), ok)
	requireInvalid(t, err)
	_, err = l.ListEndedEntries(cancelledContext(t), ok)
	require.ErrorIs(t, err, context.Canceled)
}
