package pgstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/internal/pgtest"
	"github.com/leaseledger/ledger/ledgertest"
)

// This file proves that the store's statements find their rows through an
// index whatever the planner's statistics say. pgx prepares every
// statement, and PostgreSQL may switch a prepared statement to a generic
// plan after five executions, costed on the statistics of that moment and
// kept until the next ANALYZE. A queue that starts empty (a fresh
// deployment, a test database, a table just truncated or purged) is
// planned as a table of ten pages that has never been analysed; a plan
// that scans such a table whole is cheap to the planner, and reads every
// row once the table has grown.
//
// The statements are not listed by hand: a tracer records every statement
// the store sends while the conformance suites (and the calls they do not
// make) run against it, with group commit on and off (without history a
// store sends a subset of the same statements). Each one is then planned as a generic plan in a fresh schema that
// has never been analysed, first empty, then holding 100,000 ended rows
// in each table with still no ANALYZE, and no plan may read a ledger
// table by a sequential scan.

// statementLog records the SQL text of every statement a pool sends,
// alone or in a batch, while it is on, with the prelude (grantPrelude,
// leasePrelude or rangePrelude) its transaction ran before it: the settings it is
// planned under.
type statementLog struct {
	mu      sync.Mutex
	on      bool
	seen    map[string]string    // statement: its prelude, "" for none
	prelude map[*pgx.Conn]string // the prelude of the transaction open on a connection
}

func (l *statementLog) add(conn *pgx.Conn, sql string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	word, _, _ := strings.Cut(strings.ToUpper(strings.TrimSpace(sql)), " ")
	switch {
	case sql == grantPrelude || sql == rangePrelude:
		l.prelude[conn] = sql
	case sql == leasePrelude:
		// The lease's lock beside grantPrelude's settings: the
		// settings are what its statements are planned under.
		l.prelude[conn] = grantPrelude
	case word == "BEGIN" || word == "COMMIT" || word == "ROLLBACK":
		// A savepoint's rollback undoes the settings too.
		delete(l.prelude, conn)
	case l.on:
		// A statement ever sent without a prelude is planned without one.
		if p, ok := l.seen[sql]; !ok || p != "" {
			l.seen[sql] = l.prelude[conn]
		}
	}
}

func (l *statementLog) record(on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.on = on
}

func (l *statementLog) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	l.add(conn, d.SQL)
	return ctx
}

func (l *statementLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (l *statementLog) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (l *statementLog) TraceBatchQuery(_ context.Context, conn *pgx.Conn, d pgx.TraceBatchQueryData) {
	l.add(conn, d.SQL)
}

func (l *statementLog) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// statements returns the recorded statements that plan (the queries and
// writes, not BEGIN, COMMIT, SET or NOTIFY), each with its prelude.
func (l *statementLog) statements() map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]string{}
	for sql, prelude := range l.seen {
		word, _, _ := strings.Cut(strings.TrimSpace(sql), " ")
		word, _, _ = strings.Cut(word, "\n")
		switch strings.ToUpper(strings.TrimSpace(word)) {
		case "SELECT", "WITH", "INSERT", "UPDATE", "DELETE":
			out[sql] = prelude
		}
	}
	return out
}

// tracedPool is pgtest.Pool whose statements are recorded in log.
func tracedPool(t *testing.T, log *statementLog) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.DSN(t))
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = ""
	cfg.ConnConfig.Tracer = log
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// ledgerTables are the tables that grow with the work; the small ones
// (the counts, the fences, the leads, the migrations) may be read whole.
var ledgerTables = []string{"deliveries", "outbox_entries", "delivery_history", "outbox_entry_history"}

