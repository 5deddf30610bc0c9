package pgstore_test

import (
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// TestActivationsStopAtMaxCount: no caller can set a delivery's
// activation count, so the conformance suite cannot reach its bound; here
// the column is set to the largest value it holds (ledger.MaxCount), and
// an activation still applies and leaves it there instead of failing the
// statement.
func TestActivationsStopAtMaxCount(t *testing.T) {
	s, pool := newStore(t)
	ctx := testContext(t)
	_, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: "d1", Target: "host"}, t0)
	require.NoError(t, err)
	require.Equal(t, int32(math.MaxInt32), int32(ledger.MaxCount), "the bound is what the integer column holds")
	_, err = pool.Exec(ctx, "UPDATE "+pgx.Identifier{s.Schema(), "deliveries"}.Sanitize()+" SET activations = $1 WHERE id = 'd1'", ledger.MaxCount)
	require.NoError(t, err)
	res, err := s.RecordActivation(ctx, "d1", ledger.Activation{Result: ledger.ActivationDelivered}, t0.Add(time.Second))
	require.NoError(t, err)
	require.Equal(t, ledger.OutcomeApplied, res.Outcome)
	require.Equal(t, ledger.MaxCount, res.Delivery.Activations)
	d, err := s.Get(ctx, "d1")
	require.NoError(t, err)
	require.Equal(t, ledger.MaxCount, d.Activations)
	require.Equal(t, ledger.ActivationDelivered, d.LastActivation.Result)
}
