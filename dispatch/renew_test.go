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
	"github.com/leaseledger/ledger/memstore"
	"github.com/leaseledger/ledger/storekit"
)

// renewingOutbox overrides memstore's ledger.ClaimRenewer by applying the
// root state machine to the stored entry without storing the renewed
// expiry, so that a renewal past the first expiry answers LeaseExpired:
// these tests check what the dispatcher does with each answer.
type renewingOutbox struct {
	*memstore.Outbox
	mu     sync.Mutex
	calls  []time.Time
	failed bool // answer the next call with an error
}

var _ ledger.ClaimRenewer = (*renewingOutbox)(nil)

var errRenew = errors.New("connection reset")

func (s *renewingOutbox) RenewClaim(ctx context.Context, claim ledger.Claim, now time.Time, d time.Duration) (ledger.OutboxResult, error) {
	if err := storekit.ValidateRenewClaim(claim, now, d); err != nil {
		return ledger.OutboxResult{}, err
	}
	s.mu.Lock()
	s.calls = append(s.calls, now)
	fail := s.failed
	s.failed = false
	s.mu.Unlock()
	if fail {
		return ledger.OutboxResult{}, errRenew
	}
	e, err := s.FindByID(ctx, claim.EntryID)
	if errors.Is(err, ledger.ErrNotFound) {
		return ledger.OutboxResult{Outcome: ledger.OutcomeNotFound}, nil
	}
	if err != nil {
		return ledger.OutboxResult{}, err
	}
	// Entries read back carry no token: the stored claim of the same
	// sequence number is the one in force, and gets the caller's token.
	if e.Claim != nil && e.Claim.Seq == claim.Seq && e.Claim.EntryID == claim.EntryID {
		e.Claim.Token = claim.Token
	}
	e, out := storekit.OutboxEntry(e).RenewClaim(claim, now, d)
	// Like every store, it hands the entry out without the token.
	return ledger.OutboxResult{Outcome: out, Entry: e.Redacted()}, nil
}

func (s *renewingOutbox) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

func (s *renewingOutbox) FailNext() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failed = true
}

func TestLongEmissionRenewsItsClaimAndStopsWhenLost(t *testing.T) {
	t.Parallel()
	clk := newClock()
	store := &renewingOutbox{Outbox: newOutbox(clk)}
	ids := enqueue(t, store, "k", 1)
	timers := &fakeTimers{}
	em := newBlockingEmitter(true)
	obs := newCounter()
	const lease = 90 * time.Second
	const every = lease / 3
	d, err := dispatch.NewDispatcher(store, em, append(baseOptions(clk, timers, obs),
		dispatch.WithLeaseDuration(lease), dispatch.WithEmitTimeout(time.Minute))...)
	require.NoError(t, err)

	done := runOnceAsync(context.Background(), d)
	receive(t, em.started, "emission")
	require.Equal(t, 1, timers.Active(every), "renewal scheduled at a third of the lease")

	clk.Advance(every)
	require.Equal(t, 1, timers.Fire(every))
	assert.Equal(t, 1, store.Calls())
	assert.Equal(t, 1, obs.Count(dispatch.EventRenewed))
	require.Equal(t, 1, timers.Active(every), "the next renewal is scheduled")

	// A store error does not end the emission: the claim may still be ours.
	store.FailNext()
	require.Equal(t, 1, timers.Fire(every))
	assert.Equal(t, 1, obs.Count(dispatch.EventStoreError))
	require.Equal(t, 1, timers.Active(every))
	renewErr := obs.Events(dispatch.EventStoreError)[0]
	assert.False(t, renewErr.Final, "a renewal's store error settles nothing: the emission goes on")
	assert.Equal(t, string(ids[0]), renewErr.EntryID)
	assert.Equal(t, "mail", renewErr.Provider, "a renewal's events are labelled like the others")

	// The store did not keep the renewed expiry, so at the lease's end the
	// renewal answers LeaseExpired: the emission is cancelled.
	clk.Advance(lease)
	require.Equal(t, 1, timers.Fire(every))
	assert.ErrorIs(t, receive(t, em.causes, "cancellation"), dispatch.ErrClaimLost)
	res := receive(t, done, "RunOnce")
	require.ErrorIs(t, res.err, errRenew, "renewal store errors are reported")
	assert.Equal(t, 1, obs.Count(dispatch.EventRenewLost))
	assert.Equal(t, 1, res.stats.Renewed)
	assert.Zero(t, timers.Active(every), "no renewal after the emission ended")

	assert.Len(t, obs.Finals(), 1, "one event settles the entry")

	// Nobody took the entry over, so the failure is still recorded.
	e := get(t, store, ids[0])
	assert.Equal(t, ledger.OutboxStatusRetryScheduled, e.Status)
	require.NotNil(t, e.LastError)
	assert.Equal(t, dispatch.CodeClaimLost, e.LastError.Code)
}

