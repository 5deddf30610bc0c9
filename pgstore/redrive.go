package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// Compile-time checks that both stores redrive.
var (
	_ ledger.Redriver       = (*Store)(nil)
	_ ledger.OutboxRedriver = (*Outbox)(nil)
)

// This file is redrive (see redrive.go in the root package for the
// rules). One call is one transaction: lock the originals (FOR UPDATE,
// never skipped: a redrive waits for a concurrent one of the same record
// and then finds it redriven), read the records their new IDs name, let
// the root package decide, insert the new records (with their creation
// entry, which names the original, so not implied) and write the
// originals back with their history entries. An insert that loses its ID
// to a concurrent insert fails with a unique violation and the call runs
// again, as Enqueue does; it then finds the ID taken. Originals are
// terminal before and after, so the terminal counts do not change; a
// delivery's bound, when its target has one, abandons what it must (see
// bound.go), its count changes written last.

// Redrive sends a Failed or Expired delivery again as a new Offered one
// linked to it (see ledger.Redriver). Outcomes: Applied, NotFound,
// Repeated, WrongState, Conflict. Errors: ErrInvalid, ctx.Err(), database
// errors wrapped with the operation.
func (s *Store) Redrive(ctx context.Context, req ledger.RedriveRequest, now time.Time) (ledger.RedriveResult, error) {
	if err := s.check(ctx, storekit.ValidateRedrive(req, now)); err != nil {
		return ledger.RedriveResult{}, err
	}
	now, err := s.decisionTime(ctx, "redrive", now)
	if err != nil {
		return ledger.RedriveResult{}, err
	}
	now = ledger.Normalize(now)
	var res ledger.RedriveResult
	err = s.enqueueOnce(ctx, "redrive", func(tx pgx.Tx) (bool, error) {
		res = ledger.RedriveResult{}
		d, err := scanDelivery(tx.QueryRow(ctx, s.q.lockDelivery, string(req.ID)))
		if noRows(err) {
			res.Outcome = ledger.OutcomeNotFound
			return false, nil
		}
		if err != nil {
			return false, err
		}
		rs, err := s.redrive(ctx, tx, []ledger.Delivery{d}, req.NewID, now)
		if err != nil {
			return false, err
		}
		res = rs[0]
		return s.notifyInserted(ctx, tx, ChannelDeliveries, res.Applied())
	})
	if err != nil {
		return ledger.RedriveResult{}, err
	}
	return redriveOut(res), nil
}

// RedriveMatching redrives up to q.Limit deliveries matching q, oldest
// EndedAt first (see ledger.Redriver), in one transaction. It reads them
// through the index of ended records from the cursor on, so its cost
// grows with the ended records it passes over, of every state and target,
// and not only with those it redrives. Errors as Redrive.
func (s *Store) RedriveMatching(ctx context.Context, q ledger.RedriveQuery, now time.Time) (ledger.RedriveBatch, error) {
	after, verr := storekit.ValidateRedriveQuery(q, now)
	if err := s.check(ctx, verr); err != nil {
		return ledger.RedriveBatch{}, err
	}
	now, err := s.decisionTime(ctx, "redrive matching", now)
	if err != nil {
		return ledger.RedriveBatch{}, err
	}
	now = ledger.Normalize(now)
	states := make([]string, 0, 2)
	for _, st := range q.States {
		states = append(states, string(st))
	}
	if len(states) == 0 {
		states = append(states, string(ledger.DeliveryStateFailed), string(ledger.DeliveryStateExpired))
	}
	targets := make([]string, len(q.Targets))
	for i, t := range q.Targets {
		targets[i] = string(t)
	}
	var batch ledger.RedriveBatch
	err = s.enqueueOnce(ctx, "redrive matching", func(tx pgx.Tx) (bool, error) {
		batch = ledger.RedriveBatch{}
		if err := s.indexesFirst(ctx, tx); err != nil {
			return false, err
		}
		rows, err := tx.Query(ctx, s.q.redrivableDeliveries, redriveArgs(after, q.Cutoff(now), states, targets, q.Limit)...)
		if err != nil {
			return false, err
		}
		ds, err := collectDeliveries(rows)
		if err != nil {
			return false, err
		}
		if len(ds) == q.Limit {
			last := ds[len(ds)-1]
			batch.Next = storekit.EncodeRedriveCursor(storekit.RedrivePosition{EndedAt: last.EndedAt, ID: string(last.ID)})
		}
		if batch.Results, err = s.redrive(ctx, tx, ds, "", now); err != nil {
			return false, err
		}
		return s.notifyInserted(ctx, tx, ChannelDeliveries, batch.Redriven() > 0)
	})
	if err != nil {
		return ledger.RedriveBatch{}, err
	}
	return redrivesOut(batch), nil
}

