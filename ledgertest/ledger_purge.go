package ledgertest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// testPurgeDeliveries checks Purger.PurgeDeliveries: retention deletes
// terminal deliveries that ended before the cutoff, oldest first, a
// bounded batch per call, and never an open one.
func testPurgeDeliveries(t *testing.T, newLedger NewLedgerFunc) {
	runLedgerRules(t, newLedger, []ledgerRule{
		{"DeletesOnlyEndedBeforeTheCutoff", purgeDeletesOnlyEndedBeforeTheCutoff},
		{"OldestFirstAndBounded", purgeOldestFirstAndBounded},
		{"InvalidIsRejected", purgeInvalidIsRejected},
		{"AnIDCanBeEnqueuedAgainAfterPurge", purgeAnIDCanBeEnqueuedAgain},
	})
}

// purger returns the ledger's Purger. Every store this project ships
// implements it, so a store without it fails the group.
func (f *ledgerFixture) purger() ledger.Purger {
	f.t.Helper()
	p, ok := f.l.(ledger.Purger)
	if !ok {
		f.t.Fatalf("%T does not implement ledger.Purger", f.l)
	}
	return p
}

// purge calls PurgeDeliveries and requires no error.
func (f *ledgerFixture) purge(olderThan time.Time, limit int) int {
	f.t.Helper()
	n, err := f.purger().PurgeDeliveries(f.ctx, olderThan, limit)
	require.NoError(f.t, err)
	return n
}

// abandoned enqueues id at enqueued and ends it as Expired at ended, so
// that its EndedAt is exactly ended.
func (f *ledgerFixture) abandoned(id ledger.DeliveryID, enqueued, ended time.Time) ledger.Delivery {
	f.t.Helper()
	f.enqueue(req(id, "host-1"), enqueued)
	cause := ledger.Cause{Kind: ledger.CauseQueueBounded}
	d := f.applied(f.get(id), ended)(f.l.Abandon(f.ctx, id, cause, ended))
	require.Equal(f.t, ledger.Normalize(ended), d.EndedAt)
	return d
}

func purgeDeletesOnlyEndedBeforeTheCutoff(t *testing.T, f *ledgerFixture) {
	cutoff := at(time.Hour)
	// Open deliveries of every open state, all far older than the cutoff.
	f.enqueue(req("open-offered", "host-1"), t0)
	f.enqueue(req("open-leased", "host-2"), t0)
	f.leaseOne("open-leased", ownerA, t0)
	f.acknowledged("open-acked", "host-3", ownerB, t0)
	open := []ledger.Delivery{f.get("open-offered"), f.get("open-leased"), f.get("open-acked")}
	// Terminal deliveries ended long before, just before, at and after the
	// cutoff, each of a different terminal state.
	f.abandoned("old-expired", t0, at(time.Minute))
	f.acknowledged("old-processed", "host-4", ownerA, t0)
	proc := f.process("old-processed", ownerA, nil, cutoff.Add(-time.Microsecond))
	require.Equal(t, ledger.DeliveryStateProcessed, proc.State)
	atCutoff := f.abandoned("at-cutoff", t0, cutoff)
	after := f.abandoned("after-cutoff", t0, cutoff.Add(time.Second))

	require.Equal(t, 2, f.purge(cutoff, ledger.MaxLimit), "the two deliveries that ended before the cutoff go")
	f.requireAbsent("old-expired")
	f.requireAbsent("old-processed")
	f.requireUnchanged(atCutoff)
	f.requireUnchanged(after)
	for _, d := range open {
		f.requireUnchanged(d)
	}
	require.Equal(t, 0, f.purge(cutoff, ledger.MaxLimit), "nothing is left before the cutoff")

	// A cutoff past everything takes every terminal delivery, and still
	// no open one, whatever its age.
	require.Equal(t, 2, f.purge(storekit.MaxTime(), ledger.MaxLimit))
	f.requireAbsent("at-cutoff")
	f.requireAbsent("after-cutoff")
	for _, d := range open {
		f.requireUnchanged(d)
	}
	require.ElementsMatch(t, []ledger.DeliveryID{"open-acked", "open-leased", "open-offered"}, deliveryIDs(f.all()))
}

