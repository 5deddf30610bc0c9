package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
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
	"github.com/leaseledger/ledger/pgstore"
	"github.com/leaseledger/ledger/storekit"
)

// This file checks the terminal counts behind Stats and OutboxStats
// against the records themselves, after a random mix of every call that
// moves records into a terminal state or deletes them, after concurrent
// completions, and after the migration that counts the records an older
// schema already held.

// countsQuery renders the counts, row by row (key, shard, n), from the
// count tables (%[1]s is "counts") or by brute force from the records
// (%[1]s is "records"), with the shard computed in SQL as migration 0005
// does, so that the store's Go shards are checked against it.
const (
	deliveryCountsByTable = `SELECT target || '|' || ceremony || '|' || state || '|' || cause_kind || '|' || shard || '=' || n
		FROM %s.delivery_counts WHERE n <> 0`
	deliveryCountsByRecords = `SELECT k || '=' || count(*) FROM (
		SELECT target || '|' || coalesce(ceremony, '') || '|' || state || '|' ||
			CASE WHEN state = 'expired' THEN coalesce(cause_kind, '') ELSE '' END || '|' ||
			(get_byte(sha256(convert_to(id, 'UTF8')), 0) %% 16) AS k
		FROM %s.deliveries WHERE ended_at IS NOT NULL) AS r GROUP BY k`
	entryCountsByTable   = `SELECT status || '|' || shard || '=' || n FROM %s.outbox_counts WHERE n <> 0`
	entryCountsByRecords = `SELECT k || '=' || count(*) FROM (
		SELECT status || '|' || (get_byte(sha256(convert_to(id, 'UTF8')), 0) %% 16) AS k
		FROM %s.outbox_entries WHERE ended_at IS NOT NULL) AS r GROUP BY k`
)

// requireCountsMatchRecords fails unless the count tables hold exactly
// the terminal records, key by key and shard by shard, and hold no row
// that is zero or negative.
func requireCountsMatchRecords(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	q := pgx.Identifier{schema}.Sanitize()
	lines := func(sql string) []string {
		rows, err := pool.Query(ctx, fmt.Sprintf(sql, q))
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		slices.Sort(out)
		return out
	}
	require.Equal(t, lines(deliveryCountsByRecords), lines(deliveryCountsByTable), "delivery counts")
	require.Equal(t, lines(entryCountsByRecords), lines(entryCountsByTable), "outbox counts")
	var bad int
	require.NoError(t, pool.QueryRow(ctx, fmt.Sprintf(`SELECT (SELECT count(*) FROM %[1]s.delivery_counts WHERE n <= 0)
		+ (SELECT count(*) FROM %[1]s.outbox_counts WHERE n <= 0)`, q)).Scan(&bad))
	require.Zero(t, bad, "count rows that reached zero are deleted, and none goes below")
}

// requireStatsMatchRecords fails unless Stats, under filters, and
// OutboxStats, at several instants, equal what the root package counts
// from every record.
func requireStatsMatchRecords(ctx context.Context, t *testing.T, s *pgstore.Store, entries []ledger.OutboxEntryID, nows []time.Time, filters []ledger.StatsFilter) {
	t.Helper()
	var all []ledger.Delivery
	for q := (ledger.ListQuery{Limit: ledger.MaxLimit}); ; {
		p, err := s.List(ctx, q)
		require.NoError(t, err)
		all = append(all, p.Deliveries...)
		if p.Next == "" {
			break
		}
		q.Cursor = p.Next
	}
	var es []ledger.OutboxEntry
	for _, id := range entries {
		e, err := s.Outbox().FindByID(ctx, id)
		if err == nil {
			es = append(es, e)
			continue
		}
		require.ErrorIs(t, err, ledger.ErrNotFound)
	}
	for _, now := range nows {
		for _, f := range filters {
			want := storekit.NewDeliveryStats()
			for i := range all {
				if (f.Target == "" || all[i].Target == f.Target) && (f.Ceremony == "" || all[i].Ceremony == f.Ceremony) {
					storekit.CountDelivery(&want, &all[i], now)
				}
			}
			storekit.FinishDeliveryStats(&want, now)
			got, err := s.Stats(ctx, f, now)
			require.NoError(t, err)
			require.Equal(t, want, got, "Stats %+v at %s", f, now)
		}
		want := storekit.NewOutboxStats()
		for i := range es {
			storekit.CountEntry(&want, &es[i], now)
		}
		storekit.FinishOutboxStats(&want, now)
		got, err := s.Outbox().OutboxStats(ctx, now)
		require.NoError(t, err)
		require.Equal(t, want, got, "OutboxStats at %s", now)
	}
}

