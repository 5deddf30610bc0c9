package ledgertest

import (
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// This file holds the helpers of the outbox and claim half of the suite.
// Every name starts with claim so that it never collides with the delivery
// ledger half, which lives in the same package.

// claimT0 is the fixed start of every claim test's logical time. Claim
// requests carry their Now; the base outbox methods stamp times from the
// store's own clock, so the suite never asserts their exact values.
var claimT0 = time.Date(2031, time.March, 4, 5, 6, 7, 0, time.UTC)

// claimLease is the claim duration the tests use unless they say otherwise.
const claimLease = time.Minute

// claimWorker is the worker name the tests claim under.
const claimWorker = "worker-a"

// claimAt returns claimT0 plus d.
func claimAt(d time.Duration) time.Time { return claimT0.Add(d) }

// claimRun runs fn as a parallel subtest with a fresh store.
func claimRun(t *testing.T, name string, newStore NewClaimStoreFunc, fn func(t *testing.T, s ledger.ClaimStore)) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		require.NotNil(t, s, "NewClaimStoreFunc returned nil")
		fn(t, s)
	})
}

// claimEnvelope returns a distinct, valid envelope for key.
func claimEnvelope(key string) ledger.Envelope {
	return ledger.Envelope{
		Provider:       "provider-a",
		Kind:           "kind-a",
		Payload:        []byte("payload of " + key),
		IdempotencyKey: key,
	}
}

// claimEnqueue enqueues a new entry for key and returns it.
func claimEnqueue(t *testing.T, s ledger.ClaimStore, key string) ledger.OutboxEntry {
	t.Helper()
	res, err := s.Enqueue(t.Context(), claimEnvelope(key))
	require.NoError(t, err)
	require.Equal(t, ledger.OutcomeApplied, res.Outcome, "enqueue %q", key)
	return res.Entry
}

// claimEnqueueN enqueues n new entries named prefix-0 ... prefix-(n-1).
func claimEnqueueN(t *testing.T, s ledger.ClaimStore, prefix string, n int) []ledger.OutboxEntry {
	t.Helper()
	out := make([]ledger.OutboxEntry, 0, n)
	for i := range n {
		out = append(out, claimEnqueue(t, s, fmt.Sprintf("%s-%d", prefix, i)))
	}
	return out
}

// claimUnsortedKeys returns the keys prefix-1 ... prefix-n after checking
// that their entry IDs (hashes of the keys) are not in key order. A store
// that broke ties on CreatedAt by ID instead of by enqueue order would then
// list entries enqueued in key order in another order, so a test that
// expects key order cannot pass by accident.
func claimUnsortedKeys(t *testing.T, prefix string, n int) []string {
	t.Helper()
	keys := make([]string, n)
	ids := make([]ledger.OutboxEntryID, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%d", prefix, i+1)
		ids[i] = ledger.OutboxEntryIDFor(keys[i])
	}
	require.False(t, slices.IsSorted(ids), "the IDs of %v must not already be in key order", keys)
	return keys
}

// claimEnqueueKeys enqueues a new entry for each of keys with one
// EnqueueBatch and returns them in the order of keys.
func claimEnqueueKeys(t *testing.T, s ledger.ClaimStore, keys []string) []ledger.OutboxEntry {
	t.Helper()
	envs := make([]ledger.Envelope, len(keys))
	for i, key := range keys {
		envs[i] = claimEnvelope(key)
	}
	res, err := claimBatcher(t, s).EnqueueBatch(t.Context(), envs)
	require.NoError(t, err)
	require.Len(t, res, len(envs))
	out := make([]ledger.OutboxEntry, len(res))
	for i, r := range res {
		require.Equal(t, ledger.OutcomeApplied, r.Outcome, "enqueue %q", keys[i])
		out[i] = r.Entry
	}
	return out
}

// claimScheduled enqueues an entry for key and schedules it for a retry at
// at with the base MarkFailed. The entry then has one attempt.
func claimScheduled(t *testing.T, s ledger.ClaimStore, key string, at time.Time) ledger.OutboxEntry {
	t.Helper()
	e := claimEnqueue(t, s, key)
	got, err := s.MarkFailed(t.Context(), e.ID, ledger.EmissionError{Code: "busy", Message: "try later"}, &at)
	require.NoError(t, err)
	require.Equal(t, ledger.OutboxStatusRetryScheduled, got.Status)
	return got
}

// claimDeferred enqueues an entry for key and defers it until at with Save.
func claimDeferred(t *testing.T, s ledger.ClaimStore, key string, at time.Time) ledger.OutboxEntry {
	t.Helper()
	e := claimEnqueue(t, s, key)
	e.Status = ledger.OutboxStatusDeferred
	e.NextAttemptAt = at
	got, err := s.Save(t.Context(), e)
	require.NoError(t, err)
	require.Equal(t, ledger.OutboxStatusDeferred, got.Status)
	return got
}

// claimFind returns the stored entry id.
func claimFind(t *testing.T, s ledger.ClaimStore, id ledger.OutboxEntryID) ledger.OutboxEntry {
	t.Helper()
	e, err := s.FindByID(t.Context(), id)
	require.NoError(t, err)
	requireNoClaimToken(t, e)
	return e
}

