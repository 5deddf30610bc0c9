package ledgerotel_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger/memstore"
	ledgerotel "github.com/leaseledger/ledger/otel"
)

// TestScenarioOnMemstore runs the scenario on memstore and checks its
// metrics, its gauges and its spans.
func TestScenarioOnMemstore(t *testing.T) {
	t.Parallel()
	for _, wrap := range []bool{true, false} {
		name := map[bool]string{true: "Wrapped", false: "ObserverOnly"}[wrap]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			h := newHarness(t, clk)
			store := memstore.New(memstore.WithClock(clk.Now))
			outbox := store.Outbox()
			_, err := h.inst.ObserveStats(store)
			require.NoError(t, err)
			_, err = h.inst.ObserveOutboxStats(outbox)
			require.NoError(t, err)

			r := runScenario(t, h, clk, store, outbox, wrap)
			requireScenarioMetrics(t, h, r)
			requireScenarioSpans(t, h, r, wrap)

			ms := h.collect(t)
			st := `leaseledger.delivery.state=`
			assert.Equal(t, map[string]int64{
				(st + "offered"): 1, (st + "leased"): 0, (st + "acknowledged"): 0,
				(st + "processed"): 2, (st + "failed"): 0, (st + "expired"): 0,
			}, sums(t, ms[ledgerotel.DeliveryRecords]))
			assert.Equal(t, "{delivery}", ms[ledgerotel.DeliveryRecords].Unit)
			for _, name := range []string{ledgerotel.DeliveryDepth, ledgerotel.DeliveryLag, ledgerotel.OutboxDepth, ledgerotel.OutboxLag} {
				_, has := ms[name]
				assert.False(t, has, "%s: the retried items wait for their backoff, and nothing was due at any collection", name)
			}
			ss := `leaseledger.outbox.status=`
			assert.Equal(t, map[string]int64{
				(ss + "pending"): 0, (ss + "retry_scheduled"): 1, (ss + "deferred"): 0,
				(ss + "delivered"): 2, (ss + "failed"): 0, (ss + "dead_lettered"): 1,
			}, sums(t, ms[ledgerotel.OutboxEntries]))

			// Once the backoffs have passed, the retried delivery is
			// queued on its target and the retried entry on its provider.
			clk.Advance(2 * time.Hour)
			ms = h.collect(t)
			assert.Equal(t, map[string]int64{dest + "host-2": 1}, gauges[int64](t, ms[ledgerotel.DeliveryDepth]))
			assert.Equal(t, "{delivery}", ms[ledgerotel.DeliveryDepth].Unit)
			lag := gauges[float64](t, ms[ledgerotel.DeliveryLag])[dest+"host-2"]
			assert.True(t, lag > 0 && lag < 7200, "waited less than the two hours, but waited: %v", lag)
			assert.Equal(t, "s", ms[ledgerotel.DeliveryLag].Unit)
			assert.Equal(t, map[string]int64{dest + "sms": 1}, gauges[int64](t, ms[ledgerotel.OutboxDepth]))
			assert.Equal(t, "{entry}", ms[ledgerotel.OutboxDepth].Unit)
			lag = gauges[float64](t, ms[ledgerotel.OutboxLag])[dest+"sms"]
			assert.True(t, lag > 0 && lag < 7200, "waited less than the two hours, but waited: %v", lag)
		})
	}
}
