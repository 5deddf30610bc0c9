package ledgerotel_test

import (
	"testing"

	"github.com/leaseledger/ledger/pgstore/pgstoretest"
)

// TestMain gives the PostgreSQL tests their database: the server named
// by LEDGER_TEST_DATABASE_URL, or a throwaway cluster (see pgstoretest).
func TestMain(m *testing.M) { pgstoretest.Main(m) }
