package ledgerotel_test

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger/dispatch"
	ledgerotel "github.com/leaseledger/ledger/otel"
)

// TestSweepEventsAreTheirOwnMetric: a Sweeper's events count in
// leaseledger.sweep.events by job, the records its sweeps changed in
// leaseledger.sweep.records, and none of them in the outbox's events,
// where a sweeper's events used to land.
func TestSweepEventsAreTheirOwnMetric(t *testing.T) {
	h := newHarness(t, newClock())
	for _, ev := range []dispatch.Event{
		{Kind: dispatch.EventLeadTaken, Job: dispatch.SweepExpire, Outcome: "applied"},
		{Kind: dispatch.EventSwept, Job: dispatch.SweepExpire, Count: 7},
		{Kind: dispatch.EventSwept, Job: dispatch.SweepExpire, Count: 3},
		{Kind: dispatch.EventSwept, Job: dispatch.SweepPurgeDeliveries, Count: 1000},
		{Kind: dispatch.EventSweepFailed, Job: dispatch.SweepPurgeEntries, Err: errors.New("connection reset")},
	} {
		h.inst.Observe(ev)
	}
	ms := h.collect(t)
	const ev, job, errType = "leaseledger.event", "leaseledger.sweep.job", "error.type"
	assert.Equal(t, map[string]int64{
		lbl(ev, "lead_taken", job, string(dispatch.SweepExpire), "leaseledger.outcome", "applied"): 1,
		lbl(ev, "swept", job, string(dispatch.SweepExpire)):                                        2,
		lbl(ev, "swept", job, string(dispatch.SweepPurgeDeliveries)):                               1,
		lbl(ev, "sweep_failed", job, string(dispatch.SweepPurgeEntries), errType, "store_error"):   1,
	}, sums(t, ms[ledgerotel.SweepEvents]))
	assert.Equal(t, "{record}", ms[ledgerotel.SweepRecords].Unit)
	assert.Equal(t, map[string]int64{
		lbl(job, string(dispatch.SweepExpire)):          10,
		lbl(job, string(dispatch.SweepPurgeDeliveries)): 1000,
	}, sums(t, ms[ledgerotel.SweepRecords]))
	assert.NotContains(t, ms, ledgerotel.OutboxEvents, "no sweep event is an outbox event")
	assert.Empty(t, h.spans.Ended(), "a sweep has no item, so no span")
}

// TestVersionIsTheLatestRelease ties the scope version to the changelog:
// a release bumps both.
func TestVersionIsTheLatestRelease(t *testing.T) {
	log, err := os.ReadFile(filepath.Join("..", "CHANGELOG.md"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^## \[(\d+\.\d+\.\d+)\]`).FindSubmatch(log)
	require.NotNil(t, m, "a released version in the changelog")
	assert.Equal(t, string(m[1]), ledgerotel.Version)
}
