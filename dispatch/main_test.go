package dispatch_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/leaseledger/ledger/internal/pgtest"
)

// TestMain gives the package one throwaway PostgreSQL cluster (or the
// server named by LEDGER_TEST_DATABASE_URL), started only when a pgstore
// test first asks for it, and fails the binary when a goroutine outlives
// the tests that passed: every Dispatcher and Worker loop, and what they
// start, must be gone once Run returns.
func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Harness(m)) }
