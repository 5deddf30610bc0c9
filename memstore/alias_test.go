package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/memstore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// scribble overwrites everything a caller could reach through d's pointers
// and slices.
func scribble(d *ledger.Delivery) {
	for i := range d.Payload {
		d.Payload[i] = 'X'
	}
	if d.Lease != nil {
		d.Lease.Token = "stolen"
		d.Lease.ExpiresAt = d.Lease.ExpiresAt.Add(time.Hour)
	}
	if d.Ack != nil {
		d.Ack.Owner.Agent = "mallory"
	}
	if d.Processing != nil {
		d.Processing.Action = "forged"
		if d.Processing.Fence != nil {
			*d.Processing.Fence = 999
		}
	}
	if d.LastActivation != nil {
		d.LastActivation.Detail = "forged"
	}
	if d.EndedLease != nil {
		d.EndedLease.Token = "stolen"
	}
	if d.LastFailure != nil {
		d.LastFailure.Message = "forged"
	}
}

func TestNoAliasingOfDeliveries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	owner := ledger.Owner{Agent: "a", Incarnation: "1"}
	payload := []byte("original")
	req := ledger.EnqueueRequest{ID: "d1", Target: "t", Payload: payload}

	r, err := s.Enqueue(ctx, req, t0)
	require.NoError(t, err)
	payload[0] = 'X' // the request's payload after Enqueue
	scribble(&r.Delivery)

	lr, err := s.Lease(ctx, ledger.LeaseFilter{}, owner, t0, time.Minute, 1)
	require.NoError(t, err)
	require.Len(t, lr.Leased, 1)
	lease := lr.Leased[0].Lease
	scribble(&lr.Leased[0].Delivery)

	ar, err := s.Acknowledge(ctx, lease, "seen", t0)
	require.NoError(t, err)
	require.True(t, ar.Applied())
	scribble(&ar.Delivery)

	_, err = s.RecordActivation(ctx, "d1", ledger.Activation{Result: ledger.ActivationDelivered, Detail: "push"}, t0)
	require.NoError(t, err)
	fence := ledger.FenceOf(7)
	pr, err := s.MarkProcessed(ctx, "d1", owner, fence, "act", t0)
	require.NoError(t, err)
	require.True(t, pr.Applied())
	*fence = 1 // the caller's fence after the call
	scribble(&pr.Delivery)

	got, err := s.Get(ctx, "d1")
	require.NoError(t, err)
	scribble(&got)
	page, err := s.List(ctx, ledger.ListQuery{Limit: 10})
	require.NoError(t, err)
	scribble(&page.Deliveries[0])

	d, err := s.Get(ctx, "d1")
	require.NoError(t, err)
	assert.Equal(t, []byte("original"), d.Payload)
	assert.Nil(t, d.Lease, "processed deliveries keep no lease")
	assert.Equal(t, owner, d.Ack.Owner)
	assert.Equal(t, ledger.ActionRef("act"), d.Processing.Action)
	assert.Equal(t, ledger.Fence(7), *d.Processing.Fence)
	assert.Equal(t, "push", d.LastActivation.Detail)

	// The fence high-water mark was not moved by the caller's write: a
	// fence of 6 on the same target is still rejected.
	_, err = s.Enqueue(ctx, ledger.EnqueueRequest{ID: "d2", Target: "t"}, t0)
	require.NoError(t, err)
	lr, err = s.Lease(ctx, ledger.LeaseFilter{}, owner, t0, time.Minute, 1)
	require.NoError(t, err)
	_, err = s.Acknowledge(ctx, lr.Leased[0].Lease, "", t0)
	require.NoError(t, err)
	pr, err = s.MarkProcessed(ctx, "d2", owner, ledger.FenceOf(6), "act", t0)
	require.NoError(t, err)
	assert.Equal(t, ledger.OutcomeFenceRejected, pr.Outcome)
}

func TestNoAliasingOfLeaseAndFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memstore.New()
	owner := ledger.Owner{Agent: "a", Incarnation: "1"}
	_, err := s.EnqueueBatch(ctx, []ledger.EnqueueRequest{{ID: "d1", Target: "t", Payload: []byte("p")}}, t0)
	require.NoError(t, err)
	lr, err := s.Lease(ctx, ledger.LeaseFilter{}, owner, t0, time.Minute, 1)
	require.NoError(t, err)
	lease := lr.Leased[0].Lease
	// The returned record's lease is a copy: changing it changes nothing.
	lr.Leased[0].Delivery.Lease.Token = lease.Token + "x"
	fr, err := s.MarkFailed(ctx, lease, ledger.FailureReason{Message: "boom"}, t0.Add(time.Second))
	require.NoError(t, err)
	require.True(t, fr.Applied())
	scribble(&fr.Delivery)

	d, err := s.Get(ctx, "d1")
	require.NoError(t, err)
	assert.Equal(t, "boom", d.LastFailure.Message)
	assert.Equal(t, lease.Seq, d.EndedLease.Seq)
	assert.Empty(t, d.EndedLease.Token, "records handed out carry no token")
	assert.Equal(t, []byte("p"), d.Payload)
	// The stored ended lease still holds the token: the same call again
	// is recognised as a repeat.
	again, err := s.MarkFailed(ctx, lease, ledger.FailureReason{Message: "boom"}, t0.Add(2*time.Second))
	require.NoError(t, err)
	assert.Equal(t, ledger.OutcomeRepeated, again.Outcome)
}

func TestNoAliasingOfOutboxEntries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := memstore.NewOutbox()
	payload := []byte("original")
	r, err := o.Enqueue(ctx, ledger.Envelope{Provider: "p", Kind: "k", Payload: payload, IdempotencyKey: "key"})
	require.NoError(t, err)
	payload[0] = 'X'
	r.Entry.Envelope.Payload[0] = 'X'

	claims, err := o.ClaimPending(ctx, ledger.ClaimRequest{Worker: "w", Now: t0, LeaseDuration: time.Minute, Limit: 1})
	require.NoError(t, err)
	require.Len(t, claims, 1)
	claims[0].Entry.Envelope.Payload[0] = 'X'
	claims[0].Entry.Claim.Token = "stolen"

	pending, err := o.FindPending(ctx, 10)
	require.NoError(t, err)
	pending[0].Envelope.Payload[0] = 'X'
	pending[0].Claim.Worker = "mallory"

	next := t0.Add(time.Hour)
	fr, err := o.MarkClaimFailed(ctx, claims[0].Claim, ledger.EmissionError{Message: "boom"}, &next)
	require.NoError(t, err)
	require.True(t, fr.Applied())
	next = t0.Add(-time.Hour) // the caller's time after the call
	fr.Entry.LastError.Message = "forged"

	e, err := o.FindByID(ctx, r.Entry.ID)
	require.NoError(t, err)
	assert.Equal(t, []byte("original"), e.Envelope.Payload)
	assert.Equal(t, "boom", e.LastError.Message)
	assert.Equal(t, t0.Add(time.Hour), e.NextAttemptAt)
	assert.Equal(t, claims[0].Claim.Seq, e.EndedClaim.Seq)
	assert.Empty(t, e.EndedClaim.Token, "entries handed out carry no token")
	// The stored ended claim still holds the token: the same call again
	// is recognised as a repeat.
	again, err := o.MarkClaimFailed(ctx, claims[0].Claim, ledger.EmissionError{Message: "boom"}, &next)
	require.NoError(t, err)
	assert.Equal(t, ledger.OutcomeRepeated, again.Outcome)
}
