package main

import (
	"context"
	"fmt"
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

// cleanupTimeout bounds each cleanup step (dropping a schema), which runs
// after the run's context may have been cancelled.
const cleanupTimeout = time.Minute

// ledgerStore and outboxStore are what the workloads drive: both stores
// implement the contracts and their batch enqueuers.
type (
	ledgerStore interface {
		ledger.Ledger
		ledger.BatchEnqueuer
	}
	outboxStore interface {
		ledger.ClaimStore
		ledger.OutboxBatchEnqueuer
	}
)

// env is what every workload runs against: the settings, the progress
// line and, on PostgreSQL, the pool and the cluster started for this run.
type env struct {
	cfg     config
	prog    *progress
	server  string             // what the report says about the store
	pool    *pgxpool.Pool      // nil in memory
	cluster *pgcluster.Cluster // nil unless this run started it
	// postmaster is the server's postmaster PID when the server runs on
	// this machine, so that its CPU can be read; 0 otherwise, and
	// serverCPUWhyNot says why.
	postmaster      int
	serverCPUWhyNot string
}

// stores is a fresh, empty ledger and outbox for one workload. On
// PostgreSQL they live in a schema of their own, dropped by drop.
type stores struct {
	ledger ledgerStore
	outbox outboxStore
	schema string // "" in memory
	drop   func()
}

// openEnv connects to the store the settings ask for, starting a
// throwaway cluster for -store pg without -dsn.
func openEnv(ctx context.Context, cfg config, prog *progress) (_ *env, err error) {
	e := &env{cfg: cfg, prog: prog, server: "in memory (memstore)"}
	if cfg.store == storeMem {
		return e, nil
	}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	dsn := cfg.dsn
	if dsn == "" {
		prog.logf("starting a throwaway PostgreSQL cluster (default settings: fsync and synchronous_commit on)")
		// The zero Options are the server's defaults: a durable cluster,
		// so commits cost what they cost in production.
		if e.cluster, err = pgcluster.Start(ctx, pgcluster.Options{}); err != nil {
			return nil, err
		}
		dsn = e.cluster.DSN()
	}
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse -dsn: %w", err)
	}
	// A connection for every worker, each steady producer, the held
	// snapshot and the statistics queries, so that no call waits for a
	// connection and the figures measure the server, not the pool.
	pcfg.MaxConns = int32(cfg.workers + steadyProducers + 4)
	if e.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	var version, fsync, syncCommit string
	if err := e.pool.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('fsync'),
		current_setting('synchronous_commit')`).Scan(&version, &fsync, &syncCommit); err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	where := "at -dsn"
	if e.cluster != nil {
		where = "throwaway cluster"
	}
	e.server = fmt.Sprintf("PostgreSQL %s (%s; fsync=%s, synchronous_commit=%s)", version, where, fsync, syncCommit)
	e.postmaster, e.serverCPUWhyNot = e.findPostmaster(ctx)
	return e, nil
}

// close releases the pool and stops the cluster this run started, which
// removes its directory.
func (e *env) close() {
	if e.pool != nil {
		e.pool.Close()
	}
	if e.cluster != nil {
		if err := e.cluster.Stop(); err != nil {
			e.prog.logf("stopping the cluster: %v", err)
		}
	}
}

// fresh returns empty stores for one workload; opts, on PostgreSQL, come
// after the run's own options and so override them.
func (e *env) fresh(ctx context.Context, w workloadName, opts ...pgstore.Option) (*stores, error) {
	if e.cfg.store == storeMem {
		s := memstore.New()
		return &stores{ledger: s, outbox: s.Outbox(), drop: func() {}}, nil
	}
	schema := "ledgerbench_" + strings.ReplaceAll(string(w), "-", "_") + "_" + strings.ToLower(string(storekit.NewToken())[:8])
	s, err := e.newPGStore(schema, opts...)
	if err != nil {
		return nil, err
	}
	drop := func() { e.dropSchema(ctx, schema) }
	if err := s.Migrate(ctx); err != nil {
		drop()
		return nil, fmt.Errorf("migrate: %w", err)
	}
	return &stores{ledger: s, outbox: s.Outbox(), schema: schema, drop: drop}, nil
}

// newPGStore builds every PostgreSQL store of the run, so that a store
// option chosen by a flag is set in this one place; extra options come
// last.
func (e *env) newPGStore(schema string, extra ...pgstore.Option) (*pgstore.Store, error) {
	opts := []pgstore.Option{pgstore.WithSchema(schema), pgstore.WithGroupCommit(e.cfg.groupCommit)}
	return pgstore.New(e.pool, append(opts, extra...)...)
}

// dropSchema removes a schema the run created, also after the run was
// interrupted.
func (e *env) dropSchema(ctx context.Context, schema string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if _, err := e.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		e.prog.logf("dropping schema %s: %v", schema, err)
	}
}

// analyze refreshes the planner's statistics of a workload's tables and,
// with vacuum, clears what bulk loading left behind, as autovacuum does
// on any table in use after its first nap (a minute). Without statistics
// the planner estimates offerable rows from default selectivities and can
// prefer sorting every offerable row to the ordered index scan.
func (e *env) analyze(ctx context.Context, st *stores, vacuum bool) error {
	if st.schema == "" {
		return nil
	}
	verb := "ANALYZE "
	if vacuum {
		verb = "VACUUM ANALYZE "
	}
	for _, table := range []string{"deliveries", "outbox_entries"} {
		if _, err := e.pool.Exec(ctx, verb+pgx.Identifier{st.schema, table}.Sanitize()); err != nil {
			return fmt.Errorf("%s%s: %w", verb, table, err)
		}
	}
	return nil
}
