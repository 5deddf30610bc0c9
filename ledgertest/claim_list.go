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

// testListEntries checks ledger.OutboxLister: filters by status and
// provider, ID order and keyset paging, as testList checks Ledger.List. A
// store that does not implement OutboxLister skips the group: listing is
// optional.
func testListEntries(t *testing.T, newStore NewClaimStoreFunc) {
	claimRun(t, "EmptyStoreIsOneEmptyPage", newStore, listEntriesEmptyStore)
	claimRun(t, "IDOrderAndRecordsAsFindByID", newStore, listEntriesIDOrder)
	claimRun(t, "Filters", newStore, listEntriesFilters)
	claimRun(t, "ByIdempotencyKey", newStore, listEntriesByKey)
	claimRun(t, "PagingVisitsEveryEntryOnce", newStore, listEntriesPaging)
	claimRun(t, "PagingWithAFilter", newStore, listEntriesPagingWithAFilter)
	claimRun(t, "NextIsEmptyOnAFullLastPage", newStore, listEntriesFullLastPage)
	claimRun(t, "MalformedCursorIsInvalid", newStore, listEntriesMalformedCursor)
	claimRun(t, "InvalidIsRejected", newStore, listEntriesInvalid)
}

// claimLister returns s as an OutboxLister, skipping the test when it is
// not one.
func claimLister(t *testing.T, s ledger.ClaimStore) ledger.OutboxLister {
	t.Helper()
	l, ok := s.(ledger.OutboxLister)
	if !ok {
		t.Skipf("%T does not implement ledger.OutboxLister: listing is optional", s)
	}
	return l
}

// claimPage calls ListEntries and requires no error and a page within its
// limit.
func claimPage(t *testing.T, s ledger.ClaimStore, q ledger.OutboxListQuery) ledger.OutboxPage {
	t.Helper()
	p, err := claimLister(t, s).ListEntries(t.Context(), q)
	require.NoError(t, err, "ListEntries %+v", q)
	require.LessOrEqual(t, len(p.Entries), q.Limit)
	return p
}

// claimListAll pages through every entry matching q, pages of q.Limit,
// and returns their IDs.
func claimListAll(t *testing.T, s ledger.ClaimStore, q ledger.OutboxListQuery) []ledger.OutboxEntryID {
	t.Helper()
	var ids []ledger.OutboxEntryID
	for pages := 0; ; pages++ {
		require.Less(t, pages, 1000, "paging does not end")
		p := claimPage(t, s, q)
		ids = append(ids, claimEntryIDs(p.Entries)...)
		if p.Next == "" {
			return ids
		}
		q.Cursor = p.Next
	}
}

// claimEveryStatus makes one entry in each status, its key named after the
// status, and returns their IDs by status. The ended ones go to
// provider-b, the open ones stay with claimEnvelope's provider-a.
func claimEveryStatus(t *testing.T, s ledger.ClaimStore) map[ledger.OutboxStatus]ledger.OutboxEntryID {
	t.Helper()
	ctx := t.Context()
	out := map[ledger.OutboxStatus]ledger.OutboxEntryID{
		ledger.OutboxStatusPending:        claimEnqueue(t, s, "st-pending").ID,
		ledger.OutboxStatusRetryScheduled: claimScheduled(t, s, "st-retry", claimAt(time.Hour)).ID,
		ledger.OutboxStatusDeferred:       claimDeferred(t, s, "st-deferred", claimAt(time.Hour)).ID,
	}
	end := func(key string, status ledger.OutboxStatus, complete func(id ledger.OutboxEntryID) (ledger.OutboxEntry, error)) {
		env := claimEnvelope(key)
		env.Provider = "provider-b"
		res, err := s.Enqueue(ctx, env)
		require.NoError(t, err)
		got, err := complete(res.Entry.ID)
		require.NoError(t, err)
		require.Equal(t, status, got.Status)
		out[status] = got.ID
	}
	end("st-delivered", ledger.OutboxStatusDelivered, func(id ledger.OutboxEntryID) (ledger.OutboxEntry, error) {
		return s.MarkDelivered(ctx, id, ledger.EmissionResult{ProviderRef: "ref-1"})
	})
	end("st-failed", ledger.OutboxStatusFailed, func(id ledger.OutboxEntryID) (ledger.OutboxEntry, error) {
		return s.MarkFailed(ctx, id, ledger.EmissionError{Code: "gone", Message: "no such user"}, nil)
	})
	end("st-dead", ledger.OutboxStatusDeadLettered, func(id ledger.OutboxEntryID) (ledger.OutboxEntry, error) {
		return s.MarkDeadLettered(ctx, id, ledger.EmissionError{Code: "bad", Message: "malformed"}, "poison")
	})
	return out
}