// claimRequest returns a request of claimWorker at now for claimLease.
func claimRequest(now time.Time, limit int) ledger.ClaimRequest {
	return ledger.ClaimRequest{Worker: claimWorker, Now: now, LeaseDuration: claimLease, Limit: limit}
}

// claimPending claims up to limit pending entries at now.
func claimPending(t *testing.T, s ledger.ClaimStore, now time.Time, limit int) []ledger.ClaimedEntry {
	t.Helper()
	got, err := s.ClaimPending(t.Context(), claimRequest(now, limit))
	require.NoError(t, err)
	claimRequireGrants(t, got)
	return got
}

// claimRetry claims up to limit retry-ready entries at now.
func claimRetry(t *testing.T, s ledger.ClaimStore, now time.Time, limit int) []ledger.ClaimedEntry {
	t.Helper()
	got, err := s.ClaimRetryReady(t.Context(), claimRequest(now, limit))
	require.NoError(t, err)
	claimRequireGrants(t, got)
	return got
}

// claimRequireGrants asserts that each claimed entry shows its claim
// without the token, and only the Claim returned beside it carries one.
func claimRequireGrants(t *testing.T, got []ledger.ClaimedEntry) {
	t.Helper()
	for _, ce := range got {
		require.NotEmpty(t, ce.Claim.Token, "the claim returned to the worker carries its token")
		require.NotNil(t, ce.Entry.Claim)
		requireNoClaimToken(t, ce.Entry)
		require.Equal(t, claimCanonClaim(claimWithoutToken(ce.Claim)), claimCanonClaim(*ce.Entry.Claim), "the entry shows the claim, without its token")
	}
}

// claimOnlyPending claims at now and requires exactly the entry id.
func claimOnlyPending(t *testing.T, s ledger.ClaimStore, id ledger.OutboxEntryID, now time.Time) ledger.ClaimedEntry {
	t.Helper()
	got := claimPending(t, s, now, ledger.MaxLimit)
	require.Len(t, got, 1, "ClaimPending at %s", now)
	require.Equal(t, id, got[0].Entry.ID)
	return got[0]
}

// claimNew enqueues an entry for key and claims it at now.
func claimNew(t *testing.T, s ledger.ClaimStore, key string, now time.Time) ledger.ClaimedEntry {
	t.Helper()
	e := claimEnqueue(t, s, key)
	return claimOnlyPending(t, s, e.ID, now)
}

// claimCanon returns e with every time normalised, so that entries read
// through different paths compare equal with require.Equal whatever
// location or monotonic reading their times carry.
func claimCanon(e ledger.OutboxEntry) ledger.OutboxEntry {
	e = e.Clone()
	e.NextAttemptAt = ledger.Normalize(e.NextAttemptAt)
	e.CreatedAt = ledger.Normalize(e.CreatedAt)
	e.UpdatedAt = ledger.Normalize(e.UpdatedAt)
	e.EndedAt = ledger.Normalize(e.EndedAt)
	if e.Claim != nil {
		c := claimCanonClaim(*e.Claim)
		e.Claim = &c
	}
	if e.EndedClaim != nil {
		e.EndedClaim.At = ledger.Normalize(e.EndedClaim.At)
	}
	return e
}

// claimCanonClaim returns c with its times normalised.
func claimCanonClaim(c ledger.Claim) ledger.Claim {
	c.ClaimedAt = ledger.Normalize(c.ClaimedAt)
	c.ExpiresAt = ledger.Normalize(c.ExpiresAt)
	return c
}

// claimRequireEntry requires got to equal want, field by field.
func claimRequireEntry(t *testing.T, want, got ledger.OutboxEntry, msgAndArgs ...any) {
	t.Helper()
	require.Equal(t, claimCanon(want), claimCanon(got), msgAndArgs...)
}

// claimRequireStored requires the stored entry to equal e.
func claimRequireStored(t *testing.T, s ledger.ClaimStore, e ledger.OutboxEntry) {
	t.Helper()
	claimRequireEntry(t, e, claimFind(t, s, e.ID), "the result must carry the entry as stored")
}

// claimRequireApplied requires res to have applied, to carry the entry as
// stored, and to have bumped the Version of before by one.
func claimRequireApplied(t *testing.T, s ledger.ClaimStore, before ledger.OutboxEntry, res ledger.OutboxResult, err error) ledger.OutboxEntry {
	t.Helper()
	require.NoError(t, err)
	require.Equal(t, ledger.OutcomeApplied, res.Outcome)
	require.True(t, res.Applied())
	require.Equal(t, before.ID, res.Entry.ID)
	require.Equal(t, before.Version+1, res.Entry.Version, "an applied call writes once")
	claimRequireStored(t, s, res.Entry)
	return res.Entry
}