// countsRun drives a random mix of calls on one store.
type countsRun struct {
	t      *testing.T
	ctx    context.Context
	s      *pgstore.Store
	rng    *rand.Rand
	now    time.Time
	leases []ledger.Lease
	acked  []ledger.Lease // acknowledged under these, not yet closed
	claims []ledger.Claim
	keys   []string
}

func (r *countsRun) pick(n int) int { return r.rng.IntN(n) }

func (r *countsRun) deliveryReq() ledger.EnqueueRequest {
	i := r.pick(60)
	req := ledger.EnqueueRequest{ID: ledger.DeliveryID(fmt.Sprintf("d%02d", i)), Target: ledger.Target(fmt.Sprintf("h%d", i%3)),
		Policy: ledger.Policy{MaxAttempts: 1 + i%3, BackoffBase: time.Millisecond}}
	if i%4 != 0 {
		req.Ceremony = ledger.CeremonyID(fmt.Sprintf("c%d", i%2))
	}
	return req
}

func (r *countsRun) envelope() ledger.Envelope {
	return ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: r.keys[r.pick(len(r.keys))]}
}

// step makes one random call. Outcomes do not matter here, only that the
// calls succeed; the records they leave are compared with the counts.
func (r *countsRun) step() {
	t, ctx, s, o := r.t, r.ctx, r.s, r.s.Outbox()
	r.now = r.now.Add(time.Duration(r.pick(3000)) * time.Millisecond)
	owners := []ledger.Owner{{Agent: "a", Incarnation: "1"}, {Agent: "a", Incarnation: "2"}, {Agent: "b", Incarnation: "1"}}
	var err error
	switch x := r.pick(100); {
	case x < 12:
		reqs := make([]ledger.EnqueueRequest, 1+r.pick(5))
		for i := range reqs {
			reqs[i] = r.deliveryReq()
		}
		_, err = s.EnqueueBatch(ctx, reqs, r.now)
	case x < 24:
		var lr ledger.LeaseResult
		lr, err = s.Lease(ctx, ledger.LeaseFilter{}, owners[r.pick(len(owners))], r.now, time.Duration(1+r.pick(5))*time.Second, 1+r.pick(5))
		for _, l := range lr.Leased {
			r.leases = append(r.leases, l.Lease)
		}
	case x < 36 && len(r.leases) > 0:
		l := r.leases[r.pick(len(r.leases))]
		var res ledger.DeliveryResult
		if res, err = s.Acknowledge(ctx, l, "seen", r.now); res.Applied() {
			r.acked = append(r.acked, l)
		}
	case x < 46 && len(r.acked) > 0:
		l := r.acked[0]
		r.acked = r.acked[1:]
		_, err = s.MarkProcessed(ctx, l.DeliveryID, l.Owner, nil, "done", r.now)
	case x < 52 && len(r.leases) > 0:
		_, err = s.MarkFailed(ctx, r.leases[r.pick(len(r.leases))], ledger.FailureReason{Message: "no", Permanent: r.pick(3) == 0}, r.now)
	case x < 56:
		_, err = s.Expire(ctx, r.now)
	case x < 59:
		_, err = s.Abandon(ctx, r.deliveryReq().ID, ledger.Cause{Kind: ledger.CauseKind([]string{"queue_bounded", "operator"}[r.pick(2)])}, r.now)
	case x < 61:
		_, err = s.ExpireCeremony(ctx, ledger.CeremonyID(fmt.Sprintf("c%d", r.pick(2))), ledger.Cause{Kind: ledger.CauseCeremonyEnded}, r.now)
	case x < 63:
		_, err = s.Supersede(ctx, "h0", "h1", []ledger.FollowMode{ledger.Follow, ledger.LeaveBehind}[r.pick(2)], r.now)
	case x < 66:
		_, err = s.PurgeDeliveries(ctx, r.now.Add(-time.Duration(r.pick(20))*time.Second), 1+r.pick(10))
	case x < 72:
		envs := make([]ledger.Envelope, 1+r.pick(4))
		for i := range envs {
			envs[i] = r.envelope()
		}
		_, err = o.EnqueueBatch(ctx, envs)
	case x < 78:
		var cs []ledger.ClaimedEntry
		req := ledger.ClaimRequest{Worker: "w", Now: r.now, LeaseDuration: time.Duration(1+r.pick(5)) * time.Second, Limit: 1 + r.pick(4)}
		if r.pick(2) == 0 {
			cs, err = o.ClaimPending(ctx, req)
		} else {
			cs, err = o.ClaimRetryReady(ctx, req)
		}
		for _, c := range cs {
			r.claims = append(r.claims, c.Claim)
		}
	case x < 86 && len(r.claims) > 0:
		c := r.claims[r.pick(len(r.claims))]
		next := r.now.Add(time.Second)
		switch r.pick(3) {
		case 0:
			_, err = o.MarkClaimDelivered(ctx, c, ledger.EmissionResult{ProviderRef: "r"})
		case 1:
			_, err = o.MarkClaimFailed(ctx, c, ledger.EmissionError{Code: "503"}, []*time.Time{nil, &next}[r.pick(2)])
		default:
			_, err = o.MarkClaimDeadLettered(ctx, c, ledger.EmissionError{Code: "400"}, "poison")
		}
	case x < 92:
		// Save can move an entry into any status, the terminal ones too.
		id := ledger.OutboxEntryIDFor(r.envelope().IdempotencyKey)
		e, ferr := o.FindByID(ctx, id)
		if ferr != nil {
			require.ErrorIs(t, ferr, ledger.ErrNotFound)
			return
		}
		e.Status = ledger.OutboxStatuses()[r.pick(len(ledger.OutboxStatuses()))]
		e.NextAttemptAt = r.now.Add(time.Second)
		if _, err = o.Save(ctx, e); err != nil {
			require.ErrorIs(t, err, ledger.ErrConflict) // ended already
			err = nil
		}
	case x < 96:
		id := ledger.OutboxEntryIDFor(r.envelope().IdempotencyKey)
		switch r.pick(3) {
		case 0:
			_, err = o.MarkDelivered(ctx, id, ledger.EmissionResult{})
		case 1:
			_, err = o.MarkFailed(ctx, id, ledger.EmissionError{Message: "no"}, nil)
		default:
			_, err = o.MarkDeadLettered(ctx, id, ledger.EmissionError{Code: "x"}, "poison")
		}
		if errors.Is(err, ledger.ErrNotFound) || errors.Is(err, ledger.ErrConflict) {
			err = nil // no such entry, or it ended otherwise
		}
	default:
		_, err = o.PurgeEntries(ctx, r.now, 1+r.pick(5))
	}
	require.NoError(t, err)
}

