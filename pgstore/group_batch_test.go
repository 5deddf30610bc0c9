package pgstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// Batches of claim completions (Outbox.CompleteClaims) in the group
// commit queue: they share groups with other callers, withdraw whole when
// their caller gives up, and decide every completion exactly once under
// a mix of callers. The helpers are in group_test.go.

// claimedBatch enqueues n entries named by prefix and claims them.
func claimedBatch(ctx context.Context, t *testing.T, s *Store, prefix string, n int) []ledger.ClaimedEntry {
	t.Helper()
	envs := make([]ledger.Envelope, n)
	for i := range envs {
		envs[i] = ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: fmt.Sprintf("%s-%d", prefix, i)}
	}
	_, err := s.Outbox().EnqueueBatch(ctx, envs)
	require.NoError(t, err)
	claims, err := s.Outbox().ClaimPending(ctx, ledger.ClaimRequest{Worker: prefix, Now: groupT0, LeaseDuration: time.Hour, Limit: n})
	require.NoError(t, err)
	require.Len(t, claims, n)
	return claims
}

func deliveredAll(claims []ledger.ClaimedEntry) []ledger.ClaimCompletion {
	cs := make([]ledger.ClaimCompletion, len(claims))
	for i, c := range claims {
		cs[i] = ledger.ClaimCompletion{Claim: c.Claim, Op: ledger.OpMarkDelivered, Result: ledger.EmissionResult{ProviderRef: "ref"}}
	}
	return cs
}

// batchAnswer is what one CompleteClaims call answered.
type batchAnswer struct {
	res []ledger.OutboxResult
	err error
}

// completeBatch delivers claims by one CompleteClaims call under ctx, in
// a goroutine of its own.
func completeBatch(ctx context.Context, s *Store, claims []ledger.ClaimedEntry) <-chan batchAnswer {
	out := make(chan batchAnswer, 1)
	go func() {
		res, err := s.Outbox().CompleteClaims(ctx, deliveredAll(claims))
		out <- batchAnswer{res, err}
	}()
	return out
}

// TestCompleteClaimsBatchesShareAGroup queues two batches of four and a
// single call: one group of nine decides them all, in one commit.
func TestCompleteClaimsBatchesShareAGroup(t *testing.T) {
	s, ctx := groupTestStore(t)
	a, b, c := claimedBatch(ctx, t, s, "a", 4), claimedBatch(ctx, t, s, "b", 4), claimedBatch(ctx, t, s, "c", 1)
	fixGroups(s, 9)
	q := s.groups.entries
	ga := completeBatch(ctx, s, a)
	queued(t, q, 4)
	gb := completeBatch(ctx, s, b)
	queued(t, q, 8)
	single, err := s.Outbox().MarkClaimDelivered(ctx, c[0].Claim, ledger.EmissionResult{ProviderRef: "ref"})
	require.NoError(t, err)
	require.True(t, single.Applied())
	for _, got := range []batchAnswer{<-ga, <-gb} {
		require.NoError(t, got.err)
		require.Len(t, got.res, 4)
		for _, r := range got.res {
			require.Equal(t, ledger.OutcomeApplied, r.Outcome)
			require.Equal(t, ledger.OutboxStatusDelivered, r.Entry.Status)
		}
	}
	require.EqualValues(t, 1, q.groupsRun.Load(), "one group")
	require.EqualValues(t, 9, q.callsGrouped.Load())
	st, err := s.Outbox().OutboxStats(ctx, groupT0)
	require.NoError(t, err)
	require.EqualValues(t, 9, st.ByStatus[ledger.OutboxStatusDelivered])
}

