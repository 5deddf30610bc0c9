package dispatch_test

// The Worker's shutdown, heartbeat and polling.

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/dispatch"
)

func TestWorkerShutdownFinishesInFlightAndReleasesTheRest(t *testing.T) {
	t.Parallel()
	clk := newClock()
	l := newLedger(clk)
	ids := offer(t, l, clk, "host", 4)
	timers := &fakeTimers{}
	h := newBlockingHandler()
	obs := newCounter()
	w := newWorker(t, l, "agent", h, append(workerOptions(clk, timers, obs),
		dispatch.WithConcurrency(1), dispatch.WithBatchSize(4), dispatch.WithShutdownTimeout(time.Hour))...)

	ctx, cancel := context.WithCancel(context.Background())
	done := runWorkerAsync(ctx, w)
	assert.Equal(t, ids[0], receive(t, h.started, "first handler"), "oldest first")
	cancel()
	// The handler in flight is not cancelled: it has the shutdown timeout.
	require.Eventually(t, func() bool { return timers.Active(time.Hour) == 1 }, waitLimit, time.Millisecond)
	h.proceed <- struct{}{}
	res := receive(t, done, "RunOnce")
	require.ErrorIs(t, res.err, context.Canceled)
	assert.Equal(t, 4, res.stats.Leased)
	assert.Equal(t, 1, res.stats.Processed)
	assert.Equal(t, 3, res.stats.Released)
	assert.Zero(t, timers.Active(time.Hour), "the shutdown timer is stopped")
	assert.Equal(t, ledger.DeliveryStateProcessed, getDelivery(t, l, ids[0]).State)
	for _, id := range ids[1:] {
		d := getDelivery(t, l, id)
		assert.Equal(t, ledger.DeliveryStateOffered, d.State)
		assert.Zero(t, d.Attempts, "released leases give the attempt back")
	}
}

func TestWorkerShutdownDeadlineCancelsTheHandler(t *testing.T) {
	t.Parallel()
	clk := newClock()
	l := newLedger(clk)
	ids := offer(t, l, clk, "host", 1)
	timers := &fakeTimers{}
	h := newBlockingHandler()
	w := newWorker(t, l, "agent", h, append(workerOptions(clk, timers, newCounter()),
		dispatch.WithShutdownTimeout(time.Hour))...)
	ctx, cancel := context.WithCancel(context.Background())
	done := runWorkerAsync(ctx, w)
	receive(t, h.started, "handler")
	cancel()
	require.Eventually(t, func() bool { return timers.Fire(time.Hour) == 1 }, waitLimit, time.Millisecond)
	assert.ErrorIs(t, receive(t, h.causes, "cancellation"), dispatch.ErrShutdown)
	res := receive(t, done, "RunOnce")
	require.ErrorIs(t, res.err, context.Canceled)
	assert.Equal(t, 1, res.stats.Retried, "recorded with a detached context")
	d := getDelivery(t, l, ids[0])
	assert.Equal(t, ledger.DeliveryStateOffered, d.State)
}

func TestWorkerHeartbeatKeepsALongHandlersLease(t *testing.T) {
	t.Parallel()
	clk := newClock()
	l := newLedger(clk)
	ids := offer(t, l, clk, "host", 1)
	timers := &fakeTimers{}
	h := newBlockingHandler()
	obs := newCounter()
	const lease = 90 * time.Second
	const every = lease / 3
	w := newWorker(t, l, "agent", h, append(workerOptions(clk, timers, obs),
		dispatch.WithLeaseDuration(lease), dispatch.WithHandleTimeout(time.Hour))...)

	done := runWorkerAsync(context.Background(), w)
	receive(t, h.started, "handler")
	// Run well past the original lease, renewing every third of it.
	for i := 1; i <= 4; i++ {
		require.Equal(t, 1, timers.Active(every), "renewal %d scheduled", i)
		clk.Advance(every)
		require.Equal(t, 1, timers.Fire(every))
		d := getDelivery(t, l, ids[0])
		require.NotNil(t, d.Lease)
		assert.Equal(t, clk.Now().Add(lease), d.Lease.ExpiresAt, "renewal %d moved the expiry", i)
	}
	h.proceed <- struct{}{}
	res := receive(t, done, "RunOnce")
	require.NoError(t, res.err)
	assert.Equal(t, 4, res.stats.Renewed)
	assert.Equal(t, 1, res.stats.Processed, "acknowledged on the renewed lease")
	assert.Zero(t, timers.Active(every), "no renewal after the handler ended")
	assert.Equal(t, ledger.DeliveryStateProcessed, getDelivery(t, l, ids[0]).State)
}

func TestWorkerLostRenewalCancelsTheHandler(t *testing.T) {
	t.Parallel()
	clk := newClock()
	l := newLedger(clk)
	ids := offer(t, l, clk, "host", 1)
	timers := &fakeTimers{}
	h := newBlockingHandler()
	obs := newCounter()
	const lease = 90 * time.Second
	const every = lease / 3
	w := newWorker(t, l, "agent", h, append(workerOptions(clk, timers, obs),
		dispatch.WithLeaseDuration(lease), dispatch.WithHandleTimeout(time.Hour))...)

	done := runWorkerAsync(context.Background(), w)
	receive(t, h.started, "handler")
	// The delivery ends under the handler (for example its ceremony
	// ended): the next renewal answers Ended.
	r, err := l.Abandon(context.Background(), ids[0], ledger.Cause{Kind: ledger.CauseCeremonyEnded}, clk.Now())
	require.NoError(t, err)
	require.True(t, r.Applied())
	clk.Advance(every)
	require.Equal(t, 1, timers.Fire(every))
	assert.ErrorIs(t, receive(t, h.causes, "cancellation"), dispatch.ErrLeaseLost)
	res := receive(t, done, "RunOnce")
	require.NoError(t, res.err)
	assert.Equal(t, 1, obs.Count(dispatch.EventRenewLost))
	assert.Equal(t, 1, res.stats.Lost, "the failure does not apply to an ended delivery")
	assert.Zero(t, res.stats.Retried)
	assert.Zero(t, timers.Active(every))
	assert.Equal(t, ledger.DeliveryStateExpired, getDelivery(t, l, ids[0]).State)
}

func TestWorkerRunPollsOnTheInjectedTimer(t *testing.T) {
	t.Parallel()
	clk := newClock()
	l := newLedger(clk)
	timers := &fakeTimers{}
	obs := newCounter()
	const interval = 7 * time.Second
	w := newWorker(t, l, "agent", answer(newHandlerCalls(), dispatch.Processed("act"), nil), append(workerOptions(clk, timers, obs),
		dispatch.WithPollInterval(interval), dispatch.WithoutPollJitter())...)

	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- w.Run(ctx) }()
	require.Eventually(t, func() bool { return timers.Active(interval) == 1 }, waitLimit, time.Millisecond)
	ids := offer(t, l, clk, "host", 3)
	require.Equal(t, 1, timers.Fire(interval))
	require.Eventually(t, func() bool { return timers.Active(interval) == 1 }, waitLimit, time.Millisecond)
	assert.Equal(t, 3, obs.Count(dispatch.EventProcessed))
	for _, id := range ids {
		assert.Equal(t, ledger.DeliveryStateProcessed, getDelivery(t, l, id).State)
	}
	cancel()
	require.NoError(t, receive(t, runErr, "Run to return"))
	assert.Zero(t, timers.Active(interval), "the poll timer is stopped")
}
