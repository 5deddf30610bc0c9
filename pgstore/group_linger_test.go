package pgstore

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// Calls that linger (ledger.WithLinger) in the group commit queue. The
// helpers are in group_test.go and group_batch_test.go.

// deliverEach marks each of claims delivered under ctx, each from a
// goroutine of its own, and sends each call's error, or nil when it
// applied.
func deliverEach(ctx context.Context, s *Store, claims []ledger.ClaimedEntry) <-chan error {
	answers := make(chan error, len(claims))
	for _, c := range claims {
		go func() {
			r, err := s.Outbox().MarkClaimDelivered(ctx, c.Claim, ledger.EmissionResult{ProviderRef: "ref"})
			if err == nil && !r.Applied() {
				err = fmt.Errorf("outcome %s", r.Outcome)
			}
			answers <- err
		}()
	}
	return answers
}

// TestLingeringCallsWaitForAnotherCaller: two calls of one lingering
// caller do not keep each other company, and nothing else is in flight,
// so they wait; a call of another caller joins them, and one group
// decides all three at once, without waiting out the linger: the third
// call gives up after half of it, and must not have to.
func TestLingeringCallsWaitForAnotherCaller(t *testing.T) {
	s, ctx := groupTestStore(t)
	a, b := claimedBatch(ctx, t, s, "a", 2), claimedBatch(ctx, t, s, "b", 1)
	q := s.groups.entries
	lingering := ledger.WithLinger(ctx, MaxGroupCommitWindow)
	answers := deliverEach(lingering, s, a)
	queued(t, q, 2)
	hurried, cancel := context.WithTimeout(ctx, MaxGroupCommitWindow/2)
	defer cancel()
	r, err := s.Outbox().MarkClaimDelivered(hurried, b[0].Claim, ledger.EmissionResult{ProviderRef: "ref"})
	require.NoError(t, err)
	require.True(t, r.Applied())
	for range a {
		require.NoError(t, <-answers)
	}
	require.EqualValues(t, 1, q.groupsRun.Load(), "one group")
	require.EqualValues(t, 3, q.callsGrouped.Load())
}

// TestLingeringCallsAloneRunAfterTheirLinger: calls of one lingering
// caller that no other caller joins run once the linger has passed (the
// longest there is, so that both calls are queued well before), as one
// group, and a later call without a linger runs at once, alone.
func TestLingeringCallsAloneRunAfterTheirLinger(t *testing.T) {
	s, ctx := groupTestStore(t)
	a, b := claimedBatch(ctx, t, s, "a", 2), claimedBatch(ctx, t, s, "b", 1)
	q := s.groups.entries
	lingering := ledger.WithLinger(ctx, MaxGroupCommitWindow)
	answers := deliverEach(lingering, s, a)
	queued(t, q, 2)
	for range a {
		require.NoError(t, <-answers)
	}
	require.EqualValues(t, 1, q.groupsRun.Load(), "the lingering caller's calls, as one group")
	require.EqualValues(t, 2, q.callsGrouped.Load())

	r, err := s.Outbox().MarkClaimDelivered(ctx, b[0].Claim, ledger.EmissionResult{ProviderRef: "ref"})
	require.NoError(t, err)
	require.True(t, r.Applied())
	require.EqualValues(t, 1, q.groupsRun.Load(), "a lone call without a linger runs on its own")
}
