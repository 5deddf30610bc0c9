package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/internal/pgtest"
	"github.com/leaseledger/ledger/storekit"
)

// This file proves that every hot query is served by an index: on tables
// holding 100,000 terminal rows (each with a history row) beside a few
// hundred open ones, the planner, left to itself (no enable_seqscan=off),
// must reach deliveries and outbox_entries, and their history tables,
// through an index (the partial indexes on the open states; the primary
// key for List, for the grants' join back to the picked rows and for the
// history) in the lease, claim, find, sweep, list, purge, stats and
// history statements, never by a sequential scan. The stats statements
// may scan the small count tables whole; that is what they are for. Each statement is checked twice: with its parameters
// bound, as the first executions of a prepared statement are planned, and
// as a generic plan, which PostgreSQL may switch a cached prepared
// statement (pgx caches every statement) to after five executions.

// explainTerminalRows is how many terminal rows each table holds.
const explainTerminalRows = 100_000

// explainT0 is the fixed instant the data and the parameters are built from.
var explainT0 = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)

// explainOwner holds the open leases of the fixture: explainHeldLeases
// leased deliveries (see insertOpenRows).
var explainOwner = ledger.Owner{Agent: "agent-1", Incarnation: "boot-1"}

const explainHeldLeases = 60

// explainFixture builds the fixture of the EXPLAIN tests in a schema of
// its own: explainTerminalRows terminal records in each table (and their
// history when history is true), the open rows of insertOpenRows, and
// fresh planner statistics.
func explainFixture(ctx context.Context, t *testing.T, history bool) (*Store, *pgxpool.Pool, string) {
	t.Helper()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool)
	s, err := New(pool, WithSchema(schema), WithClock(func() time.Time { return explainT0 }),
		WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))

	insertTerminalDeliveries(ctx, t, pool, schema, explainTerminalRows, explainT0)
	insertTerminalEntries(ctx, t, pool, schema, explainTerminalRows, explainT0)
	if history {
		insertTerminalHistory(ctx, t, pool, schema)
	}
	insertOpenRows(ctx, t, s)
	for _, table := range []string{"deliveries", "outbox_entries", "delivery_history", "outbox_entry_history", "delivery_counts", "outbox_counts"} {
		_, err := pool.Exec(ctx, "ANALYZE "+pgx.Identifier{schema, table}.Sanitize())
		require.NoError(t, err)
	}
	return s, pool, schema
}

