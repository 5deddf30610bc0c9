package ledgertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// testEntryHistory checks ledger.OutboxHistorian: every applied transition
// of an outbox entry, and only those, leaves one entry in its history. The
// base contract's calls act for nobody in particular; claims and claim
// completions name the claim's worker. A store that does not implement
// OutboxHistorian skips the group: history is optional.
//
// The base calls and the claim completions stamp their times from the
// store's own clock, so the expected times of their entries are read back
// from the entry they return.
func testEntryHistory(t *testing.T, newStore NewClaimStoreFunc) {
	claimRun(t, "ScriptedLife", newStore, claimHistoryScriptedLife)
	claimRun(t, "ClaimCallsNameTheirWorker", newStore, claimHistoryClaimCallsNameTheirWorker)
	claimRun(t, "BaseCallsNameNoActor", newStore, claimHistoryBaseCallsNameNoActor)
	claimRun(t, "RedriveRecordsTheActorOfItsContext", newStore, claimHistoryRedriveActor)
	claimRun(t, "BatchEnqueueCreates", newStore, claimHistoryBatchEnqueueCreates)
	claimRun(t, "CallsThatDoNotApplyAddNothing", newStore, claimHistoryNotAppliedAddsNothing)
	claimRun(t, "UnknownIsNotFound", newStore, claimHistoryUnknownIsNotFound)
	claimRun(t, "InvalidIsRejected", newStore, claimHistoryInvalidIsRejected)
	claimRun(t, "PurgeTakesTheHistory", newStore, claimHistoryPurgeTakesTheHistory)
	claimRun(t, "ConcurrentWorkKeepsEveryHistoryWhole", newStore, claimHistoryConcurrentWork)
}

// claimHistorian returns s as an OutboxHistorian, skipping the test when
// it is not one.
func claimHistorian(t *testing.T, s ledger.ClaimStore) ledger.OutboxHistorian {
	t.Helper()
	h, ok := s.(ledger.OutboxHistorian)
	if !ok {
		t.Skipf("%T does not implement ledger.OutboxHistorian: history is optional", s)
	}
	return h
}

// claimHistory returns the history of id with its times normalised, after
// checking that it is numbered 1, 2, 3... and ends at the entry's Version.
func claimHistory(t *testing.T, s ledger.ClaimStore, id ledger.OutboxEntryID) []ledger.Transition {
	t.Helper()
	h, err := claimHistorian(t, s).EntryHistory(t.Context(), id)
	require.NoError(t, err, "EntryHistory %s", id)
	require.NotEmpty(t, h, "an entry has at least its creation in its history")
	for i := range h {
		h[i].At = ledger.Normalize(h[i].At)
		require.Equal(t, int64(i+1), h[i].Seq, "history of %s is numbered from 1 without gaps", id)
	}
	require.Equal(t, claimFind(t, s, id).Version, h[len(h)-1].Seq,
		"every write bumps Version by one and leaves one entry")
	return h
}

// claimRequireHistory requires the history of id to be want, numbered
// from 1.
func claimRequireHistory(t *testing.T, s ledger.ClaimStore, id ledger.OutboxEntryID, want ...ledger.Transition) {
	t.Helper()
	for i := range want {
		want[i].Seq = int64(i + 1)
	}
	require.Equal(t, want, claimHistory(t, s, id), "history of %s", id)
}

// claimStep is an expected history entry of an outbox entry.
func claimStep(op ledger.Operation, from, to ledger.OutboxStatus, worker, reason string, now time.Time) ledger.Transition {
	return ledger.Transition{
		Op: op, From: string(from), To: string(to), Outcome: ledger.OutcomeApplied,
		Actor: worker, Reason: reason, At: ledger.Normalize(now),
	}
}

// claimCreated is the first entry of e's history.
func claimCreated(e ledger.OutboxEntry) ledger.Transition {
	return claimStep(ledger.OpEnqueue, "", ledger.OutboxStatusPending, "", "", e.CreatedAt)
}

const (
	pending      = ledger.OutboxStatusPending
	retrying     = ledger.OutboxStatusRetryScheduled
	deferred     = ledger.OutboxStatusDeferred
	delivered    = ledger.OutboxStatusDelivered
	failedEntry  = ledger.OutboxStatusFailed
	deadLettered = ledger.OutboxStatusDeadLettered
)

