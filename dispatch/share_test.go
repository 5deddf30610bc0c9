package dispatch_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/dispatch"
	"github.com/leaseledger/ledger/memstore"
)

// claimCounter is a claim store that counts the claims made through it.
type claimCounter struct {
	*memstore.Outbox
	claims atomic.Int64
}

func (c *claimCounter) ClaimDue(ctx context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	c.claims.Add(1)
	return c.Outbox.ClaimDue(ctx, req)
}

// startIdle runs n loops, the i-th built by build to poll at its own
// interval (one second plus i milliseconds, without jitter) so that a
// test can fire one loop's timer at a time, and waits until all are
// idle. It returns their intervals; the loops stop when the test ends.
func startIdle(t *testing.T, timers *fakeTimers, n int, build func(i int, interval time.Duration) func(context.Context) error) []time.Duration {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	intervals := make([]time.Duration, n)
	for i := range n {
		intervals[i] = time.Second + time.Duration(i)*time.Millisecond
		run := build(i, intervals[i])
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = run(ctx)
		}()
	}
	for _, d := range intervals {
		waitIdle(t, timers, d)
	}
	return intervals
}

// idleFleet runs n idle Dispatchers over store (see startIdle).
func idleFleet(t *testing.T, store ledger.ClaimStore, timers *fakeTimers, obs dispatch.Observer, n int, extra ...dispatch.DispatcherOption) []time.Duration {
	t.Helper()
	emitter := dispatch.EmitterFunc(func(context.Context, ledger.OutboxEntry) (ledger.EmissionResult, error) {
		return ledger.EmissionResult{ProviderRef: "ref"}, nil
	})
	return startIdle(t, timers, n, func(i int, interval time.Duration) func(context.Context) error {
		opts := append([]dispatch.DispatcherOption{
			dispatch.WithAfterFunc(timers.AfterFunc), dispatch.WithObserver(obs), dispatch.WithLogger(discardLogger()),
			dispatch.WithPollInterval(interval), dispatch.WithoutPollJitter(), dispatch.WithWorker(fmt.Sprintf("w%d", i)),
		}, extra...)
		d, err := dispatch.NewDispatcher(store, emitter, opts...)
		require.NoError(t, err)
		return d.Run
	})
}

// waitIdle waits until the loop polling at interval d waits for its timer.
func waitIdle(t *testing.T, timers *fakeTimers, d time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool { return timers.Active(d) == 1 }, 10*time.Second, time.Millisecond)
}

// pollRounds fires every loop's timer once per round, one at a time,
// waiting for the loop to be idle again before the next.
func pollRounds(t *testing.T, timers *fakeTimers, intervals []time.Duration, rounds int) {
	t.Helper()
	for range rounds {
		for _, d := range intervals {
			require.Equal(t, 1, timers.Fire(d))
			waitIdle(t, timers, d)
		}
	}
}

func TestIdleDispatchersOfOneStorePollAboutOncePerInterval(t *testing.T) {
	const n, rounds = 8, 3
	store := &claimCounter{Outbox: memstore.NewOutbox()}
	timers := &fakeTimers{}
	obs := newCounter()
	intervals := idleFleet(t, store, timers, obs, n)

	before := store.claims.Load()
	pollRounds(t, timers, intervals, rounds)
	claims := store.claims.Load() - before
	// Each loop's timer fired once a round: alone, each would have
	// claimed, n per round. Shared, the loop that looked last claims and
	// the others see that it found nothing.
	require.GreaterOrEqual(t, claims, int64(rounds), "somebody polls every round")
	require.LessOrEqual(t, claims, int64(2*rounds), "not every idle loop polls")

	// Work enqueued now is still claimed within one round of polls.
	_, err := store.Enqueue(context.Background(), ledger.Envelope{Provider: "mail", Kind: "welcome", IdempotencyKey: "late"})
	require.NoError(t, err)
	pollRounds(t, timers, intervals, 1)
	require.Equal(t, 1, obs.Count(dispatch.EventDelivered))
}

func TestDispatchersWithTheirOwnClockPollOnTheirOwn(t *testing.T) {
	const n, rounds = 4, 2
	store := &claimCounter{Outbox: memstore.NewOutbox()}
	timers := &fakeTimers{}
	intervals := idleFleet(t, store, timers, newCounter(), n, dispatch.WithClock(time.Now))

	before := store.claims.Load()
	pollRounds(t, timers, intervals, rounds)
	require.Equal(t, int64(n*rounds), store.claims.Load()-before, "each loop with its own clock polls at each of its timers")
}

// leaseCounter is a ledger that counts the leases taken through it.
type leaseCounter struct {
	*memstore.Store
	leases atomic.Int64
}

func (c *leaseCounter) Lease(ctx context.Context, f ledger.LeaseFilter, o ledger.Owner, now time.Time, d time.Duration, limit int) (ledger.LeaseResult, error) {
	c.leases.Add(1)
	return c.Store.Lease(ctx, f, o, now, d, limit)
}

func TestIdleWorkersShareOnlyWithWorkersOfTheSameTargets(t *testing.T) {
	const rounds = 3
	l := &leaseCounter{Store: memstore.New()}
	timers := &fakeTimers{}
	h := dispatch.HandlerFunc(func(context.Context, ledger.Delivery) (dispatch.Decision, error) {
		return dispatch.Processed("done"), nil
	})
	// Three Workers for target a share a view; the one for b has its own.
	targets := []ledger.Target{"a", "a", "a", "b"}
	intervals := startIdle(t, timers, len(targets), func(i int, interval time.Duration) func(context.Context) error {
		w, err := dispatch.NewWorker(l, fmt.Sprintf("agent-%d", i), []ledger.Target{targets[i]}, h,
			dispatch.WithAfterFunc(timers.AfterFunc), dispatch.WithLogger(discardLogger()),
			dispatch.WithPollInterval(interval), dispatch.WithoutPollJitter(), dispatch.WithoutSweeper())
		require.NoError(t, err)
		return w.Run
	})
	before := l.leases.Load()
	pollRounds(t, timers, intervals, rounds)
	leases := l.leases.Load() - before
	// b's Worker leases every round; a's three about once a round between them.
	require.GreaterOrEqual(t, leases, int64(2*rounds))
	require.LessOrEqual(t, leases, int64(3*rounds), "the Workers of a do not all poll")
}
