package pgstore

import (
	"cmp"
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// Compile-time checks that both stores count.
var (
	_ ledger.StatsReporter       = (*Store)(nil)
	_ ledger.OutboxStatsReporter = (*Outbox)(nil)
)

// This file is Stats and OutboxStats, and the terminal counts behind them
// (see migrations/0005_history_and_counts.sql). Open records are counted
// where they are: through the partial indexes on open rows, the same that
// Lease and the claims read, so the cost grows with the work in hand and
// not with the ended records beside it. Terminal records are counted in
// delivery_counts and outbox_counts, which every transition into or out
// of a terminal state updates in its own transaction, and purge too.

// countShards is how many rows one count is spread over.
const countShards = 16

// shardOf picks the count row of a record among countShards: the first
// byte of the SHA-256 of its ID, as migration 0005 computes it in SQL for
// the records it counts, so that a purge later takes a record away from
// the row that counted it.
func shardOf(id string) int16 {
	sum := sha256.Sum256([]byte(id))
	return int16(sum[0] % countShards)
}

// deliveryCountKey is the key of a row of delivery_counts.
type deliveryCountKey struct {
	target, ceremony, state, cause string
	shard                          int16
}

func (k deliveryCountKey) compare(o deliveryCountKey) int {
	return cmp.Or(strings.Compare(k.target, o.target), strings.Compare(k.ceremony, o.ceremony),
		strings.Compare(k.state, o.state), strings.Compare(k.cause, o.cause), cmp.Compare(k.shard, o.shard))
}

// deliveryCounts adds up changes of delivery_counts by key.
type deliveryCounts map[deliveryCountKey]int64

// add counts d n times, when d is terminal: in its state and, when it
// expired with a cause, the cause's kind, as storekit.CountDelivery
// counts it.
func (c deliveryCounts) add(d *ledger.Delivery, n int64) {
	if !d.State.Terminal() {
		return
	}
	k := deliveryCountKey{target: string(d.Target), ceremony: string(d.Ceremony), state: string(d.State), shard: shardOf(string(d.ID))}
	if d.State == ledger.DeliveryStateExpired && d.Cause != nil {
		k.cause = string(d.Cause.Kind)
	}
	c[k] += n
}

// change counts a transition from before to after.
func (c deliveryCounts) change(before, after *ledger.Delivery) {
	c.add(before, -1)
	c.add(after, 1)
}

// keys returns the keys whose change is not zero, in key order: the order
// every transaction updates count rows in, so that two of them never wait
// for each other's rows the other way round.
func (c deliveryCounts) keys() []deliveryCountKey {
	ks := slices.Collect(maps.Keys(c))
	ks = slices.DeleteFunc(ks, func(k deliveryCountKey) bool { return c[k] == 0 })
	slices.SortFunc(ks, deliveryCountKey.compare)
	return ks
}

// queue adds the upsert of the changes to b (one statement, rows in key
// order) and, with dropZeros, the removal of the rows that reached zero.
func (c deliveryCounts) queue(b *pgx.Batch, q *queries, dropZeros bool) {
	ks := c.keys()
	if len(ks) == 0 {
		return
	}
	var targets, ceremonies, states, causes []string
	var shards []int16
	var ns []int64
	for _, k := range ks {
		targets, ceremonies, states, causes = append(targets, k.target), append(ceremonies, k.ceremony), append(states, k.state), append(causes, k.cause)
		shards, ns = append(shards, k.shard), append(ns, c[k])
	}
	b.Queue(q.addDeliveryCounts, targets, ceremonies, states, causes, shards, ns)
	if dropZeros {
		b.Queue(q.dropDeliveryCounts, targets, ceremonies, states, causes, shards)
	}
}

// outboxCountKey is the key of a row of outbox_counts.
type outboxCountKey struct {
	status string
	shard  int16
}

func (k outboxCountKey) compare(o outboxCountKey) int {
	return cmp.Or(strings.Compare(k.status, o.status), cmp.Compare(k.shard, o.shard))
}

// outboxCounts is deliveryCounts for outbox_counts.
type outboxCounts map[outboxCountKey]int64

func (c outboxCounts) add(e *ledger.OutboxEntry, n int64) {
	if e.Status.Terminal() {
		c[outboxCountKey{status: string(e.Status), shard: shardOf(string(e.ID))}] += n
	}
}

func (c outboxCounts) change(before, after *ledger.OutboxEntry) {
	c.add(before, -1)
	c.add(after, 1)
}

func (c outboxCounts) queue(b *pgx.Batch, q *queries, dropZeros bool) {
	ks := slices.Collect(maps.Keys(c))
	ks = slices.DeleteFunc(ks, func(k outboxCountKey) bool { return c[k] == 0 })
	if len(ks) == 0 {
		return
	}
	slices.SortFunc(ks, outboxCountKey.compare)
	var statuses []string
	var shards []int16
	var ns []int64
	for _, k := range ks {
		statuses, shards, ns = append(statuses, k.status), append(shards, k.shard), append(ns, c[k])
	}
	b.Queue(q.addOutboxCounts, statuses, shards, ns)
	if dropZeros {
		b.Queue(q.dropOutboxCounts, statuses, shards)
	}
}

// Stats counts the deliveries that match filter, as seen at now (see
// ledger.StatsReporter), in one statement and so from one snapshot. Its
// cost does not grow with the terminal deliveries: the open ones are
// counted through the partial indexes on open rows (the queue, Depth and
// OldestAvailableAt overall and by target, through the lease statement's
// own index, with its predicate, storekit.Delivery.Offerable, grouped by
// target), the terminal ones read from
// delivery_counts. Without a filter, or with a ceremony only, it sums
// every count row of the deliveries' (target, ceremony) pairs, of which
// there are at most 16 per pair, state and cause. Errors: ErrInvalid,
// ctx.Err(), and database errors wrapped with the operation name.
func (s *Store) Stats(ctx context.Context, filter ledger.StatsFilter, now time.Time) (ledger.DeliveryStats, error) {
	if err := s.check(ctx, storekit.ValidateStats(filter, now)); err != nil {
		return ledger.DeliveryStats{}, err
	}
	now, err := s.decisionTime(ctx, "stats", now)
	if err != nil {
		return ledger.DeliveryStats{}, err
	}
	now = ledger.Normalize(now)
	byTarget, byCeremony := filter.Target != "", filter.Ceremony != ""
	args := []any{now}
	if byTarget {
		args = append(args, string(filter.Target))
	}
	if byCeremony {
		args = append(args, string(filter.Ceremony))
	}
	var st ledger.DeliveryStats
	err = s.readIndexed(ctx, "stats", func(db dbtx) error {
		var offeredOrLeased, leased, acknowledged int64
		var states, causes, targets []string
		var totals, depths []int64
		var oldests []time.Time
		if err := db.QueryRow(ctx, s.q.stats[b2i(byTarget)][b2i(byCeremony)], args...).Scan(
			&offeredOrLeased, &leased, &acknowledged, &targets, &depths, &oldests, &states, &causes, &totals); err != nil {
			return err
		}
		if len(depths) != len(targets) || len(oldests) != len(targets) {
			return fmt.Errorf("queue of %d targets with %d depths and %d oldest times", len(targets), len(depths), len(oldests))
		}
		st = storekit.NewDeliveryStats()
		st.ByState[ledger.DeliveryStateOffered] = offeredOrLeased - leased
		st.ByState[ledger.DeliveryStateLeased] = leased
		st.ByState[ledger.DeliveryStateAcknowledged] = acknowledged
		for i, state := range states {
			st.ByState[ledger.DeliveryState(state)] += totals[i]
			if state == string(ledger.DeliveryStateExpired) && causes[i] != "" && totals[i] != 0 {
				st.ByCause[ledger.CauseKind(causes[i])] += totals[i]
			}
		}
		for i, target := range targets {
			storekit.AddDeliveryQueue(&st, ledger.Target(target), depths[i], oldests[i].UTC())
		}
		storekit.FinishDeliveryStats(&st, now)
		return nil
	})
	if err != nil {
		return ledger.DeliveryStats{}, err
	}
	return st, nil
}

// OutboxStats counts the outbox entries as seen at now (see
// ledger.OutboxStatsReporter), in one statement, as Store.Stats does:
// open entries, and the queue overall and by provider, through the
// partial indexes the claims read, terminal ones from outbox_counts (at
// most 16 rows per status). Errors as Store.Stats.
func (o *Outbox) OutboxStats(ctx context.Context, now time.Time) (ledger.OutboxStats, error) {
	s := o.s
	if err := s.check(ctx, storekit.ValidateOutboxStats(now)); err != nil {
		return ledger.OutboxStats{}, err
	}
	now, err := o.s.decisionTime(ctx, "outbox stats", now)
	if err != nil {
		return ledger.OutboxStats{}, err
	}
	now = ledger.Normalize(now)
	var st ledger.OutboxStats
	err = s.readIndexed(ctx, "outbox stats", func(db dbtx) error {
		var pending, scheduled, deferred int64
		var statuses, providers []string
		var totals, depths []int64
		var oldests []time.Time
		if err := db.QueryRow(ctx, s.q.outboxStats, now).Scan(&pending, &scheduled, &deferred,
			&providers, &depths, &oldests, &statuses, &totals); err != nil {
			return err
		}
		if len(depths) != len(providers) || len(oldests) != len(providers) {
			return fmt.Errorf("queue of %d providers with %d depths and %d oldest times", len(providers), len(depths), len(oldests))
		}
		st = storekit.NewOutboxStats()
		st.ByStatus[ledger.OutboxStatusPending] = pending
		st.ByStatus[ledger.OutboxStatusRetryScheduled] = scheduled - deferred
		st.ByStatus[ledger.OutboxStatusDeferred] = deferred
		for i, status := range statuses {
			st.ByStatus[ledger.OutboxStatus(status)] += totals[i]
		}
		for i, provider := range providers {
			storekit.AddOutboxQueue(&st, provider, depths[i], oldests[i].UTC())
		}
		storekit.FinishOutboxStats(&st, now)
		return nil
	})
	if err != nil {
		return ledger.OutboxStats{}, err
	}
	return st, nil
}

// deliveryStatsTemplate counts deliveries: %[1]s is the deliveries table,
// %[2]s delivery_counts, %[3]s the filter (" AND target = $2", ...), which
// reads the same on both tables, and %[4]s offerableWhere. Offered is
// counted as Offered or Leased minus Leased, so that each count matches
// one partial index's predicate and needs no other column (index-only
// where the visibility map allows); Acknowledged reads the
// acknowledgement-deadline index. The queue (the depth and oldest
// AvailableAt) is counted by target, through the same partial index of
// offer candidates, in arrays of one element per target with something
// offerable. The open counts, the queue and the terminal counts come from
// one snapshot.
const deliveryStatsTemplate = `SELECT
	(SELECT count(*) FROM %[1]s WHERE state IN ('offered', 'leased')%[3]s),
	(SELECT count(*) FROM %[1]s WHERE state = 'leased'%[3]s),
	(SELECT count(*) FROM %[1]s WHERE state = 'acknowledged'%[3]s),
	queue.targets, queue.depths, queue.oldests, ended.states, ended.causes, ended.totals
FROM (SELECT coalesce(array_agg(target), '{}'), coalesce(array_agg(n), '{}'), coalesce(array_agg(oldest), '{}') FROM (
		SELECT target, count(*), min(available_at) FROM %[1]s WHERE %[4]s%[3]s
		GROUP BY target) AS g(target, n, oldest)) AS queue(targets, depths, oldests),
	(SELECT array_agg(state), array_agg(cause_kind), array_agg(total) FROM (
		SELECT state, cause_kind, sum(n)::bigint AS total FROM %[2]s WHERE TRUE%[3]s
		GROUP BY state, cause_kind) AS g) AS ended(states, causes, totals)`

// outboxStatsTemplate counts outbox entries: %[1]s is outbox_entries,
// %[2]s outbox_counts ($1 is now). Open entries are counted through the
// partial indexes the claims read (migrations/0008): the unclaimed ones
// by status, and the claimed ones, few since a claim is work in hand,
// through the index of claims by expiry. RetryScheduled is counted as
// scheduled minus Deferred, for the same reason as Offered above. The
// queue is counted by provider, in arrays of one element per provider
// with something due, from the same three indexes: the unclaimed pending
// entries, the unclaimed scheduled ones due at now, and the claimed ones
// whose claim ran out. An entry's due time is storekit.OutboxEntry.DueAt:
// its creation (pending) or next attempt (scheduled), or the expiry of a
// claim on it that ran out, if later.
const outboxStatsTemplate = `SELECT
	(SELECT count(*) FROM %[1]s WHERE status = 'pending' AND claim_token IS NULL)
		+ claimed.pending,
	(SELECT count(*) FROM %[1]s WHERE status IN ('retry_scheduled', 'deferred') AND claim_token IS NULL)
		+ claimed.scheduled,
	(SELECT count(*) FROM %[1]s WHERE status IN ('retry_scheduled', 'deferred') AND claim_token IS NULL AND status = 'deferred')
		+ claimed.deferred,
	queue.providers, queue.depths, queue.oldests,
	ended.statuses, ended.totals
FROM (SELECT count(*) FILTER (WHERE status = 'pending'),
		count(*) FILTER (WHERE status IN ('retry_scheduled', 'deferred')),
		count(*) FILTER (WHERE status = 'deferred')
	FROM %[1]s WHERE claim_token IS NOT NULL) AS claimed(pending, scheduled, deferred),
	(SELECT coalesce(array_agg(provider), '{}'), coalesce(array_agg(n), '{}'), coalesce(array_agg(oldest), '{}') FROM (
		SELECT provider, sum(n)::bigint, min(oldest) FROM (
			SELECT provider, count(*), min(created_at) FROM %[1]s
				WHERE status = 'pending' AND claim_token IS NULL
				GROUP BY provider
			UNION ALL
			SELECT provider, count(*), min(next_attempt_at) FROM %[1]s
				WHERE status IN ('retry_scheduled', 'deferred') AND claim_token IS NULL AND next_attempt_at <= $1
				GROUP BY provider
			UNION ALL
			SELECT provider, count(*),
				min(greatest(CASE WHEN status = 'pending' THEN created_at ELSE next_attempt_at END, claim_expires_at))
			FROM %[1]s
				WHERE claim_token IS NOT NULL AND claim_expires_at <= $1
					AND (status = 'pending' OR (status IN ('retry_scheduled', 'deferred') AND next_attempt_at <= $1))
				GROUP BY provider) AS due(provider, n, oldest)
		GROUP BY provider) AS g(provider, n, oldest)) AS queue(providers, depths, oldests),
	(SELECT array_agg(status), array_agg(total) FROM (
		SELECT status, sum(n)::bigint AS total FROM %[2]s GROUP BY status) AS g) AS ended(statuses, totals)`

// statsQueries builds the Stats statements: stats[byTarget][byCeremony],
// with $1 now, then the target and the ceremony as present.
func statsQueries(q *queries, deliveries, deliveryCounts, outbox, outboxCounts string) {
	for _, byTarget := range []bool{false, true} {
		for _, byCeremony := range []bool{false, true} {
			filter, next := "", 2
			if byTarget {
				filter += fmt.Sprintf(" AND target = $%d", next)
				next++
			}
			if byCeremony {
				filter += fmt.Sprintf(" AND ceremony = $%d", next)
			}
			q.stats[b2i(byTarget)][b2i(byCeremony)] = fmt.Sprintf(deliveryStatsTemplate, deliveries, deliveryCounts, filter, offerableWhere)
		}
	}
	q.outboxStats = fmt.Sprintf(outboxStatsTemplate, outbox, outboxCounts)
	q.addDeliveryCounts = `INSERT INTO ` + deliveryCounts + ` AS c (target, ceremony, state, cause_kind, shard, n)
		SELECT target, ceremony, state, cause_kind, shard, n
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::smallint[], $6::bigint[])
			WITH ORDINALITY AS u(target, ceremony, state, cause_kind, shard, n, i)
		ORDER BY i
		ON CONFLICT (target, ceremony, state, cause_kind, shard) DO UPDATE SET n = c.n + excluded.n`
	q.dropDeliveryCounts = `DELETE FROM ` + deliveryCounts + ` AS c
		USING unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::smallint[]) AS u(target, ceremony, state, cause_kind, shard)
		WHERE (c.target, c.ceremony, c.state, c.cause_kind, c.shard) = (u.target, u.ceremony, u.state, u.cause_kind, u.shard)
			AND c.n = 0`
	q.addOutboxCounts = `INSERT INTO ` + outboxCounts + ` AS c (status, shard, n)
		SELECT status, shard, n FROM unnest($1::text[], $2::smallint[], $3::bigint[]) WITH ORDINALITY AS u(status, shard, n, i)
		ORDER BY i
		ON CONFLICT (status, shard) DO UPDATE SET n = c.n + excluded.n`
	q.dropOutboxCounts = `DELETE FROM ` + outboxCounts + ` AS c
		USING unnest($1::text[], $2::smallint[]) AS u(status, shard)
		WHERE (c.status, c.shard) = (u.status, u.shard) AND c.n = 0`
}