func claimHistoryScriptedLife(t *testing.T, s ledger.ClaimStore) {
	ctx := t.Context()
	e := claimEnqueue(t, s, "order-1")
	ce := claimOnlyPending(t, s, e.ID, claimT0)
	emissionErr := ledger.EmissionError{Code: "timeout", Message: "provider timed out"}
	next := claimAt(time.Minute)
	res, err := s.MarkClaimFailed(ctx, ce.Claim, emissionErr, &next)
	failed1 := claimRequireApplied(t, s, ce.Entry, res, err)
	retry := claimRetry(t, s, next, ledger.MaxLimit)
	require.Len(t, retry, 1)
	// The same answer from the provider again still says why.
	next2 := claimAt(2 * time.Minute)
	res, err = s.MarkClaimFailed(ctx, retry[0].Claim, emissionErr, &next2)
	failed2 := claimRequireApplied(t, s, retry[0].Entry, res, err)
	retry = claimRetry(t, s, next2, ledger.MaxLimit)
	require.Len(t, retry, 1)
	res, err = s.MarkClaimDeadLettered(ctx, retry[0].Claim, emissionErr, "poison message")
	dead := claimRequireApplied(t, s, retry[0].Entry, res, err)
	why := "timeout: provider timed out"
	claimRequireHistory(t, s, e.ID,
		claimCreated(e),
		claimStep(ledger.OpClaim, pending, pending, claimWorker, "", claimT0),
		claimStep(ledger.OpMarkFailed, pending, retrying, claimWorker, why, failed1.UpdatedAt),
		claimStep(ledger.OpClaim, retrying, retrying, claimWorker, "", next),
		claimStep(ledger.OpMarkFailed, retrying, retrying, claimWorker, why, failed2.UpdatedAt),
		claimStep(ledger.OpClaim, retrying, retrying, claimWorker, "", next2),
		claimStep(ledger.OpMarkDeadLettered, retrying, deadLettered, claimWorker, "poison message", dead.UpdatedAt),
	)
}

func claimHistoryClaimCallsNameTheirWorker(t *testing.T, s ledger.ClaimStore) {
	ctx := t.Context()
	ce := claimNew(t, s, "order-1", claimT0)
	id := ce.Entry.ID
	res, err := s.ReleaseClaim(ctx, ce.Claim, "shutting down")
	released := claimRequireApplied(t, s, ce.Entry, res, err)
	ce2 := claimOnlyPending(t, s, id, claimAt(time.Second))
	want := []ledger.Transition{
		claimCreated(ce.Entry),
		claimStep(ledger.OpClaim, pending, pending, claimWorker, "", claimT0),
		claimStep(ledger.OpReleaseClaim, pending, pending, claimWorker, "shutting down", released.UpdatedAt),
		claimStep(ledger.OpClaim, pending, pending, claimWorker, "", claimAt(time.Second)),
	}
	held := ce2.Entry
	if r, ok := s.(ledger.ClaimRenewer); ok {
		res, err := r.RenewClaim(ctx, ce2.Claim, claimAt(2*time.Second), claimLease)
		held = claimRequireApplied(t, s, held, res, err)
		want = append(want, claimStep(ledger.OpRenewClaim, pending, pending, claimWorker, "", claimAt(2*time.Second)))
	}
	in := held
	in.Status = ledger.OutboxStatusDeferred
	in.NextAttemptAt = claimAt(time.Hour)
	res, err = s.SaveClaim(ctx, ce2.Claim, in)
	saved := claimRequireApplied(t, s, held, res, err)
	// Another worker takes it from here: the completion names it.
	got, err := s.ClaimRetryReady(ctx, ledger.ClaimRequest{Worker: "worker-b", Now: claimAt(time.Hour), LeaseDuration: claimLease, Limit: 1})
	require.NoError(t, err)
	require.Len(t, got, 1)
	res, err = s.MarkClaimDelivered(ctx, got[0].Claim, ledger.EmissionResult{ProviderRef: "ref-1"})
	done := claimRequireApplied(t, s, got[0].Entry, res, err)
	want = append(want,
		claimStep(ledger.OpSaveClaim, pending, deferred, claimWorker, "", saved.UpdatedAt),
		claimStep(ledger.OpClaim, deferred, deferred, "worker-b", "", claimAt(time.Hour)),
		claimStep(ledger.OpMarkDelivered, deferred, delivered, "worker-b", "", done.UpdatedAt),
	)
	claimRequireHistory(t, s, id, want...)
}

