package ledgertest

import (
	"cmp"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// testPurgeEntries checks OutboxPurger.PurgeEntries: retention deletes
// terminal entries that ended before the cutoff, oldest first, a bounded
// batch per call, and never an open one.
//
// Entries end at the store's own clock (the base completions carry no
// now), so these rules read each EndedAt back and compute their cutoffs
// and expected orders from the stored values rather than from claimT0.
func testPurgeEntries(t *testing.T, newStore NewClaimStoreFunc) {
	claimRun(t, "DeletesOnlyEndedBeforeTheCutoff", newStore, claimPurgeDeletesOnlyEndedBeforeTheCutoff)
	claimRun(t, "OldestFirstAndBounded", newStore, claimPurgeOldestFirstAndBounded)
	claimRun(t, "InvalidIsRejected", newStore, claimPurgeInvalidIsRejected)
	claimRun(t, "AnIDCanBeEnqueuedAgainAfterPurge", newStore, claimPurgeAnIDCanBeEnqueuedAgain)
}

// claimPurger returns s as an OutboxPurger. Every store this project
// ships implements it, so a store without it fails the group.
func claimPurger(t *testing.T, s ledger.ClaimStore) ledger.OutboxPurger {
	t.Helper()
	p, ok := s.(ledger.OutboxPurger)
	if !ok {
		t.Fatalf("%T does not implement ledger.OutboxPurger", s)
	}
	return p
}

// claimPurge calls PurgeEntries and requires no error.
func claimPurge(t *testing.T, s ledger.ClaimStore, olderThan time.Time, limit int) int {
	t.Helper()
	n, err := claimPurger(t, s).PurgeEntries(t.Context(), olderThan, limit)
	require.NoError(t, err)
	return n
}

// claimRequireAbsent requires FindByID to answer ErrNotFound for id.
func claimRequireAbsent(t *testing.T, s ledger.ClaimStore, id ledger.OutboxEntryID) {
	t.Helper()
	_, err := s.FindByID(t.Context(), id)
	require.ErrorIs(t, err, ledger.ErrNotFound, "FindByID %s", id)
}

// claimDelivered enqueues an entry for key, ends it as Delivered with the
// base MarkDelivered and returns it as stored.
func claimDelivered(t *testing.T, s ledger.ClaimStore, key string) ledger.OutboxEntry {
	t.Helper()
	e := claimEnqueue(t, s, key)
	got, err := s.MarkDelivered(t.Context(), e.ID, ledger.EmissionResult{ProviderRef: "ref-" + key})
	require.NoError(t, err)
	require.Equal(t, ledger.OutboxStatusDelivered, got.Status)
	return claimFind(t, s, e.ID)
}

// claimEndedOrder returns the IDs of entries oldest EndedAt first, then
// by ID: the order PurgeEntries deletes in.
func claimEndedOrder(entries []ledger.OutboxEntry) []ledger.OutboxEntryID {
	sorted := slices.Clone(entries)
	slices.SortFunc(sorted, func(a, b ledger.OutboxEntry) int {
		return cmp.Or(a.EndedAt.Compare(b.EndedAt), cmp.Compare(a.ID, b.ID))
	})
	return claimEntryIDs(sorted)
}

func claimPurgeDeletesOnlyEndedBeforeTheCutoff(t *testing.T, s ledger.ClaimStore) {
	// Open entries of every open status, claimed or not (the claimed one
	// first, so that it is the only one to claim).
	claimed := claimNew(t, s, "open-claimed", claimT0)
	open := []ledger.OutboxEntry{
		claimed.Entry,
		claimEnqueue(t, s, "open-pending"),
		claimScheduled(t, s, "open-retry", claimAt(time.Hour)),
		claimDeferred(t, s, "open-deferred", claimAt(time.Hour)),
	}
	// Terminal entries of each terminal status, ended one after another.
	var ended []ledger.OutboxEntry
	ended = append(ended, claimDelivered(t, s, "ended-delivered"))
	e := claimEnqueue(t, s, "ended-failed")
	_, err := s.MarkFailed(t.Context(), e.ID, ledger.EmissionError{Code: "gone", Message: "for good"}, nil)
	require.NoError(t, err)
	ended = append(ended, claimFind(t, s, e.ID))
	e = claimEnqueue(t, s, "ended-dead")
	_, err = s.MarkDeadLettered(t.Context(), e.ID, ledger.EmissionError{Message: "poison"}, "poison message")
	require.NoError(t, err)
	ended = append(ended, claimFind(t, s, e.ID))
	last := ended[0]
	for _, e := range ended {
		require.Equal(t, e.Status.Terminal(), !e.EndedAt.IsZero())
		if e.EndedAt.After(last.EndedAt) {
			last = e
		}
	}

	// The cutoff is the latest end: what ended strictly before it goes,
	// what ended at it stays.
	cutoff := last.EndedAt
	var gone, kept []ledger.OutboxEntryID
	for _, e := range ended {
		if e.EndedAt.Before(cutoff) {
			gone = append(gone, e.ID)
		} else {
			kept = append(kept, e.ID)
		}
	}
	require.Contains(t, kept, last.ID)
	require.Equal(t, len(gone), claimPurge(t, s, cutoff, ledger.MaxLimit))
	for _, id := range gone {
		claimRequireAbsent(t, s, id)
	}
	for _, e := range ended {
		if slices.Contains(kept, e.ID) {
			claimRequireStored(t, s, e)
		}
	}
	for _, e := range open {
		claimRequireStored(t, s, e)
	}

	// Just after the latest end, every terminal entry goes, and still no
	// open one, whatever its age.
	require.Equal(t, len(kept), claimPurge(t, s, cutoff.Add(time.Microsecond), ledger.MaxLimit))
	for _, e := range ended {
		claimRequireAbsent(t, s, e.ID)
	}
	require.Zero(t, claimPurge(t, s, storekit.MaxTime(), ledger.MaxLimit), "open entries are never purged")
	for _, e := range open {
		claimRequireStored(t, s, e)
	}
	require.Equal(t, []ledger.OutboxEntryID{open[1].ID}, claimClaimedIDs(claimPending(t, s, claimT0, ledger.MaxLimit)), "the open entries still work")
}

func claimPurgeOldestFirstAndBounded(t *testing.T, s ledger.ClaimStore) {
	// End the entries in an order other than key order.
	var ended []ledger.OutboxEntry
	for _, key := range []string{"purge-3", "purge-1", "purge-4", "purge-0", "purge-2"} {
		ended = append(ended, claimDelivered(t, s, key))
	}
	order := claimEndedOrder(ended)
	cutoff := storekit.MaxTime()
	for i, n := range []int{2, 2, 1} {
		require.Equal(t, n, claimPurge(t, s, cutoff, 2), "call %d", i+1)
		gone := order[:min(2*(i+1), len(order))]
		for _, id := range order {
			if slices.Contains(gone, id) {
				claimRequireAbsent(t, s, id)
			} else {
				claimFind(t, s, id)
			}
		}
	}
	require.Zero(t, claimPurge(t, s, cutoff, 2), "a purge with nothing left deletes nothing")
}

func claimPurgeInvalidIsRejected(t *testing.T, s ledger.ClaimStore) {
	e := claimDelivered(t, s, "ended")
	open := claimEnqueue(t, s, "open")
	p := claimPurger(t, s)
	cutoff := storekit.MaxTime()
	requireUntouched := func() {
		t.Helper()
		claimRequireStored(t, s, e)
		claimRequireStored(t, s, open)
	}
	for _, c := range []struct {
		name      string
		olderThan time.Time
		limit     int
	}{
		{"ZeroTime", time.Time{}, 10},
		{"TimeBeyondMax", storekit.MaxTime().Add(time.Hour), 10},
		{"ZeroLimit", cutoff, 0},
		{"NegativeLimit", cutoff, -1},
		{"LimitAboveMax", cutoff, ledger.MaxLimit + 1},
	} {
		n, err := p.PurgeEntries(t.Context(), c.olderThan, c.limit)
		requireInvalid(t, err)
		require.Zero(t, n, c.name)
		requireUntouched()
	}
	n, err := p.PurgeEntries(nilContext(), cutoff, 10)
	require.ErrorIs(t, err, ledger.ErrInvalid, "a nil context")
	require.Zero(t, n)
	requireUntouched()
	n, err = p.PurgeEntries(cancelledContext(t), cutoff, 10)
	require.ErrorIs(t, err, context.Canceled, "a cancelled context")
	require.Zero(t, n)
	requireUntouched()
}

func claimPurgeAnIDCanBeEnqueuedAgain(t *testing.T, s ledger.ClaimStore) {
	old := claimDelivered(t, s, "again")
	require.Equal(t, 1, claimPurge(t, s, old.EndedAt.Add(time.Microsecond), 1))
	claimRequireAbsent(t, s, old.ID)
	env := claimEnvelope("again")
	env.Payload = []byte("another payload")
	res, err := s.Enqueue(t.Context(), env)
	require.NoError(t, err)
	require.Equal(t, ledger.OutcomeApplied, res.Outcome, "a purged key starts over as a new entry")
	require.Equal(t, old.ID, res.Entry.ID)
	require.Equal(t, ledger.OutboxStatusPending, res.Entry.Status)
	require.Zero(t, res.Entry.Attempts)
	require.True(t, res.Entry.EndedAt.IsZero())
	require.Equal(t, env.Payload, res.Entry.Envelope.Payload)
	claimRequireStored(t, s, res.Entry)
	require.Equal(t, []ledger.OutboxEntryID{old.ID}, claimClaimedIDs(claimPending(t, s, claimT0, 10)))
}
