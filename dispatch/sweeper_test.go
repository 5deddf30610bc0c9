package dispatch_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/dispatch"
	"github.com/leaseledger/ledger/memstore"
)

const sweepEvery = dispatch.DefaultSweepInterval

// isSweepWait matches the sweep interval's timer, jitter included.
func isSweepWait(d time.Duration) bool { return d >= sweepEvery && d < sweepEvery+sweepEvery/10 }

func sweeperOptions(clk *testClock, timers *fakeTimers, obs dispatch.Observer, holder string) []dispatch.SweeperOption {
	return []dispatch.SweeperOption{
		dispatch.WithClock(clk.Now),
		dispatch.WithAfterFunc(timers.AfterFunc),
		dispatch.WithObserver(obs),
		dispatch.WithLogger(discardLogger()),
		dispatch.WithHolder(holder),
	}
}

func newSweeper(t *testing.T, l ledger.Ledger, o ledger.OutboxStore, opts ...dispatch.SweeperOption) *dispatch.Sweeper {
	t.Helper()
	s, err := dispatch.NewSweeper(l, o, opts...)
	require.NoError(t, err)
	return s
}

func sweepOnce(t *testing.T, s *dispatch.Sweeper) dispatch.SweepStats {
	t.Helper()
	st, err := s.RunOnce(context.Background())
	require.NoError(t, err)
	return st
}

// leaseAndAck leases id for owner and acknowledges it at clk's now.
func leaseAndAck(t *testing.T, l ledger.Ledger, clk *testClock, owner ledger.Owner, id ledger.DeliveryID) {
	t.Helper()
	ctx := context.Background()
	res, err := l.Lease(ctx, ledger.LeaseFilter{}, owner, clk.Now(), time.Minute, 1)
	require.NoError(t, err)
	require.Len(t, res.Leased, 1)
	require.Equal(t, id, res.Leased[0].Delivery.ID)
	ack, err := l.Acknowledge(ctx, res.Leased[0].Lease, "", clk.Now())
	require.NoError(t, err)
	require.True(t, ack.Applied())
}

func TestNewSweeperRejectsBadConfiguration(t *testing.T) {
	t.Parallel()
	l := memstore.New()
	for name, mk := range map[string]func() (*dispatch.Sweeper, error){
		"NothingToSweep": func() (*dispatch.Sweeper, error) { return dispatch.NewSweeper(nil, nil) },
		"OutboxWithoutRetention": func() (*dispatch.Sweeper, error) {
			return dispatch.NewSweeper(nil, l.Outbox())
		},
		"RetentionOfALedgerThatCannotPurge": func() (*dispatch.Sweeper, error) {
			return dispatch.NewSweeper(plainLedger{l}, nil, dispatch.WithRetention(time.Hour))
		},
		"ZeroRetention": func() (*dispatch.Sweeper, error) { return dispatch.NewSweeper(l, nil, dispatch.WithRetention(0)) },
		"NegativeRetention": func() (*dispatch.Sweeper, error) {
			return dispatch.NewSweeper(l, nil, dispatch.WithRetention(-time.Hour))
		},
		"HugeRetention": func() (*dispatch.Sweeper, error) {
			return dispatch.NewSweeper(l, nil, dispatch.WithRetention(dispatch.MaxRetention+time.Hour))
		},
		"ZeroInterval": func() (*dispatch.Sweeper, error) { return dispatch.NewSweeper(l, nil, dispatch.WithSweepInterval(0)) },
		"HugeInterval": func() (*dispatch.Sweeper, error) {
			return dispatch.NewSweeper(l, nil, dispatch.WithSweepInterval(48*time.Hour))
		},
		"ZeroBatch":    func() (*dispatch.Sweeper, error) { return dispatch.NewSweeper(l, nil, dispatch.WithPurgeBatchSize(0)) },
		"EmptyHolder":  func() (*dispatch.Sweeper, error) { return dispatch.NewSweeper(l, nil, dispatch.WithHolder("")) },
		"NilClock":     func() (*dispatch.Sweeper, error) { return dispatch.NewSweeper(l, nil, dispatch.WithClock(nil)) },
		"NilLogger":    func() (*dispatch.Sweeper, error) { return dispatch.NewSweeper(l, nil, dispatch.WithLogger(nil)) },
		"NilAfterFunc": func() (*dispatch.Sweeper, error) { return dispatch.NewSweeper(l, nil, dispatch.WithAfterFunc(nil)) },
		"NilObserver":  func() (*dispatch.Sweeper, error) { return dispatch.NewSweeper(l, nil, dispatch.WithObserver(nil)) },
		"DispatcherSweeperWithoutRetention": func() (*dispatch.Sweeper, error) {
			_, err := dispatch.NewDispatcher(l.Outbox(), dispatch.EmitterFunc(nil), dispatch.WithSweeper())
			return nil, err
		},
		"WorkerSweeperWithBadInterval": func() (*dispatch.Sweeper, error) {
			_, err := dispatch.NewWorker(l, "a", nil, answer(newHandlerCalls(), dispatch.Decision{}, nil),
				dispatch.WithSweeper(dispatch.WithSweepInterval(-1)))
			return nil, err
		},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := mk()
			require.ErrorIs(t, err, ledger.ErrInvalid)
			assert.Nil(t, s)
		})
	}
	s, err := dispatch.NewSweeper(nil, l.Outbox(), dispatch.WithRetention(time.Hour))
	require.NoError(t, err, "an outbox alone sweeps with retention")
	assert.NotEmpty(t, s.Holder(), "a default holder name")
}