// claimSortedIDs returns ids sorted, as ListEntries returns them.
func claimSortedIDs(ids ...ledger.OutboxEntryID) []ledger.OutboxEntryID {
	return slices.Sorted(slices.Values(ids))
}

func listEntriesEmptyStore(t *testing.T, s ledger.ClaimStore) {
	p := claimPage(t, s, ledger.OutboxListQuery{Limit: 10})
	require.Empty(t, p.Entries)
	require.Empty(t, p.Next)
}

func listEntriesIDOrder(t *testing.T, s ledger.ClaimStore) {
	claimNew(t, s, "claimed", claimT0)
	entries := claimEnqueueN(t, s, "order", 12)
	want := claimSortedIDs(append(claimEntryIDs(entries), ledger.OutboxEntryIDFor("claimed"))...)
	p := claimPage(t, s, ledger.OutboxListQuery{Limit: ledger.MaxLimit})
	require.Equal(t, want, claimEntryIDs(p.Entries), "entries in ID order (byte order)")
	require.Empty(t, p.Next)
	for _, e := range p.Entries {
		claimRequireEntry(t, claimFind(t, s, e.ID), e, "ListEntries returns the entries as FindByID does")
	}

	// The entries are copies: changing them changes nothing stored.
	first := p.Entries[0]
	before := claimFind(t, s, first.ID)
	first.Envelope.Payload[0] = 'X'
	claimRequireStored(t, s, before)
}

func listEntriesFilters(t *testing.T, s ledger.ClaimStore) {
	byStatus := claimEveryStatus(t, s)
	list := func(q ledger.OutboxListQuery) []ledger.OutboxEntryID {
		q.Limit = ledger.MaxLimit
		return claimListAll(t, s, q)
	}
	all := slices.Collect(func(yield func(ledger.OutboxEntryID) bool) {
		for _, id := range byStatus {
			if !yield(id) {
				return
			}
		}
	})
	require.Equal(t, claimSortedIDs(all...), list(ledger.OutboxListQuery{}))
	for status, id := range byStatus {
		require.Equal(t, []ledger.OutboxEntryID{id}, list(ledger.OutboxListQuery{Statuses: []ledger.OutboxStatus{status}}), status)
	}
	open := claimSortedIDs(byStatus[ledger.OutboxStatusPending], byStatus[ledger.OutboxStatusRetryScheduled], byStatus[ledger.OutboxStatusDeferred])
	ended := claimSortedIDs(byStatus[ledger.OutboxStatusDelivered], byStatus[ledger.OutboxStatusFailed], byStatus[ledger.OutboxStatusDeadLettered])
	require.Equal(t, open, list(ledger.OutboxListQuery{Statuses: []ledger.OutboxStatus{
		ledger.OutboxStatusPending, ledger.OutboxStatusRetryScheduled, ledger.OutboxStatusDeferred}}), "every open status")
	require.Equal(t, ended, list(ledger.OutboxListQuery{Statuses: []ledger.OutboxStatus{
		ledger.OutboxStatusDelivered, ledger.OutboxStatusFailed, ledger.OutboxStatusDeadLettered}}), "every terminal status")
	require.Equal(t, open, list(ledger.OutboxListQuery{Providers: []string{"provider-a"}}))
	require.Equal(t, ended, list(ledger.OutboxListQuery{Providers: []string{"provider-b"}}))
	require.Equal(t, claimSortedIDs(all...), list(ledger.OutboxListQuery{Providers: []string{"provider-b", "provider-a"}}))
	require.Empty(t, list(ledger.OutboxListQuery{Providers: []string{"provider-z"}}))
	require.Empty(t, list(ledger.OutboxListQuery{Providers: []string{"provider-a"}, Statuses: []ledger.OutboxStatus{ledger.OutboxStatusDelivered}}))
	require.Equal(t, claimSortedIDs(byStatus[ledger.OutboxStatusFailed], byStatus[ledger.OutboxStatusDeadLettered]),
		list(ledger.OutboxListQuery{Providers: []string{"provider-b"}, Statuses: []ledger.OutboxStatus{
			ledger.OutboxStatusDeadLettered, ledger.OutboxStatusFailed, ledger.OutboxStatusPending}}), "a mix of open and terminal statuses")
	require.Equal(t, []ledger.OutboxEntryID{byStatus[ledger.OutboxStatusPending]},
		list(ledger.OutboxListQuery{Providers: []string{"provider-a"}, Statuses: []ledger.OutboxStatus{ledger.OutboxStatusPending}}))
}