func TestExplainGenericPlansOnUnanalysedTables(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the conformance suites and builds 400,000 rows; skipped under -short")
	}
	// Beside the other runs of whole suites: it mostly waits on the server.
	t.Parallel()
	log := &statementLog{seen: map[string]string{}, prelude: map[*pgx.Conn]string{}}
	// Every store of the workload lives in a schema of its own; the
	// statements name it, and are planned in one fresh schema instead.
	var schemas sync.Map
	newTraced := func(t *testing.T, opts ...Option) *Store {
		// Migrations are not hot: the schema is migrated through a pool
		// of its own, and the store under test records what it does after.
		plain := pgtest.Pool(t)
		schema := pgtest.Schema(t, plain)
		m, err := New(plain, WithSchema(schema))
		require.NoError(t, err)
		require.NoError(t, m.Migrate(t.Context()))
		s, err := New(tracedPool(t, log), append([]Option{WithSchema(schema)}, opts...)...)
		require.NoError(t, err)
		schemas.Store(schema, true)
		return s
	}
	t.Run("Workload", func(t *testing.T) {
		log.record(true)
		defer log.record(false)
		for _, cfg := range []struct {
			name string
			opts []Option
		}{
			{"Default", nil},
			{"NoGroupCommit", []Option{WithGroupCommit(false)}},
		} {
			t.Run(cfg.name, func(t *testing.T) {
				t.Run("Ledger", func(t *testing.T) {
					ledgertest.TestLedger(t, func(t *testing.T) ledger.Ledger { return newTraced(t, cfg.opts...) })
				})
				t.Run("ClaimStore", func(t *testing.T) {
					ledgertest.TestClaimStore(t, func(t *testing.T) ledger.ClaimStore { return newTraced(t, cfg.opts...).Outbox() })
				})
				t.Run("QueueBounds", func(t *testing.T) {
					ledgertest.TestQueueBounds(t, func(t *testing.T, b ledger.QueueBounds) ledger.Ledger {
						opts := append([]Option{WithQueueBound(b.Default)}, cfg.opts...)
						for target, n := range b.Targets {
							opts = append(opts, WithTargetQueueBound(target, n))
						}
						return newTraced(t, opts...)
					})
				})
				t.Run("Retention", func(t *testing.T) { retentionWorkload(t, newTraced(t, cfg.opts...)) })
			})
		}
	})
	if t.Failed() {
		return
	}
	stmts := log.statements()
	require.NotEmpty(t, stmts)

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool)
	s, err := New(pool, WithSchema(schema))
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	// Autovacuum must not analyse the tables while the test plans.
	for _, table := range ledgerTables {
		_, err := pool.Exec(ctx, "ALTER TABLE "+pgx.Identifier{schema, table}.Sanitize()+" SET (autovacuum_enabled = false)")
		require.NoError(t, err)
	}
	target := pgx.Identifier{schema}.Sanitize()
	inSchema := map[string]string{}
	for sql, prelude := range stmts {
		schemas.Range(func(k, _ any) bool {
			sql = strings.ReplaceAll(sql, pgx.Identifier{k.(string)}.Sanitize(), target)
			return true
		})
		if inSchema[sql] == "" {
			inSchema[sql] = prelude
		}
	}
	sorted := slices.Sorted(maps.Keys(inSchema))
	t.Logf("%d distinct statements recorded", len(sorted))

	// A never analysed table, on every version (reltuples only marks one,
	// as -1, from PostgreSQL 14).
	requireUnanalysed := func(t *testing.T) {
		for _, table := range ledgerTables {
			var analyses int64
			require.NoError(t, pool.QueryRow(ctx, "SELECT analyze_count + autoanalyze_count FROM pg_catalog.pg_stat_user_tables WHERE relid = $1::regclass",
				pgx.Identifier{schema, table}.Sanitize()).Scan(&analyses))
			require.Zero(t, analyses, "%s has been analysed", table)
		}
	}
	check := func(t *testing.T) {
		requireUnanalysed(t)
		for i, sql := range sorted {
			var settings []string
			if p := inSchema[sql]; p != "" {
				settings = []string{p}
			}
			plan := explainGeneric(ctx, t, pool, sql, settings...)
			seq, _, tree := inspectPlan(plan, "")
			if len(seq) > 0 {
				t.Errorf("statement %d reads a ledger table by a sequential scan\nplan: %s\nsql: %s", i, tree, sql)
			} else {
				t.Logf("statement %d: %s\nplan: %s", i, strings.Join(strings.Fields(sql), " "), tree)
			}
		}
	}
	t.Run("Empty", check)
	t.Run("Grown", func(t *testing.T) {
		at := time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)
		insertTerminalDeliveries(ctx, t, pool, schema, 100_000, at)
		insertTerminalEntries(ctx, t, pool, schema, 100_000, at)
		insertTerminalHistory(ctx, t, pool, schema)
		check(t)
	})
}

// retentionWorkload makes the calls of a sweeper's retention and of an
// operator's purge dry run, which the conformance suites do not.
func retentionWorkload(t *testing.T, s *Store) {
	ctx := t.Context()
	at := time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)
	for i := range 3 {
		id := ledger.DeliveryID(fmt.Sprintf("d-%d", i))
		_, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: id, Target: "host"}, at)
		require.NoError(t, err)
		_, err = s.Abandon(ctx, id, ledger.Cause{Kind: "done"}, at)
		require.NoError(t, err)
	}
	o := s.Outbox()
	r, err := o.Enqueue(ctx, ledger.Envelope{Provider: "mail", Kind: "k", IdempotencyKey: "key"})
	require.NoError(t, err)
	_, err = o.MarkDeadLettered(ctx, r.Entry.ID, ledger.EmissionError{Code: "x"}, "poison")
	require.NoError(t, err)
	// The ID look-ups a sharded ledger's enqueue makes.
	_, err = s.FindDeliveryIDs(ctx, []ledger.DeliveryID{"d-0", "d-9"})
	require.NoError(t, err)
	_, err = o.FindEntryIDs(ctx, []ledger.OutboxEntryID{r.Entry.ID})
	require.NoError(t, err)
	later := at.Add(1000 * time.Hour)
	_, err = s.CountPurgeable(ctx, later)
	require.NoError(t, err)
	_, err = o.CountPurgeable(ctx, later)
	require.NoError(t, err)
	_, err = s.PurgeDeliveries(ctx, later, 2)
	require.NoError(t, err)
	_, err = o.PurgeEntries(ctx, later, 2)
	require.NoError(t, err)
}