func TestExplainHotQueriesUseIndexes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 200,000 rows; skipped under -short")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s, pool, schema := explainFixture(ctx, t, true)

	q := s.q
	now := explainT0.Add(time.Minute)
	expiry := now.Add(time.Minute)
	// A batch of 100, as a busy agent or worker asks for.
	tokens := make([]string, 100)
	for i := range tokens {
		tokens[i] = fmt.Sprintf("token-%d", i)
	}
	f, reason := grantProbe()
	// leaseArgs are the parameters of the lease statements as grant binds
	// them, for a batch of len(tokens).
	entry := leaseEntryArgs(explainOwner.String(), now, reason)
	leaseArgs := func(filters ...any) []any {
		return append([]any{now, len(tokens), tokens, explainOwner.Agent, explainOwner.Incarnation, expiry,
			string(f.Kind), f.Message, f.Permanent, entry[0], entry[1], entry[2], entry[3], true}, filters...)
	}
	claimEntry := claimEntryArgs("worker-1", now)
	claimArgs := []any{now, len(tokens), tokens, "worker-1", expiry, claimEntry[0], claimEntry[1], true}
	cases := []struct {
		name  string
		sql   string
		args  []any
		table string // the main table the statement must reach by index
	}{
		{"Lease", q.lease[0][0], leaseArgs(), "deliveries"},
		{"LeaseByTargets", q.lease[1][0], leaseArgs([]string{"host-3", "host-7"}), "deliveries"},
		{"LeaseByCeremony", q.lease[0][1], leaseArgs("ceremony-2"), "deliveries"},
		{"LeaseByTargetsAndCeremony", q.lease[1][1], leaseArgs([]string{"host-3"}, "ceremony-2"), "deliveries"},
		{"LeaseReclaim", q.reclaimable, []any{"", sweepBatchSize, explainOwner.Agent, "boot-2"}, "deliveries"},
		{"Expire", q.expirable, []any{"", sweepBatchSize, now.Add(time.Hour)}, "deliveries"},
		{"ExpireCeremony", q.ceremonyOpen, []any{"", sweepBatchSize, "ceremony-2"}, "deliveries"},
		{"Supersede", q.supersedable, []any{"", sweepBatchSize, "host-3"}, "deliveries"},
		{"ListFirstPage", q.listDeliveries, []any{"", []string{}, nil, []string{}, 101}, "deliveries"},
		{"ClaimPending", q.claimPending, claimArgs, "outbox_entries"},
		{"ClaimRetryReady", q.claimRetryReady, claimArgs, "outbox_entries"},
		{"FindPending", q.findPending, []any{100}, "outbox_entries"},
		{"FindRetryReady", q.findRetryReady, []any{now.Add(time.Hour), 100}, "outbox_entries"},
		{"PurgeDeliveries", purgeDeliveriesSQL(schema), []any{now, 100}, "deliveries"},
		{"PurgeEntries", purgeEntriesSQL(schema), []any{now, 100}, "outbox_entries"},
		{"Stats", q.stats[0][0], []any{now}, "deliveries"},
		{"StatsByTarget", q.stats[1][0], []any{now, "host-3"}, "deliveries"},
		{"StatsByCeremony", q.stats[0][1], []any{now, "ceremony-2"}, "deliveries"},
		{"StatsByTargetAndCeremony", q.stats[1][1], []any{now, "host-3", "ceremony-2"}, "deliveries"},
		{"OutboxStats", q.outboxStats, []any{now}, "outbox_entries"},
		{"History", q.deliveryHistory, []any{"done-00000042"}, "delivery_history"},
		{"EntryHistory", q.entryHistory, []any{"done-00000042"}, "outbox_entry_history"},
		{"ListEntriesByKey", q.browse.listEntriesByKey, []any{"", []string{}, []string{}, 51,
			string(ledger.OutboxEntryIDFor("key-42")), "key-42"}, "outbox_entries"},
		{"RedriveEntriesByKey", q.redrivableEntriesByKey, append(redriveArgs(storekit.RedrivePosition{}, entryCutoff(time.Time{}),
			[]string{"failed", "dead_lettered"}, nil, 100), string(ledger.OutboxEntryIDFor("key-42")), "key-42"), "outbox_entries"},
	}
	// The control: an unindexed predicate over the same data must show up
	// as a sequential scan, or the checks below could pass because the
	// planner was kept from scanning sequentially, or because the plan's
	// JSON was not read the way checkPlan expects.
	t.Run("ControlUnindexedIsSeqScan", func(t *testing.T) {
		for _, table := range []string{"deliveries", "outbox_entries"} {
			sql := "SELECT id FROM " + pgx.Identifier{schema, table}.Sanitize() + " WHERE attempts = $1"
			seq, reached, tree := inspectPlan(explainCustom(ctx, t, pool, sql, []any{1}), table)
			require.True(t, reached, "plan never scans %s: %s", table, tree)
			require.NotEmpty(t, seq, "no sequential scan found in %s", tree)
		}
	})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Run("Custom", func(t *testing.T) {
				checkPlan(t, explainCustom(ctx, t, pool, c.sql, c.args), c.table)
			})
			t.Run("Generic", func(t *testing.T) {
				checkPlan(t, explainGeneric(ctx, t, pool, c.sql), c.table)
			})
		})
	}

	// The stats statements count the queue by target or provider too:
	// every index they read is a partial index of open rows, never the
	// primary key or the index of ended rows, and the queue is read
	// through the offer candidates' or the claims' own indexes.
	t.Run("StatsReadOnlyOpenRowIndexes", func(t *testing.T) {
		// The control: a count over the oldest ended rows, read through
		// their index, is caught.
		ended := "SELECT count(*) FROM " + pgx.Identifier{schema, "deliveries"}.Sanitize() + " WHERE ended_at <= $1"
		plan := explainCustom(ctx, t, pool, ended, []any{explainT0.Add(-99_000 * time.Second)})
		require.Contains(t, statsIndexProblem(plan, "deliveries"), "deliveries_ended_idx", "plan: %s", plan.tree())
		for _, c := range cases {
			if !strings.HasPrefix(c.name, "Stats") && c.name != "OutboxStats" {
				continue
			}
			for mode, plan := range map[string]planNode{
				"Custom":  explainCustom(ctx, t, pool, c.sql, c.args),
				"Generic": explainGeneric(ctx, t, pool, c.sql),
			} {
				checkStatsIndexes(t, c.name+"/"+mode, plan, c.table)
			}
		}
	})

	// An operator's lookup by idempotency key looks the one entry up in
	// the primary key by the ID the key fixes: walking the primary key or
	// the index of ended entries would pass the check above and read
	// every entry.
	t.Run("ByKeyLooksUpThePrimaryKey", func(t *testing.T) {
		for _, c := range cases {
			if !strings.HasSuffix(c.name, "ByKey") {
				continue
			}
			for mode, plan := range map[string]planNode{
				"Custom":  explainCustom(ctx, t, pool, c.sql, c.args),
				"Generic": explainGeneric(ctx, t, pool, c.sql),
			} {
				require.True(t, usesIndex(plan, "outbox_entries_pkey"), "%s/%s: %s", c.name, mode, plan.tree())
			}
		}
	})

	// A grant's UPDATE finds the rows it picked by their position (see
	// pairTokens), not through the primary key again, and pairs them with
	// their tokens by subscript, not by a join with unnest($3), which a
	// generic plan rescanned for every picked row. Under the generic plan,
	// which a pooled connection settles on, the UPDATE reads a TID scan and
	// no function scan. The controls are the same statements rewritten the
	// old ways.
	t.Run("GrantsUpdateByPosition", func(t *testing.T) {
		scans := func(plan planNode, node, table string) bool {
			found := false
			plan.walk(func(n planNode) { found = found || n.NodeType == node && (table == "" || n.RelationName == table) })
			return found
		}
		byID := strings.Replace(q.claimPending, grantedRow, "d.id = granted.id", 1)
		require.NotEqual(t, q.claimPending, byID)
		control := explainGeneric(ctx, t, pool, byID)
		require.False(t, scans(control, "Tid Scan", "outbox_entries"), "control: %s", control.tree())
		joined := strings.Replace(q.lease[0][0], pairTokens, `), granted AS (
	SELECT p.*, t.token
	FROM (SELECT picked.*, row_number() OVER () AS n FROM picked) AS p
	JOIN unnest($3::text[]) WITH ORDINALITY AS t(token, n) ON t.n = p.n
), updated AS (`, 1)
		require.NotEqual(t, q.lease[0][0], joined)
		control = explainGeneric(ctx, t, pool, joined)
		require.True(t, scans(control, "Function Scan", ""), "control: %s", control.tree())
		for _, c := range cases {
			grant := strings.HasPrefix(c.name, "Claim") || strings.HasPrefix(c.name, "Lease") && c.name != "LeaseReclaim"
			if !grant {
				continue
			}
			plan := explainGeneric(ctx, t, pool, c.sql)
			require.True(t, scans(plan, "Tid Scan", c.table), "%s: %s", c.name, plan.tree())
			require.False(t, usesIndex(plan, c.table+"_pkey"), "%s: %s", c.name, plan.tree())
			require.False(t, scans(plan, "Function Scan", ""), "%s: %s", c.name, plan.tree())
		}
	})

	// A held write finds its rows where the grant, or the held write
	// before it, wrote them (positionBit), matching the ID: a TID scan, not
	// the primary key. A held copy of unknown position makes its group go
	// by ID: the control.
	t.Run("HeldWritesByPosition", func(t *testing.T) {
		for name, k := range map[string]struct {
			table *bulkTable
			tail  *heldTail
			rel   string
		}{
			"Deliveries": {s.held.deliveries.kind.table, s.held.deliveries.tail, "deliveries"},
			"Entries":    {s.held.entries.kind.table, s.held.entries.tail, "outbox_entries"},
		} {
			version := uint64(1) << (len(k.table.names) - 1)
			byID := explainGeneric(ctx, t, pool, k.table.heldStatement(version, k.tail).sql)
			require.True(t, usesIndex(byID, k.rel+"_pkey"), "%s, control: %s", name, byID.tree())
			plan := explainGeneric(ctx, t, pool, k.table.heldStatement(version|positionBit, k.tail).sql)
			tid := false
			plan.walk(func(n planNode) { tid = tid || n.NodeType == "Tid Scan" && n.RelationName == k.rel })
			require.True(t, tid, "%s: %s", name, plan.tree())
			require.False(t, usesIndex(plan, k.rel+"_pkey"), "%s: %s", name, plan.tree())
		}
	})

	// The incarnation rule's lookup reads none of the leases of the
	// calling incarnation (see TestExplainReclaimWithManyLeasesHeld).
	t.Run("LeaseReclaimReadsOnlyWhatItTakesBack", func(t *testing.T) {
		checkReclaimReads(ctx, t, pool, q.reclaimable, explainOwner, explainHeldLeases)
	})
}

