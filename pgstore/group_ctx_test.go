package pgstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/internal/pgtest"
	"github.com/leaseledger/ledger/ledgertest"
)

// Group commit and contexts: calls that give up before, while and
// around their group, and the conformance suite with group commit off.
// The helpers are in group_test.go.

// TestGroupCommitCancelledBeforePickup cancels a call while it waits for
// its group: it returns the context's error and writes nothing, and the
// group runs without it. Then the collecting leader's own context ends
// before it takes its group: its call is dropped, and it still runs the
// group for the others.
func TestGroupCommitCancelledBeforePickup(t *testing.T) {
	s, ctx := groupTestStore(t)
	leases := leasedDeliveries(ctx, t, s, "a", "b", "c", "d", "e", "f")
	fixGroups(s, 3)
	q := s.groups.deliveries
	start := func(ctx context.Context, id ledger.DeliveryID) <-chan answer[ledger.DeliveryResult] {
		done := make(chan answer[ledger.DeliveryResult], 1)
		go func() {
			r, err := s.Acknowledge(ctx, leases[id], "seen", groupT0)
			done <- answer[ledger.DeliveryResult]{r, err}
		}()
		return done
	}
	unchanged := func(id ledger.DeliveryID) {
		t.Helper()
		d, err := s.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, ledger.DeliveryStateLeased, d.State, "%s was not written", id)
		h, err := s.History(ctx, id)
		require.NoError(t, err)
		require.Len(t, h, 2, "enqueue and lease only")
	}

	a := start(ctx, "a") // the leader, waiting for two more
	queued(t, q, 1)
	bctx, cancelB := context.WithCancel(ctx)
	b := start(bctx, "b")
	queued(t, q, 2)
	cancelB()
	require.ErrorIs(t, (<-b).err, context.Canceled)
	queued(t, q, 1) // b withdrew; a still waits
	c := start(ctx, "c")
	queued(t, q, 2)
	d := start(ctx, "d") // the third: the group runs
	for _, ch := range []<-chan answer[ledger.DeliveryResult]{a, c, d} {
		got := <-ch
		require.NoError(t, got.err)
		require.Equal(t, ledger.OutcomeApplied, got.res.Outcome)
	}
	unchanged("b")
	require.EqualValues(t, 1, q.groupsRun.Load())
	require.EqualValues(t, 3, q.callsGrouped.Load())

	ectx, cancelE := context.WithCancel(ctx)
	e := start(ectx, "e") // the next leader
	queued(t, q, 1)
	cancelE() // it keeps collecting, for the calls that come
	f := start(ctx, "f")
	queued(t, q, 2)
	again := start(ctx, "a") // the third
	require.ErrorIs(t, (<-e).err, context.Canceled)
	gotF, gotA := <-f, <-again
	require.NoError(t, gotF.err)
	require.Equal(t, ledger.OutcomeApplied, gotF.res.Outcome)
	require.NoError(t, gotA.err)
	require.Equal(t, ledger.OutcomeRepeated, gotA.res.Outcome)
	unchanged("e")
	require.EqualValues(t, 2, q.groupsRun.Load(), "f and a were grouped without e")
	require.EqualValues(t, 5, q.callsGrouped.Load())
}

