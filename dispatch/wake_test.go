package dispatch_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger/dispatch"
)

// Created counts every timer ever armed, fired and stopped ones included.
func (ft *fakeTimers) Created(d time.Duration) int {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	n := 0
	for _, t := range ft.timers {
		if t.d == d {
			n++
		}
	}
	return n
}

func TestRunPollsAtOnceOnAWakeUp(t *testing.T) {
	t.Parallel()
	clk := newClock()
	store := newOutbox(clk)
	timers := &fakeTimers{}
	obs := newCounter()
	const interval = 7 * time.Second
	wake := make(chan struct{}, 1)
	d, err := dispatch.NewDispatcher(store, okEmitter(newEmissions()), append(baseOptions(clk, timers, obs),
		dispatch.WithPollInterval(interval), dispatch.WithoutPollJitter(), dispatch.WithWake(wake))...)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- d.Run(ctx) }()
	require.Eventually(t, func() bool { return timers.Active(interval) == 1 }, waitLimit, time.Millisecond)

	// A wake-up ends the wait without the poll timer firing.
	enqueue(t, store, "a", 3)
	wake <- struct{}{}
	require.Eventually(t, func() bool { return obs.Count(dispatch.EventDelivered) == 3 }, waitLimit, time.Millisecond)
	require.Eventually(t, func() bool { return timers.Created(interval) == 2 }, waitLimit, time.Millisecond)
	assert.Equal(t, 1, timers.Active(interval), "the woken wait stopped its timer and the next wait armed one")

	// A closed wake channel leaves the interval as the only trigger: Run
	// neither spins on it nor stops polling.
	close(wake)
	enqueue(t, store, "b", 2)
	assert.Equal(t, 3, obs.Count(dispatch.EventDelivered), "nothing polls before the timer fires")
	require.Equal(t, 1, timers.Fire(interval))
	require.Eventually(t, func() bool { return obs.Count(dispatch.EventDelivered) == 5 }, waitLimit, time.Millisecond)
	require.Eventually(t, func() bool { return timers.Active(interval) == 1 }, waitLimit, time.Millisecond)
	assert.Equal(t, 3, timers.Created(interval), "one wait per cycle: the closed channel did not end any")

	cancel()
	require.NoError(t, receive(t, runErr, "Run to return"))
	assert.Zero(t, timers.Active(interval), "the poll timer is stopped")
}

func TestWorkerRunPollsAtOnceOnAWakeUp(t *testing.T) {
	t.Parallel()
	clk := newClock()
	l := newLedger(clk)
	timers := &fakeTimers{}
	obs := newCounter()
	const interval = 7 * time.Second
	wake := make(chan struct{}, 1)
	w := newWorker(t, l, "agent", answer(newHandlerCalls(), dispatch.Processed("act"), nil), append(workerOptions(clk, timers, obs),
		dispatch.WithPollInterval(interval), dispatch.WithoutPollJitter(), dispatch.WithWake(wake))...)

	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- w.Run(ctx) }()
	require.Eventually(t, func() bool { return timers.Active(interval) == 1 }, waitLimit, time.Millisecond)

	offer(t, l, clk, "host", 3)
	wake <- struct{}{}
	require.Eventually(t, func() bool { return obs.Count(dispatch.EventProcessed) == 3 }, waitLimit, time.Millisecond)
	require.Eventually(t, func() bool { return timers.Created(interval) == 2 }, waitLimit, time.Millisecond)
	assert.Equal(t, 1, timers.Active(interval))

	cancel()
	require.NoError(t, receive(t, runErr, "Run to return"))
	assert.Zero(t, timers.Active(interval))
}
