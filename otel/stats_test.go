package ledgerotel_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/memstore"
	ledgerotel "github.com/leaseledger/ledger/otel"
)

// countingStats counts the Stats and OutboxStats calls made of a store.
type countingStats struct {
	*memstore.Store
	outbox      *memstore.Outbox
	calls       atomic.Int64
	outboxCalls atomic.Int64
	filters     chan ledger.StatsFilter
	fail        atomic.Bool
}

func (c *countingStats) Stats(ctx context.Context, f ledger.StatsFilter, now time.Time) (ledger.DeliveryStats, error) {
	c.calls.Add(1)
	select {
	case c.filters <- f:
	default:
	}
	if c.fail.Load() {
		return ledger.DeliveryStats{}, errUnreachable
	}
	return c.Store.Stats(ctx, f, now)
}

func (c *countingStats) OutboxStats(ctx context.Context, now time.Time) (ledger.OutboxStats, error) {
	c.outboxCalls.Add(1)
	return c.outbox.OutboxStats(ctx, now)
}

var errUnreachable = errors.New("database unreachable")

func newCountingStats(clk *testClock) *countingStats {
	s := memstore.New(memstore.WithClock(clk.Now))
	return &countingStats{Store: s, outbox: s.Outbox(), filters: make(chan ledger.StatsFilter, 16)}
}

// TestOneStatsCallPerCollection: whatever the number of instruments the
// stats feed, a collection asks each reporter once (once per target when
// targets are given).
func TestOneStatsCallPerCollection(t *testing.T) {
	t.Parallel()
	clk := newClock()
	h := newHarness(t, clk)
	cs := newCountingStats(clk)
	_, err := cs.Enqueue(t.Context(), ledger.EnqueueRequest{ID: "d1", Target: "host-1"}, clk.Now())
	require.NoError(t, err)
	_, err = cs.outbox.Enqueue(t.Context(), ledger.Envelope{Provider: "mail", Kind: "welcome", IdempotencyKey: "k1"})
	require.NoError(t, err)
	_, err = h.inst.ObserveStats(cs)
	require.NoError(t, err)
	_, err = h.inst.ObserveOutboxStats(ledger.OutboxStatsReporter(cs))
	require.NoError(t, err)

	clk.Advance(time.Minute)
	ms := h.collect(t)
	assert.Equal(t, int64(1), cs.calls.Load(), "one Stats call for the three delivery instruments")
	assert.Equal(t, int64(1), cs.outboxCalls.Load(), "one OutboxStats call for the three outbox instruments")
	assert.Equal(t, ledger.StatsFilter{}, <-cs.filters, "the whole ledger")
	assert.Equal(t, map[string]int64{"": 1}, gauges[int64](t, ms[ledgerotel.DeliveryDepth]))
	assert.Equal(t, map[string]float64{"": 60}, gauges[float64](t, ms[ledgerotel.DeliveryLag]), "waiting a minute, at the Instrumentation's clock")
	assert.Equal(t, map[string]int64{"": 1}, gauges[int64](t, ms[ledgerotel.OutboxDepth]))
	assert.Equal(t, map[string]float64{"": 60}, gauges[float64](t, ms[ledgerotel.OutboxLag]))

	h.collect(t)
	assert.Equal(t, int64(2), cs.calls.Load(), "one more per collection")
	assert.Equal(t, int64(2), cs.outboxCalls.Load())
}

func TestStatsByTarget(t *testing.T) {
	t.Parallel()
	clk := newClock()
	h := newHarness(t, clk)
	cs := newCountingStats(clk)
	for id, target := range map[ledger.DeliveryID]ledger.Target{"d1": "host-1", "d2": "host-1", "d3": "host-2"} {
		_, err := cs.Enqueue(t.Context(), ledger.EnqueueRequest{ID: id, Target: target}, clk.Now())
		require.NoError(t, err)
	}
	_, err := h.inst.ObserveStats(cs, "host-1", "host-2")
	require.NoError(t, err)
	ms := h.collect(t)
	assert.Equal(t, int64(2), cs.calls.Load(), "one call per target")
	dest := "messaging.destination.name="
	assert.Equal(t, map[string]int64{dest + "host-1": 2, dest + "host-2": 1}, gauges[int64](t, ms[ledgerotel.DeliveryDepth]))
	records := sums(t, ms[ledgerotel.DeliveryRecords])
	assert.Equal(t, int64(2), records["leaseledger.delivery.state=offered,"+dest+"host-1"])
	assert.Len(t, records, 2*len(ledger.DeliveryStates()), "every state of every target")

	_, err = h.inst.ObserveStats(cs, "bad\ntarget")
	assert.ErrorIs(t, err, ledger.ErrInvalid)
	_, err = h.inst.ObserveStats(nil)
	assert.Error(t, err)
}

// TestFailedStatsLeaveTheirPointsOut: a store that fails leaves its
// gauges out of the collection, and the others are still collected.
func TestFailedStatsLeaveTheirPointsOut(t *testing.T) {
	t.Parallel()
	clk := newClock()
	h := newHarness(t, clk)
	cs := newCountingStats(clk)
	cs.fail.Store(true)
	_, err := h.inst.ObserveStats(cs)
	require.NoError(t, err)
	_, err = h.inst.ObserveOutboxStats(ledger.OutboxStatsReporter(cs))
	require.NoError(t, err)
	ms, err := h.collectErr(t)
	require.ErrorIs(t, err, errUnreachable, "the collection reports the failure")
	_, has := ms[ledgerotel.DeliveryDepth]
	assert.False(t, has, "no points from a failed call")
	assert.Equal(t, map[string]int64{"": 0}, gauges[int64](t, ms[ledgerotel.OutboxDepth]))
}
