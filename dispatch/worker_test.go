package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/dispatch"
	"github.com/leaseledger/ledger/memstore"
	"github.com/leaseledger/ledger/storekit"
)

// workerPolicy is the default policy of every test ledger.
var workerPolicy = ledger.Policy{MaxAttempts: 3, BackoffBase: time.Second, BackoffMax: time.Minute, AckWindow: 5 * time.Minute}

func newLedger(clk *testClock) *memstore.Store {
	return memstore.New(memstore.WithClock(clk.Now), memstore.WithDefaultPolicy(workerPolicy))
}

// plainLedger hides memstore's RenewLease: a ledger without heartbeats.
type plainLedger struct{ ledger.Ledger }

// offer enqueues n deliveries for target and returns their IDs.
func offer(t *testing.T, l ledger.Ledger, clk *testClock, target ledger.Target, n int) []ledger.DeliveryID {
	t.Helper()
	ids := make([]ledger.DeliveryID, n)
	for i := range n {
		ids[i] = ledger.DeliveryID(fmt.Sprintf("%s-%04d", target, i))
		r, err := l.Enqueue(context.Background(), ledger.EnqueueRequest{ID: ids[i], Target: target, Payload: []byte("p")}, clk.Now())
		require.NoError(t, err)
		require.True(t, r.Applied())
	}
	return ids
}

func getDelivery(t *testing.T, l ledger.Ledger, id ledger.DeliveryID) ledger.Delivery {
	t.Helper()
	d, err := l.Get(context.Background(), id)
	require.NoError(t, err)
	return d
}

func workerOptions(clk *testClock, timers *fakeTimers, obs dispatch.Observer) []dispatch.WorkerOption {
	return []dispatch.WorkerOption{
		dispatch.WithClock(clk.Now),
		dispatch.WithAfterFunc(timers.AfterFunc),
		dispatch.WithObserver(obs),
		dispatch.WithLogger(discardLogger()),
	}
}

func newWorker(t *testing.T, l ledger.Ledger, agent string, h dispatch.Handler, opts ...dispatch.WorkerOption) *dispatch.Worker {
	t.Helper()
	w, err := dispatch.NewWorker(l, agent, nil, h, opts...)
	require.NoError(t, err)
	return w
}

// handlerCalls counts Handle calls per delivery.
type handlerCalls struct {
	mu sync.Mutex
	n  map[ledger.DeliveryID]int
}

func newHandlerCalls() *handlerCalls { return &handlerCalls{n: make(map[ledger.DeliveryID]int)} }

func (h *handlerCalls) add(id ledger.DeliveryID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n[id]++
}

func (h *handlerCalls) get(id ledger.DeliveryID) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[id]
}

// answer returns a handler that counts its calls and answers dec, err.
func answer(calls *handlerCalls, dec dispatch.Decision, err error) dispatch.HandlerFunc {
	return func(_ context.Context, d ledger.Delivery) (dispatch.Decision, error) {
		calls.add(d.ID)
		return dec, err
	}
}

// blockingHandler signals started with each delivery it receives and then
// waits for proceed or for ctx to end.
type blockingHandler struct {
	started chan ledger.DeliveryID
	proceed chan struct{}
	causes  chan error
}

func newBlockingHandler() *blockingHandler {
	return &blockingHandler{
		started: make(chan ledger.DeliveryID, 100),
		proceed: make(chan struct{}),
		causes:  make(chan error, 100),
	}
}

func (b *blockingHandler) Handle(ctx context.Context, d ledger.Delivery) (dispatch.Decision, error) {
	b.started <- d.ID
	select {
	case <-b.proceed:
		return dispatch.Processed("done"), nil
	case <-ctx.Done():
		b.causes <- context.Cause(ctx)
		return dispatch.Decision{}, ctx.Err()
	}
}

type workerResult struct {
	stats dispatch.WorkerStats
	err   error
}

func runWorkerAsync(ctx context.Context, w *dispatch.Worker) <-chan workerResult {
	out := make(chan workerResult, 1)
	go func() {
		st, err := w.RunOnce(ctx)
		out <- workerResult{st, err}
	}()
	return out
}

