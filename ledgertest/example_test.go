package ledgertest_test

import (
	"testing"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/ledgertest"
	"github.com/leaseledger/ledger/memstore"
)

// TestLedger runs from a test of your store's package, with a function
// that makes a fresh, empty store for each subtest. It needs a
// *testing.T, so this example only shows the call: in your store's
// _test.go file it is a test of its own,
//
//	func TestConformance(t *testing.T) {
//		ledgertest.TestLedger(t, newLedger)
//	}
//
// and `go test -run TestConformance/Lease` runs one group of rules.
func ExampleTestLedger() {
	newLedger := func(t *testing.T) ledger.Ledger {
		// Your store goes here, fresh and empty; register anything it
		// must release with t.Cleanup.
		return memstore.New()
	}
	conformance := func(t *testing.T) {
		ledgertest.TestLedger(t, newLedger)
		ledgertest.TestClaimStore(t, func(t *testing.T) ledger.ClaimStore { return memstore.NewOutbox() })
	}
	_ = conformance
}