func TestSweeperEndsLapsedWork(t *testing.T) {
	t.Parallel()
	clk := newClock()
	l := newLedger(clk) // workerPolicy: 3 attempts, a 5-minute acknowledgement window
	ctx := context.Background()
	obs := newCounter()
	s := newSweeper(t, l, nil, sweeperOptions(clk, &fakeTimers{}, obs, "sweeper-1")...)
	ids := offer(t, l, clk, "host", 2)
	owner := ledger.Owner{Agent: "host", Incarnation: "boot-1"}
	// ids[0]: acknowledged and never processed (a fence rejected, a
	// handler that died after the acknowledgement).
	leaseAndAck(t, l, clk, owner, ids[0])
	// ids[1]: leased once per attempt and never completed; its holders died.
	for range workerPolicy.MaxAttempts {
		res, err := l.Lease(ctx, ledger.LeaseFilter{}, owner, clk.Now(), time.Minute, 1)
		require.NoError(t, err)
		require.Len(t, res.Leased, 1)
		clk.Advance(time.Minute)
	}
	// The last lease ran out with the attempts used up; the
	// acknowledgement window is still open.
	assert.Equal(t, dispatch.SweepStats{Expired: 1, Done: 1}, sweepOnce(t, s))
	assert.Equal(t, ledger.DeliveryStateFailed, getDelivery(t, l, ids[1]).State, "attempts used up")
	assert.Equal(t, ledger.DeliveryStateAcknowledged, getDelivery(t, l, ids[0]).State)
	clk.Advance(5 * time.Minute)
	assert.Equal(t, dispatch.SweepStats{Expired: 1, Done: 1}, sweepOnce(t, s))
	d := getDelivery(t, l, ids[0])
	assert.Equal(t, ledger.DeliveryStateExpired, d.State)
	assert.Equal(t, ledger.CauseAcknowledgementLapsed, d.Cause.Kind)
	swept := obs.Events(dispatch.EventSwept)
	require.Len(t, swept, 2)
	assert.Equal(t, dispatch.SweepExpire, swept[1].Job)
	assert.Equal(t, 1, swept[1].Count)
	assert.Equal(t, dispatch.SweepStats{Done: 1}, sweepOnce(t, s), "nothing left")
}

func TestSweeperRetentionPurgesInBatchesAndNeverOpenWork(t *testing.T) {
	t.Parallel()
	clk := newClock()
	l := newLedger(clk)
	outbox := l.Outbox()
	ctx := context.Background()
	owner := ledger.Owner{Agent: "host", Incarnation: "boot-1"}
	ids := offer(t, l, clk, "host", 5)
	// Four end now (Released then Failed for good), one stays open.
	for range 4 {
		res, err := l.Lease(ctx, ledger.LeaseFilter{}, owner, clk.Now(), time.Minute, 1)
		require.NoError(t, err)
		f, err := l.MarkFailed(ctx, res.Leased[0].Lease, ledger.FailureReason{Message: "gone", Permanent: true}, clk.Now())
		require.NoError(t, err)
		require.True(t, f.Applied())
	}
	entries := enqueue(t, outbox, "old", 3)
	for range 3 {
		cl, err := outbox.ClaimPending(ctx, ledger.ClaimRequest{Worker: "w", Now: clk.Now(), LeaseDuration: time.Minute, Limit: 1})
		require.NoError(t, err)
		_, err = outbox.MarkClaimDelivered(ctx, cl[0].Claim, ledger.EmissionResult{})
		require.NoError(t, err)
	}
	s := newSweeper(t, l, outbox, append(sweeperOptions(clk, &fakeTimers{}, newCounter(), "sweeper-1"),
		dispatch.WithRetention(24*time.Hour), dispatch.WithPurgeBatchSize(3))...)

	assert.Equal(t, dispatch.SweepStats{Done: 3}, sweepOnce(t, s), "nothing ended a day ago yet")
	clk.Advance(24*time.Hour + time.Second)
	assert.Equal(t, dispatch.SweepStats{PurgedDeliveries: 4, PurgedEntries: 3, Done: 3}, sweepOnce(t, s),
		"in calls of three, until one deletes less")
	for _, id := range ids[:4] {
		_, err := l.Get(ctx, id)
		require.ErrorIs(t, err, ledger.ErrNotFound)
	}
	assert.Equal(t, ledger.DeliveryStateOffered, getDelivery(t, l, ids[4]).State, "open work is never purged")
	for _, id := range entries {
		_, err := outbox.FindByID(ctx, id)
		require.ErrorIs(t, err, ledger.ErrNotFound)
	}
}