// redriveArgs are the parameters of the redrivable statements: what ended
// after the position after and before the cutoff (see
// ledger.RedriveQuery.Cutoff).
func redriveArgs(after storekit.RedrivePosition, cutoff time.Time, states, filter []string, limit int) []any {
	from := after.EndedAt
	if from.IsZero() {
		from = storekit.MinTime() // every ended_at is at or after it, every ID after ""
	}
	if filter == nil {
		filter = []string{} // NULL would match nothing
	}
	return []any{from, after.ID, ledger.Normalize(cutoff), states, filter, limit}
}

// redrive redrives the locked deliveries ds, in order, each as newID
// (empty: derived), and answers one result each.
func (s *Store) redrive(ctx context.Context, tx pgx.Tx, ds []ledger.Delivery, newID ledger.DeliveryID, now time.Time) ([]ledger.RedriveResult, error) {
	if len(ds) == 0 {
		return nil, nil
	}
	ids := make([]string, len(ds))
	for i, d := range ds {
		ids[i] = string(storekit.Delivery(d).RedriveAs(newID))
	}
	rows, err := tx.Query(ctx, s.q.deliveriesByID, ids)
	if err != nil {
		return nil, err
	}
	found, err := collectDeliveries(rows)
	if err != nil {
		return nil, err
	}
	existing := make(map[ledger.DeliveryID]ledger.Delivery, len(found))
	for _, d := range found {
		existing[d.ID] = d
	}
	results := make([]ledger.RedriveResult, len(ds))
	var (
		changes  []deliveryChange
		inserts  []ledger.Delivery
		at       = map[ledger.DeliveryID]int{} // the result of each new record
		newTargs []ledger.Target
	)
	for i, d := range ds {
		e, taken := existing[ledger.DeliveryID(ids[i])]
		orig, fresh, o := storekit.Delivery(d).Redrive(newID, taken, now)
		results[i] = ledger.RedriveResult{Outcome: o, Original: orig}
		switch o {
		case ledger.OutcomeRepeated:
			if taken {
				results[i].Redriven = e
			}
		case ledger.OutcomeApplied:
			changes = append(changes, changeOf(how{op: ledger.OpRedrive, actor: ledger.ActorFrom(ctx)}, d, orig))
			inserts = append(inserts, fresh)
			existing[fresh.ID] = fresh // a later original redriven as it finds it taken
			results[i].Redriven = fresh
			at[fresh.ID] = i
			newTargs = append(newTargs, fresh.Target)
		}
	}
	if len(inserts) == 0 {
		return results, nil
	}
	b := &pgx.Batch{}
	for _, d := range inserts {
		r, err := newDeliveryRow(d)
		if err != nil {
			return nil, err
		}
		md, err := metadataParam(d.Metadata)
		if err != nil {
			return nil, err
		}
		creation := storekit.DeliveryCreation(&d)
		b.Queue(s.q.insertDelivery, append(pointers(r.columns()), md, entryParam(s.cfg.noHistory, creation))...)
	}
	if _, err := execBatch(ctx, tx, b); err != nil {
		return nil, err
	}
	counts := deliveryCounts{}
	if err := s.writeDeliveries(ctx, tx, changes, counts); err != nil {
		return nil, err
	}
	if s.cfg.bounds.Any() {
		abandoned, err := s.boundQueues(ctx, tx, s.boundedTargets(newTargs), now, counts)
		if err != nil {
			return nil, err
		}
		// As EnqueueBatch does: each target's abandoned IDs on its last
		// redrive, and a new record abandoned shown as it now stands.
		last := map[ledger.Target]int{}
		for i, r := range results {
			if r.Applied() {
				last[r.Redriven.Target] = i
			}
		}
		for t, gone := range abandoned {
			for _, d := range gone {
				results[last[t]].Abandoned = append(results[last[t]].Abandoned, d.ID)
				if i, ok := at[d.ID]; ok {
					results[i].Redriven = d
				}
			}
		}
	}
	b = &pgx.Batch{}
	counts.queue(b, s.q, false)
	if _, err := execBatch(ctx, tx, b); err != nil {
		return nil, err
	}
	return results, nil
}

