package pgstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

func TestFindIDsAnswersWhichAreHeld(t *testing.T) {
	s, _ := newStore(t)
	ctx := testContext(t)
	for _, id := range []ledger.DeliveryID{"d-open", "d-ended"} {
		_, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: id, Target: "host", Payload: []byte("p")}, t0)
		require.NoError(t, err)
	}
	_, err := s.Abandon(ctx, "d-ended", ledger.Cause{Kind: "done"}, t0.Add(time.Second))
	require.NoError(t, err)

	got, err := s.FindDeliveryIDs(ctx, []ledger.DeliveryID{"d-missing", "d-ended", "d-open", "d-open"})
	require.NoError(t, err)
	require.ElementsMatch(t, []ledger.DeliveryID{"d-ended", "d-open"}, got, "held in any state, each once")

	got, err = s.FindDeliveryIDs(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, got)
	_, err = s.FindDeliveryIDs(ctx, []ledger.DeliveryID{"d-open", ""})
	require.ErrorIs(t, err, ledger.ErrInvalid)

	o := s.Outbox()
	r, err := o.Enqueue(ctx, ledger.Envelope{Provider: "mail", Kind: "k", IdempotencyKey: "key-1"})
	require.NoError(t, err)
	entries, err := o.FindEntryIDs(ctx, []ledger.OutboxEntryID{ledger.OutboxEntryIDFor("key-2"), r.Entry.ID})
	require.NoError(t, err)
	require.Equal(t, []ledger.OutboxEntryID{r.Entry.ID}, entries)
}
