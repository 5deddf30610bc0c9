package pgstore_test

import (
	"testing"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/ledgertest"
	"github.com/leaseledger/ledger/pgstore"
)

func TestConformance(t *testing.T) {
	// Beside the other runs of whole suites: they mostly wait on the server.
	t.Parallel()
	t.Run("Ledger", func(t *testing.T) {
		ledgertest.TestLedger(t, func(t *testing.T) ledger.Ledger {
			s, _ := newStore(t)
			return s
		})
	})
	t.Run("ClaimStore", func(t *testing.T) {
		ledgertest.TestClaimStore(t, func(t *testing.T) ledger.ClaimStore {
			s, _ := newStore(t)
			return s.Outbox()
		})
	})
	t.Run("QueueBounds", func(t *testing.T) {
		ledgertest.TestQueueBounds(t, func(t *testing.T, b ledger.QueueBounds) ledger.Ledger {
			opts := []pgstore.Option{pgstore.WithQueueBound(b.Default)}
			for target, n := range b.Targets {
				opts = append(opts, pgstore.WithTargetQueueBound(target, n))
			}
			s, _ := newStore(t, opts...)
			return s
		})
	})
}
