package memstore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// TestOpCodesMatchTheTable checks that the switch in opCode and the table
// it codes into agree, for every operation of both contracts.
func TestOpCodesMatchTheTable(t *testing.T) {
	t.Parallel()
	seen := map[ledger.Operation]bool{}
	for i, op := range operations {
		if i == 0 {
			require.Zero(t, opCode(op), "code 0 is no operation")
			continue
		}
		require.True(t, op.Valid(), "%q", op)
		require.False(t, seen[op], "%q listed twice", op)
		seen[op] = true
		require.Equal(t, uint8(i), opCode(op), "%q", op)
	}
	require.Zero(t, opCode("no such operation"))
	for i, name := range deliveryStates {
		require.Equal(t, uint8(i), stateCode(name))
	}
	for i, name := range outboxStatuses {
		require.Equal(t, uint8(i), statusCode(name))
	}
}

// TestWithoutHistory checks that a store built WithoutHistory keeps no
// history, answers an empty one for the records it holds, and still tells
// an unknown record apart.
func TestWithoutHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	owner := ledger.Owner{Agent: "a", Incarnation: "1"}
	s := New(WithoutHistory(), WithClock(func() time.Time { return t0 }))
	_, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: "d", Target: "t"}, t0)
	require.NoError(t, err)
	res, err := s.Lease(ctx, ledger.LeaseFilter{}, owner, t0, time.Minute, 1)
	require.NoError(t, err)
	require.Len(t, res.Leased, 1)
	_, err = s.Acknowledge(ctx, res.Leased[0].Lease, "", t0)
	require.NoError(t, err)
	h, err := s.History(ctx, "d")
	require.NoError(t, err)
	require.NotNil(t, h)
	require.Empty(t, h)
	_, err = s.History(ctx, "missing")
	require.ErrorIs(t, err, ledger.ErrNotFound)
	require.Nil(t, s.hist)
	require.NoError(t, checkStore(s))

	o := s.Outbox()
	e, err := o.Enqueue(ctx, ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: "key"})
	require.NoError(t, err)
	cs, err := o.ClaimPending(ctx, ledger.ClaimRequest{Worker: "w", Now: t0, LeaseDuration: time.Minute, Limit: 1})
	require.NoError(t, err)
	require.Len(t, cs, 1)
	_, err = o.MarkClaimDelivered(ctx, cs[0].Claim, ledger.EmissionResult{})
	require.NoError(t, err)
	eh, err := o.EntryHistory(ctx, e.Entry.ID)
	require.NoError(t, err)
	require.NotNil(t, eh)
	require.Empty(t, eh)
	_, err = o.EntryHistory(ctx, ledger.OutboxEntryIDFor("missing"))
	require.ErrorIs(t, err, ledger.ErrNotFound)
	for _, p := range o.entries {
		require.Nil(t, p.hist)
	}
	require.NoError(t, checkOutbox(o))
}

// TestHistoryIsACopy checks that the history handed out does not change
// when the record moves on, and that writing to it changes nothing kept.
func TestHistoryIsACopy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	owner := ledger.Owner{Agent: "a", Incarnation: "1"}
	s := New()
	_, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: "d", Target: "t"}, t0)
	require.NoError(t, err)
	res, err := s.Lease(ctx, ledger.LeaseFilter{}, owner, t0, time.Minute, 1)
	require.NoError(t, err)
	h, err := s.History(ctx, "d")
	require.NoError(t, err)
	require.Len(t, h, 2)
	kept := append([]ledger.Transition(nil), h...)
	h[1].Actor = "scribbled"
	_, err = s.Acknowledge(ctx, res.Leased[0].Lease, "", t0)
	require.NoError(t, err)
	require.Len(t, h, 2, "an earlier answer does not grow")
	again, err := s.History(ctx, "d")
	require.NoError(t, err)
	require.Len(t, again, 3)
	require.Equal(t, kept, again[:2])
}
