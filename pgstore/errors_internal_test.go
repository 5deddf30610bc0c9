package pgstore

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// notSent is an error the driver raised before sending anything.
type notSent struct{}

func (notSent) Error() string     { return "not sent" }
func (notSent) SafeToRetry() bool { return true }

func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "40001"}, true},
		{&pgconn.PgError{Code: "40P01"}, true},
		{fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "40P01"}), true},
		{notSent{}, true},
		{&pgconn.PgError{Code: "23505"}, false}, // unique violation
		{&pgconn.PgError{Code: "57P01"}, false}, // admin shutdown: it may have applied
		{context.Canceled, false},
		{ledger.ErrConflict, false},
		{errRowChanged, false},
	} {
		assert.Equal(t, tc.want, retryable(tc.err), "%v", tc.err)
	}
}

func TestRetryIsBounded(t *testing.T) {
	for _, retries := range []int{0, 2} {
		s := &Store{cfg: config{maxRetries: retries}}
		calls := 0
		err := s.retry(context.Background(), "op", func() error {
			calls++
			return &pgconn.PgError{Code: "40001"}
		})
		require.Error(t, err)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		assert.Equal(t, retries+1, calls)
	}

	// A success after a deadlock ends the retries.
	s := &Store{cfg: config{maxRetries: 3}}
	calls := 0
	require.NoError(t, s.retry(context.Background(), "op", func() error {
		calls++
		if calls == 1 {
			return &pgconn.PgError{Code: "40P01"}
		}
		return nil
	}))
	assert.Equal(t, 2, calls)

	// Nothing is retried inside the caller's transaction, nor once ctx is done.
	s = &Store{cfg: config{maxRetries: 3}, callerTx: true}
	calls = 0
	require.Error(t, s.retry(context.Background(), "op", func() error { calls++; return notSent{} }))
	assert.Equal(t, 1, calls)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s = &Store{cfg: config{maxRetries: 3}}
	calls = 0
	err := s.retry(ctx, "op", func() error { calls++; return notSent{} })
	assert.Equal(t, 1, calls)
	assert.True(t, errors.Is(err, context.Canceled), "a done context shows in the error")
}