func TestNewWorkerRejectsBadArguments(t *testing.T) {
	t.Parallel()
	clk := newClock()
	l := newLedger(clk)
	h := answer(newHandlerCalls(), dispatch.Decision{}, nil)
	cases := map[string]func() (*dispatch.Worker, error){
		"NilLedger":  func() (*dispatch.Worker, error) { return dispatch.NewWorker(nil, "a", nil, h) },
		"NilHandler": func() (*dispatch.Worker, error) { return dispatch.NewWorker(l, "a", nil, nil) },
		"EmptyAgent": func() (*dispatch.Worker, error) { return dispatch.NewWorker(l, "", nil, h) },
		"BadTarget":  func() (*dispatch.Worker, error) { return dispatch.NewWorker(l, "a", []ledger.Target{""}, h) },
		"HandleTimeoutNotUnderLeaseWithoutRenewer": func() (*dispatch.Worker, error) {
			return dispatch.NewWorker(plainLedger{l}, "a", nil, h, dispatch.WithHandleTimeout(time.Minute), dispatch.WithLeaseDuration(time.Minute))
		},
		"ZeroConcurrency": func() (*dispatch.Worker, error) {
			return dispatch.NewWorker(l, "a", nil, h, dispatch.WithConcurrency(0))
		},
		"BadCeremony": func() (*dispatch.Worker, error) {
			return dispatch.NewWorker(l, "a", nil, h, dispatch.WithCeremony("bad\x00"))
		},
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w, err := mk()
			require.ErrorIs(t, err, ledger.ErrInvalid)
			assert.Nil(t, w)
		})
	}
	// With a Renewer the lease is renewed, so a long timeout is fine.
	_, err := dispatch.NewWorker(l, "a", nil, h, dispatch.WithHandleTimeout(time.Hour), dispatch.WithLeaseDuration(time.Minute))
	require.NoError(t, err)
}

func TestWorkerEveryDeliveryProcessedOnceAcrossAgents(t *testing.T) {
	t.Parallel()
	clk := newClock()
	checkProcessedOnceAcrossAgents(t, clk, newLedger(clk), "agent-1", "agent-2", "agent-3", "agent-4")
}

// checkProcessedOnceAcrossAgents offers 60 deliveries on l and runs one
// worker per agent over them concurrently: without faults each delivery
// must be handled and processed exactly once.
func checkProcessedOnceAcrossAgents(t *testing.T, clk *testClock, l ledger.Ledger, agents ...string) {
	t.Helper()
	var ids []ledger.DeliveryID
	for _, target := range []ledger.Target{"host-a", "host-b", "host-c"} {
		ids = append(ids, offer(t, l, clk, target, 20)...)
	}
	calls := newHandlerCalls()
	obs := newCounter()
	timers := &fakeTimers{}
	var workers []*dispatch.Worker
	for _, agent := range agents {
		h := dispatch.HandlerFunc(func(_ context.Context, d ledger.Delivery) (dispatch.Decision, error) {
			calls.add(d.ID)
			return dispatch.Processed(ledger.ActionRef("by-" + agent)), nil
		})
		workers = append(workers, newWorker(t, l, agent, h, append(workerOptions(clk, timers, obs),
			dispatch.WithBatchSize(4), dispatch.WithConcurrency(3))...))
	}

	processed := 0
	for round := 0; processed < len(ids); round++ {
		require.Less(t, round, 100, "deliveries did not all end")
		results := make([]workerResult, len(workers))
		var wg sync.WaitGroup
		for i, w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := w.RunOnce(context.Background())
				results[i] = workerResult{st, err}
			}()
		}
		wg.Wait()
		for _, r := range results {
			require.NoError(t, r.err)
			assert.Equal(t, r.stats.Leased, r.stats.Processed, "no faults: every lease is processed")
			processed += r.stats.Processed
		}
	}
	assert.Equal(t, len(ids), processed)
	assert.Equal(t, len(ids), obs.Count(dispatch.EventProcessed))
	for _, id := range ids {
		assert.Equal(t, 1, calls.get(id), "handled exactly once: %s", id)
		d := getDelivery(t, l, id)
		require.Equal(t, ledger.DeliveryStateProcessed, d.State)
		require.NotNil(t, d.Ack)
		require.NotNil(t, d.Processing)
		assert.Equal(t, ledger.ActionRef("by-"+d.Ack.Owner.Agent), d.Processing.Action, "processed by the owner that acknowledged")
		assert.Equal(t, 1, d.Attempts)
	}
}

func TestWorkerRetriesThenFailsAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	clk := newClock()
	l := newLedger(clk)
	ids := offer(t, l, clk, "host", 1)
	calls := newHandlerCalls()
	obs := newCounter()
	w := newWorker(t, l, "agent", answer(calls, dispatch.Decision{}, errTransient), workerOptions(clk, &fakeTimers{}, obs)...)

	for attempt := 1; attempt <= workerPolicy.MaxAttempts; attempt++ {
		st, err := w.RunOnce(context.Background())
		require.NoError(t, err)
		require.Equal(t, 1, st.Leased, "attempt %d", attempt)
		d := getDelivery(t, l, ids[0])
		require.NotNil(t, d.LastFailure)
		assert.Equal(t, ledger.FailureReported, d.LastFailure.Kind)
		assert.False(t, d.LastFailure.Permanent)
		if attempt < workerPolicy.MaxAttempts {
			assert.Equal(t, 1, st.Retried)
			assert.Equal(t, ledger.DeliveryStateOffered, d.State)
			assert.True(t, d.AvailableAt.After(clk.Now()), "offered again after a backoff")
			st, err = w.RunOnce(context.Background())
			require.NoError(t, err)
			assert.Zero(t, st.Leased, "not before the backoff")
			clk.Advance(time.Minute)
			continue
		}
		assert.Equal(t, 1, st.Failed)
		assert.Equal(t, ledger.DeliveryStateFailed, d.State)
	}
	assert.Equal(t, workerPolicy.MaxAttempts, calls.get(ids[0]))
	evs := obs.Events(dispatch.EventFailed)
	require.Len(t, evs, 1)
	assert.ErrorIs(t, evs[0].Err, errTransient)
	assert.Equal(t, workerPolicy.MaxAttempts-1, obs.Count(dispatch.EventRetried))
}

func TestWorkerPermanentErrorFailsAtOnce(t *testing.T) {
	t.Parallel()
	clk := newClock()
	l := newLedger(clk)
	ids := offer(t, l, clk, "host", 1)
	w := newWorker(t, l, "agent", answer(newHandlerCalls(), dispatch.Decision{}, dispatch.Permanent(errTransient)),
		workerOptions(clk, &fakeTimers{}, newCounter())...)
	st, err := w.RunOnce(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, st.Failed)
	d := getDelivery(t, l, ids[0])
	assert.Equal(t, ledger.DeliveryStateFailed, d.State)
	assert.Equal(t, 1, d.Attempts)
	require.NotNil(t, d.LastFailure)
	assert.True(t, d.LastFailure.Permanent)
	assert.Equal(t, errTransient.Error(), d.LastFailure.Message, "Permanent is recorded apart, not as a prefix")
}

func TestWorkerRecordsAPanicAsAFailure(t *testing.T) {
	t.Parallel()
	clk := newClock()
	l := newLedger(clk)
	ids := offer(t, l, clk, "host", 1)
	obs := newCounter()
	h := dispatch.HandlerFunc(func(context.Context, ledger.Delivery) (dispatch.Decision, error) { panic("boom") })
	w := newWorker(t, l, "agent", h, workerOptions(clk, &fakeTimers{}, obs)...)
	st, err := w.RunOnce(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, st.Retried)
	evs := obs.Events(dispatch.EventRetried)
	require.Len(t, evs, 1)
	assert.ErrorIs(t, evs[0].Err, dispatch.ErrPanic)
	d := getDelivery(t, l, ids[0])
	assert.Equal(t, ledger.DeliveryStateOffered, d.State)
	require.NotNil(t, d.LastFailure)
	assert.Equal(t, ledger.FailureReported, d.LastFailure.Kind)
}

func TestWorkerReleaseGivesTheAttemptBack(t *testing.T) {
	t.Parallel()
	clk := newClock()
	l := newLedger(clk)
	ids := offer(t, l, clk, "host", 1)
	calls := newHandlerCalls()
	w := newWorker(t, l, "agent", answer(calls, dispatch.Released(), nil), workerOptions(clk, &fakeTimers{}, newCounter())...)
	for range 2 {
		st, err := w.RunOnce(context.Background())
		require.NoError(t, err)
		assert.Equal(t, 1, st.Released)
		d := getDelivery(t, l, ids[0])
		assert.Equal(t, ledger.DeliveryStateOffered, d.State)
		assert.Zero(t, d.Attempts, "the attempt is not counted")
		assert.Nil(t, d.Ack, "released work is never acknowledged")
	}
	assert.Equal(t, 2, calls.get(ids[0]), "offered again at once")
}