// TestSweepersTakeTurns runs two sweepers over one memstore: one does
// each job at a time; when it dies the other takes over once its lead
// lapses, and when it stops cleanly, at once.
func TestSweepersTakeTurns(t *testing.T) {
	t.Parallel()
	clk := newClock()
	l := newLedger(clk)
	obs := newCounter()
	a := newSweeper(t, l, nil, sweeperOptions(clk, &fakeTimers{}, obs, "sweeper-a")...)
	b := newSweeper(t, l, nil, sweeperOptions(clk, &fakeTimers{}, newCounter(), "sweeper-b")...)

	assert.Equal(t, dispatch.SweepStats{Done: 1}, sweepOnce(t, a))
	assert.Equal(t, dispatch.SweepStats{Skipped: 1}, sweepOnce(t, b), "a leads")
	lead, err := l.GetLead(context.Background(), string(dispatch.SweepExpire))
	require.NoError(t, err)
	assert.Equal(t, "sweeper-a", lead.Holder)

	// Sweep after sweep, a renews and b waits.
	for range 5 {
		clk.Advance(sweepEvery)
		assert.Equal(t, 1, sweepOnce(t, a).Done)
		assert.Equal(t, 1, sweepOnce(t, b).Skipped)
	}
	// a dies: it sweeps no more and never gives its lead up. b takes the
	// job over once the lead lapses, three intervals after a's last
	// renewal, and ends what lapses afterwards: no sweep is lost.
	ids := offer(t, l, clk, "host", 1)
	leaseAndAck(t, l, clk, ledger.Owner{Agent: "host", Incarnation: "boot-1"}, ids[0])
	clk.Advance(2 * sweepEvery)
	assert.Equal(t, 1, sweepOnce(t, b).Skipped, "a's lead still holds")
	clk.Advance(sweepEvery)
	assert.Equal(t, dispatch.SweepStats{Done: 1}, sweepOnce(t, b), "taken over as a's lead lapses")
	clk.Advance(workerPolicy.AckWindow)
	assert.Equal(t, dispatch.SweepStats{Done: 1, Expired: 1}, sweepOnce(t, b))
	assert.Equal(t, ledger.DeliveryStateExpired, getDelivery(t, l, ids[0]).State)
	// a comes back from its stall: its term is over.
	assert.Equal(t, 1, sweepOnce(t, a).Skipped)
	assert.Equal(t, 1, obs.Count(dispatch.EventLeadLost), "a saw it lost the lead")
}

