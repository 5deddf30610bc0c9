package dispatch_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/dispatch"
)

// blockingEmitter signals started with each entry it receives and then
// waits for proceed (or, when honourCtx, for ctx to end).
type blockingEmitter struct {
	started   chan ledger.OutboxEntryID
	proceed   chan struct{}
	honourCtx bool
	causes    chan error
}

func newBlockingEmitter(honourCtx bool) *blockingEmitter {
	return &blockingEmitter{
		started:   make(chan ledger.OutboxEntryID, 100),
		proceed:   make(chan struct{}),
		honourCtx: honourCtx,
		causes:    make(chan error, 100),
	}
}

func (b *blockingEmitter) Emit(ctx context.Context, e ledger.OutboxEntry) (ledger.EmissionResult, error) {
	b.started <- e.ID
	if b.honourCtx {
		select {
		case <-b.proceed:
			return ledger.EmissionResult{ProviderRef: "done"}, nil
		case <-ctx.Done():
			b.causes <- context.Cause(ctx)
			return ledger.EmissionResult{}, ctx.Err()
		}
	}
	<-b.proceed
	return ledger.EmissionResult{ProviderRef: "done"}, nil
}

func TestEmitTimeoutCancelsTheEmissionAndRetries(t *testing.T) {
	t.Parallel()
	for name, honour := range map[string]bool{"EmitterHonoursContext": true, "EmitterIgnoresContext": false} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			store := newOutbox(clk)
			ids := enqueue(t, store, "k", 1)
			timers := &fakeTimers{}
			em := newBlockingEmitter(honour)
			defer close(em.proceed) // lets an abandoned emitter return
			obs := newCounter()
			d, err := dispatch.NewDispatcher(store, em, append(baseOptions(clk, timers, obs),
				dispatch.WithEmitTimeout(10*time.Second), dispatch.WithLeaseDuration(time.Minute))...)
			require.NoError(t, err)

			done := runOnceAsync(context.Background(), d)
			receive(t, em.started, "emission to start")
			require.Equal(t, 1, timers.Fire(10*time.Second), "one emit timeout timer")
			res := receive(t, done, "RunOnce")
			require.NoError(t, res.err)
			assert.Equal(t, 1, res.stats.Retried)
			if honour {
				assert.ErrorIs(t, receive(t, em.causes, "cause"), dispatch.ErrEmitTimeout)
			}
			e := get(t, store, ids[0])
			assert.Equal(t, ledger.OutboxStatusRetryScheduled, e.Status)
			require.NotNil(t, e.LastError)
			assert.Equal(t, dispatch.CodeTimeout, e.LastError.Code)
			evs := obs.Events(dispatch.EventRetried)
			require.Len(t, evs, 1)
			assert.ErrorIs(t, evs[0].Err, dispatch.ErrEmitTimeout)
		})
	}
}

// An emitter that ignores its context is abandoned when the emit timeout
// ends its emission, and the dispatcher goes on: with a concurrency of one,
// the entries after it are still emitted in the same cycle.
func TestAbandonedEmissionLeavesThePoolWhole(t *testing.T) {
	t.Parallel()
	clk := newClock()
	store := newOutbox(clk)
	ids := enqueue(t, store, "k", 3)
	timers := &fakeTimers{}
	hung, started := make(chan struct{}), make(chan struct{}, 3)
	defer close(hung)
	var calls atomic.Int32
	em := dispatch.EmitterFunc(func(ctx context.Context, e ledger.OutboxEntry) (ledger.EmissionResult, error) {
		started <- struct{}{}
		if calls.Add(1) == 1 {
			<-hung // ignores ctx
		}
		return ledger.EmissionResult{ProviderRef: "done"}, nil
	})
	d, err := dispatch.NewDispatcher(store, em, append(baseOptions(clk, timers, newCounter()),
		dispatch.WithConcurrency(1), dispatch.WithEmitTimeout(10*time.Second), dispatch.WithLeaseDuration(time.Minute))...)
	require.NoError(t, err)

	done := runOnceAsync(context.Background(), d)
	receive(t, started, "first emission")
	require.Equal(t, 1, timers.Fire(10*time.Second), "one emit timeout timer")
	res := receive(t, done, "RunOnce")
	require.NoError(t, res.err)
	assert.Equal(t, 1, res.stats.Retried, "the abandoned emission")
	assert.Equal(t, 2, res.stats.Delivered, "the entries after it")
	assert.Equal(t, int32(3), calls.Load())
	assert.Equal(t, ledger.OutboxStatusRetryScheduled, get(t, store, ids[0]).Status)
	for _, id := range ids[1:] {
		assert.Equal(t, ledger.OutboxStatusDelivered, get(t, store, id).Status)
	}
}