// RedriveEntry sends a Failed or DeadLettered entry again as a new Pending
// one linked to it (see ledger.OutboxRedriver), stamped with the store's
// clock. Outcomes: Applied, NotFound, Repeated, WrongState, Conflict.
// Errors: ErrInvalid, ctx.Err(), database errors wrapped with the
// operation.
func (o *Outbox) RedriveEntry(ctx context.Context, req ledger.RedriveEntryRequest) (ledger.RedriveEntryResult, error) {
	s := o.s
	if err := s.check(ctx, storekit.ValidateRedriveEntry(req)); err != nil {
		return ledger.RedriveEntryResult{}, err
	}
	now := ledger.Normalize(s.cfg.clock())
	var res ledger.RedriveEntryResult
	err := s.enqueueOnce(ctx, "redrive entry", func(tx pgx.Tx) (bool, error) {
		res = ledger.RedriveEntryResult{}
		e, err := scanEntry(tx.QueryRow(ctx, s.q.lockEntry, string(req.ID)))
		if noRows(err) {
			res.Outcome = ledger.OutcomeNotFound
			return false, nil
		}
		if err != nil {
			return false, err
		}
		rs, err := o.redrive(ctx, tx, []ledger.OutboxEntry{e}, req.IdempotencyKey, now)
		if err != nil {
			return false, err
		}
		res = rs[0]
		return s.notifyInserted(ctx, tx, ChannelOutbox, res.Applied())
	})
	if err != nil {
		return ledger.RedriveEntryResult{}, err
	}
	return redriveEntryOut(res), nil
}

// RedriveEntriesMatching redrives up to q.Limit entries matching q,
// oldest EndedAt first (see ledger.OutboxRedriver), in one transaction,
// reading them as RedriveMatching does. Errors as RedriveEntry.
func (o *Outbox) RedriveEntriesMatching(ctx context.Context, q ledger.RedriveEntryQuery) (ledger.RedriveEntryBatch, error) {
	s := o.s
	after, verr := storekit.ValidateRedriveEntryQuery(q)
	if err := s.check(ctx, verr); err != nil {
		return ledger.RedriveEntryBatch{}, err
	}
	now := ledger.Normalize(s.cfg.clock())
	statuses := make([]string, 0, 2)
	for _, st := range q.Statuses {
		statuses = append(statuses, string(st))
	}
	if len(statuses) == 0 {
		statuses = append(statuses, string(ledger.OutboxStatusFailed), string(ledger.OutboxStatusDeadLettered))
	}
	providers := append([]string{}, q.Providers...)
	var batch ledger.RedriveEntryBatch
	err := s.enqueueOnce(ctx, "redrive entries matching", func(tx pgx.Tx) (bool, error) {
		batch = ledger.RedriveEntryBatch{}
		if err := s.indexesFirst(ctx, tx); err != nil {
			return false, err
		}
		sql, args := s.q.redrivableEntries, redriveArgs(after, entryCutoff(q.EndedBefore), statuses, providers, q.Limit)
		if q.IdempotencyKey != "" {
			sql, args = s.q.redrivableEntriesByKey, append(args, string(ledger.OutboxEntryIDFor(q.IdempotencyKey)), q.IdempotencyKey)
		}
		rows, err := tx.Query(ctx, sql, args...)
		if err != nil {
			return false, err
		}
		es, err := collectEntries(rows)
		if err != nil {
			return false, err
		}
		if len(es) == q.Limit {
			last := es[len(es)-1]
			batch.Next = storekit.EncodeRedriveCursor(storekit.RedrivePosition{EndedAt: last.EndedAt, ID: string(last.ID)})
		}
		if batch.Results, err = o.redrive(ctx, tx, es, "", now); err != nil {
			return false, err
		}
		return s.notifyInserted(ctx, tx, ChannelOutbox, batch.Redriven() > 0)
	})
	if err != nil {
		return ledger.RedriveEntryBatch{}, err
	}
	return redriveEntriesOut(batch), nil
}

