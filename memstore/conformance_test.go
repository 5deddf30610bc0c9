package memstore_test

import (
	"testing"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/ledgertest"
	"github.com/leaseledger/ledger/memstore"
)

func TestLedgerConformance(t *testing.T) {
	ledgertest.TestLedger(t, func(t *testing.T) ledger.Ledger { return memstore.New() })
}

func TestClaimStoreConformance(t *testing.T) {
	ledgertest.TestClaimStore(t, func(t *testing.T) ledger.ClaimStore { return memstore.NewOutbox() })
}

func TestQueueBoundsConformance(t *testing.T) {
	ledgertest.TestQueueBounds(t, func(t *testing.T, b ledger.QueueBounds) ledger.Ledger {
		opts := []memstore.Option{memstore.WithQueueBound(b.Default)}
		for target, n := range b.Targets {
			opts = append(opts, memstore.WithTargetQueueBound(target, n))
		}
		return memstore.New(opts...)
	})
}