func TestWorkerAppliesTheFence(t *testing.T) {
	t.Parallel()
	clk := newClock()
	l := newLedger(clk)
	ids := offer(t, l, clk, "host", 3)
	var mu sync.Mutex
	var fence int64 = 5
	var asked []ledger.Target
	source := func(_ context.Context, target ledger.Target) (*ledger.Fence, error) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, target)
		return ledger.FenceOf(fence), nil
	}
	obs := newCounter()
	w := newWorker(t, l, "agent", answer(newHandlerCalls(), dispatch.Processed("act"), nil),
		append(workerOptions(clk, &fakeTimers{}, obs), dispatch.WithFenceSource(source), dispatch.WithBatchSize(1))...)

	st, err := w.RunOnce(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, st.Processed)
	d := getDelivery(t, l, ids[0])
	require.NotNil(t, d.Processing)
	require.NotNil(t, d.Processing.Fence)
	assert.Equal(t, ledger.Fence(5), *d.Processing.Fence)
	assert.Equal(t, []ledger.Target{"host"}, asked)

	// A stale fence is rejected: counted, never a success.
	mu.Lock()
	fence = 3
	mu.Unlock()
	st, err = w.RunOnce(context.Background())
	require.NoError(t, err)
	assert.Zero(t, st.Processed)
	assert.Equal(t, 1, st.FenceRejected)
	evs := obs.Events(dispatch.EventFenceRejected)
	require.Len(t, evs, 1)
	assert.Equal(t, string(ledger.OutcomeFenceRejected), evs[0].Outcome)
	// It ends at once, with a cause that names both fences, by the
	// Worker's owner: no acknowledgement deadline to wait for.
	d = getDelivery(t, l, ids[1])
	assert.Equal(t, ledger.DeliveryStateExpired, d.State, "a refused delivery ends at once")
	require.NotNil(t, d.Cause)
	assert.Equal(t, storekit.FenceRejectedCause("host", 3, 5), *d.Cause)
	assert.Nil(t, d.Processing)
	h, err := l.History(context.Background(), ids[1])
	require.NoError(t, err)
	assert.Equal(t, ledger.OpAbandon, h[len(h)-1].Op)
	assert.Equal(t, w.Owner().String(), h[len(h)-1].Actor)

	// A fence source error is a failure, recorded before acknowledging.
	errSource := errors.New("fence store down")
	w2 := newWorker(t, l, "agent-2", answer(newHandlerCalls(), dispatch.Processed("act"), nil),
		append(workerOptions(clk, &fakeTimers{}, obs), dispatch.WithFenceSource(func(context.Context, ledger.Target) (*ledger.Fence, error) {
			return nil, errSource
		}))...)
	st, err = w2.RunOnce(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, st.Retried)
	assert.ErrorIs(t, obs.Events(dispatch.EventRetried)[0].Err, errSource)
	d = getDelivery(t, l, ids[2])
	assert.Equal(t, ledger.DeliveryStateOffered, d.State)

	// A ledger that cannot end it leaves it acknowledged until its
	// deadline, as before.
	r, err := l.Enqueue(context.Background(), ledger.EnqueueRequest{ID: "host-late", Target: "host"}, clk.Now())
	require.NoError(t, err)
	require.True(t, r.Applied())
	w3 := newWorker(t, plainLedger{l}, "agent-3", answer(newHandlerCalls(), dispatch.Processed("act"), nil),
		append(workerOptions(clk, &fakeTimers{}, obs), dispatch.WithFenceSource(source), dispatch.WithBatchSize(1))...)
	st, err = w3.RunOnce(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, st.FenceRejected)
	d = getDelivery(t, l, "host-late")
	assert.Equal(t, ledger.DeliveryStateAcknowledged, d.State, "acknowledged before the fence was checked")
	assert.Nil(t, d.Processing)
}

func TestWorkerDecisionFenceOverridesTheSource(t *testing.T) {
	t.Parallel()
	clk := newClock()
	l := newLedger(clk)
	ids := offer(t, l, clk, "host", 1)
	source := func(context.Context, ledger.Target) (*ledger.Fence, error) { return ledger.FenceOf(1), nil }
	w := newWorker(t, l, "agent", answer(newHandlerCalls(), dispatch.Decision{Fence: ledger.FenceOf(9)}, nil),
		append(workerOptions(clk, &fakeTimers{}, newCounter()), dispatch.WithFenceSource(source))...)
	st, err := w.RunOnce(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, st.Processed)
	d := getDelivery(t, l, ids[0])
	require.NotNil(t, d.Processing.Fence)
	assert.Equal(t, ledger.Fence(9), *d.Processing.Fence)
	assert.Equal(t, dispatch.DefaultAction, d.Processing.Action)
}

func TestNewIncarnationReclaimsTheOldLeases(t *testing.T) {
	t.Parallel()
	clk := newClock()
	checkNewIncarnationReclaims(t, clk, newLedger(clk))
}

