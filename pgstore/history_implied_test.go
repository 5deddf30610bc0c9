package pgstore

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// TestImpliedCreationIsTheStateMachines ties impliedCreation, the history
// entry History answers for a record whose creation was not stored, to
// the entry the root package makes for the creation of a record.
func TestImpliedCreationIsTheStateMachines(t *testing.T) {
	now := time.Date(2030, time.January, 1, 9, 0, 0, 123456000, time.UTC)
	d := storekit.NewDelivery(ledger.EnqueueRequest{ID: "d-1", Target: "host-1", Ceremony: "c-1", Payload: []byte("x")}, ledger.DefaultPolicy(), now)
	want := storekit.DeliveryTransition(ledger.OpEnqueue, nil, &d, "")
	want.Seq = d.Version
	require.Equal(t, want, impliedCreation(string(d.State), d.CreatedAt))

	e := storekit.NewOutboxEntry(ledger.Envelope{Provider: "mail", Kind: "welcome", IdempotencyKey: "k-1"}, now)
	wantEntry := storekit.EntryTransition(ledger.OpEnqueue, nil, &e, "")
	wantEntry.Seq = e.Version
	require.Equal(t, wantEntry, impliedCreation(string(e.Status), e.CreatedAt))
}
