package dispatch_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/dispatch"
	"github.com/leaseledger/ledger/memstore"
)

// lingers records the linger (ledger.WithLinger) of every completion a
// loop makes, and the callers they name.
type lingers struct {
	mu      sync.Mutex
	d       []time.Duration
	callers map[any]bool
}

func (l *lingers) add(ctx context.Context) {
	d, caller := ledger.LingerFrom(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.d = append(l.d, d)
	if l.callers == nil {
		l.callers = map[any]bool{}
	}
	if caller != nil {
		l.callers[caller] = true
	}
}

// take returns what was recorded and forgets it.
func (l *lingers) take() (ds []time.Duration, callers int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ds, callers = l.d, len(l.callers)
	l.d, l.callers = nil, nil
	return ds, callers
}

// lingerOutbox records the linger of each MarkClaimDelivered.
type lingerOutbox struct {
	*memstore.Outbox
	seen *lingers
}

func (o lingerOutbox) MarkClaimDelivered(ctx context.Context, c ledger.Claim, r ledger.EmissionResult) (ledger.OutboxResult, error) {
	o.seen.add(ctx)
	return o.Outbox.MarkClaimDelivered(ctx, c, r)
}

// lingerLedger records the linger of each AcknowledgeProcessed.
type lingerLedger struct {
	*memstore.Store
	seen *lingers
}

func (l lingerLedger) AcknowledgeProcessed(ctx context.Context, lease ledger.Lease, observation string, fence *ledger.Fence, action ledger.ActionRef, now time.Time) (ack, processed ledger.DeliveryResult, err error) {
	l.seen.add(ctx)
	return l.Store.AcknowledgeProcessed(ctx, lease, observation, fence, action, now)
}

// repeat returns n copies of d.
func repeat(d time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

// TestCompletionsOfADrainedCycleLinger: a cycle that claims less than a
// full batch completes under DefaultCompletionLinger (or the linger
// WithCompletionLinger sets; none with 0), all its completions as one
// caller, each cycle a caller of its own; a full cycle never lingers.
func TestCompletionsOfADrainedCycleLinger(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []dispatch.DispatcherOption
		want time.Duration
	}{
		{"Default", nil, dispatch.DefaultCompletionLinger},
		{"Set", []dispatch.DispatcherOption{dispatch.WithCompletionLinger(7 * time.Millisecond)}, 7 * time.Millisecond},
		{"Off", []dispatch.DispatcherOption{dispatch.WithCompletionLinger(0)}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			seen := &lingers{}
			store := lingerOutbox{Outbox: newOutbox(clk), seen: seen}
			opts := append(baseOptions(clk, &fakeTimers{}, newCounter()), dispatch.WithBatchSize(4))
			d, err := dispatch.NewDispatcher(store, okEmitter(newEmissions()), append(opts, tc.opts...)...)
			require.NoError(t, err)

			enqueue(t, store, "full", 4)
			st, err := d.RunOnce(t.Context())
			require.NoError(t, err)
			require.Equal(t, 4, st.Delivered)
			ds, _ := seen.take()
			require.Equal(t, repeat(0, 4), ds, "a full cycle does not linger")

			for cycle := range 2 {
				enqueue(t, store, "short"+string(rune('a'+cycle)), 3)
				st, err = d.RunOnce(t.Context())
				require.NoError(t, err)
				require.Equal(t, 3, st.Delivered)
				ds, callers := seen.take()
				require.Equal(t, repeat(tc.want, 3), ds, "a drained cycle lingers")
				if tc.want > 0 {
					require.Equal(t, 1, callers, "a cycle's completions are one caller's")
				}
			}
		})
	}
}

// TestWorkerCompletionsOfADrainedCycleLinger is the same for a Worker.
func TestWorkerCompletionsOfADrainedCycleLinger(t *testing.T) {
	t.Parallel()
	clk := newClock()
	seen := &lingers{}
	l := lingerLedger{Store: newLedger(clk), seen: seen}
	w := newWorker(t, l, "agent", dispatch.HandlerFunc(func(context.Context, ledger.Delivery) (dispatch.Decision, error) {
		return dispatch.Processed("done"), nil
	}), append(workerOptions(clk, &fakeTimers{}, newCounter()), dispatch.WithBatchSize(4))...)

	offer(t, l, clk, "full", 4)
	st, err := w.RunOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, 4, st.Processed)
	ds, _ := seen.take()
	require.Equal(t, repeat(0, 4), ds, "a full cycle does not linger")

	offer(t, l, clk, "short", 2)
	st, err = w.RunOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, 2, st.Processed)
	ds, callers := seen.take()
	require.Equal(t, repeat(dispatch.DefaultCompletionLinger, 2), ds, "a drained cycle lingers")
	require.Equal(t, 1, callers)
}
