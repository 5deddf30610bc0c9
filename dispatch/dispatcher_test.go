package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/dispatch"
	"github.com/leaseledger/ledger/storekit"
)

func okEmitter(em *emissions) dispatch.Emitter {
	return dispatch.EmitterFunc(func(_ context.Context, e ledger.OutboxEntry) (ledger.EmissionResult, error) {
		n := em.Add(e.ID)
		return ledger.EmissionResult{ProviderRef: fmt.Sprintf("ref-%s-%d", e.ID, n)}, nil
	})
}

func TestNewDispatcherRejectsBadConfiguration(t *testing.T) {
	t.Parallel()
	store := newOutbox(newClock())
	em := okEmitter(newEmissions())
	cases := map[string]struct {
		store   ledger.ClaimStore
		emitter dispatch.Emitter
		opts    []dispatch.DispatcherOption
	}{
		"NilStore":                {nil, em, nil},
		"NilEmitter":              {store, nil, nil},
		"TimeoutEqualToLease":     {store, em, []dispatch.DispatcherOption{dispatch.WithEmitTimeout(time.Minute), dispatch.WithLeaseDuration(time.Minute)}},
		"TimeoutLongerThanLease":  {store, em, []dispatch.DispatcherOption{dispatch.WithEmitTimeout(2 * time.Minute)}},
		"ZeroTimeout":             {store, em, []dispatch.DispatcherOption{dispatch.WithEmitTimeout(0)}},
		"ZeroLease":               {store, em, []dispatch.DispatcherOption{dispatch.WithLeaseDuration(0)}},
		"ZeroBatch":               {store, em, []dispatch.DispatcherOption{dispatch.WithBatchSize(0)}},
		"HugeBatch":               {store, em, []dispatch.DispatcherOption{dispatch.WithBatchSize(ledger.MaxLimit + 1)}},
		"ZeroConcurrency":         {store, em, []dispatch.DispatcherOption{dispatch.WithConcurrency(0)}},
		"EmptyWorker":             {store, em, []dispatch.DispatcherOption{dispatch.WithWorker("")}},
		"ControlCharsInWorker":    {store, em, []dispatch.DispatcherOption{dispatch.WithWorker("a\nb")}},
		"ZeroPollInterval":        {store, em, []dispatch.DispatcherOption{dispatch.WithPollInterval(0)}},
		"NegativeShutdownTimeout": {store, em, []dispatch.DispatcherOption{dispatch.WithShutdownTimeout(-time.Second)}},
		"NegativeLinger":          {store, em, []dispatch.DispatcherOption{dispatch.WithCompletionLinger(-time.Millisecond)}},
		"LingerOverASecond":       {store, em, []dispatch.DispatcherOption{dispatch.WithCompletionLinger(time.Second + 1)}},
		"NegativeBackoff":         {store, em, []dispatch.DispatcherOption{dispatch.WithPolicy(ledger.Policy{BackoffBase: -1})}},
		"NilClock":                {store, em, []dispatch.DispatcherOption{dispatch.WithClock(nil)}},
		"NilLogger":               {store, em, []dispatch.DispatcherOption{dispatch.WithLogger(nil)}},
		"NilObserver":             {store, em, []dispatch.DispatcherOption{dispatch.WithObserver(nil)}},
		"NilAfterFunc":            {store, em, []dispatch.DispatcherOption{dispatch.WithAfterFunc(nil)}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d, err := dispatch.NewDispatcher(tc.store, tc.emitter, tc.opts...)
			require.ErrorIs(t, err, ledger.ErrInvalid)
			assert.Nil(t, d)
		})
	}

	d, err := dispatch.NewDispatcher(store, em, dispatch.WithEmitTimeout(59*time.Second), dispatch.WithWorker("w1"))
	require.NoError(t, err)
	assert.Equal(t, "w1", d.Worker())
}

func TestRunOnceRejectsNilAndCancelledContext(t *testing.T) {
	t.Parallel()
	clk := newClock()
	store := newOutbox(clk)
	ids := enqueue(t, store, "k", 1)
	d, err := dispatch.NewDispatcher(store, okEmitter(newEmissions()), baseOptions(clk, &fakeTimers{}, newCounter())...)
	require.NoError(t, err)

	//nolint:staticcheck // a nil context is the bad input under test.
	_, err = d.RunOnce(nil)
	require.ErrorIs(t, err, ledger.ErrInvalid)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	st, err := d.RunOnce(ctx)
	require.ErrorIs(t, err, context.Canceled)
	assert.Zero(t, st)
	e := get(t, store, ids[0])
	assert.Equal(t, ledger.OutboxStatusPending, e.Status, "a cancelled cycle claims nothing")
	assert.Nil(t, e.Claim)
}