func TestSweeperRunSweepsAtOnceThenEveryIntervalAndGivesItsLeadUp(t *testing.T) {
	t.Parallel()
	clk := newClock()
	l := newLedger(clk)
	timers := &fakeTimers{}
	obs := newCounter()
	a := newSweeper(t, l, nil, sweeperOptions(clk, timers, obs, "sweeper-a")...)
	b := newSweeper(t, l, nil, sweeperOptions(clk, &fakeTimers{}, newCounter(), "sweeper-b")...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	require.Eventually(t, func() bool { return len(timers.ActiveWhere(isSweepWait)) == 1 }, waitLimit, time.Millisecond,
		"the first sweep runs at once, then Run waits an interval")
	assert.Equal(t, 1, obs.Count(dispatch.EventSwept))
	require.NoError(t, a.Ready(context.Background()))
	clk.Advance(sweepEvery)
	require.Equal(t, 1, timers.FireWhere(isSweepWait))
	require.Eventually(t, func() bool { return obs.Count(dispatch.EventSwept) == 2 }, waitLimit, time.Millisecond)
	assert.Equal(t, 1, sweepOnce(t, b).Skipped)

	cancel()
	require.NoError(t, receive(t, done, "Run"))
	require.ErrorIs(t, a.Ready(context.Background()), dispatch.ErrNotReady, "Run has returned")
	lead, err := l.GetLead(context.Background(), string(dispatch.SweepExpire))
	require.NoError(t, err)
	assert.False(t, lead.HeldAt(clk.Now()), "given up as Run returned")
	assert.Equal(t, 1, sweepOnce(t, b).Done, "another sweeper takes over at once")
}

// TestSweeperWithoutLeadsSweepsEveryTime: over a ledger that keeps no
// leads, or with WithoutLeadership, every sweeper does every job.
func TestSweeperWithoutLeadsSweepsEveryTime(t *testing.T) {
	t.Parallel()
	clk := newClock()
	l := plainLedger{newLedger(clk)}
	a := newSweeper(t, l, nil, sweeperOptions(clk, &fakeTimers{}, newCounter(), "a")...)
	b := newSweeper(t, l, nil, sweeperOptions(clk, &fakeTimers{}, newCounter(), "b")...)
	assert.Equal(t, dispatch.SweepStats{Done: 1}, sweepOnce(t, a))
	assert.Equal(t, dispatch.SweepStats{Done: 1}, sweepOnce(t, b))

	// Nor over one that does, when told so.
	m := newLedger(clk)
	c := newSweeper(t, m, nil, append(sweeperOptions(clk, &fakeTimers{}, newCounter(), "c"), dispatch.WithoutLeadership())...)
	d := newSweeper(t, m, nil, append(sweeperOptions(clk, &fakeTimers{}, newCounter(), "d"), dispatch.WithoutLeadership())...)
	assert.Equal(t, dispatch.SweepStats{Done: 1}, sweepOnce(t, c))
	assert.Equal(t, dispatch.SweepStats{Done: 1}, sweepOnce(t, d))
	_, err := m.GetLead(context.Background(), string(dispatch.SweepExpire))
	require.ErrorIs(t, err, ledger.ErrNotFound, "no lead was taken")
}

// TestWorkerSweepsItsOwnLapsedWork: a Worker with nothing but its handler
// ends the deliveries it leaves behind: the one whose fence was rejected
// and one whose holder died with its attempts used up.
func TestWorkerSweepsItsOwnLapsedWork(t *testing.T) {
	t.Parallel()
	clk := newClock()
	workerSweepsItsOwnLapsedWork(t, clk, newLedger(clk))
}

// electingLedger is a ledger that keeps sweepers' leads, as both stores do.
type electingLedger interface {
	ledger.Ledger
	ledger.Elector
}

func workerSweepsItsOwnLapsedWork(t *testing.T, clk *testClock, l electingLedger) {
	ctx := context.Background()
	// A newer integrator epoch already wrote for the target: the Worker's
	// fence is rejected and its delivery ends at once.
	_, err := l.Enqueue(ctx, ledger.EnqueueRequest{ID: "fence-setter", Target: "host"}, clk.Now())
	require.NoError(t, err)
	leaseAndAck(t, l, clk, ledger.Owner{Agent: "integrator", Incarnation: "1"}, "fence-setter")
	done, err := l.MarkProcessed(ctx, "fence-setter", ledger.Owner{Agent: "integrator", Incarnation: "1"}, ledger.FenceOf(9), "x", clk.Now())
	require.NoError(t, err)
	require.True(t, done.Applied())
	ids := offer(t, l, clk, "host", 1)
	// crashed was leased by an agent that died, for the last of its
	// attempts, and its lease ran out.
	crashed := offer(t, l, clk, "other", 1)[0]
	for range workerPolicy.MaxAttempts {
		res, err := l.Lease(ctx, ledger.LeaseFilter{Targets: []ledger.Target{"other"}}, ledger.Owner{Agent: "old", Incarnation: "1"}, clk.Now(), time.Minute, 1)
		require.NoError(t, err)
		require.Len(t, res.Leased, 1)
		clk.Advance(time.Minute)
	}

	timers := &fakeTimers{}
	obs := newCounter()
	w := newWorker(t, l, "agent", answer(newHandlerCalls(), dispatch.Decision{Fence: ledger.FenceOf(1)}, nil),
		append(workerOptions(clk, timers, obs), dispatch.WithoutPollJitter())...)
	runCtx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- w.Run(runCtx) }()
	require.Eventually(t, func() bool { return obs.Count(dispatch.EventFenceRejected) == 1 }, waitLimit, time.Millisecond)
	// The refused delivery ended at once, with its own cause: nothing of
	// it is left for the sweeper.
	require.Eventually(t, func() bool {
		return getDelivery(t, l, ids[0]).State == ledger.DeliveryStateExpired
	}, waitLimit, time.Millisecond)
	assert.Equal(t, ledger.CauseFenceRejected, getDelivery(t, l, ids[0]).Cause.Kind)

	// Past the lease, the Worker's own sweeper ends the crashed one.
	clk.Advance(workerPolicy.AckWindow)
	require.Eventually(t, func() bool { return timers.FireWhere(isSweepWait) == 1 }, waitLimit, time.Millisecond)
	require.Eventually(t, func() bool {
		return getDelivery(t, l, crashed).State == ledger.DeliveryStateFailed
	}, waitLimit, time.Millisecond)
	lead, err := l.GetLead(ctx, string(dispatch.SweepExpire))
	require.NoError(t, err)
	assert.Equal(t, w.Owner().String(), lead.Holder, "the sweeper is named after its Worker")

	cancel()
	require.NoError(t, receive(t, runErr, "Run"))
	assert.Zero(t, len(timers.ActiveWhere(isSweepWait)), "the sweeper stopped with Run")
}