func claimHistoryBaseCallsNameNoActor(t *testing.T, s ledger.ClaimStore) {
	ctx := t.Context()
	e := claimEnqueue(t, s, "order-1")
	in := e
	in.Status = ledger.OutboxStatusDeferred
	in.NextAttemptAt = claimAt(time.Hour)
	saved, err := s.Save(ctx, in)
	require.NoError(t, err)
	emissionErr := ledger.EmissionError{Code: "busy", Message: "try later"}
	next := claimAt(2 * time.Hour)
	failed, err := s.MarkFailed(ctx, e.ID, emissionErr, &next)
	require.NoError(t, err)
	done, err := s.MarkDelivered(ctx, e.ID, ledger.EmissionResult{ProviderRef: "ref-1"})
	require.NoError(t, err)
	claimRequireHistory(t, s, e.ID,
		claimCreated(e),
		claimStep(ledger.OpSave, pending, deferred, "", "", saved.UpdatedAt),
		claimStep(ledger.OpMarkFailed, deferred, retrying, "", "busy: try later", failed.UpdatedAt),
		claimStep(ledger.OpMarkDelivered, retrying, delivered, "", "", done.UpdatedAt),
	)

	e2 := claimEnqueue(t, s, "order-2")
	dead, err := s.MarkDeadLettered(ctx, e2.ID, emissionErr, "poison message")
	require.NoError(t, err)
	e3 := claimEnqueue(t, s, "order-3")
	gone, err := s.MarkFailed(ctx, e3.ID, ledger.EmissionError{Message: "gone"}, nil)
	require.NoError(t, err)
	claimRequireHistory(t, s, e2.ID,
		claimCreated(e2),
		claimStep(ledger.OpMarkDeadLettered, pending, deadLettered, "", "poison message", dead.UpdatedAt),
	)
	claimRequireHistory(t, s, e3.ID,
		claimCreated(e3),
		claimStep(ledger.OpMarkFailed, pending, failedEntry, "", "gone", gone.UpdatedAt),
	)
}

func claimHistoryBatchEnqueueCreates(t *testing.T, s ledger.ClaimStore) {
	claimHistorian(t, s)
	if _, ok := s.(ledger.OutboxBatchEnqueuer); !ok {
		t.Skipf("%T does not implement ledger.OutboxBatchEnqueuer", s)
	}
	for _, e := range claimEnqueueKeys(t, s, []string{"order-1", "order-2"}) {
		claimRequireHistory(t, s, e.ID, claimCreated(e))
	}
}

