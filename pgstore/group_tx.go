package pgstore

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// This file is what a group of completions (group.go) does in its one
// transaction, and how a call chooses between a group and a transaction
// of its own.

// deliveryStep is the state machine step of one single-delivery
// transition. highest is the highest fence accepted for the delivery's
// target, read under its lock when the call carries a fence, else nil.
type deliveryStep func(d ledger.Delivery, highest *ledger.Fence) (ledger.Delivery, ledger.Outcome)

// deliveryCompletion is one single-delivery transition: what the call is
// (op, for errors; h, for its history entry), the delivery, the fence it
// carries (MarkProcessed's, when given) and its step.
type deliveryCompletion struct {
	op    string
	h     how
	id    ledger.DeliveryID
	fence *ledger.Fence
	step  deliveryStep
	// then, when not nil, is a second transition made by thenHow (with
	// its own history entry) on the record step left, when step applied:
	// AcknowledgeProcessed's MarkProcessed after its Acknowledge. The
	// call's result is then's; first receives step's. The fence is then's.
	then    deliveryStep
	thenHow how
	first   *ledger.DeliveryResult
	// wrote is what a held write of the call wrote, when that write was
	// taken for not committed (settle.go): the ordinary path that then
	// decides the call answers Applied, writing nothing, when it finds
	// the row exactly so, its version and its time. The classification
	// of errors at COMMIT should make that impossible; this keeps a wrong
	// one from turning into an untrue answer.
	wrote *ledger.Delivery
}

// entryCompletion is one claim completion of an outbox entry.
type entryCompletion struct {
	op    string
	h     how
	id    ledger.OutboxEntryID
	apply claimApply
	wrote *ledger.OutboxEntry // as deliveryCompletion.wrote
}

// groupStatements are the group transactions' fence statements, built
// once.
type groupStatements struct {
	// ensureFences creates the fence rows of $1 that are missing,
	// returning the targets it created; lockFences locks the rows of $1
	// in target order; setFences writes highest $2 to the targets $1;
	// dropFences deletes the rows of $1 still without a fence (created
	// by the group for calls that did not apply).
	ensureFences, lockFences, setFences, dropFences string
}

func newGroupStatements(schema string) groupStatements {
	fences := pgx.Identifier{schema}.Sanitize() + ".target_fences"
	return groupStatements{
		ensureFences: "INSERT INTO " + fences + " (target) SELECT t FROM unnest($1::text[]) AS u(t) ORDER BY t" +
			" ON CONFLICT (target) DO NOTHING RETURNING target",
		lockFences: "SELECT target, highest FROM " + fences + " WHERE target = ANY($1::text[]) ORDER BY target FOR UPDATE",
		setFences: "UPDATE " + fences + " AS f SET highest = u.h FROM unnest($1::text[], $2::bigint[]) AS u(t, h)" +
			" WHERE f.target = u.t",
		dropFences: "DELETE FROM " + fences + " WHERE target = ANY($1::text[]) AND highest IS NULL",
	}
}

// complete runs one single-delivery transition: in a group with others
// when group commit is on and the store is not bound to a caller's
// transaction, else (or when the group could not decide it) in a
// transaction of its own.
func (s *Store) complete(ctx context.Context, c deliveryCompletion) (ledger.DeliveryResult, error) {
	if s.groups != nil && !s.callerTx {
		res, single, err := s.groups.deliveries.submit(ctx, c)
		if !single {
			if err != nil {
				return ledger.DeliveryResult{}, wrap(ctx, c.op, err)
			}
			return res, nil
		}
		s.groups.deliveries.alone.Add(1)
		defer s.groups.deliveries.alone.Add(-1)
	}
	cs := []deliveryCompletion{c}
	if d := s.runHeldDeliveries(ctx, cs)[0]; d.decided {
		return d.res, wrap(ctx, c.op, d.err)
	}
	c = cs[0] // with what the held write wrote, if it tried
	if c.then != nil {
		return s.thenAlone(ctx, c)
	}
	res, err := s.transitionAlone(ctx, c)
	if err == nil {
		s.held.settledDelivery(c.id, res)
	}
	return res, err
}