// openRowIndexes are the partial indexes of open rows of each table,
// which stats may read; queueIndexes those of them the queue by target
// or provider must be read through (one of them at least for
// deliveries, each of them for the outbox, whose queue has three parts).
var (
	openRowIndexes = map[string][]string{
		"deliveries": {"deliveries_offerable_idx", "deliveries_offerable_target_idx", "deliveries_ceremony_open_idx",
			"deliveries_leased_idx", "deliveries_ack_deadline_idx"},
		"outbox_entries": {"outbox_entries_unclaimed_idx", "outbox_entries_unclaimed_due_idx", "outbox_entries_claimed_idx"},
	}
	queueIndexes = map[string][]string{
		"deliveries":     {"deliveries_offerable_idx", "deliveries_offerable_target_idx", "deliveries_ceremony_open_idx"},
		"outbox_entries": {"outbox_entries_unclaimed_idx", "outbox_entries_unclaimed_due_idx", "outbox_entries_claimed_idx"},
	}
)

// statsIndexProblem says what is wrong with a stats plan that reads an
// index of table that is not a partial index of open rows, or does not
// read the queue's indexes; "" when nothing is.
func statsIndexProblem(plan planNode, table string) string {
	used := map[string]bool{}
	plan.walk(func(n planNode) {
		if strings.HasPrefix(n.IndexName, table+"_") {
			used[n.IndexName] = true
		}
	})
	for idx := range used {
		if !slices.Contains(openRowIndexes[table], idx) {
			return "reads " + idx + ", not a partial index of open rows"
		}
	}
	queue := 0
	for _, idx := range queueIndexes[table] {
		if used[idx] {
			queue++
		}
	}
	switch {
	case table == "deliveries" && queue == 0:
		return "reads no index of offer candidates"
	case table == "outbox_entries" && queue < len(queueIndexes[table]):
		return "does not read every index of the queue"
	}
	return ""
}