// TestGroupCommitCallerLeavesRunningGroup cancels one call while its
// group's transaction waits for a row lock another session holds: the
// call returns at once with an error saying it may have applied, and the
// group, still wanted by its leader, commits both.
func TestGroupCommitCallerLeavesRunningGroup(t *testing.T) {
	s, ctx := groupTestStore(t)
	leases := leasedDeliveries(ctx, t, s, "a", "b")
	conn, err := pgx.Connect(ctx, pgtest.DSN(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	holder, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = holder.Exec(ctx, "SELECT 1 FROM "+pgx.Identifier{s.cfg.schema, "deliveries"}.Sanitize()+" WHERE id = 'b' FOR UPDATE")
	require.NoError(t, err)

	fixGroups(s, 2)
	got := make(chan answer[ledger.DeliveryResult], 1)
	go func() { // the leader, which runs the group and waits for it
		r, err := s.Acknowledge(ctx, leases["a"], "seen", groupT0)
		got <- answer[ledger.DeliveryResult]{r, err}
	}()
	queued(t, s.groups.deliveries, 1)
	bctx, cancelB := context.WithCancel(ctx)
	left := make(chan answer[ledger.DeliveryResult], 1)
	go func() {
		r, err := s.Acknowledge(bctx, leases["b"], "seen", groupT0)
		left <- answer[ledger.DeliveryResult]{r, err}
	}()
	for { // the group is taken once both are queued
		s.groups.deliveries.mu.Lock()
		running := s.groups.deliveries.running
		s.groups.deliveries.mu.Unlock()
		if running == 1 {
			break
		}
		runtime.Gosched()
	}
	cancelB()
	gone := <-left
	require.ErrorIs(t, gone.err, context.Canceled)
	require.Contains(t, gone.err.Error(), "may have applied")
	require.NoError(t, holder.Rollback(ctx))
	stayed := <-got
	require.NoError(t, stayed.err)
	require.Equal(t, ledger.OutcomeApplied, stayed.res.Outcome)
	for _, id := range []ledger.DeliveryID{"a", "b"} {
		d, err := s.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, ledger.DeliveryStateAcknowledged, d.State, "the group committed %s", id)
	}
}

// TestGroupCommitUnderCancellations races many callers, a third of them
// cancelled at random moments, through the default queue: nobody hangs,
// every answer is true to what was written, and what a cancelled call
// left undone can still be done.
func TestGroupCommitUnderCancellations(t *testing.T) {
	const n = 96
	s, ctx := groupTestStore(t)
	ids := make([]ledger.DeliveryID, n)
	for i := range ids {
		ids[i] = ledger.DeliveryID(fmt.Sprintf("d%03d", i))
	}
	leases := leasedDeliveries(ctx, t, s, ids...)
	type call struct {
		res ledger.DeliveryResult
		err error
	}
	out := make([]call, n)
	var wg sync.WaitGroup
	for i, id := range ids {
		cctx, cancel := context.WithCancel(ctx)
		wg.Go(func() {
			defer cancel()
			out[i].res, out[i].err = s.Acknowledge(cctx, leases[id], "seen", groupT0)
		})
		if i%3 == 0 {
			wg.Go(func() {
				for range i % 7 {
					runtime.Gosched()
				}
				cancel()
			})
		}
	}
	wg.Wait()
	for i, id := range ids {
		d, err := s.Get(ctx, id)
		require.NoError(t, err)
		switch {
		case out[i].err == nil:
			require.Equal(t, ledger.OutcomeApplied, out[i].res.Outcome, string(id))
			require.Equal(t, ledger.DeliveryStateAcknowledged, d.State, string(id))
		case errors.Is(out[i].err, context.Canceled):
			// Applied or not; either way the call can be made again
			// and says which.
			r, err := s.Acknowledge(ctx, leases[id], "seen", groupT0)
			require.NoError(t, err)
			require.Contains(t, []ledger.Outcome{ledger.OutcomeApplied, ledger.OutcomeRepeated}, r.Outcome)
		default:
			t.Fatalf("%s: %v", id, out[i].err)
		}
	}
}

// TestConformanceWithoutGroupCommit runs the conformance groups that
// group commit changes the path of on a store with it off (the package's
// TestConformance runs everything with it on, the default).
func TestConformanceWithoutGroupCommit(t *testing.T) {
	// Beside the other runs of whole suites: they mostly wait on the server.
	t.Parallel()
	affected := map[string]bool{"Acknowledge": true, "MarkProcessed": true, "MarkFailed": true, "Release": true,
		"RecordActivation": true, "Abandon": true, "ClaimCompletions": true, "Concurrency": true, "Races": true}
	newStore := func(t *testing.T) *Store {
		// Test names are TestConformanceWithoutGroupCommit/<contract>/<group>/...
		if parts := strings.Split(t.Name(), "/"); len(parts) < 3 || !affected[parts[2]] {
			t.Skip("not changed by group commit; run with it on by TestConformance")
		}
		s, _ := groupTestStore(t, WithGroupCommit(false), WithClock(time.Now))
		return s
	}
	t.Run("Ledger", func(t *testing.T) {
		ledgertest.TestLedger(t, func(t *testing.T) ledger.Ledger { return newStore(t) })
	})
	t.Run("ClaimStore", func(t *testing.T) {
		ledgertest.TestClaimStore(t, func(t *testing.T) ledger.ClaimStore { return newStore(t).Outbox() })
	})
}