// entryCutoff is the cutoff of RedriveEntriesMatching: EndedBefore, or
// none (see ledger.RedriveEntryQuery.Matches).
func entryCutoff(endedBefore time.Time) time.Time {
	if endedBefore.IsZero() {
		return storekit.MaxTime().Add(time.Microsecond) // after every ended_at
	}
	return endedBefore
}

// redrive redrives the locked entries es, in order, each under key
// (empty: derived), and answers one result each.
func (o *Outbox) redrive(ctx context.Context, tx pgx.Tx, es []ledger.OutboxEntry, key string, now time.Time) ([]ledger.RedriveEntryResult, error) {
	s := o.s
	if len(es) == 0 {
		return nil, nil
	}
	ids := make([]string, len(es))
	for i, e := range es {
		ids[i] = string(storekit.OutboxEntry(e).RedriveAs(key))
	}
	rows, err := tx.Query(ctx, s.q.entriesByID, ids)
	if err != nil {
		return nil, err
	}
	found, err := collectEntries(rows)
	if err != nil {
		return nil, err
	}
	existing := make(map[ledger.OutboxEntryID]ledger.OutboxEntry, len(found))
	for _, e := range found {
		existing[e.ID] = e
	}
	results := make([]ledger.RedriveEntryResult, len(es))
	b := &pgx.Batch{}
	var updates int
	for i, e := range es {
		ex, taken := existing[ledger.OutboxEntryID(ids[i])]
		orig, fresh, out := storekit.OutboxEntry(e).Redrive(key, taken, now)
		results[i] = ledger.RedriveEntryResult{Outcome: out, Original: orig}
		switch out {
		case ledger.OutcomeRepeated:
			if taken {
				results[i].Redriven = ex
			}
		case ledger.OutcomeApplied:
			existing[fresh.ID] = fresh
			results[i].Redriven = fresh
			nr, err := newOutboxRow(fresh)
			if err != nil {
				return nil, err
			}
			md, err := metadataParam(fresh.Envelope.Metadata)
			if err != nil {
				return nil, err
			}
			creation := storekit.EntryCreation(&fresh)
			b.Queue(s.q.insertEntry, append(pointers(nr.columns()), md, entryParam(s.cfg.noHistory, creation))...)
			or, err := newOutboxRow(orig)
			if err != nil {
				return nil, err
			}
			redriven := entryChangeOf(how{op: ledger.OpRedrive, actor: ledger.ActorFrom(ctx)}, e, orig).t
			b.Queue(s.q.updateEntry, updateArgs(e.Version, pointers(or.columns()), entryParam(s.cfg.noHistory, redriven))...)
			updates++
		}
	}
	if updates == 0 {
		return results, nil
	}
	done, err := execBatch(ctx, tx, b)
	if err != nil {
		return nil, err
	}
	for i := 1; i < 2*updates; i += 2 {
		if !done[i] {
			return nil, errRowChanged
		}
	}
	return results, nil
}
