package ledgerotel_test

import (
	"context"
	"errors"
	"fmt"
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

// dest labels a point with a target or a provider.
const dest = "messaging.destination.name="

// TestOneStatsCallPerCollection: whatever the number of instruments the
// stats feed, and of targets asked for, a collection asks each reporter
// once, for the whole ledger or outbox.
func TestOneStatsCallPerCollection(t *testing.T) {
	t.Parallel()
	for _, targets := range [][]ledger.Target{nil, {"host-1", "host-2", "host-3"}} {
		t.Run(fmt.Sprintf("%d targets", len(targets)), func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			h := newHarness(t, clk)
			cs := newCountingStats(clk)
			_, err := cs.Enqueue(t.Context(), ledger.EnqueueRequest{ID: "d1", Target: "host-1"}, clk.Now())
			require.NoError(t, err)
			_, err = cs.outbox.Enqueue(t.Context(), ledger.Envelope{Provider: "mail", Kind: "welcome", IdempotencyKey: "k1"})
			require.NoError(t, err)
			_, err = h.inst.ObserveStats(cs, targets...)
			require.NoError(t, err)
			_, err = h.inst.ObserveOutboxStats(ledger.OutboxStatsReporter(cs))
			require.NoError(t, err)

			clk.Advance(time.Minute)
			ms := h.collect(t)
			assert.Equal(t, int64(1), cs.calls.Load(), "one Stats call for the three delivery instruments and every target")
			assert.Equal(t, int64(1), cs.outboxCalls.Load(), "one OutboxStats call for the three outbox instruments")
			assert.Equal(t, ledger.StatsFilter{}, <-cs.filters, "the whole ledger")
			depth, lag := map[string]int64{dest + "host-1": 1}, map[string]float64{dest + "host-1": 60}
			for _, tg := range targets {
				if tg != "host-1" {
					depth[dest+string(tg)], lag[dest+string(tg)] = 0, 0
				}
			}
			assert.Equal(t, depth, gauges[int64](t, ms[ledgerotel.DeliveryDepth]))
			assert.Equal(t, lag, gauges[float64](t, ms[ledgerotel.DeliveryLag]), "waiting a minute, at the Instrumentation's clock")
			assert.Equal(t, map[string]int64{dest + "mail": 1}, gauges[int64](t, ms[ledgerotel.OutboxDepth]))
			assert.Equal(t, map[string]float64{dest + "mail": 60}, gauges[float64](t, ms[ledgerotel.OutboxLag]))

			h.collect(t)
			assert.Equal(t, int64(2), cs.calls.Load(), "one more per collection")
			assert.Equal(t, int64(2), cs.outboxCalls.Load())
		})
	}
}