// checkNewIncarnationReclaims leases deliveries of l to an old incarnation
// of an agent for an hour: a new worker of that agent must take them back
// on its first lease, without waiting for them to expire.
func checkNewIncarnationReclaims(t *testing.T, clk *testClock, l ledger.Ledger) {
	t.Helper()
	ids := offer(t, l, clk, "host", 2)
	old := ledger.Owner{Agent: "agent", Incarnation: "before-restart"}
	res, err := l.Lease(context.Background(), ledger.LeaseFilter{}, old, clk.Now(), time.Hour, 2)
	require.NoError(t, err)
	require.Len(t, res.Leased, 2)

	obs := newCounter()
	calls := newHandlerCalls()
	w := newWorker(t, l, "agent", answer(calls, dispatch.Processed("act"), nil), workerOptions(clk, &fakeTimers{}, obs)...)
	other := newWorker(t, l, "agent", answer(calls, dispatch.Processed("act"), nil), workerOptions(clk, &fakeTimers{}, obs)...)
	assert.Equal(t, "agent", w.Owner().Agent)
	assert.NotEqual(t, old.Incarnation, w.Owner().Incarnation)
	assert.NotEqual(t, other.Owner().Incarnation, w.Owner().Incarnation, "every NewWorker is a new incarnation")

	// No waiting for the hour-long leases: the first lease takes them back.
	st, err := w.RunOnce(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 2, st.Reclaimed)
	assert.Equal(t, 2, st.Processed)
	assert.Equal(t, 2, obs.Count(dispatch.EventReclaimed))
	for _, id := range ids {
		d := getDelivery(t, l, id)
		assert.Equal(t, ledger.DeliveryStateProcessed, d.State)
		assert.Equal(t, w.Owner(), d.Ack.Owner)
		assert.Equal(t, 2, d.Attempts, "the reclaimed attempt is counted")
		require.NotNil(t, d.LastFailure)
		assert.Equal(t, ledger.FailureReclaimed, d.LastFailure.Kind)
	}
}

func TestWorkerAcknowledgementAfterTheLeaseExpiredIsLost(t *testing.T) {
	t.Parallel()
	clk := newClock()
	l := plainLedger{newLedger(clk)}
	ids := offer(t, l, clk, "host", 1)
	const lease = time.Minute
	h := dispatch.HandlerFunc(func(context.Context, ledger.Delivery) (dispatch.Decision, error) {
		clk.Advance(lease) // the handler overran its lease
		return dispatch.Processed("act"), nil
	})
	obs := newCounter()
	w := newWorker(t, l, "agent", h, append(workerOptions(clk, &fakeTimers{}, obs),
		dispatch.WithLeaseDuration(lease), dispatch.WithHandleTimeout(time.Second))...)
	st, err := w.RunOnce(context.Background())
	require.NoError(t, err)
	assert.Zero(t, st.Processed)
	assert.Equal(t, 1, st.Lost)
	evs := obs.Events(dispatch.EventLost)
	require.Len(t, evs, 1)
	assert.Equal(t, string(ledger.OutcomeLeaseExpired), evs[0].Outcome)
	d := getDelivery(t, l, ids[0])
	assert.Equal(t, ledger.DeliveryStateLeased, d.State, "not acknowledged: offered again")
	assert.True(t, storekit.Delivery(d).Offerable(clk.Now()))
}

func TestWorkerHandleTimeoutCancelsTheHandler(t *testing.T) {
	t.Parallel()
	clk := newClock()
	l := newLedger(clk)
	ids := offer(t, l, clk, "host", 1)
	timers := &fakeTimers{}
	h := newBlockingHandler()
	obs := newCounter()
	w := newWorker(t, l, "agent", h, append(workerOptions(clk, timers, obs), dispatch.WithHandleTimeout(10*time.Second))...)
	done := runWorkerAsync(context.Background(), w)
	receive(t, h.started, "handler")
	require.Equal(t, 1, timers.Fire(10*time.Second))
	assert.ErrorIs(t, receive(t, h.causes, "cancellation"), dispatch.ErrHandleTimeout)
	res := receive(t, done, "RunOnce")
	require.NoError(t, res.err)
	assert.Equal(t, 1, res.stats.Retried)
	evs := obs.Events(dispatch.EventRetried)
	require.Len(t, evs, 1)
	assert.ErrorIs(t, evs[0].Err, dispatch.ErrHandleTimeout)
	assert.Equal(t, ledger.DeliveryStateOffered, getDelivery(t, l, ids[0]).State)
}