// thenAlone runs a call of two steps on its own, as its two calls would
// run: the first in a transaction of its own, then, when it applied, the
// second in another (see ledger.AckProcessor).
func (s *Store) thenAlone(ctx context.Context, c deliveryCompletion) (ledger.DeliveryResult, error) {
	first := c
	first.then, first.fence = nil, nil
	res, err := s.transitionAlone(ctx, first)
	if err == nil {
		s.held.settledDelivery(c.id, res)
	}
	*c.first = res
	if err != nil || !res.Applied() {
		return ledger.DeliveryResult{}, err
	}
	second := deliveryCompletion{op: c.op, h: c.thenHow, id: c.id, fence: c.fence, step: c.then, wrote: c.wrote}
	res, err = s.transitionAlone(ctx, second)
	if err == nil {
		s.held.settledDelivery(c.id, res)
	}
	return res, err
}

// completeClaim runs one claim completion, grouped like transition.
func (o *Outbox) completeClaim(ctx context.Context, c entryCompletion) (ledger.OutboxResult, error) {
	s := o.s
	if s.groups != nil && !s.callerTx {
		res, single, err := s.groups.entries.submit(ctx, c)
		if !single {
			if err != nil {
				return ledger.OutboxResult{}, wrap(ctx, c.op, err)
			}
			return res, nil
		}
		s.groups.entries.alone.Add(1)
		defer s.groups.entries.alone.Add(-1)
	}
	return o.completeClaimSingle(ctx, c)
}

// completeClaimSingle runs a claim completion no group decided: on its
// held entry, or else in a transaction of its own.
func (o *Outbox) completeClaimSingle(ctx context.Context, c entryCompletion) (ledger.OutboxResult, error) {
	cs := []entryCompletion{c}
	if d := o.s.runHeldEntries(ctx, cs)[0]; d.decided {
		return d.res, wrap(ctx, c.op, d.err)
	}
	c = cs[0] // with what the held write wrote, if it tried
	return o.completeClaimAlone(ctx, c.op, c.h, c.id, c.apply, c.wrote)
}

// groupWrites is what a group transaction writes once it has decided:
// the write-back (checked by the server, bulkTable.statement) and then
// the count changes, sent with COMMIT in one round trip. Count rows are
// the rows concurrent groups share (a few per target), so they are taken
// last, and held only for the commit.
type groupWrites struct {
	b      *pgx.Batch
	counts *pgx.Batch
	// settle judges the commit when its outcome is unknown, by reading
	// one row the group wrote (settle.go): a transaction commits all its
	// rows or none, so one row tells for every call.
	settle func(ctx context.Context) commitVerdict
}

// groupConn is the connection one attempt of a group transaction runs on.
type groupConn struct {
	*pgx.Conn
	begun bool
}

// lock begins the transaction and runs query, the locking read of the
// group's rows, in the same round trip, calling scan for every row.
func (c *groupConn) lock(ctx context.Context, query string, ids []string, scan func(pgx.Rows) error) (err error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(query, ids)
	br := c.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}()
	if _, err := br.Exec(); err != nil {
		return err
	}
	c.begun = true
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// send sends b and checks each statement's tag with check (nil: none).
func send(ctx context.Context, conn *pgx.Conn, b *pgx.Batch, check func(int, pgconn.CommandTag) error) (err error) {
	br := conn.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}()
	for i := range b.Len() {
		tag, err := br.Exec()
		if err != nil {
			return err
		}
		if check != nil {
			if err := check(i, tag); err != nil {
				return err
			}
		}
	}
	return nil
}

// errRolledBack: COMMIT answered ROLLBACK, which it does for a
// transaction an earlier error aborted.
var errRolledBack = errors.New("group transaction rolled back at commit")

