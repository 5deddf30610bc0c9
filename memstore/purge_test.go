package memstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// TestPurgeKeepsEveryIndex purges ended deliveries scattered among open
// ones of every kind, a few at a time, and after each call rebuilds every
// index from the records (checkStore): a purge moves the last record into
// each emptied slot, so an index keyed by slot that missed the move shows
// up here, and the survivors must still lease and expire as before.
func TestPurgeKeepsEveryIndex(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := New()
	owner := ledger.Owner{Agent: "agent", Incarnation: "boot"}
	pol := ledger.Policy{MaxAttempts: 3, BackoffBase: time.Second, BackoffMax: time.Minute, AckWindow: time.Hour}
	var open, ended []ledger.DeliveryID
	for i := range 90 {
		id := ledger.DeliveryID(fmt.Sprintf("d-%02d", i))
		// Each delivery's own target lets Lease pick exactly it.
		target := ledger.Target(fmt.Sprintf("t-%02d", i))
		only := ledger.LeaseFilter{Targets: []ledger.Target{target}}
		r := ledger.EnqueueRequest{ID: id, Target: target, Payload: []byte(id), Policy: pol}
		if i%5 == 0 {
			r.Ceremony = ledger.CeremonyID(fmt.Sprintf("c-%d", i%3))
		}
		_, err := s.Enqueue(ctx, r, t0.Add(time.Duration(i)*time.Second))
		require.NoError(t, err)
		switch i % 6 {
		case 0, 3: // ended, at a time that does not follow the slot order
			res, err := s.Abandon(ctx, id, ledger.Cause{Kind: ledger.CauseQueueBounded}, t0.Add(time.Duration(90-i)*time.Minute))
			require.NoError(t, err)
			require.True(t, res.Applied())
			ended = append(ended, id)
		case 1: // leased
			res, err := s.Lease(ctx, only, owner, t0.Add(time.Duration(i)*time.Second), time.Hour, 1)
			require.NoError(t, err)
			require.Len(t, res.Leased, 1)
			require.Equal(t, id, res.Leased[0].Delivery.ID)
			open = append(open, id)
		case 2: // acknowledged
			res, err := s.Lease(ctx, only, owner, t0.Add(time.Duration(i)*time.Second), time.Hour, 1)
			require.NoError(t, err)
			require.Len(t, res.Leased, 1)
			ack, err := s.Acknowledge(ctx, res.Leased[0].Lease, "seen", t0.Add(time.Duration(i)*time.Second))
			require.NoError(t, err)
			require.True(t, ack.Applied())
			open = append(open, id)
		default: // offered
			open = append(open, id)
		}
	}
	require.NoError(t, checkStore(s))
	before := make(map[ledger.DeliveryID]ledger.Delivery, len(open))
	for _, id := range open {
		d, err := s.Get(ctx, id)
		require.NoError(t, err)
		before[id] = d
	}

	cutoff := t0.Add(24 * time.Hour)
	purged := 0
	for {
		n, err := s.PurgeDeliveries(ctx, cutoff, 7)
		require.NoError(t, err)
		require.NoError(t, checkStore(s), "after purging %d", purged+n)
		purged += n
		if n < 7 {
			break
		}
	}
	require.Equal(t, len(ended), purged)
	for _, id := range ended {
		_, err := s.Get(ctx, id)
		require.ErrorIs(t, err, ledger.ErrNotFound, id)
	}
	for id, d := range before {
		got, err := s.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, d, got, "a purge leaves open records untouched")
	}

	// The moved records still work through every index: the offered ones
	// lease in (AvailableAt, ID) order, and the rest expire.
	res, err := s.Lease(ctx, ledger.LeaseFilter{}, owner, t0.Add(2*time.Minute), time.Minute, ledger.MaxLimit)
	require.NoError(t, err)
	var offered []ledger.DeliveryID
	for _, id := range open {
		if before[id].State == ledger.DeliveryStateOffered {
			offered = append(offered, id)
		}
	}
	var leased []ledger.DeliveryID
	for _, ld := range res.Leased {
		leased = append(leased, ld.Delivery.ID)
	}
	require.Equal(t, offered, leased)
	require.NoError(t, checkStore(s))
	sw, err := s.Expire(ctx, t0.Add(48*time.Hour))
	require.NoError(t, err)
	require.NotEmpty(t, sw.Changed)
	require.NoError(t, checkStore(s))
	for _, id := range open {
		if d, err := s.Get(ctx, id); err == nil && !d.State.Terminal() {
			_, err := s.Abandon(ctx, id, ledger.Cause{Kind: ledger.CauseQueueBounded}, t0.Add(49*time.Hour))
			require.NoError(t, err)
		}
	}
	require.NoError(t, checkStore(s))

	// Everything has ended now: one more purge empties the store.
	n, err := s.PurgeDeliveries(ctx, storekit.MaxTime(), ledger.MaxLimit)
	require.NoError(t, err)
	require.Equal(t, len(open), n)
	require.NoError(t, checkStore(s))
	page, err := s.List(ctx, ledger.ListQuery{Limit: ledger.MaxLimit})
	require.NoError(t, err)
	require.Empty(t, page.Deliveries)
}

// TestPurgeEntriesKeepsTheIndexes purges ended outbox entries and checks
// that the entries, their enqueue sequences and both indexes agree
// (checkOutbox), also after a purged key is enqueued again.
func TestPurgeEntriesKeepsTheIndexes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	o := New(WithClock(steppingClock(t0))).Outbox()
	var ended []ledger.OutboxEntryID
	for i := range 30 {
		key := fmt.Sprintf("k-%02d", i)
		r, err := o.Enqueue(ctx, env(key))
		require.NoError(t, err)
		switch i % 3 {
		case 0:
			_, err = o.MarkDelivered(ctx, r.Entry.ID, ledger.EmissionResult{})
			ended = append(ended, r.Entry.ID)
		case 1:
			next := t0.Add(time.Hour)
			_, err = o.MarkFailed(ctx, r.Entry.ID, ledger.EmissionError{Message: "later"}, &next)
		}
		require.NoError(t, err)
	}
	require.NoError(t, checkOutbox(o))
	n, err := o.PurgeEntries(ctx, storekit.MaxTime(), 4)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	require.NoError(t, checkOutbox(o))
	for i, id := range ended {
		_, err := o.FindByID(ctx, id)
		if i < 4 {
			require.ErrorIs(t, err, ledger.ErrNotFound, "the oldest ended entries go first")
		} else {
			require.NoError(t, err)
		}
	}
	n, err = o.PurgeEntries(ctx, storekit.MaxTime(), ledger.MaxLimit)
	require.NoError(t, err)
	require.Equal(t, len(ended)-4, n)
	require.NoError(t, checkOutbox(o))

	// A purged key comes back as a new entry with a fresh enqueue
	// sequence, last in the pending order.
	r, err := o.Enqueue(ctx, env("k-00"))
	require.NoError(t, err)
	require.Equal(t, ledger.OutcomeApplied, r.Outcome)
	require.NoError(t, checkOutbox(o))
	pending, err := o.FindPending(ctx, ledger.MaxLimit)
	require.NoError(t, err)
	require.Equal(t, r.Entry.ID, pending[len(pending)-1].ID)
	pendingCount := 0
	for i := range 30 {
		if i%3 == 2 {
			pendingCount++
		}
	}
	require.Len(t, pending, pendingCount+1)
}