func listEntriesPaging(t *testing.T, s ledger.ClaimStore) {
	want := claimSortedIDs(claimEntryIDs(claimEnqueueN(t, s, "page", 25))...)
	var got []ledger.OutboxEntryID
	var sizes []int
	q := ledger.OutboxListQuery{Limit: 7}
	for {
		p := claimPage(t, s, q)
		sizes = append(sizes, len(p.Entries))
		got = append(got, claimEntryIDs(p.Entries)...)
		if p.Next == "" {
			break
		}
		require.Less(t, len(sizes), 10, "paging does not end")
		q.Cursor = p.Next
	}
	require.Equal(t, want, got)
	require.Equal(t, []int{7, 7, 7, 4}, sizes)
}

func listEntriesPagingWithAFilter(t *testing.T, s ledger.ClaimStore) {
	entries := claimEnqueueN(t, s, "filtered", 20)
	var want []ledger.OutboxEntryID
	next := claimAt(time.Hour)
	for i, e := range entries {
		if i%3 == 0 {
			_, err := s.MarkFailed(t.Context(), e.ID, ledger.EmissionError{Message: "later"}, &next)
			require.NoError(t, err)
			want = append(want, e.ID)
		}
	}
	got := claimListAll(t, s, ledger.OutboxListQuery{Statuses: []ledger.OutboxStatus{ledger.OutboxStatusRetryScheduled}, Limit: 2})
	require.Equal(t, claimSortedIDs(want...), got)
}

func listEntriesFullLastPage(t *testing.T, s ledger.ClaimStore) {
	claimEnqueueN(t, s, "full", 6)
	p1 := claimPage(t, s, ledger.OutboxListQuery{Limit: 3})
	require.NotEmpty(t, p1.Next)
	p2 := claimPage(t, s, ledger.OutboxListQuery{Limit: 3, Cursor: p1.Next})
	require.Len(t, p2.Entries, 3)
	require.Empty(t, p2.Next, "a page that holds the last entry is the last page")
}

func listEntriesMalformedCursor(t *testing.T, s ledger.ClaimStore) {
	entries := claimEnqueueN(t, s, "cursor", 3)
	for _, c := range []string{
		"!!not base64!!",
		string(entries[0].ID),
		// A List cursor is a delivery cursor, not an outbox one.
		storekit.EncodeCursor(ledger.DeliveryID(entries[0].ID)),
	} {
		_, err := claimLister(t, s).ListEntries(t.Context(), ledger.OutboxListQuery{Limit: 10, Cursor: c})
		requireInvalid(t, err)
	}
}

