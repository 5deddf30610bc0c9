package dispatch_test

import (
	"testing"

	"github.com/leaseledger/ledger/internal/pgtest"
)

// TestMain gives the package one throwaway PostgreSQL cluster (or the
// server named by LEDGER_TEST_DATABASE_URL), started only when a pgstore
// test first asks for it.
func TestMain(m *testing.M) { pgtest.Main(m) }
