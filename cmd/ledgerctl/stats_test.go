package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

func TestShowHistory(t *testing.T) {
	t.Parallel()
	f := migrated(t)
	f.enqueue("d1", "host-a", "c1")
	owner := ledger.Owner{Agent: "host-a", Incarnation: "boot-1"}
	leased, err := f.store.Lease(t.Context(), ledger.LeaseFilter{}, owner, f.now.Add(-time.Minute), time.Minute, 1)
	require.NoError(t, err)
	require.Len(t, leased.Leased, 1)
	r := f.run("abandon", "d1", "-cause", "queue_bounded", "-detail", "oldest dropped")
	require.Equal(t, exitOK, r.code, r.stderr)

	doc := decode[showJSON](t, f.run("show", "d1", "-json"))
	var ops []ledger.Operation
	for _, tr := range doc.History {
		ops = append(ops, tr.Op)
	}
	assert.Equal(t, []ledger.Operation{ledger.OpEnqueue, ledger.OpLease, ledger.OpAbandon}, ops)
	require.Len(t, doc.History, 3)
	assert.Equal(t, owner.String(), doc.History[1].Actor)
	assert.Equal(t, "queue_bounded: oldest dropped", doc.History[2].Reason)

	r = f.run("show", "d1")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "history (3 transitions)")
	assert.Contains(t, r.stdout, "queue_bounded: oldest dropped")
	assert.Contains(t, r.stdout, owner.String())
}

func TestStats(t *testing.T) {
	t.Parallel()
	f := migrated(t)
	for _, id := range []string{"a1", "a2", "a3"} {
		f.enqueue(id, "host-a", "c1")
	}
	f.enqueue("b1", "host-b", "c2")
	r := f.run("abandon", "a1", "-cause", "queue_bounded")
	require.Equal(t, exitOK, r.code, r.stderr)
	_, err := f.store.Outbox().Enqueue(t.Context(), ledger.Envelope{Provider: "mail", Kind: "k", IdempotencyKey: "e1"})
	require.NoError(t, err)

	doc := decode[statsJSON](t, f.run("stats", "-json"))
	assert.Equal(t, int64(3), doc.Deliveries.ByState[ledger.DeliveryStateOffered])
	assert.Equal(t, int64(1), doc.Deliveries.ByState[ledger.DeliveryStateExpired])
	assert.Equal(t, map[ledger.CauseKind]int64{ledger.CauseQueueBounded: 1}, doc.Deliveries.ByCause)
	assert.Equal(t, int64(3), doc.Deliveries.Depth)
	// Seeds are enqueued an hour before the fixture's now; the command
	// runs a little later still.
	assert.GreaterOrEqual(t, doc.Deliveries.Lag, time.Hour)
	require.NotNil(t, doc.Outbox)
	assert.Equal(t, int64(1), doc.Outbox.ByStatus[ledger.OutboxStatusPending])

	doc = decode[statsJSON](t, f.run("stats", "-json", "-target", "host-b"))
	assert.Equal(t, int64(1), doc.Deliveries.ByState[ledger.DeliveryStateOffered])
	assert.Equal(t, int64(0), doc.Deliveries.ByState[ledger.DeliveryStateExpired])
	assert.Nil(t, doc.Outbox, "a filtered view leaves the unfiltered outbox out")

	r = f.run("stats")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "expired: queue_bounded")
	assert.Contains(t, r.stdout, "depth (offerable now)")
	assert.Contains(t, r.stdout, "OUTBOX")

	r = f.run("stats", "-target", "bad\x00target")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, "target")
	assert.Equal(t, exitUsage, f.run("stats", "extra").code)
}