func TestEmitTimeoutTimerIsStoppedAfterEmission(t *testing.T) {
	t.Parallel()
	clk := newClock()
	store := newOutbox(clk)
	enqueue(t, store, "k", 3)
	timers := &fakeTimers{}
	d, err := dispatch.NewDispatcher(store, okEmitter(newEmissions()), append(baseOptions(clk, timers, newCounter()),
		dispatch.WithEmitTimeout(10*time.Second))...)
	require.NoError(t, err)
	st, err := d.RunOnce(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 3, st.Delivered)
	assert.Zero(t, timers.Active(10*time.Second))
}

func TestShutdownFinishesInFlightAndReleasesTheRest(t *testing.T) {
	t.Parallel()
	clk := newClock()
	checkShutdownReleases(t, clk, newOutbox(clk))
}

// checkShutdownReleases cancels a Run while its first emission is in
// flight: that emission must finish and the claims not yet started must be
// released, claimable by anyone at once.
func checkShutdownReleases(t *testing.T, clk *testClock, store ledger.ClaimStore) {
	t.Helper()
	ids := enqueue(t, store, "k", 4)
	timers := &fakeTimers{}
	em := newBlockingEmitter(true)
	obs := newCounter()
	d, err := dispatch.NewDispatcher(store, em, append(baseOptions(clk, timers, obs),
		dispatch.WithConcurrency(1), dispatch.WithShutdownTimeout(time.Hour), dispatch.WithPollInterval(time.Second))...)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- d.Run(ctx) }()
	first := receive(t, em.started, "first emission")
	assert.Equal(t, ids[0], first, "oldest first")
	cancel()
	// The emission in flight is not cancelled: it has the shutdown timeout.
	require.Eventually(t, func() bool { return timers.Active(time.Hour) == 1 }, waitLimit, time.Millisecond)
	em.proceed <- struct{}{}
	require.NoError(t, receive(t, runErr, "Run to return"))

	assert.Equal(t, ledger.OutboxStatusDelivered, get(t, store, first).Status)
	assert.Equal(t, 1, obs.Count(dispatch.EventDelivered))
	assert.Equal(t, 3, obs.Count(dispatch.EventReleased))
	assert.Zero(t, timers.Active(time.Hour), "the shutdown timer is stopped")
	for _, id := range ids[1:] {
		e := get(t, store, id)
		assert.Equal(t, ledger.OutboxStatusPending, e.Status)
		assert.Nil(t, e.Claim)
		assert.Zero(t, e.Attempts, "a release gives the attempt back")
	}
	// Released entries are claimable by anyone at once, at the same now.
	claimed, err := store.ClaimPending(context.Background(), ledger.ClaimRequest{
		Worker: "other", Now: clk.Now(), LeaseDuration: time.Minute, Limit: 10,
	})
	require.NoError(t, err)
	assert.Len(t, claimed, 3)
}

// TestShutdownReleasesTheRestBeforeTheEmissionInFlightEnds: the claims
// a cancelled cycle had not started are given back at once, not after
// the emissions in flight, which may take the whole shutdown timeout.
func TestShutdownReleasesTheRestBeforeTheEmissionInFlightEnds(t *testing.T) {
	t.Parallel()
	clk := newClock()
	store := newOutbox(clk)
	enqueue(t, store, "k", 4)
	em := newBlockingEmitter(true)
	obs := newCounter()
	d, err := dispatch.NewDispatcher(store, em, append(baseOptions(clk, &fakeTimers{}, obs),
		dispatch.WithConcurrency(1), dispatch.WithShutdownTimeout(time.Hour))...)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan dispatch.Stats, 1)
	go func() {
		st, _ := d.RunOnce(ctx)
		done <- st
	}()
	receive(t, em.started, "first emission")
	cancel()
	require.Eventually(t, func() bool { return obs.Count(dispatch.EventReleased) == 3 }, waitLimit, time.Millisecond,
		"the three claims not started are released while the first emission runs")
	assert.Zero(t, obs.Count(dispatch.EventDelivered))
	em.proceed <- struct{}{}
	st := receive(t, done, "RunOnce to return")
	assert.Equal(t, 1, st.Delivered)
	assert.Equal(t, 3, st.Released)
}

func TestShutdownDeadlineCancelsInFlightEmissions(t *testing.T) {
	t.Parallel()
	for name, honour := range map[string]bool{"EmitterHonoursContext": true, "EmitterIgnoresContext": false} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			store := newOutbox(clk)
			ids := enqueue(t, store, "k", 1)
			timers := &fakeTimers{}
			em := newBlockingEmitter(honour)
			defer close(em.proceed) // lets an abandoned emitter return
			d, err := dispatch.NewDispatcher(store, em, append(baseOptions(clk, timers, newCounter()),
				dispatch.WithShutdownTimeout(5*time.Second))...)
			require.NoError(t, err)

			ctx, cancel := context.WithCancel(context.Background())
			done := runOnceAsync(ctx, d)
			receive(t, em.started, "emission")
			cancel()
			require.Eventually(t, func() bool { return timers.Fire(5*time.Second) == 1 }, waitLimit, time.Millisecond)
			res := receive(t, done, "RunOnce")
			require.ErrorIs(t, res.err, context.Canceled)
			assert.Equal(t, 1, res.stats.Retried)
			if honour {
				assert.ErrorIs(t, receive(t, em.causes, "cause"), dispatch.ErrShutdown)
			}
			e := get(t, store, ids[0])
			assert.Equal(t, ledger.OutboxStatusRetryScheduled, e.Status)
			require.NotNil(t, e.LastError)
			assert.Equal(t, dispatch.CodeShutdown, e.LastError.Code)
		})
	}
}

