package shard_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/internal/pgcluster"
	"github.com/leaseledger/ledger/internal/pgtest"
	"github.com/leaseledger/ledger/ledgertest"
	"github.com/leaseledger/ledger/pgstore"
	"github.com/leaseledger/ledger/shard"
)

// The database tests spread a ledger over three PostgreSQL servers: the
// test binary's own (pgtest) and two more throwaway clusters, started on
// first use and stopped after the tests. A fourth, started by the fault
// test alone, is the one it crashes.
func TestMain(m *testing.M) {
	code := pgtest.Run(m, false)
	servers.mu.Lock()
	for _, c := range servers.started {
		if err := c.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "shard: stopping a cluster: %v\n", err)
		}
	}
	servers.mu.Unlock()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "shard: goroutines left running after the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

var servers struct {
	mu      sync.Mutex
	started []*pgcluster.Cluster
	extra   []string // DSNs of the two shared extra clusters
	err     error
}

// startCluster starts a throwaway cluster stopped by TestMain.
func startCluster(opts pgcluster.Options) (*pgcluster.Cluster, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts.Fast = true
	c, err := pgcluster.Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	servers.mu.Lock()
	servers.started = append(servers.started, c)
	servers.mu.Unlock()
	return c, nil
}

// serverURLs returns the three servers' URLs: pgtest's first (which skips
// the test, or fails it under CI=true, when there is no server).
func serverURLs(t testing.TB) []string {
	t.Helper()
	first := pgtest.DSN(t)
	servers.mu.Lock()
	if servers.extra == nil && servers.err == nil {
		servers.mu.Unlock()
		var urls []string
		var err error
		for range 2 {
			var c *pgcluster.Cluster
			if c, err = startCluster(pgcluster.Options{}); err != nil {
				break
			}
			urls = append(urls, c.DSN())
		}
		servers.mu.Lock()
		servers.extra, servers.err = urls, err
	}
	extra, err := servers.extra, servers.err
	servers.mu.Unlock()
	require.NoError(t, err, "starting the extra clusters")
	return append([]string{first}, extra...)
}

// pgStore returns a migrated pgstore in a fresh schema of the server at
// url, dropped with its pool when the test ends. Its connections have an
// empty search_path, so a query that forgets its schema fails.
func pgStore(t testing.TB, url string, opts ...pgstore.Option) *pgstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = ""
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	var b [8]byte
	_, _ = rand.Read(b[:])
	schema := "t_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		pool.Close()
	})
	s, err := pgstore.New(pool, append([]pgstore.Option{pgstore.WithSchema(schema)}, opts...)...)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	return s
}

// pgShards returns three pgstores, one on each server.
func pgShards(t testing.TB, opts ...pgstore.Option) []*pgstore.Store {
	t.Helper()
	var out []*pgstore.Store
	for _, url := range serverURLs(t) {
		out = append(out, pgStore(t, url, opts...))
	}
	return out
}

// TestPostgresConformance runs the conformance suites over three pgstore
// databases on three servers. The Validation groups, whose calls are
// refused before any statement, run over PostgreSQL in make test/long
// only (they run over memstores in every run).
func TestPostgresConformance(t *testing.T) {
	// Beside the other tests: it mostly waits on the servers.
	t.Parallel()
	if testing.Short() {
		t.Skip("the conformance suite over three servers is not short")
	}
	skipValidation := func(t *testing.T) {
		// Test names are TestPostgresConformance/<contract>/<group>/...
		if parts := strings.Split(t.Name(), "/"); len(parts) > 2 && parts[2] == "Validation" && !pgtest.Long() {
			t.Skip("refused before any statement; over PostgreSQL in make test/long")
		}
	}
	t.Run("Ledger", func(t *testing.T) {
		ledgertest.TestLedger(t, func(t *testing.T) ledger.Ledger {
			skipValidation(t)
			s := pgShards(t)
			l, err := shard.New([]ledger.Ledger{s[0], s[1], s[2]}, shard.WithPlacement(conformancePlacement()))
			require.NoError(t, err)
			return l
		})
	})
	t.Run("ClaimStore", func(t *testing.T) {
		ledgertest.TestClaimStore(t, func(t *testing.T) ledger.ClaimStore {
			skipValidation(t)
			s := pgShards(t)
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
			s := pgShards(t, opts...)
			l, err := shard.New([]ledger.Ledger{s[0], s[1], s[2]}, shard.WithPlacement(conformancePlacement()))
			require.NoError(t, err)
			return l
		})
	})
}