// groupAttempt runs one attempt of a group transaction on a connection
// of its own: decide (which locks and reads, through c.lock, and decides
// in Go) returns what to write, nil for nothing. committing reports that
// COMMIT was sent and its outcome is not known to have failed; settle
// then judges it, once the connection is released.
func (s *Store) groupAttempt(ctx context.Context, decide func(c *groupConn) (*groupWrites, error)) (committing bool, settle func(context.Context) commitVerdict, err error) {
	pc, err := s.groups.pool.Acquire(ctx)
	if err != nil {
		return false, nil, err
	}
	// A connection released inside a transaction (a rollback that
	// failed) is closed by the pool, never reused.
	defer pc.Release()
	c := &groupConn{Conn: pc.Conn()}
	defer func() {
		if err != nil && c.begun && !committing {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_, _ = c.Exec(rctx, "ROLLBACK")
		}
	}()
	w, err := decide(c)
	if err != nil {
		return false, nil, err
	}
	if w == nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, err := c.Exec(rctx, "ROLLBACK")
		return false, nil, err
	}
	// One pipeline: nothing in it is checked by the client before the
	// server reaches COMMIT, so every check is the server's.
	b := w.b
	b.QueuedQueries = append(b.QueuedQueries, w.counts.QueuedQueries...)
	b.Queue("COMMIT")
	last := b.Len() - 1
	reached := -1 // the last statement answered without error
	err = send(ctx, c.Conn, b, func(i int, tag pgconn.CommandTag) error {
		if i == last && tag.String() != "COMMIT" {
			return errRolledBack
		}
		reached = i
		return nil
	})
	if err != nil && reached < last-1 && failedStatement(err) {
		// A statement before COMMIT failed: the server skipped the rest,
		// and the aborted transaction waits for its ROLLBACK.
		return false, nil, err
	}
	committing, err = commitOutcome(err, reached == last)
	return committing, w.settle, err
}

// runGroup runs decide as a group transaction, retrying it like inTx,
// and reports whether it committed. When the outcome of COMMIT is
// unknown it reads a row the group wrote to learn it (settle.go): landed,
// the group committed; nothing committed, the group failed as below;
// still unknown, every call gets the error. When the group did not
// commit, nothing having been applied, every call runs again on its own.
func runGroup[Req, Res any](ctx context.Context, s *Store, ms []*groupMember[Req, Res], decide func(c *groupConn) (*groupWrites, error)) bool {
	var committing bool
	var settle func(context.Context) commitVerdict
	var err error
	for n := 0; ; n++ {
		if committing, settle, err = s.groupAttempt(ctx, decide); err == nil {
			return true
		}
		if committing && settle != nil {
			switch settle(ctx) {
			case commitLanded:
				return true
			case commitLost:
				committing = false
			}
			break
		}
		if committing || n >= s.cfg.maxRetries || ctx.Err() != nil || !retryable(err) || backoff(ctx, n) != nil {
			break
		}
	}
	if committing {
		err = errHeldUnknown(err)
	}
	for _, m := range ms {
		if committing {
			m.err = err
		} else {
			m.single = true
		}
	}
	return false
}