func checkStatsIndexes(t *testing.T, name string, plan planNode, table string) {
	t.Helper()
	require.Empty(t, statsIndexProblem(plan, table), "%s; plan: %s", name, plan.tree())
}

// planNode is one node of an EXPLAIN (FORMAT JSON) plan tree.
type planNode struct {
	NodeType     string     `json:"Node Type"`
	RelationName string     `json:"Relation Name"`
	IndexName    string     `json:"Index Name"`
	IndexCond    string     `json:"Index Cond"`
	Plans        []planNode `json:"Plans"`

	// Set by EXPLAIN ANALYZE only: rows returned and rows read but
	// dropped, per loop.
	ActualRows       float64 `json:"Actual Rows"`
	ActualLoops      float64 `json:"Actual Loops"`
	RemovedByFilter  float64 `json:"Rows Removed by Filter"`
	RemovedByRecheck float64 `json:"Rows Removed by Index Recheck"`
}

// String shows a node as "Index Scan deliveries_offerable_idx on
// deliveries", for failure messages.
func (n planNode) String() string {
	s := n.NodeType
	if n.IndexName != "" {
		s += " " + n.IndexName
	}
	if n.RelationName != "" {
		s += " on " + n.RelationName
	}
	return s
}

// walk calls visit on n and every node below it.
func (n planNode) walk(visit func(planNode)) {
	visit(n)
	for _, c := range n.Plans {
		c.walk(visit)
	}
}

// explainCustom plans sql with args bound, as PostgreSQL plans the first
// executions of a prepared statement (a custom plan).
func explainCustom(ctx context.Context, t *testing.T, pool *pgxpool.Pool, sql string, args []any) planNode {
	t.Helper()
	var out []byte
	require.NoError(t, pool.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+sql, args...).Scan(&out))
	return decodePlan(t, out)
}

