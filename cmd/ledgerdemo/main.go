// Command ledgerdemo simulates a fleet of host agents and outbox workers on
// one ledger and prints what happened to every item. It runs in memory by
// default; -dsn runs it on a PostgreSQL database (in a fresh schema,
// dropped afterwards) and -pg on a throwaway cluster it starts itself.
//
// Time in the demo is simulated: each tick moves now forward by a fixed
// step, so a run covering many minutes of fleet time finishes in seconds,
// and lease expiry is exercised without sleeping. Run it with `make demo`.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/internal/pgcluster"
	"github.com/leaseledger/ledger/memstore"
	"github.com/leaseledger/ledger/pgstore"
	"github.com/leaseledger/ledger/storekit"
)

func main() {
	cfg := defaultConfig()
	flag.IntVar(&cfg.Deliveries, "deliveries", cfg.Deliveries, "deliveries to enqueue")
	flag.IntVar(&cfg.Entries, "entries", cfg.Entries, "outbox entries to enqueue")
	flag.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "random seed (same seed, same run)")
	flag.IntVar(&cfg.MaxTicks, "ticks", cfg.MaxTicks, "simulated ticks before giving up")
	dsn := flag.String("dsn", "", "run on PostgreSQL at this URL (a fresh schema, dropped afterwards) instead of in memory")
	throwaway := flag.Bool("pg", false, "run on a throwaway PostgreSQL cluster started from the local server binaries")
	then := serveFlags(flag.CommandLine)
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := start(ctx, cfg, *dsn, *throwaway, os.Stdout, then()); err != nil {
		fmt.Fprintln(os.Stderr, "ledgerdemo:", err)
		os.Exit(1)
	}
}

// afterFunc is what start does with the ledger once the demo ran on it,
// before it cleans up: end is the demo's simulated now at the end.
type afterFunc func(l ledger.Ledger, outbox ledger.ClaimStore, end time.Time) error

// start picks the store the flags ask for, runs the demo on it, hands the
// ledger to after (when not nil) and cleans up after it.
func start(ctx context.Context, cfg config, dsn string, throwaway bool, out io.Writer, after afterFunc) error {
	runThen := func(l ledger.Ledger, outbox ledger.ClaimStore) error {
		end, err := simulate(ctx, cfg, l, outbox, out)
		if err != nil || after == nil {
			return err
		}
		return after(l, outbox, end)
	}
	if dsn == "" && !throwaway {
		store := memstore.New()
		fmt.Fprintln(out, "store: in memory")
		return runThen(store, store.Outbox())
	}
	if throwaway {
		cluster, err := pgcluster.Start(ctx, pgcluster.Options{})
		if err != nil {
			return err
		}
		defer func() { _ = cluster.Stop() }()
		dsn = cluster.DSN()
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	// A schema of its own, so the demo never meets an earlier run's IDs or
	// a host's real tables.
	schema := "ledgerdemo_" + strings.ToLower(string(storekit.NewToken())[:10])
	// The demo's clock is simulated (it starts in 2030 and runs minutes
	// per tick), so comparing it with the database's would only warn.
	store, err := pgstore.New(pool, pgstore.WithSchema(schema), pgstore.WithoutSkewCheck())
	if err != nil {
		return err
	}
	if err := store.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer func() {
		_, _ = pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	}()
	fmt.Fprintf(out, "store: PostgreSQL, schema %s\n", schema)
	return runThen(store, store.Outbox())
}

// config sizes one demo run.
type config struct {
	Deliveries int
	Entries    int
	Seed       uint64
	MaxTicks   int
	Tick       time.Duration
}

func defaultConfig() config {
	return config{Deliveries: 3000, Entries: 600, Seed: 7, MaxTicks: 400, Tick: 5 * time.Second}
}

// The fleet's shape. host-4 is replaced by host-5 at supersedeTick, and
// ceremony-2 ends at ceremonyEndTick while some of its work is still open.
var hosts = []ledger.Target{"host-1", "host-2", "host-3", "host-4"}

const (
	supersedeTick   = 15
	ceremonyEndTick = 40
	leaseDuration   = 30 * time.Second
	batch           = 8
)

// run drives the simulation on l and outbox and writes progress and the
// final report to out. It returns an error when an invariant fails.
func run(ctx context.Context, cfg config, l ledger.Ledger, outbox ledger.ClaimStore, out io.Writer) error {
	_, err := simulate(ctx, cfg, l, outbox, out)
	return err
}

// simulate is run, and also returns the simulated now at the end.
func simulate(ctx context.Context, cfg config, l ledger.Ledger, outbox ledger.ClaimStore, out io.Writer) (time.Time, error) {
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5eed))
	now := ledger.Normalize(time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC))
	sim := newFleet(l, outbox, rng)

	if err := sim.enqueue(ctx, cfg, now); err != nil {
		return now, err
	}
	fmt.Fprintf(out, "enqueued %d deliveries to %d hosts and %d outbox entries\n", cfg.Deliveries, len(hosts), cfg.Entries)

	tick := 0
	for ; tick < cfg.MaxTicks; tick++ {
		now = now.Add(cfg.Tick)
		if err := sim.step(ctx, tick, now); err != nil {
			return now, err
		}
		if tick%20 == 0 {
			open, err := sim.openCounts(ctx)
			if err != nil {
				return now, err
			}
			fmt.Fprintf(out, "t+%-5s open deliveries %4d  open outbox entries %4d  reclaimed %3d  fence rejections %d\n",
				time.Duration(tick+1)*cfg.Tick, open.deliveries, open.entries, sim.stats.reclaimed, sim.stats.fenceRejected)
			if open.deliveries == 0 && open.entries == 0 {
				break
			}
		}
	}
	return now, sim.report(ctx, cfg, now, out)
}