// runDeliveryGroup decides the members' transitions in one transaction:
// it locks their deliveries in ID order, then the fence rows of the
// fenced calls' targets in target order (the order a single call takes
// them in), applies each call's step in arrival order to the record as
// the calls before it left it, and writes every change back with its
// history entry and the fence raises, then the count changes with the
// commit.
func (s *Store) runDeliveryGroup(ctx context.Context, ms []*groupMember[deliveryCompletion, ledger.DeliveryResult]) {
	ms = decideHeld(ms, func(cs []deliveryCompletion) []heldOutcome[ledger.DeliveryResult] {
		return s.runHeldDeliveries(ctx, cs)
	})
	if len(ms) == 0 {
		return
	}
	st := &s.groups.stmts
	results := make([]ledger.DeliveryResult, len(ms))
	firsts := make([]ledger.DeliveryResult, len(ms)) // the first answers of calls of two steps
	ok := runGroup(ctx, s, ms, func(c *groupConn) (*groupWrites, error) {
		clear(firsts)
		ids := make([]string, len(ms))
		for i, m := range ms {
			ids[i] = string(m.req.id)
		}
		records, err := lockRecords(ctx, c, s.groups.deliveryRecords, ids)
		if err != nil {
			return nil, err
		}
		fences, created, err := s.lockGroupFences(ctx, c.Conn, ms, records.byID)
		if err != nil {
			return nil, err
		}
		fencesRead := maps.Clone(fences)

		for i, m := range ms {
			c := m.req
			d, ok := records.byID[ids[i]]
			if !ok {
				results[i] = ledger.DeliveryResult{Outcome: ledger.OutcomeNotFound}
				continue
			}
			if c.wrote != nil && records.kind.same(d, *c.wrote) {
				results[i] = ledger.DeliveryResult{Outcome: ledger.OutcomeApplied, Delivery: records.result(ids[i], d)}
				if c.then != nil {
					firsts[i] = ledger.DeliveryResult{Outcome: ledger.OutcomeApplied, Delivery: records.kind.clone(d)}
				}
				continue
			}
			var highest *ledger.Fence
			if c.fence != nil {
				highest = fences[string(d.Target)]
			}
			next, outcome := c.step(d, highest)
			if outcome != ledger.OutcomeApplied {
				results[i] = ledger.DeliveryResult{Outcome: outcome, Delivery: records.result(ids[i], d)}
				continue
			}
			if c.then != nil {
				// The first step is the call's first answer; the record
				// it leaves is where the second starts.
				firsts[i] = ledger.DeliveryResult{Outcome: outcome, Delivery: records.apply(changeOf(c.h, d, next)).Clone()}
				d = next
				if next, outcome = c.then(d, highest); outcome != ledger.OutcomeApplied {
					results[i] = ledger.DeliveryResult{Outcome: outcome, Delivery: records.result(ids[i], d)}
					continue
				}
				c.h = c.thenHow
			}
			if c.fence != nil {
				fences[string(d.Target)] = storekit.RaiseFence(highest, c.fence)
			}
			results[i] = ledger.DeliveryResult{Outcome: outcome, Delivery: records.apply(changeOf(c.h, d, next))}
		}
		if len(records.changes) == 0 {
			return nil, nil // rolled back: also the fence rows it created
		}
		w := &groupWrites{b: &pgx.Batch{}, counts: &pgx.Batch{}}
		queueFenceWrites(w.b, st, fencesRead, fences, created)
		if err := queueWrites(s, records, deliveryCounts{}, w); err != nil {
			return nil, err
		}
		return w, nil
	})
	if ok {
		for i, m := range ms {
			m.res = results[i]
			if m.req.then != nil {
				*m.req.first = firsts[i]
			}
			s.held.settledDelivery(m.req.id, m.res)
		}
	}
}

// lockGroupFences creates the missing fence rows of the targets of the
// fenced calls whose delivery exists and locks them all, in target
// order, in one round trip. It returns each target's highest fence and
// the targets whose rows it created.
func (s *Store) lockGroupFences(ctx context.Context, conn *pgx.Conn, ms []*groupMember[deliveryCompletion, ledger.DeliveryResult],
	records map[string]ledger.Delivery) (_ map[string]*ledger.Fence, _ map[string]bool, err error) {
	var targets []string
	for _, m := range ms {
		if d, ok := records[string(m.req.id)]; ok && m.req.fence != nil {
			targets = append(targets, string(d.Target))
		}
	}
	if len(targets) == 0 {
		return nil, nil, nil
	}
	slices.Sort(targets)
	targets = slices.Compact(targets)
	st := &s.groups.stmts
	b := &pgx.Batch{}
	b.Queue(st.ensureFences, targets)
	b.Queue(st.lockFences, targets)
	br := conn.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}()
	rows, err := br.Query()
	if err != nil {
		return nil, nil, err
	}
	createdList, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, nil, err
	}
	created := make(map[string]bool, len(createdList))
	for _, t := range createdList {
		created[t] = true
	}
	rows, err = br.Query()
	if err != nil {
		return nil, nil, err
	}
	fences := make(map[string]*ledger.Fence, len(targets))
	var target string
	var highest *int64
	if _, err := pgx.ForEachRow(rows, []any{&target, &highest}, func() error {
		fences[target] = nil
		if highest != nil {
			fences[target] = ledger.FenceOf(*highest)
		}
		return nil
	}); err != nil {
		return nil, nil, err
	}
	if len(fences) != len(targets) {
		return nil, nil, errRowChanged // a fence row vanished under its lock
	}
	return fences, created, nil
}