func TestDispatchersEmitEveryEntryExactlyOnceWithoutFaults(t *testing.T) {
	t.Parallel()
	clk := newClock()
	checkExactlyOnce(t, clk, newOutbox(clk), 300, 4)
}

// checkExactlyOnce enqueues entries into store and runs workers
// dispatchers over it concurrently until they go quiet; without faults
// every entry must be emitted, and delivered, exactly once.
func checkExactlyOnce(t *testing.T, clk *testClock, store ledger.ClaimStore, entries, workers int) {
	t.Helper()
	ids := enqueue(t, store, "k", entries)
	em := newEmissions()
	obs := newCounter()

	ds := make([]*dispatch.Dispatcher, workers)
	for i := range ds {
		opts := append(baseOptions(clk, &fakeTimers{}, obs),
			dispatch.WithWorker(fmt.Sprintf("w%d", i)), dispatch.WithBatchSize(7), dispatch.WithConcurrency(3))
		d, err := dispatch.NewDispatcher(store, okEmitter(em), opts...)
		require.NoError(t, err)
		ds[i] = d
	}

	// Every dispatcher polls on its own goroutine until a cycle finds
	// nothing; the clock never moves, so no claim can expire and be
	// taken over.
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	totals := make([]dispatch.Stats, workers)
	for i, d := range ds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				st, err := d.RunOnce(context.Background())
				if err != nil {
					errs <- err
					return
				}
				totals[i].Claimed += st.Claimed
				totals[i].Delivered += st.Delivered
				totals[i].Lost += st.Lost
				if st.Claimed == 0 {
					return
				}
			}
			errs <- errors.New("dispatcher did not go quiet")
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	delivered, lost := 0, 0
	for _, st := range totals {
		assert.Equal(t, st.Claimed, st.Delivered)
		delivered += st.Delivered
		lost += st.Lost
	}
	assert.Equal(t, len(ids), delivered)
	assert.Zero(t, lost)
	assert.Equal(t, len(ids), obs.Count(dispatch.EventDelivered))
	for _, id := range ids {
		assert.Equal(t, 1, em.Get(id), "entry %s emitted once", id)
		e := get(t, store, id)
		assert.Equal(t, ledger.OutboxStatusDelivered, e.Status)
		require.NotNil(t, e.Result)
		assert.Equal(t, fmt.Sprintf("ref-%s-1", id), e.Result.ProviderRef)
		assert.Equal(t, 1, e.Attempts)
	}
}

// faultyEmitter behaves by the entry's payload suffix, so that one store
// holds every kind of fault at once.
func faultyEmitter(em *emissions, clk *testClock) dispatch.Emitter {
	return dispatch.EmitterFunc(func(_ context.Context, e ledger.OutboxEntry) (ledger.EmissionResult, error) {
		n := em.Add(e.ID)
		switch string(e.Envelope.Payload) {
		case "ok":
			return ledger.EmissionResult{ProviderRef: "ok"}, nil
		case "flaky": // fails twice, then succeeds
			if n <= 2 {
				return ledger.EmissionResult{}, fmt.Errorf("attempt %d: %w", n, errTransient)
			}
			return ledger.EmissionResult{ProviderRef: "flaky"}, nil
		case "down": // always fails
			return ledger.EmissionResult{}, errTransient
		case "permanent":
			return ledger.EmissionResult{}, dispatch.Permanent(errors.New("recipient rejected"))
		case "panic":
			panic("emitter bug")
		case "defer": // deferred once, then succeeds
			if n == 1 {
				return ledger.EmissionResult{}, dispatch.Defer(clk.Now().Add(time.Hour))
			}
			return ledger.EmissionResult{ProviderRef: "deferred"}, nil
		case "garbage": // an error message the store would reject as it is
			return ledger.EmissionResult{}, errors.New("bad\x00bytes\xff" + strings.Repeat("x", 2*ledger.MaxTextBytes))
		case "garbage-ok":
			return ledger.EmissionResult{ProviderRef: "ref\nwith\tcontrols", Detail: "nul\x00"}, nil
		}
		return ledger.EmissionResult{}, errors.New("unknown payload")
	})
}

// faultKinds are the payloads faultyEmitter understands.
var faultKinds = []string{"ok", "flaky", "down", "permanent", "panic", "defer", "garbage", "garbage-ok"}

// enqueueKinds adds n entries of each kind (the kind is the payload) and
// returns their IDs by kind and all of them.
func enqueueKinds(t *testing.T, store ledger.ClaimStore, kinds []string, n int) (map[string][]ledger.OutboxEntryID, []ledger.OutboxEntryID) {
	t.Helper()
	byKind := map[string][]ledger.OutboxEntryID{}
	var all []ledger.OutboxEntryID
	for i := range n {
		for _, k := range kinds {
			r, err := store.Enqueue(context.Background(), ledger.Envelope{
				Provider: "p", Kind: "k", Payload: []byte(k), IdempotencyKey: fmt.Sprintf("%s-%d", k, i),
			})
			require.NoError(t, err)
			byKind[k] = append(byKind[k], r.Entry.ID)
			all = append(all, r.Entry.ID)
		}
	}
	return byKind, all
}