// explainGeneric plans sql as a generic plan, which does not depend on
// the parameter values: the NULLs passed to EXECUTE are never looked at.
//
// settings are statements run first in the same transaction, as the
// store's preludes are (grantPrelude).
func explainGeneric(ctx context.Context, t *testing.T, pool *pgxpool.Pool, sql string, settings ...string) planNode {
	t.Helper()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	// The pooled connection must come back clean: the setting is local to
	// a transaction that is rolled back, and the prepared statement, which
	// outlives transactions, is deallocated after the rollback (deferred
	// calls run last first), so even after a failed EXPLAIN.
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "DEALLOCATE explain_generic") }()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	_, err = tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan")
	require.NoError(t, err)
	for _, setting := range settings {
		_, err = tx.Exec(ctx, setting)
		require.NoError(t, err)
	}
	_, err = tx.Exec(ctx, "PREPARE explain_generic AS "+sql)
	require.NoError(t, err)
	execute := "EXECUTE explain_generic"
	if n := paramCount(sql); n > 0 {
		execute += "(" + strings.TrimSuffix(strings.Repeat("NULL, ", n), ", ") + ")"
	}
	var out []byte
	require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+execute,
		pgx.QueryExecModeSimpleProtocol).Scan(&out))
	return decodePlan(t, out)
}

var paramRef = regexp.MustCompile(`\$(\d+)`)

// paramCount returns the highest parameter number sql uses.
func paramCount(sql string) int {
	n := 0
	for _, m := range paramRef.FindAllStringSubmatch(sql, -1) {
		if i, err := strconv.Atoi(m[1]); err == nil && i > n {
			n = i
		}
	}
	return n
}

func decodePlan(t *testing.T, out []byte) planNode {
	t.Helper()
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal(out, &plans))
	require.Len(t, plans, 1)
	return plans[0].Plan
}

// checkPlan fails when any node scans deliveries, outbox_entries or their
// history tables sequentially, and when the plan never scans table at all (which would
// make the first check pass for the wrong reason).
func checkPlan(t *testing.T, plan planNode, table string) {
	t.Helper()
	seq, reached, tree := inspectPlan(plan, table)
	t.Logf("plan: %s", tree)
	require.Empty(t, seq, "sequential scan of a main table; plan: %s", tree)
	require.True(t, reached, "plan never scans %s; plan: %s", table, tree)
}

// inspectPlan returns plan's sequential scans of the main tables (the
// records and their history), whether
// any node scans table, and the whole tree as "Node [Child, Child]".
func inspectPlan(plan planNode, table string) (seq []string, reached bool, tree string) {
	plan.walk(func(n planNode) {
		switch n.RelationName {
		case "deliveries", "outbox_entries", "delivery_history", "outbox_entry_history":
			if n.NodeType == "Seq Scan" {
				seq = append(seq, n.String())
			}
			if n.RelationName == table && strings.Contains(n.NodeType, "Scan") {
				reached = true
			}
		}
	})
	return seq, reached, plan.tree()
}

// tree renders n and its children as "Node [Child, Child [Grandchild]]".
func (n planNode) tree() string {
	if len(n.Plans) == 0 {
		return n.String()
	}
	kids := make([]string, len(n.Plans))
	for i, c := range n.Plans {
		kids[i] = c.tree()
	}
	return n.String() + " [" + strings.Join(kids, ", ") + "]"
}

// insertTerminalDeliveries writes n terminal deliveries (Processed, Failed
// and Expired in turn) straight into the table in one statement: the
// store's API would take minutes for as many. The rows satisfy every CHECK
// constraint, spread over 500 targets and 1,000 ceremonies, and all ended
// before the instant before.
func insertTerminalDeliveries(ctx context.Context, tb testing.TB, pool *pgxpool.Pool, schema string, n int, before time.Time) {
	tb.Helper()
	_, err := pool.Exec(ctx, fmt.Sprintf(terminalDeliveriesSQL, pgx.Identifier{schema, "deliveries"}.Sanitize()), n, before)
	require.NoError(tb, err)
}

// insertTerminalEntries is insertTerminalDeliveries for the outbox:
// Delivered, Failed and DeadLettered entries in turn.
func insertTerminalEntries(ctx context.Context, tb testing.TB, pool *pgxpool.Pool, schema string, n int, before time.Time) {
	tb.Helper()
	_, err := pool.Exec(ctx, fmt.Sprintf(terminalEntriesSQL, pgx.Identifier{schema, "outbox_entries"}.Sanitize()), n, before)
	require.NoError(tb, err)
}

