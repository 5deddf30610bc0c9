package pgstore_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/internal/pgtest"
	"github.com/leaseledger/ledger/ledgertest"
	"github.com/leaseledger/ledger/pgstore"
)

// TestBouncer runs the conformance suite through PgBouncer in transaction
// pooling mode, where consecutive transactions of one client may run on
// different server connections. It proves the store keeps no session
// state between transactions: no session advisory locks, no named
// prepared statements, no settings that must survive a commit. The
// Validation groups, whose calls are refused before any statement, go
// through PgBouncer only in make test/long.
func TestBouncer(t *testing.T) {
	// Beside the other runs of whole suites: they mostly wait on the server.
	t.Parallel()
	if testing.Short() {
		t.Skip("the conformance suite through PgBouncer is not short")
	}
	newBounced := func(t *testing.T) *pgstore.Store {
		// Test names are TestBouncer/<contract>/<group>/...
		if parts := strings.Split(t.Name(), "/"); len(parts) > 2 && parts[2] == "Validation" && !pgtest.Long() {
			t.Skip("refused before any statement; through PgBouncer in make test/long")
		}
		pool := pgtest.BouncerPool(t)
		s, err := pgstore.New(pool, pgstore.WithSchema(pgtest.Schema(t, pool)))
		require.NoError(t, err)
		require.NoError(t, s.Migrate(testContext(t)))
		return s
	}
	t.Run("Ledger", func(t *testing.T) {
		ledgertest.TestLedger(t, func(t *testing.T) ledger.Ledger { return newBounced(t) })
	})
	t.Run("ClaimStore", func(t *testing.T) {
		ledgertest.TestClaimStore(t, func(t *testing.T) ledger.ClaimStore { return newBounced(t).Outbox() })
	})
}