func listEntriesInvalid(t *testing.T, s ledger.ClaimStore) {
	claimEnqueueN(t, s, "bad", 3)
	l := claimLister(t, s)
	for _, q := range []ledger.OutboxListQuery{
		{Limit: 0},
		{Limit: -1},
		{Limit: ledger.MaxLimit + 1},
		{Limit: 10, Statuses: []ledger.OutboxStatus{"lost"}},
		{Limit: 10, Providers: []string{""}},
		{Limit: 10, Providers: []string{"bad\x00provider"}},
		{Limit: 10, IdempotencyKey: "bad\x00key"},
	} {
		_, err := l.ListEntries(t.Context(), q)
		requireInvalid(t, err)
	}
	_, err := l.ListEntries(nilContext(), ledger.OutboxListQuery{Limit: 10})
	requireInvalid(t, err)
	_, err = l.ListEntries(cancelledContext(t), ledger.OutboxListQuery{Limit: 10})
	require.ErrorIs(t, err, context.Canceled)
	require.Len(t, claimPage(t, s, ledger.OutboxListQuery{Limit: 1}).Entries, 1)
}

// listEntriesByKey: IdempotencyKey finds the entry enqueued with that key,
// whatever its ID, alone or with the other filters, and a redrive's new
// entry under its own key; a key nobody used finds nothing.
func listEntriesByKey(t *testing.T, s ledger.ClaimStore) {
	byStatus := claimEveryStatus(t, s)
	list := func(q ledger.OutboxListQuery) []ledger.OutboxEntryID {
		q.Limit = 1
		return claimListAll(t, s, q)
	}
	for status, key := range map[ledger.OutboxStatus]string{
		ledger.OutboxStatusPending: "st-pending", ledger.OutboxStatusDelivered: "st-delivered", ledger.OutboxStatusDeadLettered: "st-dead",
	} {
		got := list(ledger.OutboxListQuery{IdempotencyKey: key})
		require.Equal(t, []ledger.OutboxEntryID{byStatus[status]}, got, key)
		e := claimFind(t, s, got[0])
		require.Equal(t, key, e.Envelope.IdempotencyKey)
	}
	require.Empty(t, list(ledger.OutboxListQuery{IdempotencyKey: "nobody's"}))
	require.Empty(t, list(ledger.OutboxListQuery{IdempotencyKey: "st-pending", Providers: []string{"provider-b"}}))
	require.Empty(t, list(ledger.OutboxListQuery{IdempotencyKey: "st-dead", Statuses: []ledger.OutboxStatus{ledger.OutboxStatusPending}}))
	require.Equal(t, []ledger.OutboxEntryID{byStatus[ledger.OutboxStatusDeadLettered]},
		list(ledger.OutboxListQuery{IdempotencyKey: "st-dead", Providers: []string{"provider-b"},
			Statuses: []ledger.OutboxStatus{ledger.OutboxStatusDeadLettered}}))

	// A redriven entry is found under the key it was given.
	r, ok := s.(ledger.OutboxRedriver)
	if !ok {
		return
	}
	res, err := r.RedriveEntry(t.Context(), ledger.RedriveEntryRequest{ID: byStatus[ledger.OutboxStatusDeadLettered], IdempotencyKey: "order-7 again"})
	require.NoError(t, err)
	require.True(t, res.Applied())
	require.Equal(t, []ledger.OutboxEntryID{res.Redriven.ID}, list(ledger.OutboxListQuery{IdempotencyKey: "order-7 again"}))
	require.Equal(t, []ledger.OutboxEntryID{byStatus[ledger.OutboxStatusDeadLettered]}, list(ledger.OutboxListQuery{IdempotencyKey: "st-dead"}),
		"the original keeps its key")
}