func claimHistoryNotAppliedAddsNothing(t *testing.T, s ledger.ClaimStore) {
	ctx := t.Context()
	ce := claimNew(t, s, "order-1", claimT0)
	id := ce.Entry.ID
	stale := ce.Claim
	stale.Token = "not-the-token"
	held := ce.Entry
	res, err := s.MarkClaimDelivered(ctx, stale, ledger.EmissionResult{})
	claimRequireUnapplied(t, s, held, res, err, ledger.OutcomeLeaseLost)
	res, err = s.MarkClaimFailed(ctx, stale, ledger.EmissionError{}, nil)
	claimRequireUnapplied(t, s, held, res, err, ledger.OutcomeLeaseLost)
	res, err = s.ReleaseClaim(ctx, stale, "")
	claimRequireUnapplied(t, s, held, res, err, ledger.OutcomeLeaseLost)
	res, err = s.SaveClaim(ctx, stale, held)
	claimRequireUnapplied(t, s, held, res, err, ledger.OutcomeLeaseLost)
	if r, ok := s.(ledger.ClaimRenewer); ok {
		res, err = r.RenewClaim(ctx, ce.Claim, ce.Claim.ExpiresAt, claimLease)
		claimRequireUnapplied(t, s, held, res, err, ledger.OutcomeLeaseExpired)
	}
	require.Empty(t, claimPending(t, s, claimT0, ledger.MaxLimit), "the claim is in force")
	require.Empty(t, claimRetry(t, s, claimAt(time.Hour), ledger.MaxLimit))
	again, err := s.Enqueue(ctx, claimEnvelope("order-1"))
	require.NoError(t, err)
	require.Equal(t, ledger.OutcomeRepeated, again.Outcome)
	other := claimEnvelope("order-1")
	other.Kind = "other"
	again, err = s.Enqueue(ctx, other)
	require.NoError(t, err)
	require.Equal(t, ledger.OutcomeConflict, again.Outcome)
	staleVersion := held
	staleVersion.Version--
	_, err = s.Save(ctx, staleVersion)
	require.ErrorIs(t, err, ledger.ErrConflict)
	claimRequireHistory(t, s, id, claimCreated(ce.Entry), claimStep(ledger.OpClaim, pending, pending, claimWorker, "", claimT0))

	res, err = s.ReleaseClaim(ctx, ce.Claim, "later")
	released := claimRequireApplied(t, s, held, res, err)
	res, err = s.ReleaseClaim(ctx, ce.Claim, "later")
	claimRequireUnapplied(t, s, released, res, err, ledger.OutcomeRepeated)
	ce2 := claimOnlyPending(t, s, id, claimAt(time.Second))
	res, err = s.MarkClaimDelivered(ctx, ce2.Claim, ledger.EmissionResult{ProviderRef: "ref-1"})
	done := claimRequireApplied(t, s, ce2.Entry, res, err)
	res, err = s.MarkClaimDelivered(ctx, ce2.Claim, ledger.EmissionResult{ProviderRef: "ref-1"})
	claimRequireUnapplied(t, s, done, res, err, ledger.OutcomeEnded)
	unchanged, err := s.MarkDelivered(ctx, id, ledger.EmissionResult{ProviderRef: "ref-2"})
	require.NoError(t, err)
	claimRequireEntry(t, done, unchanged, "an entry already delivered comes back unchanged")
	_, err = s.MarkFailed(ctx, id, ledger.EmissionError{}, nil)
	require.ErrorIs(t, err, ledger.ErrConflict)
	_, err = s.Save(ctx, done)
	require.ErrorIs(t, err, ledger.ErrConflict)
	claimRequireHistory(t, s, id,
		claimCreated(ce.Entry),
		claimStep(ledger.OpClaim, pending, pending, claimWorker, "", claimT0),
		claimStep(ledger.OpReleaseClaim, pending, pending, claimWorker, "later", released.UpdatedAt),
		claimStep(ledger.OpClaim, pending, pending, claimWorker, "", claimAt(time.Second)),
		claimStep(ledger.OpMarkDelivered, pending, delivered, claimWorker, "", done.UpdatedAt),
	)
}

func claimHistoryUnknownIsNotFound(t *testing.T, s ledger.ClaimStore) {
	claimEnqueue(t, s, "order-1")
	_, err := claimHistorian(t, s).EntryHistory(t.Context(), ledger.OutboxEntryIDFor("missing"))
	require.ErrorIs(t, err, ledger.ErrNotFound)
}

func claimHistoryInvalidIsRejected(t *testing.T, s ledger.ClaimStore) {
	h := claimHistorian(t, s)
	e := claimEnqueue(t, s, "order-1")
	for _, id := range []ledger.OutboxEntryID{"", ledger.OutboxEntryID(strings.Repeat("x", ledger.MaxNameBytes+1)), "bad\xff", "ctl\n"} {
		_, err := h.EntryHistory(t.Context(), id)
		requireInvalid(t, err)
	}
	_, err := h.EntryHistory(nilContext(), e.ID)
	requireInvalid(t, err)
	_, err = h.EntryHistory(cancelledContext(t), e.ID)
	require.ErrorIs(t, err, context.Canceled)
}

func claimHistoryPurgeTakesTheHistory(t *testing.T, s ledger.ClaimStore) {
	h := claimHistorian(t, s)
	p, ok := s.(ledger.OutboxPurger)
	if !ok {
		t.Skipf("%T does not implement ledger.OutboxPurger", s)
	}
	e := claimDelivered(t, s, "order-1")
	n, err := p.PurgeEntries(t.Context(), e.EndedAt.Add(time.Microsecond), ledger.MaxLimit)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, err = h.EntryHistory(t.Context(), e.ID)
	require.ErrorIs(t, err, ledger.ErrNotFound, "purging an entry purges its history")
	again := claimEnqueue(t, s, "order-1")
	claimRequireHistory(t, s, again.ID, claimCreated(again))
}