// TestCompleteClaimsBatchWithdrawsWhole cancels a batch while it waits
// for its group behind a leading call: every completion answers the
// context's error and none is written, and the group runs without them.
func TestCompleteClaimsBatchWithdrawsWhole(t *testing.T) {
	s, ctx := groupTestStore(t)
	x, a, c := claimedBatch(ctx, t, s, "x", 1), claimedBatch(ctx, t, s, "a", 3), claimedBatch(ctx, t, s, "c", 5)
	fixGroups(s, 6)
	q := s.groups.entries
	gx := completeBatch(ctx, s, x) // the leader, waiting for five more
	queued(t, q, 1)
	actx, cancel := context.WithCancel(ctx)
	ga := completeBatch(actx, s, a)
	queued(t, q, 4)
	cancel()
	got := <-ga
	require.ErrorIs(t, got.err, context.Canceled)
	require.Len(t, got.res, 3)
	for _, r := range got.res {
		require.Empty(t, r.Outcome, "undecided")
	}
	q.mu.Lock()
	require.Len(t, q.pending, 1, "a withdrew whole; x still waits")
	q.mu.Unlock()
	gc := completeBatch(ctx, s, c) // the group is full
	for _, got := range []batchAnswer{<-gx, <-gc} {
		require.NoError(t, got.err)
		for _, r := range got.res {
			require.Equal(t, ledger.OutcomeApplied, r.Outcome)
		}
	}
	require.EqualValues(t, 1, q.groupsRun.Load())
	require.EqualValues(t, 6, q.callsGrouped.Load())
	for _, ce := range a {
		e, err := s.Outbox().FindByID(ctx, ce.Claim.EntryID)
		require.NoError(t, err)
		require.Equal(t, ledger.OutboxStatusPending, e.Status, "not written")
		require.NotNil(t, e.Claim, "still claimed")
	}
}

// TestCompleteClaimsBatchesUnderAMix runs batches and single calls from
// many goroutines, some cancelled at random moments, over one store: every
// completion is answered applied exactly when its entry was delivered by
// it, an error otherwise (then the entry is delivered or still claimed,
// never anything else), and nothing is left queued.
func TestCompleteClaimsBatchesUnderAMix(t *testing.T) {
	s, ctx := groupTestStore(t)
	const callers, per = 12, 5
	claims := make([][]ledger.ClaimedEntry, callers)
	for i := range claims {
		claims[i] = claimedBatch(ctx, t, s, fmt.Sprintf("w%d", i), per)
	}
	type outcome struct {
		id      ledger.OutboxEntryID
		applied bool
		err     error
	}
	results := make(chan outcome, callers*per)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			if i%3 == 0 {
				time.AfterFunc(time.Duration(rand.IntN(2000))*time.Microsecond, cancel)
			}
			cs := deliveredAll(claims[i])
			if i%2 == 0 {
				res, err := s.Outbox().CompleteClaims(cctx, cs)
				for j, c := range cs {
					o := outcome{id: c.Claim.EntryID, err: err}
					if j < len(res) && res[j].Outcome != "" {
						o.applied, o.err = res[j].Applied(), nil
					}
					results <- o
				}
				return
			}
			for _, c := range cs {
				r, err := s.Outbox().MarkClaimDelivered(cctx, c.Claim, c.Result)
				results <- outcome{id: c.Claim.EntryID, applied: err == nil && r.Applied(), err: err}
			}
		})
	}
	wg.Wait()
	close(results)
	n := 0
	for o := range results {
		n++
		e, err := s.Outbox().FindByID(ctx, o.id)
		require.NoError(t, err)
		switch {
		case o.applied:
			require.Equal(t, ledger.OutboxStatusDelivered, e.Status, "%s answered applied", o.id)
		case o.err == nil:
			t.Fatalf("%s: answered %v without an error", o.id, o)
		default:
			require.ErrorIs(t, o.err, context.Canceled, "%s", o.id)
			if e.Status != ledger.OutboxStatusDelivered {
				require.Equal(t, ledger.OutboxStatusPending, e.Status, "%s", o.id)
				require.NotNil(t, e.Claim, "%s still claimed", o.id)
			}
		}
	}
	require.Equal(t, callers*per, n)
	q := s.groups.entries
	q.mu.Lock()
	defer q.mu.Unlock()
	require.Empty(t, q.pending)
	require.False(t, q.collecting)
	require.Zero(t, q.running)
}
