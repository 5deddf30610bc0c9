package ledgertest

import (
	"cmp"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// testEntryRedrive checks ledger.OutboxRedriver: a failed or dead-lettered
// entry is sent again as a new Pending entry under a new idempotency key,
// linked to the original, which keeps its end. A store that does not
// implement OutboxRedriver skips the group.
//
// Redrive stamps its times from the store's clock, so the expected times
// are read back from the entries it returns.
func testEntryRedrive(t *testing.T, newStore NewClaimStoreFunc) {
	claimRun(t, "DeadLetteredBecomesANewPendingEntryLinkedToIt", newStore, claimRedriveDeadLettered)
	claimRun(t, "FailedIsRedriven", newStore, claimRedriveFailed)
	claimRun(t, "OpenIsWrongStateAndWritesNothing", newStore, claimRedriveOpenIsWrongState)
	claimRun(t, "DeliveredIsWrongState", newStore, claimRedriveDeliveredIsWrongState)
	claimRun(t, "TwiceIsRepeatedWithTheSameEntry", newStore, claimRedriveTwiceIsRepeated)
	claimRun(t, "ConcurrentRedrivesMakeOneEntry", newStore, claimRedriveConcurrentMakesOneEntry)
	claimRun(t, "AnotherKeyAfterwardsIsConflict", newStore, claimRedriveAnotherKeyIsConflict)
	claimRun(t, "CallerChoosesTheKey", newStore, claimRedriveCallerChoosesTheKey)
	claimRun(t, "TakenKeyIsConflictAndWritesNothing", newStore, claimRedriveTakenKeyIsConflict)
	claimRun(t, "TakenKeyIsConflictWhileTheDerivedKeyIsFree", newStore, claimRedriveTakenKeyDerivedFree)
	claimRun(t, "UnknownIDIsNotFound", newStore, claimRedriveUnknownIsNotFound)
	claimRun(t, "HistoryOfBothEntriesNamesTheOther", newStore, claimRedriveHistory)
	claimRun(t, "InvalidIsRejected", newStore, claimRedriveInvalidIsRejected)
	claimRun(t, "MatchingFiltersByStatusProviderAndEnd", newStore, claimRedriveMatchingFilters)
	claimRun(t, "MatchingIsOldestEndedFirstAndBounded", newStore, claimRedriveMatchingOldestFirst)
	claimRun(t, "MatchingByIdempotencyKey", newStore, claimRedriveMatchingByKey)
	claimRun(t, "MatchingInvalidIsRejected", newStore, claimRedriveMatchingInvalid)
}

// claimRedriver returns s as an OutboxRedriver, skipping the test when it
// is not one.
func claimRedriver(t *testing.T, s ledger.ClaimStore) ledger.OutboxRedriver {
	t.Helper()
	r, ok := s.(ledger.OutboxRedriver)
	if !ok {
		t.Skipf("%T does not implement ledger.OutboxRedriver: redrive is optional", s)
	}
	return r
}

// claimDeadLettered enqueues an entry for key and dead-letters it.
func claimDeadLettered(t *testing.T, s ledger.ClaimStore, key string) ledger.OutboxEntry {
	t.Helper()
	e := claimEnqueue(t, s, key)
	got, err := s.MarkDeadLettered(t.Context(), e.ID, ledger.EmissionError{Code: "550", Message: "no such mailbox"}, "permanent")
	require.NoError(t, err)
	return got
}

// claimFailed enqueues an entry for key and fails it for good.
func claimFailed(t *testing.T, s ledger.ClaimStore, key string) ledger.OutboxEntry {
	t.Helper()
	env := claimEnvelope(key)
	env.Metadata = redriveMetadata // a redrive keeps it
	res, err := s.Enqueue(t.Context(), env)
	require.NoError(t, err)
	require.Equal(t, ledger.OutcomeApplied, res.Outcome, "enqueue %q", key)
	e := res.Entry
	got, err := s.MarkFailed(t.Context(), e.ID, ledger.EmissionError{Code: "500", Message: "broken"}, nil)
	require.NoError(t, err)
	require.Equal(t, ledger.OutboxStatusFailed, got.Status)
	return got
}

// claimRedrive calls RedriveEntry and requires no error.
func claimRedrive(t *testing.T, s ledger.ClaimStore, r ledger.RedriveEntryRequest) ledger.RedriveEntryResult {
	t.Helper()
	res, err := claimRedriver(t, s).RedriveEntry(t.Context(), r)
	require.NoError(t, err, "RedriveEntry %s", r.ID)
	require.Equal(t, res.Outcome == ledger.OutcomeApplied, res.Applied())
	return res
}

// claimRequireRedriven checks an applied redrive of before under key: the
// original keeps its end and names the new entry, which starts afresh,
// Pending, with the original's envelope under the new key.
func claimRequireRedriven(t *testing.T, s ledger.ClaimStore, before ledger.OutboxEntry, res ledger.RedriveEntryResult, key string) {
	t.Helper()
	require.Equal(t, ledger.OutcomeApplied, res.Outcome)
	id := ledger.OutboxEntryIDFor(key)
	want := before
	want.RedrivenTo = id
	want.Version++
	want.UpdatedAt = res.Original.UpdatedAt
	claimRequireEntry(t, want, res.Original, "the original keeps its end and names the new entry")
	require.False(t, res.Original.UpdatedAt.Before(before.UpdatedAt))
	claimRequireStored(t, s, res.Original)
	env := before.Envelope
	env.IdempotencyKey = key
	now := res.Original.UpdatedAt
	fresh := ledger.OutboxEntry{
		ID: id, Envelope: env, Status: ledger.OutboxStatusPending,
		CreatedAt: now, UpdatedAt: now, Version: 1, RedrivenFrom: before.ID,
	}
	claimRequireEntry(t, fresh, res.Redriven, "the new entry starts afresh under the new key")
	claimRequireStored(t, s, res.Redriven)
}

// claimRequireRedriveNotApplied checks a redrive of before that answered
// want: nothing written, the original as it stands in the result.
func claimRequireRedriveNotApplied(t *testing.T, s ledger.ClaimStore, before ledger.OutboxEntry, res ledger.RedriveEntryResult, want ledger.Outcome) {
	t.Helper()
	require.Equal(t, want, res.Outcome)
	require.False(t, res.Applied())
	claimRequireEntry(t, before, res.Original, "a redrive that does not apply returns the original as it stands")
	claimRequireStored(t, s, before)
}

func claimRedriveDeadLettered(t *testing.T, s ledger.ClaimStore) {
	dead := claimDeadLettered(t, s, "user-7/welcome")
	res := claimRedrive(t, s, ledger.RedriveEntryRequest{ID: dead.ID})
	claimRequireRedriven(t, s, dead, res, "user-7/welcome/redrive")
	require.Equal(t, storekit.RedriveKey("user-7/welcome"), res.Redriven.Envelope.IdempotencyKey)
	require.Equal(t, dead.LastError, res.Original.LastError)
	require.Equal(t, dead.DeadLetterReason, res.Original.DeadLetterReason)
	require.True(t, dead.EndedAt.Equal(res.Original.EndedAt), "the original keeps its end")
	claimed := claimPending(t, s, claimAt(0), 10)
	require.Equal(t, []ledger.OutboxEntryID{res.Redriven.ID}, claimClaimedIDs(claimed), "the new entry is claimable; the original never again")
}

func claimRedriveFailed(t *testing.T, s ledger.ClaimStore) {
	failed := claimFailed(t, s, "k-1")
	claimRequireRedriven(t, s, failed, claimRedrive(t, s, ledger.RedriveEntryRequest{ID: failed.ID}), storekit.RedriveKey("k-1"))
}

func claimRedriveOpenIsWrongState(t *testing.T, s ledger.ClaimStore) {
	claimed := claimNew(t, s, "claimed", claimAt(0)).Entry
	pending := claimEnqueue(t, s, "pending")
	scheduled := claimScheduled(t, s, "scheduled", claimAt(0))
	deferred := claimDeferred(t, s, "deferred", claimAt(0))
	for _, e := range []ledger.OutboxEntry{pending, scheduled, deferred, claimed} {
		before := claimFind(t, s, e.ID)
		claimRequireRedriveNotApplied(t, s, before, claimRedrive(t, s, ledger.RedriveEntryRequest{ID: e.ID}), ledger.OutcomeWrongState)
		claimRequireAbsent(t, s, ledger.OutboxEntryIDFor(storekit.RedriveKey(e.Envelope.IdempotencyKey)))
	}
}

func claimRedriveDeliveredIsWrongState(t *testing.T, s ledger.ClaimStore) {
	e := claimEnqueue(t, s, "k-1")
	done, err := s.MarkDelivered(t.Context(), e.ID, ledger.EmissionResult{ProviderRef: "ref-1"})
	require.NoError(t, err)
	claimRequireRedriveNotApplied(t, s, done, claimRedrive(t, s, ledger.RedriveEntryRequest{ID: e.ID}), ledger.OutcomeWrongState)
	claimRequireAbsent(t, s, ledger.OutboxEntryIDFor(storekit.RedriveKey("k-1")))
}

func claimRedriveTwiceIsRepeated(t *testing.T, s ledger.ClaimStore) {
	dead := claimDeadLettered(t, s, "k-1")
	first := claimRedrive(t, s, ledger.RedriveEntryRequest{ID: dead.ID})
	require.True(t, first.Applied())
	claimPending(t, s, claimAt(0), 10) // the new entry moves on
	original, redriven := claimFind(t, s, dead.ID), claimFind(t, s, first.Redriven.ID)
	for _, r := range []ledger.RedriveEntryRequest{{ID: dead.ID}, {ID: dead.ID, IdempotencyKey: first.Redriven.Envelope.IdempotencyKey}} {
		again := claimRedrive(t, s, r)
		claimRequireRedriveNotApplied(t, s, original, again, ledger.OutcomeRepeated)
		claimRequireEntry(t, redriven, again.Redriven, "a repeat answers the entry the first redrive made")
		claimRequireStored(t, s, redriven)
	}
}

func claimRedriveAnotherKeyIsConflict(t *testing.T, s ledger.ClaimStore) {
	dead := claimDeadLettered(t, s, "k-1")
	claimRedrive(t, s, ledger.RedriveEntryRequest{ID: dead.ID})
	original := claimFind(t, s, dead.ID)
	again := claimRedrive(t, s, ledger.RedriveEntryRequest{ID: dead.ID, IdempotencyKey: "k-1-other"})
	claimRequireRedriveNotApplied(t, s, original, again, ledger.OutcomeConflict)
	require.Equal(t, ledger.OutboxEntry{}, again.Redriven)
	claimRequireAbsent(t, s, ledger.OutboxEntryIDFor("k-1-other"))
}

func claimRedriveCallerChoosesTheKey(t *testing.T, s ledger.ClaimStore) {
	dead := claimDeadLettered(t, s, "k-1")
	claimRequireRedriven(t, s, dead, claimRedrive(t, s, ledger.RedriveEntryRequest{ID: dead.ID, IdempotencyKey: "k-1-again"}), "k-1-again")
	claimRequireAbsent(t, s, ledger.OutboxEntryIDFor(storekit.RedriveKey("k-1")))
}

func claimRedriveTakenKeyIsConflict(t *testing.T, s ledger.ClaimStore) {
	dead := claimDeadLettered(t, s, "k-1")
	taken := claimEnqueue(t, s, storekit.RedriveKey("k-1"))
	chosen := claimEnqueue(t, s, "chosen")
	for _, r := range []ledger.RedriveEntryRequest{{ID: dead.ID}, {ID: dead.ID, IdempotencyKey: "chosen"}} {
		res := claimRedrive(t, s, r)
		claimRequireRedriveNotApplied(t, s, dead, res, ledger.OutcomeConflict)
		require.Equal(t, ledger.OutboxEntry{}, res.Redriven)
	}
	claimRequireStored(t, s, taken)
	claimRequireStored(t, s, chosen)
}

// claimRedriveTakenKeyDerivedFree: the entry checked for "taken" is the
// one of the caller's key, not of the key the store would derive.
func claimRedriveTakenKeyDerivedFree(t *testing.T, s ledger.ClaimStore) {
	dead := claimDeadLettered(t, s, "k-1")
	chosen := claimEnqueue(t, s, "chosen")
	res := claimRedrive(t, s, ledger.RedriveEntryRequest{ID: dead.ID, IdempotencyKey: "chosen"})
	claimRequireRedriveNotApplied(t, s, dead, res, ledger.OutcomeConflict)
	require.Equal(t, ledger.OutboxEntry{}, res.Redriven)
	claimRequireStored(t, s, chosen)
	claimRequireAbsent(t, s, ledger.OutboxEntryIDFor(storekit.RedriveKey("k-1")))
}

func claimRedriveUnknownIsNotFound(t *testing.T, s ledger.ClaimStore) {
	res := claimRedrive(t, s, ledger.RedriveEntryRequest{ID: ledger.OutboxEntryIDFor("unknown")})
	require.Equal(t, ledger.RedriveEntryResult{Outcome: ledger.OutcomeNotFound}, res)
}

func claimRedriveHistory(t *testing.T, s ledger.ClaimStore) {
	claimHistorian(t, s)
	dead := claimDeadLettered(t, s, "k-1")
	before := claimHistory(t, s, dead.ID)
	res := claimRedrive(t, s, ledger.RedriveEntryRequest{ID: dead.ID})
	now := res.Original.UpdatedAt
	dl := ledger.OutboxStatusDeadLettered
	want := append(before, claimStep(ledger.OpRedrive, dl, dl, "", "redriven as "+string(res.Redriven.ID), now))
	for i := range want {
		want[i].Seq = int64(i + 1)
	}
	require.Equal(t, want, claimHistory(t, s, dead.ID))
	first := claimStep(ledger.OpRedrive, "", ledger.OutboxStatusPending, "", "redriven from "+string(dead.ID), now)
	first.Seq = 1
	require.Equal(t, []ledger.Transition{first}, claimHistory(t, s, res.Redriven.ID))
	claimRedrive(t, s, ledger.RedriveEntryRequest{ID: dead.ID})
	claimRedrive(t, s, ledger.RedriveEntryRequest{ID: res.Redriven.ID})
	require.Len(t, claimHistory(t, s, dead.ID), len(want), "a repeat adds nothing")
	require.Len(t, claimHistory(t, s, res.Redriven.ID), 1, "a refused redrive adds nothing")
}

func claimRedriveInvalidIsRejected(t *testing.T, s ledger.ClaimStore) {
	dead := claimDeadLettered(t, s, "k-1")
	r := claimRedriver(t, s)
	for name, req := range map[string]ledger.RedriveEntryRequest{
		"empty id": {},
		"bad key":  {ID: dead.ID, IdempotencyKey: "a\x00b"},
		"long key": {ID: dead.ID, IdempotencyKey: string(make([]byte, 256))},
	} {
		_, err := r.RedriveEntry(t.Context(), req)
		requireInvalid(t, err)
		claimRequireStored(t, s, dead)
		_ = name
	}
	_, err := r.RedriveEntry(nilContext(), ledger.RedriveEntryRequest{ID: dead.ID})
	requireInvalid(t, err)
	claimRequireStored(t, s, dead)
}

// claimRedriveAll follows RedriveEntriesMatching's cursor to the end with
// q and returns every result, in order.
func claimRedriveAll(t *testing.T, s ledger.ClaimStore, q ledger.RedriveEntryQuery) []ledger.RedriveEntryResult {
	t.Helper()
	var out []ledger.RedriveEntryResult
	for range 1000 {
		b, err := claimRedriver(t, s).RedriveEntriesMatching(t.Context(), q)
		require.NoError(t, err)
		require.LessOrEqual(t, len(b.Results), q.Limit)
		require.Equal(t, len(b.Results) == q.Limit, b.Next != "", "Next is set exactly when the batch is full")
		out = append(out, b.Results...)
		if b.Next == "" {
			return out
		}
		q.Cursor = b.Next
	}
	t.Fatal("RedriveEntriesMatching never reached its end")
	return nil
}

func claimRedrivenIDs(rs []ledger.RedriveEntryResult) []ledger.OutboxEntryID {
	var out []ledger.OutboxEntryID
	for _, r := range rs {
		out = append(out, r.Original.ID)
	}
	return out
}

func claimRedriveMatchingFilters(t *testing.T, s ledger.ClaimStore) {
	deadA := claimDeadLettered(t, s, "dead-a")
	failedA := claimFailed(t, s, "failed-a")
	other := claimEnvelope("dead-other")
	other.Provider = "provider-b"
	res, err := s.Enqueue(t.Context(), other)
	require.NoError(t, err)
	deadB, err := s.MarkDeadLettered(t.Context(), res.Entry.ID, ledger.EmissionError{Message: "x"}, "")
	require.NoError(t, err)
	pending := claimEnqueue(t, s, "pending")
	e := claimEnqueue(t, s, "delivered")
	delivered, err := s.MarkDelivered(t.Context(), e.ID, ledger.EmissionResult{})
	require.NoError(t, err)

	got := claimRedriveAll(t, s, ledger.RedriveEntryQuery{
		Statuses: []ledger.OutboxStatus{ledger.OutboxStatusDeadLettered}, Providers: []string{"provider-a"}, Limit: 10,
	})
	require.Equal(t, []ledger.OutboxEntryID{deadA.ID}, claimRedrivenIDs(got))
	claimRequireRedriven(t, s, deadA, got[0], storekit.RedriveKey("dead-a"))
	for _, e := range []ledger.OutboxEntry{failedA, deadB, pending, delivered} {
		claimRequireStored(t, s, e)
	}
	// Ended before: only what ended strictly before deadB.
	got = claimRedriveAll(t, s, ledger.RedriveEntryQuery{EndedBefore: deadB.EndedAt, Limit: 10})
	want := []ledger.OutboxEntryID{}
	if failedA.EndedAt.Before(deadB.EndedAt) {
		want = append(want, failedA.ID)
	}
	require.ElementsMatch(t, want, claimRedrivenIDs(got))
	got = claimRedriveAll(t, s, ledger.RedriveEntryQuery{Limit: 10})
	require.Subset(t, []ledger.OutboxEntryID{failedA.ID, deadB.ID}, claimRedrivenIDs(got))
	claimRequireStored(t, s, pending)
	claimRequireStored(t, s, delivered)
	require.Empty(t, claimRedriveAll(t, s, ledger.RedriveEntryQuery{Limit: 10}), "everything was redriven")
}

func claimRedriveMatchingOldestFirst(t *testing.T, s ledger.ClaimStore) {
	var ended []ledger.OutboxEntry
	for _, key := range []string{"k-3", "k-1", "k-5", "k-2", "k-4"} {
		ended = append(ended, claimDeadLettered(t, s, key))
	}
	slices.SortFunc(ended, func(a, b ledger.OutboxEntry) int {
		return cmp.Or(a.EndedAt.Compare(b.EndedAt), cmp.Compare(a.ID, b.ID))
	})
	got := claimRedriveAll(t, s, ledger.RedriveEntryQuery{Limit: 2})
	require.Equal(t, claimEntryIDs(ended), claimRedrivenIDs(got), "oldest EndedAt first, then ID")
	for _, r := range got {
		require.True(t, r.Applied())
	}
}

func claimRedriveMatchingInvalid(t *testing.T, s ledger.ClaimStore) {
	dead := claimDeadLettered(t, s, "k-1")
	r := claimRedriver(t, s)
	for name, q := range map[string]ledger.RedriveEntryQuery{
		"delivered status": {Statuses: []ledger.OutboxStatus{ledger.OutboxStatusDelivered}, Limit: 1},
		"pending status":   {Statuses: []ledger.OutboxStatus{ledger.OutboxStatusPending}, Limit: 1},
		"zero limit":       {},
		"limit too high":   {Limit: ledger.MaxLimit + 1},
		"bad provider":     {Providers: []string{""}, Limit: 1},
		"bad cursor":       {Limit: 1, Cursor: "x"},
		"bad key":          {Limit: 1, IdempotencyKey: "bad\x01key"},
	} {
		_, err := r.RedriveEntriesMatching(t.Context(), q)
		requireInvalid(t, err)
		claimRequireStored(t, s, dead)
		_ = name
	}
}

// claimRedriveMatchingByKey: an IdempotencyKey filter redrives the entry
// of that key and nothing else.
func claimRedriveMatchingByKey(t *testing.T, s ledger.ClaimStore) {
	a := claimDeadLettered(t, s, "order-1")
	b := claimDeadLettered(t, s, "order-2")
	f := claimFailed(t, s, "order-3")
	got := claimRedriveAll(t, s, ledger.RedriveEntryQuery{IdempotencyKey: "order-2", Limit: 10})
	require.Equal(t, []ledger.OutboxEntryID{b.ID}, claimRedrivenIDs(got))
	claimRequireRedriven(t, s, b, got[0], storekit.RedriveKey("order-2"))
	claimRequireStored(t, s, a)
	claimRequireStored(t, s, f)
	require.Empty(t, claimRedriveAll(t, s, ledger.RedriveEntryQuery{IdempotencyKey: "order-3",
		Statuses: []ledger.OutboxStatus{ledger.OutboxStatusDeadLettered}, Limit: 10}))
	require.Empty(t, claimRedriveAll(t, s, ledger.RedriveEntryQuery{IdempotencyKey: "order-9", Limit: 10}))
	claimRequireStored(t, s, f)
}
