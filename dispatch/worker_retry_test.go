package dispatch_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/dispatch"
)

// errStoreDown is the store error flakyProcessLedger injects.
var errStoreDown = errors.New("test: store unreachable")

// flakyProcessLedger fails the first `fail` MarkProcessed calls with
// errStoreDown. When landed is set the failing calls still write, as when
// a commit succeeds but its answer is lost on the way back.
type flakyProcessLedger struct {
	ledger.Ledger
	landed bool

	mu    sync.Mutex
	fail  int
	calls int
}

func (f *flakyProcessLedger) MarkProcessed(ctx context.Context, id ledger.DeliveryID, owner ledger.Owner, fence *ledger.Fence, action ledger.ActionRef, now time.Time) (ledger.DeliveryResult, error) {
	f.mu.Lock()
	f.calls++
	failing := f.calls <= f.fail
	f.mu.Unlock()
	if !failing {
		return f.Ledger.MarkProcessed(ctx, id, owner, fence, action, now)
	}
	if f.landed {
		if _, err := f.Ledger.MarkProcessed(ctx, id, owner, fence, action, now); err != nil {
			return ledger.DeliveryResult{}, err
		}
	}
	return ledger.DeliveryResult{}, errStoreDown
}

func (f *flakyProcessLedger) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func TestWorkerRetriesMarkProcessedAfterAStoreError(t *testing.T) {
	t.Parallel()
	for name, landed := range map[string]bool{"NothingWritten": false, "WriteLandedAnswerLost": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			l := &flakyProcessLedger{Ledger: newLedger(clk), fail: 1, landed: landed}
			ids := offer(t, l, clk, "host", 1)
			calls := newHandlerCalls()
			obs := newCounter()
			w := newWorker(t, l, "agent", answer(calls, dispatch.Processed("done"), nil), workerOptions(clk, &fakeTimers{}, obs)...)

			st, err := w.RunOnce(context.Background())
			require.NoError(t, err, "a store error that a later try got past is not the cycle's error")
			assert.Equal(t, 1, st.Processed)
			assert.Zero(t, st.StoreErrors)
			assert.Zero(t, st.Lost)
			assert.Equal(t, 2, l.Calls(), "one failed try, then one that answered")
			assert.Equal(t, 1, obs.Count(dispatch.EventProcessed))
			assert.Equal(t, 1, calls.get(ids[0]))

			d := getDelivery(t, l, ids[0])
			assert.Equal(t, ledger.DeliveryStateProcessed, d.State)
			require.NotNil(t, d.Processing)
			assert.Equal(t, ledger.ActionRef("done"), d.Processing.Action)
		})
	}
}

func TestWorkerGivesUpMarkProcessedAfterBoundedTries(t *testing.T) {
	t.Parallel()
	clk := newClock()
	l := &flakyProcessLedger{Ledger: newLedger(clk), fail: 1000}
	ids := offer(t, l, clk, "host", 1)
	obs := newCounter()
	w := newWorker(t, l, "agent", answer(newHandlerCalls(), dispatch.Processed("done"), nil), workerOptions(clk, &fakeTimers{}, obs)...)

	st, err := w.RunOnce(context.Background())
	require.ErrorIs(t, err, errStoreDown)
	assert.Equal(t, 1, st.StoreErrors, "the delivery is counted once, by its last try")
	assert.Zero(t, st.Processed)
	tries := l.Calls()
	assert.Greater(t, tries, 1, "the call was tried again")
	assert.Less(t, tries, 10, "the tries are bounded")
	assert.Equal(t, ledger.DeliveryStateAcknowledged, getDelivery(t, l, ids[0]).State,
		"left acknowledged for Expire to end at its deadline")
}
