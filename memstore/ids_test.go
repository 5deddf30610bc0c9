package memstore_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/memstore"
)

func TestFindIDsAnswersWhichAreHeld(t *testing.T) {
	s := memstore.New()
	ctx := t.Context()
	_, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: "d-1", Target: "host"}, t0)
	require.NoError(t, err)
	got, err := s.FindDeliveryIDs(ctx, []ledger.DeliveryID{"d-2", "d-1"})
	require.NoError(t, err)
	require.Equal(t, []ledger.DeliveryID{"d-1"}, got)
	_, err = s.FindDeliveryIDs(ctx, []ledger.DeliveryID{""})
	require.ErrorIs(t, err, ledger.ErrInvalid)

	o := memstore.NewOutbox()
	r, err := o.Enqueue(ctx, ledger.Envelope{Provider: "mail", Kind: "k", IdempotencyKey: "key-1"})
	require.NoError(t, err)
	entries, err := o.FindEntryIDs(ctx, []ledger.OutboxEntryID{r.Entry.ID, ledger.OutboxEntryIDFor("key-2")})
	require.NoError(t, err)
	require.Equal(t, []ledger.OutboxEntryID{r.Entry.ID}, entries)
}