// terminalDeliveriesSQL takes $1 the row count and $2 the instant every
// row ended before; %s is the table.
const terminalDeliveriesSQL = `
INSERT INTO %s (id, target, ceremony, payload, max_attempts, backoff_base_us, backoff_max_us,
	ack_window_us, state, attempts, available_at, lease_seq, ended_lease_token, ended_lease_seq,
	ended_lease_op, ended_lease_at, activations, created_at, updated_at, ended_at, version)
SELECT 'done-' || lpad(i::text, 8, '0'), 'host-' || (i %% 500), 'ceremony-' || (i %% 1000),
	convert_to(repeat('x', 64), 'UTF8'), 5, 1000000, 300000000, 300000000,
	(ARRAY['processed', 'failed', 'expired'])[1 + i %% 3], 1,
	$2::timestamptz - make_interval(secs => i + 60), 1, 'token-' || i, 1, 'processed',
	$2::timestamptz - make_interval(secs => i), 0,
	$2::timestamptz - make_interval(secs => i + 60), $2::timestamptz - make_interval(secs => i),
	$2::timestamptz - make_interval(secs => i), 3
FROM generate_series(1, $1::integer) AS i`

// terminalEntriesSQL is terminalDeliveriesSQL for the outbox.
const terminalEntriesSQL = `
INSERT INTO %s (id, provider, kind, payload, idempotency_key, status, attempts,
	last_error_code, dead_letter_reason, claim_seq, ended_claim_token, ended_claim_seq,
	ended_claim_op, ended_claim_at, created_at, updated_at, ended_at, version)
SELECT 'done-' || lpad(i::text, 8, '0'), 'mail', 'welcome', convert_to(repeat('x', 64), 'UTF8'),
	'key-' || i, (ARRAY['delivered', 'failed', 'dead_lettered'])[1 + i %% 3], 1,
	CASE WHEN i %% 3 = 0 THEN NULL ELSE 'code' END,
	CASE WHEN i %% 3 = 2 THEN 'poison' ELSE '' END, 1, 'token-' || i, 1, 'delivered',
	$2::timestamptz - make_interval(secs => i),
	$2::timestamptz - make_interval(secs => i + 60), $2::timestamptz - make_interval(secs => i),
	$2::timestamptz - make_interval(secs => i), 3
FROM generate_series(1, $1::integer) AS i`

