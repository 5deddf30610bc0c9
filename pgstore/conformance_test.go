package pgstore_test

import (
	"testing"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/ledgertest"
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
}
