package main

import (
	"bytes"
	"context"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger/internal/pgtest"
	"github.com/leaseledger/ledger/memstore"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestDemoEndsEveryItemAndHoldsItsInvariants(t *testing.T) {
	cfg := defaultConfig()
	cfg.Deliveries, cfg.Entries = 1500, 120 // enough that ceremony-2 still has open work when it ends
	store := memstore.New()
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), cfg, store, store.Outbox(), &out), out.String())
	assert.Contains(t, out.String(), "Invariants: 0 lost, 0 double-held, 0 processed without acknowledgement")
	assert.Contains(t, out.String(), "ceremony_ended")
	assert.Contains(t, out.String(), "acknowledgement_lapsed")
}

func TestDoubleHeldCountsOverlappingGrants(t *testing.T) {
	f := newFleet(memstore.New(), memstore.NewOutbox(), rand.New(rand.NewPCG(1, 2)))
	f.grants["d1"] = []grant{
		{granted: t0(0), expires: t0(30)},
		{granted: t0(10), expires: t0(40)}, // before the first expired and nobody ended it
	}
	f.grants["d2"] = []grant{
		{granted: t0(0), expires: t0(30), ended: t0(5)},
		{granted: t0(10), expires: t0(40)},
	}
	assert.Equal(t, 1, f.doubleHeld())
}

func t0(sec int) time.Time { return time.Date(2030, 1, 1, 0, 0, sec, 0, time.UTC) }

// The same seed gives the same fleet on PostgreSQL as in memory, and the
// demo's schema is gone afterwards. Its simulated clock is no clock skew:
// the store logs no warning about it. (Not parallel: it replaces the
// default logger, where the store's warnings go, for its run.)
func TestDemoOnPostgreSQLMatchesMemory(t *testing.T) {
	cfg := defaultConfig()
	cfg.Deliveries, cfg.Entries = 300, 60
	var mem, pg, logs bytes.Buffer
	require.NoError(t, start(context.Background(), cfg, "", false, &mem, nil))
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, start(context.Background(), cfg, pgtest.DSN(t), false, &pg, nil))
	_, memReport, _ := strings.Cut(mem.String(), "\n")
	_, pgReport, _ := strings.Cut(pg.String(), "\n")
	assert.Equal(t, memReport, pgReport, "the report after the store line")
	assert.NotContains(t, logs.String(), "clock", "no clock-skew warning")

	var left int
	pool := pgtest.Pool(t)
	require.NoError(t, pool.QueryRow(context.Background(),
		"SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'ledgerdemo\\_%'").Scan(&left))
	assert.Zero(t, left, "the demo drops its schema")
}
