package pgstore

import (
	"context"
	"hash/fnv"

	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// This file holds the Ledger methods that enqueue, lease, transition one
// delivery, and read. The sweeps are in sweep.go.

// Enqueue offers a delivery (see ledger.Ledger). The record is committed
// when Enqueue returns without error (under WithTx: when the caller
// commits).
func (s *Store) Enqueue(ctx context.Context, req ledger.EnqueueRequest, now time.Time) (ledger.DeliveryResult, error) {
	if err := s.check(ctx, storekit.ValidateEnqueue(req, now, s.cfg.maxPayload)); err != nil {
		return ledger.DeliveryResult{}, err
	}
	now, err := s.decisionTime(ctx, "enqueue", now)
	if err != nil {
		return ledger.DeliveryResult{}, err
	}
	rs, err := s.enqueue(ctx, "enqueue", []ledger.EnqueueRequest{req}, now)
	if err != nil {
		return ledger.DeliveryResult{}, err
	}
	return deliveryOut(rs[0], nil)
}

// EnqueueBatch enqueues reqs in one transaction (see ledger.BatchEnqueuer):
// one invalid request is ErrInvalid and nothing is written; otherwise one
// result per request, in order, and a request whose ID came earlier in the
// batch is judged against the record that ID holds.
func (s *Store) EnqueueBatch(ctx context.Context, reqs []ledger.EnqueueRequest, now time.Time) ([]ledger.DeliveryResult, error) {
	if err := s.check(ctx, storekit.ValidateEnqueueBatch(reqs, now, s.cfg.maxPayload)); err != nil {
		return nil, err
	}
	now, err := s.decisionTime(ctx, "enqueue batch", now)
	if err != nil {
		return nil, err
	}
	return deliveriesOut(s.enqueue(ctx, "enqueue batch", reqs, now))
}

// Lease hands out offerable deliveries (see ledger.Ledger). In one
// transaction it first applies the incarnation rule (the agent's leases
// under other incarnations, locked and reclaimed with
// storekit.Delivery.Reclaim), then grants up to limit deliveries in one
// statement that skips rows other callers hold, so two concurrent calls
// never get the same delivery. Leased comes oldest AvailableAt first,
// then by ID; Reclaimed in ID order.
//
// When the agent holds no leases under other incarnations, as it does but
// after a restart, the call is one round trip (leaseTrip).
//
// The reclaims that end deliveries (their attempts used up) change the
// terminal counts; those rows are written last, with the history of the
// grants, after every row lock the call waits for: a count row held while
// waiting for a delivery another call holds could join a deadlock with
// that call's own completion.
func (s *Store) Lease(ctx context.Context, filter ledger.LeaseFilter, owner ledger.Owner, now time.Time, duration time.Duration, limit int) (ledger.LeaseResult, error) {
	if err := s.check(ctx, storekit.ValidateLease(filter, owner, now, duration, limit)); err != nil {
		return ledger.LeaseResult{}, err
	}
	now, err := s.decisionTime(ctx, "lease", now)
	if err != nil {
		return ledger.LeaseResult{}, err
	}
	now = ledger.Normalize(now)
	if !s.callerTx {
		if err := s.leases.enter(ctx); err != nil {
			return ledger.LeaseResult{}, wrap(ctx, "lease", err)
		}
		defer s.leases.leave()
	}
	var res ledger.LeaseResult
	var pos []tuplePos // by grant
	done := false
	if !s.callerTx {
		if res.Leased, pos, done, err = s.leaseTrip(ctx, filter, owner, now, duration, limit); err != nil {
			return ledger.LeaseResult{}, err
		}
	}
	if !done {
		pos, err = s.leaseTx(ctx, filter, owner, now, duration, limit, &res)
	}
	if err != nil {
		return ledger.LeaseResult{}, err
	}
	if s.held != nil {
		for _, id := range res.Reclaimed {
			s.held.deliveries.cache.drop(string(id))
		}
		for i, l := range res.Leased {
			s.held.keepDelivery(l.Delivery.Clone(), pos[i])
		}
	}
	return leaseOut(res, nil)
}

// leaseTrip is Lease in one round trip (oneTrip): the agent's lock, the
// read of its leases under other incarnations (the incarnation rule's)
// and the grant go in one pipeline, one implicit transaction. The grant
// grants nothing while the agent has such leases (reclaimFirst); done is
// false when it had, and Lease then takes them back and grants in
// leaseTx.
func (s *Store) leaseTrip(ctx context.Context, filter ledger.LeaseFilter, owner ledger.Owner, now time.Time, duration time.Duration, limit int) (
	_ []ledger.LeasedDelivery, _ []tuplePos, done bool, _ error) {
	sql, args := s.leaseStatement(filter, owner, now, duration, limit)
	var others int
	var out []ledger.LeasedDelivery
	var pos []tuplePos
	err := s.trip(ctx, "lease", []tripStatement{
		{sql: leasePrelude, args: []any{agentLockKey(s.cfg.schema, owner.Agent)}},
		{sql: s.q.reclaimable, args: []any{"", sweepBatchSize, owner.Agent, owner.Incarnation}, scan: func(pgx.Rows) error {
			others++
			return nil
		}},
		{sql: sql, args: args, scan: leaseScanner(&out, &pos)},
	}, func() { others, out, pos = 0, nil, nil })
	if err != nil {
		return nil, nil, false, err
	}
	// A grant beside leases to take back cannot be (reclaimFirst); were
	// it made, it is answered rather than lost.
	return out, pos, others == 0 || len(out) > 0, nil
}

// leaseTx is Lease in a transaction of several round trips, or a
// savepoint of the caller's: the incarnation rule's reclaims, then the
// grant, filling res. It returns the positions of the grants.
func (s *Store) leaseTx(ctx context.Context, filter ledger.LeaseFilter, owner ledger.Owner, now time.Time, duration time.Duration, limit int,
	res *ledger.LeaseResult) ([]tuplePos, error) {
	var pos []tuplePos
	err := s.inTx(ctx, "lease", func(tx pgx.Tx) (bool, error) {
		*res = ledger.LeaseResult{}
		// Lease calls of one agent take turns, so that of two overlapping
		// calls by different incarnations the later one sees, and takes
		// back, what the earlier one granted: the incarnation rule then
		// holds as if the calls ran one after the other. The lock is
		// transaction-scoped (nothing outlives the call, PgBouncer-safe)
		// and taken before any row lock, so it cannot join a deadlock.
		lock := s.q.advisoryXL
		if !s.callerTx {
			lock = leasePrelude
		}
		b := &pgx.Batch{}
		b.Queue(lock, agentLockKey(s.cfg.schema, owner.Agent))
		if _, err := execBatch(ctx, tx, b); err != nil {
			return false, err
		}
		counts := deliveryCounts{}
		for after := ""; ; {
			changed, last, more, err := s.sweepBatch(ctx, tx, how{op: ledger.OpReclaim, actor: owner.String()}, counts,
				s.q.reclaimable, after, []any{owner.Agent, owner.Incarnation},
				func(d ledger.Delivery) (ledger.Delivery, bool) {
					if !storekit.Delivery(d).HeldByOtherIncarnation(owner) {
						return d, false
					}
					return storekit.Delivery(d).Reclaim(owner, now), true
				})
			if err != nil {
				return false, err
			}
			res.Reclaimed = append(res.Reclaimed, changed...)
			if !more {
				break
			}
			after = last
		}
		leased, p, err := s.grant(ctx, tx, filter, owner, now, duration, limit, counts)
		if err != nil {
			return false, err
		}
		res.Leased, pos = leased, p
		return res.Applied(), nil
	})
	return pos, err
}

// grant runs the lease statement (leaseTemplate: storekit.Delivery.Grant in
// SQL, its history entries written by the same statement), writes the
// changes of the terminal counts the reclaims before it collected in
// counts (grants change none), and returns the grants in delivery order,
// and their positions.
func (s *Store) grant(ctx context.Context, tx pgx.Tx, filter ledger.LeaseFilter, owner ledger.Owner, now time.Time, duration time.Duration, limit int,
	counts deliveryCounts) ([]ledger.LeasedDelivery, []tuplePos, error) {
	sql, args := s.leaseStatement(filter, owner, now, duration, limit)
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var out []ledger.LeasedDelivery
	var pos []tuplePos
	scan := leaseScanner(&out, &pos)
	for rows.Next() {
		if err := scan(rows); err != nil {
			return nil, nil, err
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	rows.Close() // before the next statement on tx
	b := &pgx.Batch{}
	counts.queue(b, s.q, false)
	if _, err := execBatch(ctx, tx, b); err != nil {
		return nil, nil, err
	}
	return out, pos, nil
}

// leaseStatement returns the lease statement for filter and its
// arguments, with limit fresh tokens.
func (s *Store) leaseStatement(filter ledger.LeaseFilter, owner ledger.Owner, now time.Time, duration time.Duration, limit int) (string, []any) {
	tokens := make([]string, limit)
	for i := range tokens {
		tokens[i] = string(storekit.NewToken())
	}
	entry := leaseEntryArgs(owner.String(), now, s.q.grantReason)
	args := []any{now, limit, tokens, owner.Agent, owner.Incarnation, now.Add(duration.Truncate(time.Microsecond)),
		string(s.q.grantFailure.Kind), s.q.grantFailure.Message, s.q.grantFailure.Permanent,
		entry[0], entry[1], entry[2], entry[3], !s.cfg.noHistory}
	byTargets, byCeremony := len(filter.Targets) > 0, filter.Ceremony != ""
	if byTargets {
		ts := make([]string, len(filter.Targets))
		for i, t := range filter.Targets {
			ts[i] = string(t)
		}
		args = append(args, ts)
	}
	if byCeremony {
		args = append(args, string(filter.Ceremony))
	}
	return s.q.lease[b2i(byTargets)][b2i(byCeremony)], args
}

// leaseScanner returns the scan of the lease statement's rows, which
// appends each grant to out and its position to pos.
func leaseScanner(out *[]ledger.LeasedDelivery, pos *[]tuplePos) func(pgx.Rows) error {
	var r deliveryRow
	var tid pgtype.TID
	ptrs := append(pointers(r.readColumns()), &tid) // Scan writes every field of r, every row
	return func(rows pgx.Rows) error {
		if err := rows.Scan(ptrs...); err != nil {
			return err
		}
		d := r.delivery()
		if d.Lease == nil {
			return errRowChanged
		}
		*out = append(*out, ledger.LeasedDelivery{Lease: *d.Lease, Delivery: d})
		*pos = append(*pos, posOf(tid))
		return nil
	}
}

// grantProbe applies storekit.Delivery.Grant to a Leased delivery whose
// lease ran out, and returns the failure the grant records for the old
// holder and the reason of the grant's history entry. The lease statement
// writes exactly these, so that the SQL grant records what the state
// machine would; the failure's Owner and At (the old lease's holder and
// expiry) come from the row.
func grantProbe() (ledger.Failure, string) {
	t := time.Unix(1, 0).UTC()
	d := ledger.Delivery{
		ID:     "probe",
		State:  ledger.DeliveryStateLeased,
		Policy: ledger.Policy{MaxAttempts: 2},
		Lease:  &ledger.Lease{DeliveryID: "probe", Seq: 1, ExpiresAt: t},
	}
	g, _ := storekit.Delivery(d).Grant(ledger.Owner{Agent: "probe", Incarnation: "probe"}, "probe", t, time.Second)
	if g.LastFailure == nil {
		return ledger.Failure{}, ""
	}
	return *g.LastFailure, storekit.DeliveryTransition(ledger.OpLease, &d, &g, "").Reason
}

// agentLockKey is the pg_advisory_xact_lock key that serialises the Lease
// calls of one agent in one schema. Two agents whose keys collide only
// wait for each other; nothing else depends on the key.
func agentLockKey(schema, agent string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("leaseledger/pgstore lease " + schema + "\x00" + agent))
	return int64(h.Sum64())
}