// claimRequireUnapplied requires res to answer want without applying,
// without writing (before is still stored, Version included), and to carry
// the entry as it stands.
func claimRequireUnapplied(t *testing.T, s ledger.ClaimStore, before ledger.OutboxEntry, res ledger.OutboxResult, err error, want ledger.Outcome) {
	t.Helper()
	require.NoError(t, err)
	require.Equal(t, want, res.Outcome)
	require.False(t, res.Applied())
	claimRequireEntry(t, before, res.Entry, "a call that does not apply returns the entry as it stands")
	claimRequireStored(t, s, before)
}

// claimRequireTerminal requires e to have ended as status with its end
// stamped and no claim left on it.
func claimRequireTerminal(t *testing.T, e ledger.OutboxEntry, status ledger.OutboxStatus) {
	t.Helper()
	require.Equal(t, status, e.Status)
	require.False(t, e.EndedAt.IsZero(), "a terminal entry has EndedAt")
	require.True(t, e.EndedAt.Equal(e.UpdatedAt), "the end is the last write")
	require.Nil(t, e.Claim, "a terminal entry has no claim")
	require.Nil(t, e.EndedClaim, "a terminal entry keeps no ended claim")
	require.True(t, e.NextAttemptAt.IsZero(), "a terminal entry is not scheduled")
}

// claimRequireClaim checks a fresh claim ce granted by req: the claim names
// the entry, starts at req.Now, expires after req.LeaseDuration, is the
// entry's claim in force with sequence seq, and is stored.
func claimRequireClaim(t *testing.T, s ledger.ClaimStore, ce ledger.ClaimedEntry, req ledger.ClaimRequest, seq int64) {
	t.Helper()
	now := ledger.Normalize(req.Now)
	c := ce.Claim
	require.Equal(t, ce.Entry.ID, c.EntryID)
	require.Equal(t, req.Worker, c.Worker)
	require.NotEmpty(t, c.Token)
	require.Equal(t, seq, c.Seq)
	require.True(t, now.Equal(c.ClaimedAt), "ClaimedAt %s, want %s", c.ClaimedAt, now)
	require.True(t, now.Add(req.LeaseDuration.Truncate(time.Microsecond)).Equal(c.ExpiresAt), "ExpiresAt %s", c.ExpiresAt)
	require.NotNil(t, ce.Entry.Claim, "the claimed entry carries its claim")
	require.Equal(t, claimCanonClaim(claimWithoutToken(c)), claimCanonClaim(*ce.Entry.Claim), "the entry shows the claim, without its token")
	require.Equal(t, seq, ce.Entry.ClaimSeq)
	require.Nil(t, ce.Entry.EndedClaim, "a new claim clears the ended one")
	require.True(t, now.Equal(ce.Entry.UpdatedAt), "a claim stamps UpdatedAt with req.Now")
	claimRequireStored(t, s, ce.Entry)
}

// claimEntryIDs returns the IDs of entries, in order.
func claimEntryIDs(entries []ledger.OutboxEntry) []ledger.OutboxEntryID {
	ids := make([]ledger.OutboxEntryID, len(entries))
	for i, e := range entries {
		ids[i] = e.ID
	}
	return ids
}

// claimClaimedIDs returns the IDs of claimed entries, in order.
func claimClaimedIDs(claimed []ledger.ClaimedEntry) []ledger.OutboxEntryID {
	ids := make([]ledger.OutboxEntryID, len(claimed))
	for i, c := range claimed {
		ids[i] = c.Entry.ID
	}
	return ids
}

// claimPendingOrder returns the IDs of entries in FindPending order:
// CreatedAt, then enqueue order. entries must be listed in the order they
// were enqueued; the stable sort keeps that order among entries created at
// the same instant (the enqueue sequence is the stores' own, so the suite
// can only know it from the calls it made).
func claimPendingOrder(entries []ledger.OutboxEntry) []ledger.OutboxEntryID {
	sorted := append([]ledger.OutboxEntry(nil), entries...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].CreatedAt.Before(sorted[j].CreatedAt) })
	return claimEntryIDs(sorted)
}

// claimRetryOrder returns the IDs of entries in FindRetryReady order.
func claimRetryOrder(entries []ledger.OutboxEntry) []ledger.OutboxEntryID {
	sorted := append([]ledger.OutboxEntry(nil), entries...)
	sort.SliceStable(sorted, func(i, j int) bool { return storekit.RetryBefore(sorted[i], sorted[j]) })
	return claimEntryIDs(sorted)
}

// claimSnapshot is what the suite can see of a store through its readers:
// every entry FindPending and FindRetryReady return, and the entries named
// by ids. A call that writes nothing leaves it unchanged.
func claimSnapshot(t *testing.T, s ledger.ClaimStore, ids ...ledger.OutboxEntryID) []ledger.OutboxEntry {
	t.Helper()
	ctx := t.Context()
	pending, err := s.FindPending(ctx, ledger.MaxLimit)
	require.NoError(t, err)
	retry, err := s.FindRetryReady(ctx, storekit.MaxTime(), ledger.MaxLimit)
	require.NoError(t, err)
	out := append(pending, retry...)
	for _, id := range ids {
		e, err := s.FindByID(ctx, id)
		require.NoError(t, err)
		out = append(out, e)
	}
	for i := range out {
		out[i] = claimCanon(out[i])
	}
	return out
}
