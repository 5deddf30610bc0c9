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
)

// leaves counts the errors in err's tree (through Unwrap() error and
// Unwrap() []error) that are target itself.
func leaves(err, target error) int {
	if err == nil {
		return 0
	}
	if err == target {
		return 1
	}
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		n := 0
		for _, e := range u.Unwrap() {
			n += leaves(e, target)
		}
		return n
	case interface{ Unwrap() error }:
		return leaves(u.Unwrap(), target)
	}
	return 0
}

// TestRunOnceReportsAFailedClaimOnce: the error of a cycle whose claim
// (or Lease) failed holds the store's error once, so that the line Run
// logs shows it once; the observer sees it once too.
func TestRunOnceReportsAFailedClaimOnce(t *testing.T) {
	t.Parallel()
	down := &switchable{err: errDown}
	runs := map[string]func(t *testing.T, obs dispatch.Observer) error{
		"dispatcher": func(t *testing.T, obs dispatch.Observer) error {
			clk := newClock()
			d, err := dispatch.NewDispatcher(brokenOutbox{ClaimStore: newOutbox(clk), down: down}, dispatch.EmitterFunc(
				func(context.Context, ledger.OutboxEntry) (ledger.EmissionResult, error) {
					return ledger.EmissionResult{}, nil
				}), baseOptions(clk, &fakeTimers{}, obs)...)
			require.NoError(t, err)
			_, err = d.RunOnce(context.Background())
			return err
		},
		"worker": func(t *testing.T, obs dispatch.Observer) error {
			clk := newClock()
			w := newWorker(t, brokenLedger{Ledger: newLedger(clk), down: down}, "agent", answer(newHandlerCalls(), dispatch.Decision{}, nil),
				dispatch.WithoutSweeper(), dispatch.WithClock(clk.Now), dispatch.WithObserver(obs), dispatch.WithLogger(discardLogger()))
			_, err := w.RunOnce(context.Background())
			return err
		},
	}
	for name, run := range runs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			obs := newCounter()
			err := run(t, obs)
			require.ErrorIs(t, err, errDown)
			assert.Equal(t, 1, leaves(err, errDown), "the store's error appears once in: %v", err)
			assert.Equal(t, 1, obs.Count(dispatch.EventStoreError))
		})
	}
}

// stuckOutbox's claims wait for their context to end, as a store call
// in flight at shutdown does, and fail with its error.
type stuckOutbox struct {
	ledger.ClaimStore
	entered chan struct{}
}

func (s stuckOutbox) ClaimRetryReady(ctx context.Context, _ ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	close(s.entered)
	<-ctx.Done()
	return nil, fmt.Errorf("claim retry-ready: %w", ctx.Err())
}

// stuckLedger's Lease is stuckOutbox's claim for the Worker.
type stuckLedger struct {
	ledger.Ledger
	entered chan struct{}
}

func (s stuckLedger) Lease(ctx context.Context, _ ledger.LeaseFilter, _ ledger.Owner, _ time.Time, _ time.Duration, _ int) (ledger.LeaseResult, error) {
	close(s.entered)
	<-ctx.Done()
	return ledger.LeaseResult{}, fmt.Errorf("lease: %w", ctx.Err())
}

// TestShutdownIsNoStoreError: a loop stopped while its claim (or Lease)
// waits on the store returns cleanly, and the observer sees no store
// error: the store call ended because the loop did.
func TestShutdownIsNoStoreError(t *testing.T) {
	t.Parallel()
	runs := map[string]func(t *testing.T, obs dispatch.Observer, entered chan struct{}) func(context.Context) error{
		"dispatcher": func(t *testing.T, obs dispatch.Observer, entered chan struct{}) func(context.Context) error {
			clk := newClock()
			d, err := dispatch.NewDispatcher(stuckOutbox{ClaimStore: newOutbox(clk), entered: entered}, dispatch.EmitterFunc(
				func(context.Context, ledger.OutboxEntry) (ledger.EmissionResult, error) {
					return ledger.EmissionResult{}, nil
				}), baseOptions(clk, &fakeTimers{}, obs)...)
			require.NoError(t, err)
			return d.Run
		},
		"worker": func(t *testing.T, obs dispatch.Observer, entered chan struct{}) func(context.Context) error {
			clk := newClock()
			w := newWorker(t, stuckLedger{Ledger: newLedger(clk), entered: entered}, "agent", answer(newHandlerCalls(), dispatch.Decision{}, nil),
				dispatch.WithoutSweeper(), dispatch.WithClock(clk.Now), dispatch.WithObserver(obs), dispatch.WithLogger(discardLogger()))
			return w.Run
		},
	}
	for name, mk := range runs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			obs := newCounter()
			entered := make(chan struct{})
			run := mk(t, obs, entered)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- run(ctx) }()
			receive(t, entered, "the claim")
			cancel()
			require.NoError(t, receive(t, done, "Run to return"), "a clean shutdown")
			assert.Zero(t, obs.Count(dispatch.EventStoreError), "a store error observed: %v", obs.Events(dispatch.EventStoreError))
		})
	}
}

// TestRunOnceCutShortSaysSo: RunOnce cut short while it claims still
// returns an error matching the context's, without a store error.
func TestRunOnceCutShortSaysSo(t *testing.T) {
	t.Parallel()
	clk := newClock()
	obs := newCounter()
	entered := make(chan struct{})
	d, err := dispatch.NewDispatcher(stuckOutbox{ClaimStore: newOutbox(clk), entered: entered}, dispatch.EmitterFunc(
		func(context.Context, ledger.OutboxEntry) (ledger.EmissionResult, error) {
			return ledger.EmissionResult{}, nil
		}), baseOptions(clk, &fakeTimers{}, obs)...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	res := runOnceAsync(ctx, d)
	receive(t, entered, "the claim")
	cancel()
	r := receive(t, res, "RunOnce")
	require.True(t, errors.Is(r.err, context.Canceled), "%v", r.err)
	assert.Zero(t, r.stats.StoreErrors)
}
