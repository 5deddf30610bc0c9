package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/dispatch"
	"github.com/leaseledger/ledger/internal/pgtest"
	"github.com/leaseledger/ledger/pgstore"
)

// The tests in this file run the key dispatch scenarios against pgstore,
// where claims and leases are rows under real transactions and row locks,
// reusing the memstore tests' bodies wherever they take a store.

// newPgStore returns a migrated pgstore on clk, in a schema of its own on
// a pool of its own, both dropped when the test ends. Its default policy
// is the memstore ledger's, so the Worker scenarios assert the same.
func newPgStore(t *testing.T, clk *testClock) *pgstore.Store {
	t.Helper()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool)
	// The tests' clock is in 2030 on purpose: no skew warnings.
	s, err := pgstore.New(pool, pgstore.WithSchema(schema), pgstore.WithClock(clk.Now),
		pgstore.WithDefaultPolicy(workerPolicy), pgstore.WithoutSkewCheck())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	require.NoError(t, s.Migrate(ctx))
	return s
}

func TestPgDispatchersEmitEveryEntryExactlyOnceWithoutFaults(t *testing.T) {
	t.Parallel()
	clk := newClock()
	checkExactlyOnce(t, clk, newPgStore(t, clk).Outbox(), 150, 3)
}

// emitTimeout is the emit timeout of the fault test's dispatchers; it
// differs from their renewal interval (a third of the lease), so firing
// it fires nothing else.
const emitTimeout = 10 * time.Second

// hangingEmitter answers "hang" entries by hanging until the emit timeout
// cancels it, as an emitter that honours its context should, and passes
// every other entry to next. The fake clock cannot run out by itself, so
// the emitter fires its own dispatcher's emit-timeout timer once it hangs:
// the timer is armed before the emitter is called, and with a concurrency
// of one it is the only one of that duration.
func hangingEmitter(em *emissions, timers *fakeTimers, next dispatch.Emitter) dispatch.Emitter {
	return dispatch.EmitterFunc(func(ctx context.Context, e ledger.OutboxEntry) (ledger.EmissionResult, error) {
		if string(e.Envelope.Payload) != "hang" {
			return next.Emit(ctx, e)
		}
		em.Add(e.ID)
		timers.Fire(emitTimeout)
		select {
		case <-ctx.Done():
			return ledger.EmissionResult{}, ctx.Err()
		case <-time.After(waitLimit): // bounded: the test then fails on the missing timeout
			return ledger.EmissionResult{}, errors.New("emit timeout never came")
		}
	})
}

func TestPgFaultyEmittersEndEveryEntryWithItsCause(t *testing.T) {
	t.Parallel()
	clk := newClock()
	store := newPgStore(t, clk).Outbox()
	byKind, all := enqueueKinds(t, store, append(faultKinds[:len(faultKinds):len(faultKinds)], "hang"), 5)
	em := newEmissions()
	obs := newCounter()
	var ds []*dispatch.Dispatcher
	for i := range 3 {
		timers := &fakeTimers{}
		opts := append(baseOptions(clk, timers, obs), dispatch.WithWorker(fmt.Sprintf("w%d", i)),
			dispatch.WithBatchSize(5), dispatch.WithConcurrency(1), dispatch.WithEmitTimeout(emitTimeout))
		d, err := dispatch.NewDispatcher(store, hangingEmitter(em, timers, faultyEmitter(em, clk)), opts...)
		require.NoError(t, err)
		ds = append(ds, d)
	}

	drain(t, clk, store, all, 10*time.Minute, ds...)
	checkFaultOutcomes(t, store, em, obs, byKind)

	t.Run("hang", func(t *testing.T) {
		for _, id := range byKind["hang"] {
			e := get(t, store, id)
			assert.Equal(t, ledger.OutboxStatusDeadLettered, e.Status)
			assert.Equal(t, 3, e.Attempts, "a timeout is retried like any failure")
			assert.Equal(t, 3, em.Get(id))
			assert.Equal(t, dispatch.ReasonMaxAttempts, e.DeadLetterReason)
			require.NotNil(t, e.LastError)
			assert.Equal(t, dispatch.CodeTimeout, e.LastError.Code)
		}
		timeouts := 0
		for _, ev := range append(obs.Events(dispatch.EventRetried), obs.Events(dispatch.EventDeadLettered)...) {
			if errors.Is(ev.Err, dispatch.ErrEmitTimeout) {
				timeouts++
			}
		}
		assert.Equal(t, 3*len(byKind["hang"]), timeouts)
	})
}

func TestPgShutdownFinishesInFlightAndReleasesTheRest(t *testing.T) {
	t.Parallel()
	clk := newClock()
	checkShutdownReleases(t, clk, newPgStore(t, clk).Outbox())
}

func TestPgWorkerEveryDeliveryProcessedOnceAcrossAgents(t *testing.T) {
	t.Parallel()
	clk := newClock()
	checkProcessedOnceAcrossAgents(t, clk, newPgStore(t, clk), "agent-1", "agent-2", "agent-3")
}

func TestPgNewIncarnationReclaimsTheOldLeases(t *testing.T) {
	t.Parallel()
	clk := newClock()
	checkNewIncarnationReclaims(t, clk, newPgStore(t, clk))
}

// TestPgDispatcherEventsAreLabelled checks the labels of a Dispatcher's
// events on pgstore, completing one by one and in batches: the metadata
// read back from its column and the latency from the stamps of its
// completion statements.
func TestPgDispatcherEventsAreLabelled(t *testing.T) {
	t.Parallel()
	t.Run("one by one", func(t *testing.T) {
		t.Parallel()
		clk := newClock()
		checkDispatcherEventsLabelled(t, clk, newPgStore(t, clk).Outbox())
	})
	t.Run("in batches", func(t *testing.T) {
		t.Parallel()
		clk := newClock()
		checkDispatcherEventsLabelled(t, clk, newPgStore(t, clk).Outbox(), dispatch.WithBatchCompletion())
	})
}