// claimHistoryConcurrentWork races workers claiming and completing entries
// (delivered, failed for a retry, released, deferred, or dropped until the
// claim runs out and another worker takes it over). Afterwards every
// entry's history must be one unbroken chain from its creation to its
// status, with one claim entry per claim sequence number.
func claimHistoryConcurrentWork(t *testing.T, s ledger.ClaimStore) {
	claimHistorian(t, s)
	const (
		entries = 60
		workers = 8
		rounds  = 40
	)
	ctx := t.Context()
	ids := make([]ledger.OutboxEntryID, 0, entries)
	for _, e := range claimEnqueueN(t, s, "race", entries) {
		ids = append(ids, e.ID)
	}
	var (
		clock    atomic.Int64
		wg       sync.WaitGroup
		mu       sync.Mutex
		problems []error
	)
	now := func() time.Time { return claimT0.Add(time.Duration(clock.Add(3)) * time.Microsecond) }
	report := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		problems = append(problems, err)
	}
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 13))
			worker := fmt.Sprintf("worker-%d", w)
			for range rounds {
				req := ledger.ClaimRequest{Worker: worker, Now: now(), LeaseDuration: 20 * time.Microsecond, Limit: 1 + rng.IntN(3)}
				claim := s.ClaimPending
				if rng.IntN(2) == 0 {
					claim = s.ClaimRetryReady
				}
				got, err := claim(ctx, req)
				if err != nil {
					report(err)
					return
				}
				for _, ce := range got {
					next := now().Add(time.Duration(rng.IntN(30)) * time.Microsecond)
					var err error
					switch rng.IntN(6) {
					case 0, 1:
						_, err = s.MarkClaimDelivered(ctx, ce.Claim, ledger.EmissionResult{ProviderRef: worker})
					case 2:
						_, err = s.MarkClaimFailed(ctx, ce.Claim, ledger.EmissionError{Code: "busy"}, &next)
					case 3:
						_, err = s.ReleaseClaim(ctx, ce.Claim, "not now")
					case 4:
						in := ce.Entry
						in.Status, in.NextAttemptAt = ledger.OutboxStatusDeferred, next
						_, err = s.SaveClaim(ctx, ce.Claim, in)
					}
					if err != nil {
						report(err)
					}
				}
			}
		})
	}
	wg.Wait()
	require.Empty(t, problems)
	claims := 0
	for _, id := range ids {
		e := claimFind(t, s, id)
		h := claimHistory(t, s, id) // numbered 1..n, the last Seq the entry's Version
		first := h[0]
		first.Seq = 0
		require.Equal(t, claimCreated(e), first, "%s starts with its creation", id)
		n := int64(0)
		for i, tr := range h {
			require.Equal(t, ledger.OutcomeApplied, tr.Outcome)
			if i > 0 {
				require.Equal(t, h[i-1].To, tr.From, "%s: entry %d starts where entry %d ended", id, tr.Seq, tr.Seq-1)
			}
			if tr.Op == ledger.OpClaim {
				n++
				require.True(t, strings.HasPrefix(tr.Actor, "worker-"), "%s: a claim names its worker", id)
			}
		}
		require.Equal(t, string(e.Status), h[len(h)-1].To, "%s: the history ends in the entry's status", id)
		require.Equal(t, ledger.Normalize(e.UpdatedAt), h[len(h)-1].At, "%s: the last entry is the last change", id)
		require.Equal(t, e.ClaimSeq, n, "%s: one claim entry per claim sequence number", id)
		claims += int(n)
	}
	require.Positive(t, claims, "the race claimed nothing")
}

// claimHistoryRedriveActor: a redrive records the actor of its context
// (ledger.WithActor), by ID and by filter.
func claimHistoryRedriveActor(t *testing.T, s ledger.ClaimStore) {
	r, ok := s.(ledger.OutboxRedriver)
	if !ok {
		t.Skipf("%T does not implement ledger.OutboxRedriver", s)
	}
	ctx, err := ledger.WithActor(t.Context(), "bob via console")
	require.NoError(t, err)
	a := claimDeadLettered(t, s, "actor-a")
	b := claimDeadLettered(t, s, "actor-b")
	res, err := r.RedriveEntry(ctx, ledger.RedriveEntryRequest{ID: a.ID})
	require.NoError(t, err)
	require.True(t, res.Applied())
	batch, err := r.RedriveEntriesMatching(ctx, ledger.RedriveEntryQuery{IdempotencyKey: "actor-b", Limit: 10})
	require.NoError(t, err)
	require.Equal(t, 1, batch.Redriven())
	for _, id := range []ledger.OutboxEntryID{a.ID, b.ID} {
		h := claimHistory(t, s, id)
		require.Equal(t, ledger.OpRedrive, h[len(h)-1].Op)
		require.Equal(t, "bob via console", h[len(h)-1].Actor)
	}
}
