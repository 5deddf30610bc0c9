package pgstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/memstore"
	"github.com/leaseledger/ledger/storekit"
)

// These tests hold pgstore to the root state machine and to memstore field
// by field: the grant statements are the one transition written in SQL,
// and every record read back must equal what memstore returns for the
// same calls.

func TestTimesRoundTripAsUTCMicroseconds(t *testing.T) {
	s, _ := newStore(t)
	ctx := testContext(t)
	zone := time.FixedZone("UTC+05:30", 5*3600+1800)
	now := time.Date(2030, time.March, 4, 5, 6, 7, 123456789, zone)
	req := ledger.EnqueueRequest{ID: "d1", Target: "host", AvailableAt: now.Add(999 * time.Nanosecond)}

	r, err := s.Enqueue(ctx, req, now)
	require.NoError(t, err)
	got, err := s.Get(ctx, "d1")
	require.NoError(t, err)
	want := time.Date(2030, time.March, 3, 23, 36, 7, 123456000, time.UTC)
	require.Equal(t, want, got.CreatedAt)
	require.Equal(t, time.UTC, got.CreatedAt.Location())
	require.Equal(t, want.Add(time.Microsecond), got.AvailableAt)
	require.True(t, got.EndedAt.IsZero())
	require.Equal(t, r.Delivery, got)

	mr, err := memstore.New().Enqueue(ctx, req, now)
	require.NoError(t, err)
	require.Equal(t, mr.Delivery, got, "pgstore reads back what memstore answers")
}

func TestPayloadsRoundTrip(t *testing.T) {
	s, _ := newStore(t)
	ctx := testContext(t)
	for id, p := range map[ledger.DeliveryID][]byte{"nil": nil, "empty": {}, "nul": {0, 1, 0, 0xff}} {
		_, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: id, Target: "host", Payload: p}, t0)
		require.NoError(t, err)
		got, err := s.Get(ctx, id)
		require.NoError(t, err)
		if len(p) == 0 {
			require.Nil(t, got.Payload, id)
		} else {
			require.Equal(t, p, got.Payload, id)
		}
	}
}

func TestLeaseGrantMatchesStateMachine(t *testing.T) {
	s, _ := newStore(t)
	ctx := testContext(t)
	_, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: "d1", Target: "host", Policy: ledger.Policy{MaxAttempts: 3}}, t0)
	require.NoError(t, err)

	grantAndCompare := func(owner ledger.Owner, now time.Time, dur time.Duration) ledger.LeasedDelivery {
		t.Helper()
		before, err := s.Get(ctx, "d1")
		require.NoError(t, err)
		lr, err := s.Lease(ctx, ledger.LeaseFilter{}, owner, now, dur, 5)
		require.NoError(t, err)
		require.Len(t, lr.Leased, 1)
		got := lr.Leased[0]
		want, lease := storekit.Delivery(before).Grant(owner, got.Lease.Token, now, dur)
		require.NotEmpty(t, got.Lease.Token)
		require.Equal(t, lease, got.Lease, "the grantee's lease, token and all")
		require.Equal(t, want.Redacted(), got.Delivery, "the record as the state machine grants it, without the token")
		stored, err := s.Get(ctx, "d1")
		require.NoError(t, err)
		require.Equal(t, want.Redacted(), stored)
		// The history entry is the one the root package makes from the
		// records before and after, though the statement wrote it in SQL.
		entry := storekit.DeliveryTransition(ledger.OpLease, &before, &want, owner.String())
		entry.Seq = want.Version
		h, err := s.History(ctx, "d1")
		require.NoError(t, err)
		require.Equal(t, entry, h[len(h)-1])
		return got
	}
	// A fresh offer, then a takeover of an expired lease (which records a
	// lease_expired failure for the previous holder), with a duration that
	// is not a whole number of microseconds.
	grantAndCompare(ledger.Owner{Agent: "a", Incarnation: "1"}, t0.Add(time.Second), time.Minute+1500*time.Nanosecond)
	ld := grantAndCompare(ledger.Owner{Agent: "b", Incarnation: "1"}, t0.Add(5*time.Minute), time.Minute)
	require.NotNil(t, ld.Delivery.LastFailure)
	require.Equal(t, ledger.FailureLeaseExpired, ld.Delivery.LastFailure.Kind)

	// After a release the ended lease is cleared by the next grant.
	r, err := s.Release(ctx, ld.Lease, t0.Add(5*time.Minute+time.Second))
	require.NoError(t, err)
	require.NotNil(t, r.Delivery.EndedLease)
	ld = grantAndCompare(ledger.Owner{Agent: "b", Incarnation: "1"}, t0.Add(6*time.Minute), time.Minute)
	require.Nil(t, ld.Delivery.EndedLease)
}

func TestClaimGrantMatchesStateMachine(t *testing.T) {
	s, _ := newStore(t, fixedClock(t0))
	o := s.Outbox()
	ctx := testContext(t)
	er, err := o.Enqueue(ctx, ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: "key"})
	require.NoError(t, err)

	claimAndCompare := func(claim func(ledger.ClaimRequest) ([]ledger.ClaimedEntry, error), now time.Time) ledger.ClaimedEntry {
		t.Helper()
		before, err := o.FindByID(ctx, er.Entry.ID)
		require.NoError(t, err)
		cs, err := claim(ledger.ClaimRequest{Worker: "w", Now: now, LeaseDuration: time.Minute + 7, Limit: 3})
		require.NoError(t, err)
		require.Len(t, cs, 1)
		want, c := storekit.OutboxEntry(before).Grant("w", cs[0].Claim.Token, now, time.Minute+7)
		require.NotEmpty(t, cs[0].Claim.Token)
		require.Equal(t, c, cs[0].Claim, "the worker's claim, token and all")
		require.Equal(t, want.Redacted(), cs[0].Entry, "the entry as the state machine claims it, without the token")
		stored, err := o.FindByID(ctx, er.Entry.ID)
		require.NoError(t, err)
		require.Equal(t, want.Redacted(), stored)
		entry := storekit.EntryTransition(ledger.OpClaim, &before, &want, "w")
		entry.Seq = want.Version
		h, err := o.EntryHistory(ctx, er.Entry.ID)
		require.NoError(t, err)
		require.Equal(t, entry, h[len(h)-1])
		return cs[0]
	}
	pending := func(r ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) { return o.ClaimPending(ctx, r) }
	retry := func(r ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) { return o.ClaimRetryReady(ctx, r) }

	claimAndCompare(pending, t0)
	c := claimAndCompare(pending, t0.Add(time.Hour)) // the first claim expired
	next := t0.Add(2 * time.Hour)
	fr, err := o.MarkClaimFailed(ctx, c.Claim, ledger.EmissionError{Code: "503"}, &next)
	require.NoError(t, err)
	require.True(t, fr.Applied())
	claimAndCompare(retry, next)
}
