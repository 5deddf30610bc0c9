package ledgerotel_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	ledgerotel "github.com/leaseledger/ledger/otel"
	"github.com/leaseledger/ledger/pgstore"
	"github.com/leaseledger/ledger/pgstore/pgstoretest"
)

// TestScenarioOnPgstore runs the scenario on PostgreSQL: the trace
// context goes through the metadata column, and the metrics and spans
// are those of the in-memory run.
func TestScenarioOnPgstore(t *testing.T) {
	t.Parallel()
	clk := newClock()
	h := newHarness(t, clk)
	store, _ := pgstoretest.New(t, pgstore.WithClock(clk.Now), pgstore.WithLogger(quiet()))
	_, err := h.inst.ObserveStats(store, "host-1", "host-2")
	require.NoError(t, err)
	_, err = h.inst.ObserveOutboxStats(store.Outbox())
	require.NoError(t, err)

	r := runScenario(t, h, clk, store, store.Outbox(), true)
	requireScenarioMetrics(t, h, r)
	requireScenarioSpans(t, h, r, true)

	ms := h.collect(t)
	records := sums(t, ms[ledgerotel.DeliveryRecords])
	assert.Equal(t, int64(2), records["leaseledger.delivery.state=processed"])
	assert.Equal(t, int64(1), records["leaseledger.delivery.state=offered"])
	assert.Equal(t, map[string]int64{dest + "host-1": 0, dest + "host-2": 0}, gauges[int64](t, ms[ledgerotel.DeliveryDepth]),
		"the targets asked for, at zero while the retry waits for its backoff")
	entries := sums(t, ms[ledgerotel.OutboxEntries])
	assert.Equal(t, int64(2), entries["leaseledger.outbox.status=delivered"])
	assert.Equal(t, int64(1), entries["leaseledger.outbox.status=retry_scheduled"])
	assert.Equal(t, int64(1), entries["leaseledger.outbox.status=dead_lettered"])

	// Once the backoffs have passed, the queues are read by target and
	// by provider from the statement's breakdown.
	clk.Advance(2 * time.Hour)
	ms = h.collect(t)
	assert.Equal(t, map[string]int64{dest + "host-1": 0, dest + "host-2": 1}, gauges[int64](t, ms[ledgerotel.DeliveryDepth]))
	assert.Positive(t, gauges[float64](t, ms[ledgerotel.DeliveryLag])[dest+"host-2"])
	assert.Equal(t, map[string]int64{dest + "sms": 1}, gauges[int64](t, ms[ledgerotel.OutboxDepth]))
	assert.Positive(t, gauges[float64](t, ms[ledgerotel.OutboxLag])[dest+"sms"])
}