// insertTerminalHistory gives every delivery and outbox entry one history
// row, its creation, as Enqueue writes it, straight into the tables.
func insertTerminalHistory(ctx context.Context, tb testing.TB, pool *pgxpool.Pool, schema string) {
	tb.Helper()
	for _, t := range []struct{ records, history, first string }{
		{"deliveries", "delivery_history", "offered"},
		{"outbox_entries", "outbox_entry_history", "pending"},
	} {
		_, err := pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (id, seq, op, to_state, outcome, at)
			SELECT id, 1, 'enqueue', $1, 'applied', created_at FROM %s`,
			pgx.Identifier{schema, t.history}.Sanitize(), pgx.Identifier{schema, t.records}.Sanitize()), t.first)
		require.NoError(tb, err)
	}
}

// insertOpenRows writes a few hundred open records through the store, so
// they are exactly what the store writes: 300 deliveries over 10 targets
// and 5 ceremonies, of which 100 Leased (40 of them then Acknowledged),
// and 300 outbox entries, of which 50 claimed and 50 RetryScheduled.
func insertOpenRows(ctx context.Context, t *testing.T, s *Store) {
	t.Helper()
	reqs := make([]ledger.EnqueueRequest, 300)
	for i := range reqs {
		reqs[i] = ledger.EnqueueRequest{
			ID:       ledger.DeliveryID(fmt.Sprintf("open-%04d", i)),
			Target:   ledger.Target(fmt.Sprintf("host-%d", i%10)),
			Ceremony: ledger.CeremonyID(fmt.Sprintf("ceremony-%d", i%5)),
			Payload:  []byte("payload"),
		}
	}
	_, err := s.EnqueueBatch(ctx, reqs, explainT0)
	require.NoError(t, err)
	lr, err := s.Lease(ctx, ledger.LeaseFilter{}, explainOwner, explainT0, time.Minute, 100)
	require.NoError(t, err)
	require.Len(t, lr.Leased, 100)
	for _, l := range lr.Leased[:40] {
		r, err := s.Acknowledge(ctx, l.Lease, "seen", explainT0)
		require.NoError(t, err)
		require.Equal(t, ledger.OutcomeApplied, r.Outcome)
	}

	o := s.Outbox()
	envs := make([]ledger.Envelope, 300)
	for i := range envs {
		envs[i] = ledger.Envelope{Provider: "mail", Kind: "welcome", Payload: []byte("hi"), IdempotencyKey: fmt.Sprintf("open-%04d", i)}
	}
	_, err = o.EnqueueBatch(ctx, envs)
	require.NoError(t, err)
	claimed, err := o.ClaimPending(ctx, ledger.ClaimRequest{Worker: "worker-0", Now: explainT0, LeaseDuration: time.Minute, Limit: 100})
	require.NoError(t, err)
	require.Len(t, claimed, 100)
	retry := explainT0.Add(30 * time.Second)
	for _, c := range claimed[:50] {
		r, err := o.MarkClaimFailed(ctx, c.Claim, ledger.EmissionError{Code: "busy", Message: "try later"}, &retry)
		require.NoError(t, err)
		require.Equal(t, ledger.OutcomeApplied, r.Outcome)
	}
}

// TestExplainGroupStatementsUseIndexes checks the statements of a group
// transaction (group_tx.go, group_bulk.go) on the fixture of
// TestExplainHotQueriesUseIndexes: the locking reads of a full group's
// records by id = ANY($1) look their rows up in the primary keys of
// deliveries and outbox_entries (an index condition, not a whole index
// read in id order and filtered), and so do the write-backs, which join
// one array per column to the table on id.
func TestExplainGroupStatementsUseIndexes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 200,000 rows; skipped under -short")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s, pool, _ := explainFixture(ctx, t, false)
	require.NotNil(t, s.groups, "group commit is on")

	// A full group: open records, as the calls of a group name them, and
	// ended ones, as late calls do.
	ids := make([]string, DefaultGroupCommitMax)
	versions := make([]int64, len(ids))
	for i := range ids {
		ids[i] = fmt.Sprintf("open-%04d", i)
		if i%2 == 1 {
			ids[i] = fmt.Sprintf("done-%08d", 1+i*701)
		}
		versions[i] = 3
	}
	// The write-back that sets only the version column: which columns a
	// group sets changes its SET list, not how it finds the rows.
	bump := func(bt *bulkTable) (string, []any) {
		next := make([]int64, len(versions))
		for i, v := range versions {
			next[i] = v + 1
		}
		return bt.statement(1 << (len(bt.names) - 1)), []any{ids, versions, next}
	}
	writeDeliveries, writeDeliveriesArgs := bump(s.groups.deliveryRecords.table)
	writeEntries, writeEntriesArgs := bump(s.groups.entryRecords.table)
	cases := []struct {
		name, sql string
		args      []any
		table     string
	}{
		{"LockDeliveries", s.groups.deliveryRecords.lock, []any{ids}, "deliveries"},
		{"LockEntries", s.groups.entryRecords.lock, []any{ids}, "outbox_entries"},
		{"WriteBackDeliveries", writeDeliveries, writeDeliveriesArgs, "deliveries"},
		{"WriteBackEntries", writeEntries, writeEntriesArgs, "outbox_entries"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pkey := c.table + "_pkey"
			t.Run("Custom", func(t *testing.T) {
				plan := explainCustom(ctx, t, pool, c.sql, c.args)
				checkPlan(t, plan, c.table)
				require.True(t, usesIndex(plan, pkey), "rows not looked up in %s: %s", pkey, plan.tree())
			})
			t.Run("Generic", func(t *testing.T) {
				plan := explainGeneric(ctx, t, pool, c.sql)
				checkPlan(t, plan, c.table)
				require.True(t, usesIndex(plan, pkey), "rows not looked up in %s: %s", pkey, plan.tree())
			})
		})
	}
}

// usesIndex reports whether any node of plan looks rows up in index by a
// condition, not only reads it whole (as for an ORDER BY) and filters.
func usesIndex(plan planNode, index string) bool {
	found := false
	plan.walk(func(n planNode) { found = found || n.IndexName == index && n.IndexCond != "" })
	return found
}