func TestFaultyEmittersEndEveryEntryWithItsCause(t *testing.T) {
	t.Parallel()
	clk := newClock()
	store := newOutbox(clk)
	byKind, all := enqueueKinds(t, store, faultKinds, 5)
	em := newEmissions()
	obs := newCounter()
	var ds []*dispatch.Dispatcher
	for i := range 3 {
		opts := append(baseOptions(clk, &fakeTimers{}, obs), dispatch.WithWorker(fmt.Sprintf("w%d", i)), dispatch.WithBatchSize(5))
		d, err := dispatch.NewDispatcher(store, faultyEmitter(em, clk), opts...)
		require.NoError(t, err)
		ds = append(ds, d)
	}

	drain(t, clk, store, all, 10*time.Minute, ds...)
	checkFaultOutcomes(t, store, em, obs, byKind)
}

// checkFaultOutcomes asserts how each faultKinds entry of byKind ended,
// and that every claim the dispatchers made ended in one recorded outcome.
func checkFaultOutcomes(t *testing.T, store ledger.ClaimStore, em *emissions, obs *counter, byKind map[string][]ledger.OutboxEntryID) {
	t.Helper()
	check := func(kind string, f func(t *testing.T, e ledger.OutboxEntry)) {
		t.Run(kind, func(t *testing.T) {
			for _, id := range byKind[kind] {
				f(t, get(t, store, id))
			}
		})
	}
	check("ok", func(t *testing.T, e ledger.OutboxEntry) {
		assert.Equal(t, ledger.OutboxStatusDelivered, e.Status)
		assert.Equal(t, 1, e.Attempts)
		assert.Equal(t, 1, em.Get(e.ID))
	})
	check("flaky", func(t *testing.T, e ledger.OutboxEntry) {
		assert.Equal(t, ledger.OutboxStatusDelivered, e.Status)
		assert.Equal(t, 3, e.Attempts)
		require.NotNil(t, e.LastError, "the last failure stays visible")
		assert.Equal(t, dispatch.CodeError, e.LastError.Code)
	})
	check("down", func(t *testing.T, e ledger.OutboxEntry) {
		assert.Equal(t, ledger.OutboxStatusDeadLettered, e.Status)
		assert.Equal(t, 3, e.Attempts, "MaxAttempts")
		assert.Equal(t, dispatch.ReasonMaxAttempts, e.DeadLetterReason)
		require.NotNil(t, e.LastError)
		assert.Equal(t, dispatch.CodeError, e.LastError.Code)
	})
	check("permanent", func(t *testing.T, e ledger.OutboxEntry) {
		assert.Equal(t, ledger.OutboxStatusDeadLettered, e.Status)
		assert.Equal(t, 1, e.Attempts, "a permanent error is not retried")
		assert.Equal(t, dispatch.ReasonPermanent, e.DeadLetterReason)
		require.NotNil(t, e.LastError)
		assert.Equal(t, dispatch.CodePermanent, e.LastError.Code)
	})
	check("panic", func(t *testing.T, e ledger.OutboxEntry) {
		assert.Equal(t, ledger.OutboxStatusDeadLettered, e.Status)
		assert.Equal(t, 3, e.Attempts, "a panic is retried like any failure")
		assert.Equal(t, dispatch.ReasonMaxAttempts, e.DeadLetterReason)
		require.NotNil(t, e.LastError)
		assert.Equal(t, dispatch.CodePanic, e.LastError.Code)
	})
	check("defer", func(t *testing.T, e ledger.OutboxEntry) {
		assert.Equal(t, ledger.OutboxStatusDelivered, e.Status)
		assert.Equal(t, 2, e.Attempts)
		assert.Nil(t, e.LastError, "a deferral is not a failure")
	})
	check("garbage", func(t *testing.T, e ledger.OutboxEntry) {
		assert.Equal(t, ledger.OutboxStatusDeadLettered, e.Status)
		require.NotNil(t, e.LastError)
		assert.NoError(t, storekit.ValidateEmissionError(*e.LastError))
	})
	check("garbage-ok", func(t *testing.T, e ledger.OutboxEntry) {
		assert.Equal(t, ledger.OutboxStatusDelivered, e.Status)
		require.NotNil(t, e.Result)
		assert.NoError(t, storekit.ValidateEmissionResult(*e.Result))
	})

	// Every claim ended in exactly one recorded outcome, and none was lost.
	claimed := obs.Count(dispatch.EventClaimed)
	ended := obs.Count(dispatch.EventDelivered) + obs.Count(dispatch.EventRetried) +
		obs.Count(dispatch.EventDeadLettered) + obs.Count(dispatch.EventDeferred)
	assert.Equal(t, claimed, ended)
	assert.Zero(t, obs.Count(dispatch.EventLost))
	assert.Zero(t, obs.Count(dispatch.EventStoreError))
	for _, ev := range obs.Events(dispatch.EventRetried) {
		require.Error(t, ev.Err)
	}
	panics := 0
	for _, ev := range append(obs.Events(dispatch.EventRetried), obs.Events(dispatch.EventDeadLettered)...) {
		var pe *dispatch.PanicError
		if errors.As(ev.Err, &pe) {
			panics++
			assert.Equal(t, "emitter bug", pe.Value)
		}
	}
	assert.Equal(t, 3*len(byKind["panic"]), panics)
}