func TestCountsMatchRecords(t *testing.T) {
	s, pool := newStore(t, fixedClock(t0))
	ctx := testContext(t)
	r := &countsRun{t: t, ctx: ctx, s: s, rng: rand.New(rand.NewPCG(7, 11)), now: t0}
	var entries []ledger.OutboxEntryID
	for i := range 30 {
		r.keys = append(r.keys, fmt.Sprintf("k%02d", i))
		entries = append(entries, ledger.OutboxEntryIDFor(r.keys[i]))
	}
	filters := []ledger.StatsFilter{{}, {Target: "h0"}, {Target: "h1"}, {Ceremony: "c0"}, {Ceremony: "c1"}, {Target: "h2", Ceremony: "c1"}, {Target: "hot"}}
	for round := range 4 {
		for range 150 {
			r.step()
		}
		requireCountsMatchRecords(ctx, t, pool, s.Schema())
		requireStatsMatchRecords(ctx, t, s, entries, []time.Time{t0, r.now, r.now.Add(time.Minute)}, filters)
		t.Logf("round %d: %s", round, r.now.Sub(t0))
	}

	// Concurrent completions of one target and ceremony, and of the
	// outbox, all landing on the same count keys, beside a purge.
	const workers, each = 8, 8
	reqs := make([]ledger.EnqueueRequest, workers*each)
	envs := make([]ledger.Envelope, workers*each)
	for i := range reqs {
		reqs[i] = ledger.EnqueueRequest{ID: ledger.DeliveryID(fmt.Sprintf("hot-%02d", i)), Target: "hot", Ceremony: "c1"}
		envs[i] = ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: fmt.Sprintf("hot-%02d", i)}
		entries = append(entries, ledger.OutboxEntryIDFor(envs[i].IdempotencyKey))
	}
	at := r.now.Add(time.Minute)
	_, err := s.EnqueueBatch(ctx, reqs, at)
	require.NoError(t, err)
	_, err = s.Outbox().EnqueueBatch(ctx, envs)
	require.NoError(t, err)
	owner := ledger.Owner{Agent: "hot", Incarnation: "1"}
	lr, err := s.Lease(ctx, ledger.LeaseFilter{Targets: []ledger.Target{"hot"}}, owner, at, time.Hour, len(reqs))
	require.NoError(t, err)
	require.Len(t, lr.Leased, len(reqs))
	for _, l := range lr.Leased {
		res, err := s.Acknowledge(ctx, l.Lease, "seen", at)
		require.NoError(t, err)
		require.True(t, res.Applied())
	}
	var claims []ledger.Claim
	for len(claims) < len(envs) {
		cs, err := s.Outbox().ClaimPending(ctx, ledger.ClaimRequest{Worker: "hot", Now: at, LeaseDuration: time.Hour, Limit: ledger.MaxLimit})
		require.NoError(t, err)
		require.NotEmpty(t, cs)
		for _, c := range cs {
			claims = append(claims, c.Claim)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(reqs)+workers)
	for w := range workers {
		wg.Go(func() {
			for i := w * each; i < (w+1)*each; i++ {
				res, err := s.MarkProcessed(ctx, lr.Leased[i].Delivery.ID, owner, nil, "done", at)
				if err == nil && !res.Applied() {
					err = fmt.Errorf("mark processed %s: %s", lr.Leased[i].Delivery.ID, res.Outcome)
				}
				errs <- err
				cr, err := s.Outbox().MarkClaimDelivered(ctx, claims[i], ledger.EmissionResult{ProviderRef: "r"})
				if err == nil && !cr.Applied() && cr.Outcome != ledger.OutcomeEnded {
					err = fmt.Errorf("mark claim delivered %s: %s", claims[i].EntryID, cr.Outcome)
				}
				errs <- err
			}
		})
	}
	wg.Go(func() {
		for range workers {
			_, err := s.PurgeDeliveries(ctx, at, 5)
			errs <- err
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	requireCountsMatchRecords(ctx, t, pool, s.Schema())
	requireStatsMatchRecords(ctx, t, s, entries, []time.Time{at}, filters)
	st, err := s.Stats(ctx, ledger.StatsFilter{Target: "hot", Ceremony: "c1"}, at)
	require.NoError(t, err)
	require.Equal(t, int64(len(reqs)), st.ByState[ledger.DeliveryStateProcessed])

	// Purging everything empties the count tables.
	for {
		n, err := s.PurgeDeliveries(ctx, storekit.MaxTime(), ledger.MaxLimit)
		require.NoError(t, err)
		m, err := s.Outbox().PurgeEntries(ctx, storekit.MaxTime(), ledger.MaxLimit)
		require.NoError(t, err)
		if n+m == 0 {
			break
		}
	}
	requireCountsMatchRecords(ctx, t, pool, s.Schema())
	var rows int
	require.NoError(t, pool.QueryRow(ctx, fmt.Sprintf(`SELECT (SELECT count(*) FROM %[1]q.delivery_counts)
		+ (SELECT count(*) FROM %[1]q.outbox_counts)`, s.Schema())).Scan(&rows))
	require.Zero(t, rows)
}

// TestCountsBackfill migrates a schema that already holds terminal
// records (written as a build before 0005 left them) and requires 0005 to
// have counted them, shard by shard as the store computes shards: purging
// them all through the store then leaves no count row behind.
func TestCountsBackfill(t *testing.T) {
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool)
	ctx := testContext(t)
	applyMigrationsBefore(ctx, t, pool, schema, 5)
	pgstore.InsertTerminalDeliveries(ctx, t, pool, schema, 3000, t0)
	pgstore.InsertTerminalEntries(ctx, t, pool, schema, 3000, t0)
	s, err := pgstore.New(pool, pgstore.WithSchema(schema))
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	requireCountsMatchRecords(ctx, t, pool, schema)
	st, err := s.Stats(ctx, ledger.StatsFilter{}, t0)
	require.NoError(t, err)
	require.Equal(t, int64(1000), st.ByState[ledger.DeliveryStateProcessed])
	require.Equal(t, int64(1000), st.ByState[ledger.DeliveryStateExpired])

	for {
		n, err := s.PurgeDeliveries(ctx, t0, ledger.MaxLimit)
		require.NoError(t, err)
		m, err := s.Outbox().PurgeEntries(ctx, t0, ledger.MaxLimit)
		require.NoError(t, err)
		if n+m == 0 {
			break
		}
	}
	var rows int
	require.NoError(t, pool.QueryRow(ctx, fmt.Sprintf(`SELECT (SELECT count(*) FROM %[1]q.delivery_counts)
		+ (SELECT count(*) FROM %[1]q.outbox_counts)`, schema)).Scan(&rows))
	require.Zero(t, rows, "every record was taken off the row that counted it")
}

// applyMigrationsBefore brings schema to the version before version, as
// an older build would have left it, by running the migration files the
// way Migrate does.
func applyMigrationsBefore(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string, version int) {
	t.Helper()
	quoted := pgx.Identifier{schema}.Sanitize()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	_, err = tx.Exec(ctx, "CREATE SCHEMA "+quoted)
	require.NoError(t, err)
	for v := 1; v < version; v++ {
		files, err := filepath.Glob(filepath.Join("migrations", fmt.Sprintf("%04d_*.sql", v)))
		require.NoError(t, err)
		require.Len(t, files, 1)
		body, err := os.ReadFile(files[0])
		require.NoError(t, err)
		_, err = tx.Exec(ctx, strings.ReplaceAll(string(body), "{schema}", quoted))
		require.NoError(t, err, files[0])
		name := strings.TrimSuffix(strings.SplitN(filepath.Base(files[0]), "_", 2)[1], ".sql")
		_, err = tx.Exec(ctx, "INSERT INTO "+quoted+".schema_migrations (version, name, applied_at) VALUES ($1, $2, now())", v, name)
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit(ctx))
}