func purgeOldestFirstAndBounded(t *testing.T, f *ledgerFixture) {
	// Ended in an order that is neither ID order nor enqueue order; two
	// share an end time, so that the ID breaks the tie.
	ends := []struct {
		id  ledger.DeliveryID
		end time.Duration
	}{
		{"d-a", 5 * time.Minute},
		{"d-b", 2 * time.Minute},
		{"d-e", 3 * time.Minute},
		{"d-c", 3 * time.Minute},
		{"d-d", 1 * time.Minute},
	}
	for _, e := range ends {
		f.abandoned(e.id, t0, at(e.end))
	}
	oldestFirst := []ledger.DeliveryID{"d-d", "d-b", "d-c", "d-e", "d-a"}
	cutoff := at(time.Hour)
	for i, n := range []int{2, 2, 1} {
		require.Equal(t, n, f.purge(cutoff, 2), "call %d", i+1)
		gone := oldestFirst[:min(2*(i+1), len(oldestFirst))]
		for _, id := range oldestFirst {
			if slices.Contains(gone, id) {
				f.requireAbsent(id)
			} else {
				f.get(id)
			}
		}
	}
	require.Equal(t, 0, f.purge(cutoff, 2), "a purge with nothing left deletes nothing")
	require.Empty(t, f.all())
}

func purgeInvalidIsRejected(t *testing.T, f *ledgerFixture) {
	d := f.abandoned("d-ended", t0, at(time.Minute))
	p := f.purger()
	cutoff := at(time.Hour)
	for _, c := range []struct {
		name      string
		olderThan time.Time
		limit     int
	}{
		{"ZeroTime", time.Time{}, 10},
		{"TimeBeyondMax", storekit.MaxTime().Add(time.Hour), 10},
		{"ZeroLimit", cutoff, 0},
		{"NegativeLimit", cutoff, -1},
		{"LimitAboveMax", cutoff, ledger.MaxLimit + 1},
	} {
		n, err := p.PurgeDeliveries(f.ctx, c.olderThan, c.limit)
		requireInvalid(t, err)
		require.Zero(t, n, c.name)
		f.requireUnchanged(d)
	}
	n, err := p.PurgeDeliveries(nilContext(), cutoff, 10)
	require.ErrorIs(t, err, ledger.ErrInvalid, "a nil context")
	require.Zero(t, n)
	f.requireUnchanged(d)
	n, err = p.PurgeDeliveries(cancelledContext(t), cutoff, 10)
	require.ErrorIs(t, err, context.Canceled, "a cancelled context")
	require.Zero(t, n)
	f.requireUnchanged(d)
}

func purgeAnIDCanBeEnqueuedAgain(t *testing.T, f *ledgerFixture) {
	f.abandoned("d-again", t0, at(time.Minute))
	require.Equal(t, 1, f.purge(at(time.Hour), 1))
	f.requireAbsent("d-again")
	now := at(2 * time.Hour)
	r := req("d-again", "host-9")
	r.Payload = []byte(fmt.Sprintf("another payload at %s", now))
	d := f.enqueue(r, now)
	require.Equal(t, ledger.DeliveryStateOffered, d.State, "a purged ID starts over as a new delivery")
	require.Equal(t, ledger.Target("host-9"), d.Target)
	require.Equal(t, now, d.CreatedAt)
	require.Zero(t, d.Attempts)
	require.Equal(t, d, f.get("d-again"))
	require.Equal(t, []ledger.DeliveryID{"d-again"}, f.leaseIDs(ledger.LeaseFilter{}, ownerA, now, 10))
}
