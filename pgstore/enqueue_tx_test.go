package pgstore

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// TestEnqueueRoundTrips counts what an enqueue sends once its
// statements are prepared, with notifications on: three round trips
// when it inserts (BEGIN with the reads, the COPY, the notification with
// COMMIT), two when every ID is taken (the reads, ROLLBACK).
func TestEnqueueRoundTrips(t *testing.T) {
	s, trips, ctx := tripStore(t, WithNotify(true))
	o := s.Outbox()
	batch := 0
	envs := func() []ledger.Envelope {
		batch++
		envs := make([]ledger.Envelope, 10)
		for i := range envs {
			envs[i] = ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: fmt.Sprintf("b%d-%d", batch, i)}
		}
		return envs
	}
	reqs := func() []ledger.EnqueueRequest {
		batch++
		reqs := make([]ledger.EnqueueRequest, 10)
		for i := range reqs {
			reqs[i] = ledger.EnqueueRequest{ID: ledger.DeliveryID(fmt.Sprintf("b%d-%d", batch, i)), Target: "host"}
		}
		return reqs
	}
	applied := func(outcomes ...ledger.Outcome) {
		t.Helper()
		for _, oc := range outcomes {
			require.Equal(t, ledger.OutcomeApplied, oc)
		}
	}
	n := tripsOf(t, trips, func() {
		rs, err := o.EnqueueBatch(ctx, envs())
		require.NoError(t, err)
		applied(rs[0].Outcome, rs[9].Outcome)
	})
	require.EqualValues(t, 3, n, "outbox EnqueueBatch")
	n = tripsOf(t, trips, func() {
		rs, err := s.EnqueueBatch(ctx, reqs(), groupT0)
		require.NoError(t, err)
		applied(rs[0].Outcome, rs[9].Outcome)
	})
	require.EqualValues(t, 3, n, "EnqueueBatch")
	n = tripsOf(t, trips, func() {
		r, err := o.Enqueue(ctx, envs()[0])
		require.NoError(t, err)
		applied(r.Outcome)
	})
	require.EqualValues(t, 3, n, "outbox Enqueue")

	again := envs()
	_, err := o.EnqueueBatch(ctx, again)
	require.NoError(t, err)
	n = tripsOf(t, trips, func() {
		rs, err := o.EnqueueBatch(ctx, again)
		require.NoError(t, err)
		require.Equal(t, ledger.OutcomeRepeated, rs[0].Outcome)
	})
	require.EqualValues(t, 2, n, "outbox EnqueueBatch of taken keys")
}