// TestStatsByTarget: the depth and lag of each target come from the one
// call; a target whose queue empties reads zero; given targets filter
// the labels.
func TestStatsByTarget(t *testing.T) {
	t.Parallel()
	clk := newClock()
	h := newHarness(t, clk)
	cs := newCountingStats(clk)
	for id, target := range map[ledger.DeliveryID]ledger.Target{"d1": "host-1", "d2": "host-1", "d3": "host-2", "d4": "host-3"} {
		_, err := cs.Enqueue(t.Context(), ledger.EnqueueRequest{ID: id, Target: target}, clk.Now())
		require.NoError(t, err)
	}
	later := ledger.EnqueueRequest{ID: "d5", Target: "host-4", AvailableAt: clk.Now().Add(time.Hour)}
	_, err := cs.Enqueue(t.Context(), later, clk.Now())
	require.NoError(t, err)
	_, err = h.inst.ObserveStats(cs)
	require.NoError(t, err)
	clk.Advance(30 * time.Second)
	ms := h.collect(t)
	assert.Equal(t, int64(1), cs.calls.Load(), "one call for every target")
	assert.Equal(t, map[string]int64{dest + "host-1": 2, dest + "host-2": 1, dest + "host-3": 1},
		gauges[int64](t, ms[ledgerotel.DeliveryDepth]), "host-4 has nothing due yet")
	assert.Equal(t, map[string]float64{dest + "host-1": 30, dest + "host-2": 30, dest + "host-3": 30},
		gauges[float64](t, ms[ledgerotel.DeliveryLag]))
	records := sums(t, ms[ledgerotel.DeliveryRecords])
	assert.Equal(t, int64(5), records["leaseledger.delivery.state=offered"], "records by state are the whole ledger's")
	assert.Len(t, records, len(ledger.DeliveryStates()), "one point per state, no target")

	// host-2's queue empties: its series reads zero, not nothing.
	res, err := cs.Lease(t.Context(), ledger.LeaseFilter{Targets: []ledger.Target{"host-2"}}, ledger.Owner{Agent: "a", Incarnation: "i"}, clk.Now(), time.Hour, 10)
	require.NoError(t, err)
	require.Len(t, res.Leased, 1)
	ms = h.collect(t)
	assert.Equal(t, map[string]int64{dest + "host-1": 2, dest + "host-2": 0, dest + "host-3": 1},
		gauges[int64](t, ms[ledgerotel.DeliveryDepth]))
	assert.Equal(t, float64(0), gauges[float64](t, ms[ledgerotel.DeliveryLag])[dest+"host-2"])

	// Given targets, only they are reported, each at every collection.
	h2 := newHarness(t, clk)
	_, err = h2.inst.ObserveStats(cs, "host-2", "host-1", "host-9", "host-1")
	require.NoError(t, err)
	ms = h2.collect(t)
	assert.Equal(t, map[string]int64{dest + "host-1": 2, dest + "host-2": 0, dest + "host-9": 0},
		gauges[int64](t, ms[ledgerotel.DeliveryDepth]))

	_, err = h.inst.ObserveStats(cs, "bad\ntarget")
	assert.ErrorIs(t, err, ledger.ErrInvalid)
	_, err = h.inst.ObserveStats(nil)
	assert.Error(t, err)
}

// TestOutboxStatsByProvider: depth and lag by provider, from one
// OutboxStats call.
func TestOutboxStatsByProvider(t *testing.T) {
	t.Parallel()
	clk := newClock()
	h := newHarness(t, clk)
	cs := newCountingStats(clk)
	for key, provider := range map[string]string{"k1": "mail", "k2": "mail", "k3": "sms"} {
		_, err := cs.outbox.Enqueue(t.Context(), ledger.Envelope{Provider: provider, Kind: "welcome", IdempotencyKey: key})
		require.NoError(t, err)
	}
	_, err := h.inst.ObserveOutboxStats(ledger.OutboxStatsReporter(cs))
	require.NoError(t, err)
	clk.Advance(2 * time.Minute)
	ms := h.collect(t)
	assert.Equal(t, int64(1), cs.outboxCalls.Load())
	assert.Equal(t, map[string]int64{dest + "mail": 2, dest + "sms": 1}, gauges[int64](t, ms[ledgerotel.OutboxDepth]))
	assert.Equal(t, map[string]float64{dest + "mail": 120, dest + "sms": 120}, gauges[float64](t, ms[ledgerotel.OutboxLag]))
	entries := sums(t, ms[ledgerotel.OutboxEntries])
	assert.Equal(t, int64(3), entries["leaseledger.outbox.status=pending"])
	assert.Len(t, entries, len(ledger.OutboxStatuses()), "one point per status, no provider")

	h2 := newHarness(t, clk)
	_, err = h2.inst.ObserveOutboxStats(ledger.OutboxStatsReporter(cs), "sms", "push")
	require.NoError(t, err)
	ms = h2.collect(t)
	assert.Equal(t, map[string]int64{dest + "push": 0, dest + "sms": 1}, gauges[int64](t, ms[ledgerotel.OutboxDepth]))
	_, err = h.inst.ObserveOutboxStats(ledger.OutboxStatsReporter(cs), "")
	assert.ErrorIs(t, err, ledger.ErrInvalid)
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
	assert.Equal(t, int64(0), sums(t, ms[ledgerotel.OutboxEntries])["leaseledger.outbox.status=pending"], "the outbox's points are collected")
}
