package shard_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/ledgertest"
	"github.com/leaseledger/ledger/pgstore"
	"github.com/leaseledger/ledger/shard"
)

// citusShards returns three pgstores, each in a distributed schema of its
// own on the Citus cluster whose coordinator LEDGER_CITUS_URL names, or
// skips the test when it is not set (make test/citus sets it; make test
// does not promise Citus). Citus places each schema's tables together on
// one worker, so the three stores spread over the workers.
func citusShards(t *testing.T, opts ...pgstore.Option) []*pgstore.Store {
	t.Helper()
	url := os.Getenv("LEDGER_CITUS_URL")
	if url == "" {
		t.Skip("LEDGER_CITUS_URL is not set (make test/citus runs these tests)")
	}
	// An unknown URL parameter is a setting of the session: every schema
	// the stores create is a distributed one.
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	url += sep + "citus.enable_schema_based_sharding=on"
	var out []*pgstore.Store
	for range 3 {
		out = append(out, pgStore(t, url, opts...))
	}
	return out
}

// TestCitusConformance runs the conformance suites over three pgstores
// in three distributed schemas of one Citus cluster: one ledger spread
// over Citus's workers by this package, the host code unchanged.
func TestCitusConformance(t *testing.T) {
	t.Run("Ledger", func(t *testing.T) {
		ledgertest.TestLedger(t, func(t *testing.T) ledger.Ledger {
			s := citusShards(t)
			l, err := shard.New([]ledger.Ledger{s[0], s[1], s[2]}, shard.WithPlacement(conformancePlacement()))
			require.NoError(t, err)
			return l
		})
	})
	t.Run("ClaimStore", func(t *testing.T) {
		ledgertest.TestClaimStore(t, func(t *testing.T) ledger.ClaimStore {
			s := citusShards(t)
			o, err := shard.NewOutbox([]ledger.ClaimStore{s[0].Outbox(), s[1].Outbox(), s[2].Outbox()})
			require.NoError(t, err)
			return o
		})
	})
	t.Run("QueueBounds", func(t *testing.T) {
		ledgertest.TestQueueBounds(t, func(t *testing.T, b ledger.QueueBounds) ledger.Ledger {
			opts := []pgstore.Option{pgstore.WithQueueBound(b.Default)}
			for target, n := range b.Targets {
				opts = append(opts, pgstore.WithTargetQueueBound(target, n))
			}
			s := citusShards(t, opts...)
			l, err := shard.New([]ledger.Ledger{s[0], s[1], s[2]}, shard.WithPlacement(conformancePlacement()))
			require.NoError(t, err)
			return l
		})
	})
}