func TestWorkerWithoutSweeperLeavesLapsedWorkAlone(t *testing.T) {
	t.Parallel()
	clk := newClock()
	l := newLedger(clk)
	ids := offer(t, l, clk, "host", 1)
	leaseAndAck(t, l, clk, ledger.Owner{Agent: "host", Incarnation: "1"}, ids[0])
	clk.Advance(workerPolicy.AckWindow)
	timers := &fakeTimers{}
	w := newWorker(t, l, "agent", answer(newHandlerCalls(), dispatch.Decision{}, nil),
		append(workerOptions(clk, timers, newCounter()), dispatch.WithoutSweeper(), dispatch.WithPollInterval(time.Hour), dispatch.WithoutPollJitter())...)
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- w.Run(ctx) }()
	require.Eventually(t, func() bool { return timers.Active(time.Hour) == 1 }, waitLimit, time.Millisecond)
	cancel()
	require.NoError(t, receive(t, runErr, "Run"))
	assert.Equal(t, ledger.DeliveryStateAcknowledged, getDelivery(t, l, ids[0]).State, "another process sweeps")
	_, err := l.GetLead(context.Background(), string(dispatch.SweepExpire))
	require.ErrorIs(t, err, ledger.ErrNotFound)
}

func TestDispatcherSweeperPurgesTheOutbox(t *testing.T) {
	t.Parallel()
	clk := newClock()
	store := newOutbox(clk)
	ids := enqueue(t, store, "e", 2)
	timers := &fakeTimers{}
	obs := newCounter()
	em := dispatch.EmitterFunc(func(ctx context.Context, e ledger.OutboxEntry) (ledger.EmissionResult, error) {
		return ledger.EmissionResult{ProviderRef: "ok"}, nil
	})
	d, err := dispatch.NewDispatcher(store, em, append(baseOptions(clk, timers, obs),
		dispatch.WithPollInterval(time.Hour), dispatch.WithoutPollJitter(),
		dispatch.WithSweeper(dispatch.WithRetention(time.Hour)))...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- d.Run(ctx) }()
	require.Eventually(t, func() bool { return obs.Count(dispatch.EventDelivered) == 2 }, waitLimit, time.Millisecond)
	require.Eventually(t, func() bool { return len(timers.ActiveWhere(isSweepWait)) == 1 }, waitLimit, time.Millisecond)
	clk.Advance(time.Hour + time.Second)
	require.Equal(t, 1, timers.FireWhere(isSweepWait))
	require.Eventually(t, func() bool {
		for _, ev := range obs.Events(dispatch.EventSwept) {
			if ev.Job == dispatch.SweepPurgeEntries && ev.Count == 2 {
				return true
			}
		}
		return false
	}, waitLimit, time.Millisecond)
	for _, id := range ids {
		_, err := store.FindByID(context.Background(), id)
		require.ErrorIs(t, err, ledger.ErrNotFound)
	}
	cancel()
	require.NoError(t, receive(t, runErr, "Run"))
}