func TestLostClaimIsCountedAsLostNotSuccess(t *testing.T) {
	t.Parallel()
	clk := newClock()
	store := newOutbox(clk)
	ids := enqueue(t, store, "k", 1)
	lease := time.Minute

	slow := newBlockingEmitter(false)
	obsA := newCounter()
	a, err := dispatch.NewDispatcher(store, slow, append(baseOptions(clk, &fakeTimers{}, obsA),
		dispatch.WithWorker("a"), dispatch.WithLeaseDuration(lease), dispatch.WithEmitTimeout(30*time.Second))...)
	require.NoError(t, err)
	// b fails transiently, so the entry stays open and a's late completion
	// meets a claim that is no longer its own.
	b, err := dispatch.NewDispatcher(store, dispatch.EmitterFunc(func(context.Context, ledger.OutboxEntry) (ledger.EmissionResult, error) {
		return ledger.EmissionResult{}, errTransient
	}), append(baseOptions(clk, &fakeTimers{}, newCounter()), dispatch.WithWorker("b"))...)
	require.NoError(t, err)

	doneA := runOnceAsync(context.Background(), a)
	receive(t, slow.started, "a's emission")
	clk.Advance(lease) // a's claim has expired: [claimed, expires)
	stB, err := b.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, stB.Claimed, "b takes the expired claim over")
	require.Equal(t, 1, stB.Retried)

	close(slow.proceed) // a's emitter now reports success, too late
	resA := receive(t, doneA, "a's RunOnce")
	require.NoError(t, resA.err)
	assert.Equal(t, 1, resA.stats.Lost)
	assert.Zero(t, resA.stats.Delivered)
	lost := obsA.Events(dispatch.EventLost)
	require.Len(t, lost, 1)
	assert.Equal(t, string(ledger.OutcomeLeaseLost), lost[0].Outcome)
	assert.Equal(t, string(ids[0]), lost[0].EntryID)
	assert.Zero(t, obsA.Count(dispatch.EventDelivered))

	e := get(t, store, ids[0])
	assert.Equal(t, ledger.OutboxStatusRetryScheduled, e.Status, "a's success did not land")
}

func TestCompletionOnEndedEntryIsLost(t *testing.T) {
	t.Parallel()
	clk := newClock()
	store := newOutbox(clk)
	ids := enqueue(t, store, "k", 1)
	slow := newBlockingEmitter(false)
	obs := newCounter()
	a, err := dispatch.NewDispatcher(store, slow, append(baseOptions(clk, &fakeTimers{}, obs), dispatch.WithWorker("a"))...)
	require.NoError(t, err)
	b, err := dispatch.NewDispatcher(store, okEmitter(newEmissions()), append(baseOptions(clk, &fakeTimers{}, newCounter()), dispatch.WithWorker("b"))...)
	require.NoError(t, err)

	doneA := runOnceAsync(context.Background(), a)
	receive(t, slow.started, "a's emission")
	clk.Advance(dispatch.DefaultLeaseDuration)
	stB, err := b.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, stB.Delivered)
	close(slow.proceed)
	resA := receive(t, doneA, "a's RunOnce")
	require.NoError(t, resA.err)
	assert.Equal(t, 1, resA.stats.Lost)
	assert.Zero(t, resA.stats.Delivered)
	lost := obs.Events(dispatch.EventLost)
	require.Len(t, lost, 1)
	assert.Equal(t, string(ledger.OutcomeEnded), lost[0].Outcome)
	assert.Equal(t, ledger.OutboxStatusDelivered, get(t, store, ids[0]).Status)
}

// failingStore fails every completion, to show that a store error is
// reported and never counted as success.
type failingStore struct {
	ledger.ClaimStore
}

var errStore = errors.New("store down")

func (failingStore) MarkClaimDelivered(context.Context, ledger.Claim, ledger.EmissionResult) (ledger.OutboxResult, error) {
	return ledger.OutboxResult{}, errStore
}

func TestCompletionStoreErrorIsReported(t *testing.T) {
	t.Parallel()
	clk := newClock()
	store := newOutbox(clk)
	enqueue(t, store, "k", 2)
	obs := newCounter()
	d, err := dispatch.NewDispatcher(failingStore{store}, okEmitter(newEmissions()), baseOptions(clk, &fakeTimers{}, obs)...)
	require.NoError(t, err)
	st, err := d.RunOnce(context.Background())
	require.ErrorIs(t, err, errStore)
	assert.Equal(t, 2, st.StoreErrors)
	assert.Zero(t, st.Delivered)
	assert.Equal(t, 2, obs.Count(dispatch.EventStoreError))
}