// queueFenceWrites adds to b the raise of every fence the group changed
// and the removal of the rows it created for calls that did not apply,
// which a call on its own would have rolled back.
func queueFenceWrites(b *pgx.Batch, st *groupStatements, read, now map[string]*ledger.Fence, created map[string]bool) {
	var raised, dropped []string
	var highest []int64
	for _, t := range slices.Sorted(maps.Keys(now)) {
		switch f := now[t]; {
		case f != nil && (read[t] == nil || *f != *read[t]):
			raised, highest = append(raised, t), append(highest, int64(*f))
		case f == nil && created[t]:
			dropped = append(dropped, t)
		}
	}
	if len(raised) > 0 {
		b.Queue(st.setFences, raised, highest)
	}
	if len(dropped) > 0 {
		b.Queue(st.dropFences, dropped)
	}
}

// runEntryGroup is runDeliveryGroup for claim completions: lock the
// entries in ID order, apply each call in arrival order, stamped with the
// store's clock, and write the changes back.
func (s *Store) runEntryGroup(ctx context.Context, ms []*groupMember[entryCompletion, ledger.OutboxResult]) {
	ms = decideHeld(ms, func(cs []entryCompletion) []heldOutcome[ledger.OutboxResult] { return s.runHeldEntries(ctx, cs) })
	if len(ms) == 0 {
		return
	}
	results := make([]ledger.OutboxResult, len(ms))
	ok := runGroup(ctx, s, ms, func(c *groupConn) (*groupWrites, error) {
		ids := make([]string, len(ms))
		for i, m := range ms {
			ids[i] = string(m.req.id)
		}
		records, err := lockRecords(ctx, c, s.groups.entryRecords, ids)
		if err != nil {
			return nil, err
		}
		for i, m := range ms {
			c := m.req
			e, ok := records.byID[ids[i]]
			if !ok {
				results[i] = ledger.OutboxResult{Outcome: ledger.OutcomeNotFound}
				continue
			}
			if c.wrote != nil && records.kind.same(e, *c.wrote) {
				results[i] = ledger.OutboxResult{Outcome: ledger.OutcomeApplied, Entry: records.result(ids[i], e)}
				continue
			}
			next, outcome := c.apply(e, ledger.Normalize(s.cfg.clock()))
			if outcome != ledger.OutcomeApplied {
				results[i] = ledger.OutboxResult{Outcome: outcome, Entry: records.result(ids[i], e)}
				continue
			}
			results[i] = ledger.OutboxResult{Outcome: outcome, Entry: records.apply(entryChangeOf(c.h, e, next))}
		}
		if len(records.changes) == 0 {
			return nil, nil
		}
		w := &groupWrites{b: &pgx.Batch{}, counts: &pgx.Batch{}}
		if err := queueWrites(s, records, outboxCounts{}, w); err != nil {
			return nil, err
		}
		return w, nil
	})
	if ok {
		for i, m := range ms {
			m.res = results[i]
			s.held.settledEntry(m.req.id, m.res)
		}
	}
}

// decideHeld lets held decide what it can of the members' calls (see
// runHeldEntries) and returns the members left undecided.
func decideHeld[Req, Res any](ms []*groupMember[Req, Res], held func([]Req) []heldOutcome[Res]) []*groupMember[Req, Res] {
	reqs := make([]Req, len(ms))
	for i, m := range ms {
		reqs[i] = m.req
	}
	rest := ms[:0:0]
	for i, d := range held(reqs) {
		if !d.decided {
			ms[i].req = reqs[i] // with what the held write wrote, if it tried
			rest = append(rest, ms[i])
			continue
		}
		ms[i].res, ms[i].err = d.res, d.err
	}
	return rest
}