func TestDeferralSavesDeferredUntilRequestedTime(t *testing.T) {
	t.Parallel()
	clk := newClock()
	store := newOutbox(clk)
	ids := enqueue(t, store, "k", 1)
	until := t0.Add(90 * time.Minute)
	calls := newEmissions()
	emitter := dispatch.EmitterFunc(func(_ context.Context, e ledger.OutboxEntry) (ledger.EmissionResult, error) {
		if calls.Add(e.ID) == 1 {
			return ledger.EmissionResult{}, dispatch.Defer(until)
		}
		return ledger.EmissionResult{}, nil
	})
	d, err := dispatch.NewDispatcher(store, emitter, baseOptions(clk, &fakeTimers{}, newCounter())...)
	require.NoError(t, err)

	st, err := d.RunOnce(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, st.Deferred)
	e := get(t, store, ids[0])
	assert.Equal(t, ledger.OutboxStatusDeferred, e.Status)
	assert.True(t, until.Equal(e.NextAttemptAt))
	assert.Nil(t, e.Claim)

	clk.Advance(90*time.Minute - time.Microsecond)
	st, err = d.RunOnce(context.Background())
	require.NoError(t, err)
	assert.Zero(t, st.Claimed, "not due before the deferral ends")

	clk.Advance(time.Microsecond)
	st, err = d.RunOnce(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, st.Delivered)
	assert.Equal(t, ledger.OutboxStatusDelivered, get(t, store, ids[0]).Status)
}

func TestFailureSchedulesRetryWithPolicyBackoff(t *testing.T) {
	t.Parallel()
	clk := newClock()
	store := newOutbox(clk)
	ids := enqueue(t, store, "k", 1)
	emitter := dispatch.EmitterFunc(func(context.Context, ledger.OutboxEntry) (ledger.EmissionResult, error) {
		return ledger.EmissionResult{}, errTransient
	})
	policy := ledger.Policy{MaxAttempts: 3, BackoffBase: time.Second, BackoffMax: time.Minute}
	d, err := dispatch.NewDispatcher(store, emitter, baseOptions(clk, &fakeTimers{}, newCounter())...)
	require.NoError(t, err)

	st, err := d.RunOnce(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, st.Retried)
	e := get(t, store, ids[0])
	assert.Equal(t, ledger.OutboxStatusRetryScheduled, e.Status)
	want := ledger.Normalize(t0.Add(policy.Resolve(ledger.DefaultPolicy()).Backoff(ledger.DeliveryID(ids[0]), 1)))
	assert.True(t, want.Equal(e.NextAttemptAt), "next attempt %s, want %s", e.NextAttemptAt, want)
	require.NotNil(t, e.LastError)
	assert.Equal(t, errTransient.Error(), e.LastError.Message)
}

func TestEmitterErrorHelpers(t *testing.T) {
	t.Parallel()
	require.NoError(t, dispatch.Permanent(nil))
	perm := dispatch.Permanent(errTransient)
	require.ErrorIs(t, perm, dispatch.ErrPermanent)
	require.ErrorIs(t, perm, errTransient)
	var pe *dispatch.PermanentError
	require.ErrorAs(t, fmt.Errorf("wrapped: %w", perm), &pe)

	until := t0.Add(time.Hour)
	def := fmt.Errorf("wrapped: %w", dispatch.Defer(until))
	require.ErrorIs(t, def, dispatch.ErrDeferred)
	var de *dispatch.DeferError
	require.ErrorAs(t, def, &de)
	assert.True(t, until.Equal(de.Until))

	require.ErrorIs(t, &dispatch.PanicError{Value: 1}, dispatch.ErrPanic)
	require.ErrorIs(t, dispatch.ErrEmitTimeout, context.DeadlineExceeded)
}