func TestRenewalStopsWhenEmissionEnds(t *testing.T) {
	t.Parallel()
	clk := newClock()
	store := &renewingOutbox{Outbox: newOutbox(clk)}
	enqueue(t, store, "k", 2)
	timers := &fakeTimers{}
	d, err := dispatch.NewDispatcher(store, okEmitter(newEmissions()), baseOptions(clk, timers, newCounter())...)
	require.NoError(t, err)
	st, err := d.RunOnce(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 2, st.Delivered)
	assert.Zero(t, timers.Active(dispatch.DefaultLeaseDuration/3))
	assert.Zero(t, timers.Fire(dispatch.DefaultLeaseDuration/3))
	assert.Zero(t, store.Calls())
}

func TestRunPollsOnTheInjectedTimer(t *testing.T) {
	t.Parallel()
	clk := newClock()
	store := newOutbox(clk)
	timers := &fakeTimers{}
	obs := newCounter()
	const interval = 7 * time.Second
	d, err := dispatch.NewDispatcher(store, okEmitter(newEmissions()), append(baseOptions(clk, timers, obs),
		dispatch.WithPollInterval(interval), dispatch.WithoutPollJitter())...)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- d.Run(ctx) }()

	// The first cycle finds nothing and waits for the poll timer.
	require.Eventually(t, func() bool { return timers.Active(interval) == 1 }, waitLimit, time.Millisecond)
	ids := enqueue(t, store, "k", 3)
	require.Equal(t, 1, timers.Fire(interval))
	require.Eventually(t, func() bool { return timers.Active(interval) == 1 }, waitLimit, time.Millisecond)
	assert.Equal(t, 3, obs.Count(dispatch.EventDelivered))
	for _, id := range ids {
		assert.Equal(t, ledger.OutboxStatusDelivered, get(t, store, id).Status)
	}
	cancel()
	require.NoError(t, receive(t, runErr, "Run to return"))
	assert.Zero(t, timers.Active(interval), "the poll timer is stopped")
}

// TestOneTimerRenewsEveryEmissionOfACycle: a cycle's emissions in flight
// are renewed together, on one timer, and an emission that starts while
// others run is renewed at the cycle's next tick; one that ended is not.
func TestOneTimerRenewsEveryEmissionOfACycle(t *testing.T) {
	t.Parallel()
	clk := newClock()
	store := &renewingOutbox{Outbox: newOutbox(clk)}
	enqueue(t, store, "k", 3)
	timers := &fakeTimers{}
	em := newBlockingEmitter(true)
	obs := newCounter()
	const lease = 90 * time.Second
	const every = lease / 3
	d, err := dispatch.NewDispatcher(store, em, append(baseOptions(clk, timers, obs),
		dispatch.WithLeaseDuration(lease), dispatch.WithEmitTimeout(time.Minute), dispatch.WithConcurrency(2))...)
	require.NoError(t, err)

	done := runOnceAsync(context.Background(), d)
	receive(t, em.started, "first emission")
	receive(t, em.started, "second emission")
	require.Equal(t, 1, timers.Active(every), "one renewal timer for the cycle, not one per emission")
	clk.Advance(every)
	require.Equal(t, 1, timers.Fire(every))
	assert.Equal(t, 2, store.Calls(), "the tick renewed both claims")

	em.proceed <- struct{}{}
	receive(t, em.started, "third emission, in the place of the one that ended")
	require.Equal(t, 1, timers.Active(every))
	clk.Advance(every)
	require.Equal(t, 1, timers.Fire(every))
	assert.Equal(t, 4, store.Calls(), "the tick renewed the two claims in flight, not the ended one")

	em.proceed <- struct{}{}
	em.proceed <- struct{}{}
	res := receive(t, done, "RunOnce")
	require.NoError(t, res.err)
	assert.Equal(t, 3, res.stats.Delivered)
	assert.Equal(t, 4, res.stats.Renewed)
	assert.Zero(t, timers.Active(every), "no renewal after the cycle's emissions ended")
}
