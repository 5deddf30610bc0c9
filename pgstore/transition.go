package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// This file holds the single-delivery transitions and the reads. On its
// own, a transition is one transaction: lock the row (SELECT ... FOR
// UPDATE), apply the state machine's method to it in Go, and write the
// new record back only when the call applied, re-checking the version
// read. With group commit (group.go) concurrent transitions share one
// such transaction.

// deliveryApply is the state machine step of one transition.
type deliveryApply func(tx pgx.Tx, d ledger.Delivery) (ledger.Delivery, ledger.Outcome, error)

// transition runs apply on the locked delivery id: OutcomeNotFound when
// there is none; the new record written back, with its history entry
// (made by h), when apply answers OutcomeApplied; otherwise nothing
// written and the record as it stands.
func (s *Store) transition(ctx context.Context, op string, h how, id ledger.DeliveryID, apply deliveryApply) (ledger.DeliveryResult, error) {
	var res ledger.DeliveryResult
	var before int64 // the version the write found
	err := s.inTx(ctx, op, func(tx pgx.Tx) (bool, error) {
		res = ledger.DeliveryResult{}
		old, err := scanDelivery(tx.QueryRow(ctx, s.q.lockDelivery, string(id)))
		before = old.Version
		if noRows(err) {
			res.Outcome = ledger.OutcomeNotFound
			return false, nil
		}
		if err != nil {
			return false, err
		}
		d, outcome, err := apply(tx, old)
		if err != nil {
			return false, err
		}
		if outcome == outcomeWritten {
			res = ledger.DeliveryResult{Outcome: ledger.OutcomeApplied, Delivery: old}
			return false, nil
		}
		if outcome != ledger.OutcomeApplied {
			res = ledger.DeliveryResult{Outcome: outcome, Delivery: old}
			return false, nil
		}
		res = ledger.DeliveryResult{Outcome: outcome, Delivery: d}
		return true, s.writeDeliveries(ctx, tx, []deliveryChange{changeOf(h, old, d)}, nil)
	})
	if err != nil && res.Applied() && s.held != nil {
		// The commit's outcome may be unknown: the row tells.
		err = settleAlone(ctx, s, s.held.deliveries.kind, string(id), before, res.Delivery, err)
	}
	if err != nil {
		return ledger.DeliveryResult{}, err
	}
	return res, nil
}

// outcomeWritten is what a transition's apply answers when it finds the
// row already as the call's held write left it (deliveryCompletion.wrote):
// transition then answers Applied with the row, and writes nothing.
const outcomeWritten ledger.Outcome = "pgstore: written"

// transitionAlone runs c in a transaction of its own (see transition).
// With a fence, the delivery's target row in target_fences is locked too
// (and created if absent, which is undone when the call does not apply),
// so the fence checks and raises of one target are serialised across
// processes.
func (s *Store) transitionAlone(ctx context.Context, c deliveryCompletion) (ledger.DeliveryResult, error) {
	return s.transition(ctx, c.op, c.h, c.id, func(tx pgx.Tx, d ledger.Delivery) (ledger.Delivery, ledger.Outcome, error) {
		if c.wrote != nil && s.held.deliveries.kind.same(d, *c.wrote) {
			return d, outcomeWritten, nil
		}
		var highest *ledger.Fence
		if c.fence != nil {
			if _, err := tx.Exec(ctx, s.q.ensureFence, string(d.Target)); err != nil {
				return d, "", err
			}
			var h *int64
			if err := tx.QueryRow(ctx, s.q.lockFence, string(d.Target)).Scan(&h); err != nil {
				return d, "", err
			}
			if h != nil {
				highest = ledger.FenceOf(*h)
			}
		}
		next, o := c.step(d, highest)
		if o != ledger.OutcomeApplied {
			return next, o, nil
		}
		if raised := storekit.RaiseFence(highest, c.fence); raised != nil && (highest == nil || *raised != *highest) {
			if _, err := tx.Exec(ctx, s.q.setFence, string(next.Target), int64(*raised)); err != nil {
				return next, "", err
			}
		}
		return next, o, nil
	})
}

// Acknowledge records receipt under the current lease (see ledger.Ledger).
func (s *Store) Acknowledge(ctx context.Context, lease ledger.Lease, observation string, now time.Time) (ledger.DeliveryResult, error) {
	if err := s.check(ctx, storekit.ValidateAcknowledge(lease, observation, now)); err != nil {
		return ledger.DeliveryResult{}, err
	}
	now, err := s.decisionTime(ctx, "acknowledge", now)
	if err != nil {
		return ledger.DeliveryResult{}, err
	}
	return deliveryOut(s.complete(ctx, deliveryCompletion{op: "acknowledge", h: how{op: ledger.OpAcknowledge, actor: lease.Owner.String()}, id: lease.DeliveryID,
		step: func(d ledger.Delivery, _ *ledger.Fence) (ledger.Delivery, ledger.Outcome) {
			return storekit.Delivery(d).Acknowledge(lease, observation, now)
		}}))
}

// AcknowledgeProcessed acknowledges under lease and, when that applied,
// marks the delivery processed by the owner that acknowledged it (see
// ledger.AckProcessor). On a delivery this store leased, without a fence,
// both are one write in one transaction, grouped with other calls; a call
// the store cannot decide that way runs as its two calls would, each in a
// transaction of its own. When the call fails with an error, ack is the
// acknowledgement's answer if that committed, else zero.
func (s *Store) AcknowledgeProcessed(ctx context.Context, lease ledger.Lease, observation string, fence *ledger.Fence, action ledger.ActionRef, now time.Time) (ack, processed ledger.DeliveryResult, err error) {
	if err := s.check(ctx, storekit.ValidateAcknowledgeProcessed(lease, observation, fence, action, now)); err != nil {
		return ledger.DeliveryResult{}, ledger.DeliveryResult{}, err
	}
	now, err = s.decisionTime(ctx, "acknowledge processed", now)
	if err != nil {
		return ledger.DeliveryResult{}, ledger.DeliveryResult{}, err
	}
	var first ledger.DeliveryResult
	processed, err = s.complete(ctx, deliveryCompletion{op: "acknowledge processed", id: lease.DeliveryID, fence: fence,
		h: how{op: ledger.OpAcknowledge, holder: true},
		step: func(d ledger.Delivery, _ *ledger.Fence) (ledger.Delivery, ledger.Outcome) {
			return storekit.Delivery(d).Acknowledge(lease, observation, now)
		},
		thenHow: how{op: ledger.OpMarkProcessed, holder: true},
		then: func(d ledger.Delivery, highest *ledger.Fence) (ledger.Delivery, ledger.Outcome) {
			return storekit.Delivery(d).MarkProcessed(d.Ack.Owner, fence, highest, action, now)
		},
		first: &first})
	// first holds the acknowledgement's answer once it committed (with
	// the second step, or on its own), and is zero otherwise.
	ack, _ = deliveryOut(first, nil)
	processed, err = deliveryOut(processed, err)
	return ack, processed, err
}

// MarkProcessed closes an acknowledged delivery (see ledger.Ledger). With
// a fence, the delivery's target row in target_fences is locked too (and
// created if absent, which is undone when the call does not apply), so the
// fence checks and raises of one target are serialised across processes.
func (s *Store) MarkProcessed(ctx context.Context, id ledger.DeliveryID, owner ledger.Owner, fence *ledger.Fence, action ledger.ActionRef, now time.Time) (ledger.DeliveryResult, error) {
	if err := s.check(ctx, storekit.ValidateMarkProcessed(id, owner, fence, action, now)); err != nil {
		return ledger.DeliveryResult{}, err
	}
	now, err := s.decisionTime(ctx, "mark processed", now)
	if err != nil {
		return ledger.DeliveryResult{}, err
	}
	return deliveryOut(s.complete(ctx, deliveryCompletion{op: "mark processed", h: how{op: ledger.OpMarkProcessed, actor: owner.String()}, id: id, fence: fence,
		step: func(d ledger.Delivery, highest *ledger.Fence) (ledger.Delivery, ledger.Outcome) {
			return storekit.Delivery(d).MarkProcessed(owner, fence, highest, action, now)
		}}))
}

// RecordActivation notes what a push or wake-up did (see ledger.Ledger).
func (s *Store) RecordActivation(ctx context.Context, id ledger.DeliveryID, activation ledger.Activation, now time.Time) (ledger.DeliveryResult, error) {
	if err := s.check(ctx, storekit.ValidateRecordActivation(id, activation, now)); err != nil {
		return ledger.DeliveryResult{}, err
	}
	now, err := s.decisionTime(ctx, "record activation", now)
	if err != nil {
		return ledger.DeliveryResult{}, err
	}
	return deliveryOut(s.complete(ctx, deliveryCompletion{op: "record activation", h: how{op: ledger.OpRecordActivation}, id: id,
		step: func(d ledger.Delivery, _ *ledger.Fence) (ledger.Delivery, ledger.Outcome) {
			return storekit.Delivery(d).RecordActivation(activation, now)
		}}))
}

// MarkFailed gives up the attempt held under lease (see ledger.Ledger).
func (s *Store) MarkFailed(ctx context.Context, lease ledger.Lease, reason ledger.FailureReason, now time.Time) (ledger.DeliveryResult, error) {
	if err := s.check(ctx, storekit.ValidateMarkFailed(lease, reason, now)); err != nil {
		return ledger.DeliveryResult{}, err
	}
	now, err := s.decisionTime(ctx, "mark failed", now)
	if err != nil {
		return ledger.DeliveryResult{}, err
	}
	return deliveryOut(s.complete(ctx, deliveryCompletion{op: "mark failed", h: how{op: ledger.OpMarkFailed, actor: lease.Owner.String()}, id: lease.DeliveryID,
		step: func(d ledger.Delivery, _ *ledger.Fence) (ledger.Delivery, ledger.Outcome) {
			return storekit.Delivery(d).MarkFailed(lease, reason, now)
		}}))
}

// Release gives the lease back without counting the attempt (see
// ledger.Ledger).
func (s *Store) Release(ctx context.Context, lease ledger.Lease, now time.Time) (ledger.DeliveryResult, error) {
	if err := s.check(ctx, storekit.ValidateRelease(lease, now)); err != nil {
		return ledger.DeliveryResult{}, err
	}
	now, err := s.decisionTime(ctx, "release", now)
	if err != nil {
		return ledger.DeliveryResult{}, err
	}
	return deliveryOut(s.complete(ctx, deliveryCompletion{op: "release", h: how{op: ledger.OpRelease, actor: lease.Owner.String()}, id: lease.DeliveryID,
		step: func(d ledger.Delivery, _ *ledger.Fence) (ledger.Delivery, ledger.Outcome) {
			return storekit.Delivery(d).Release(lease, now)
		}}))
}

// Abandon ends one open delivery as Expired with cause (see ledger.Ledger).
func (s *Store) Abandon(ctx context.Context, id ledger.DeliveryID, cause ledger.Cause, now time.Time) (ledger.DeliveryResult, error) {
	if err := s.check(ctx, storekit.ValidateAbandon(id, cause, now)); err != nil {
		return ledger.DeliveryResult{}, err
	}
	now, err := s.decisionTime(ctx, "abandon", now)
	if err != nil {
		return ledger.DeliveryResult{}, err
	}
	return deliveryOut(s.complete(ctx, deliveryCompletion{op: "abandon", h: how{op: ledger.OpAbandon, actor: ledger.ActorFrom(ctx)}, id: id,
		step: func(d ledger.Delivery, _ *ledger.Fence) (ledger.Delivery, ledger.Outcome) {
			return storekit.Delivery(d).Abandon(cause, now)
		}}))
}

// EndFenceRejected ends the acknowledged delivery id whose processing by
// owner was refused for fence (see ledger.FenceRejecter), recorded as an
// abandon by owner. It reads the target's highest fence under its lock,
// as MarkProcessed does, and never raises it: the fence is lower.
func (s *Store) EndFenceRejected(ctx context.Context, id ledger.DeliveryID, owner ledger.Owner, fence ledger.Fence, now time.Time) (ledger.DeliveryResult, error) {
	if err := s.check(ctx, storekit.ValidateEndFenceRejected(id, owner, fence, now)); err != nil {
		return ledger.DeliveryResult{}, err
	}
	now, err := s.decisionTime(ctx, "end fence rejected", now)
	if err != nil {
		return ledger.DeliveryResult{}, err
	}
	return deliveryOut(s.complete(ctx, deliveryCompletion{op: "end fence rejected", h: how{op: ledger.OpAbandon, actor: owner.String()}, id: id, fence: &fence,
		step: func(d ledger.Delivery, highest *ledger.Fence) (ledger.Delivery, ledger.Outcome) {
			return storekit.Delivery(d).EndFenceRejected(owner, fence, highest, now)
		}}))
}

// Get returns one delivery in any state; an error matching
// ledger.ErrNotFound when no delivery has the ID.
func (s *Store) Get(ctx context.Context, id ledger.DeliveryID) (ledger.Delivery, error) {
	if err := s.check(ctx, storekit.ValidateGet(string(id))); err != nil {
		return ledger.Delivery{}, err
	}
	var d ledger.Delivery
	err := s.read(ctx, "get", func(db dbtx) error {
		var err error
		d, err = scanDelivery(db.QueryRow(ctx, s.q.getDelivery, string(id)))
		if noRows(err) {
			return ledger.ErrNotFound
		}
		return err
	})
	if err != nil {
		return ledger.Delivery{}, err
	}
	return d.Redacted(), nil
}

// List returns one page of deliveries in ID order (byte order), keyset
// paginated: a page is one indexed range scan after the cursor's ID, so a
// record inserted while paging shows up on a later page when its ID sorts
// after the cursor, and no record appears twice.
func (s *Store) List(ctx context.Context, q ledger.ListQuery) (ledger.Page, error) {
	after, verr := storekit.ValidateList(q)
	if err := s.check(ctx, verr); err != nil {
		return ledger.Page{}, err
	}
	targets := make([]string, len(q.Targets))
	for i, t := range q.Targets {
		targets[i] = string(t)
	}
	states := make([]string, len(q.States))
	for i, st := range q.States {
		states[i] = string(st)
	}
	var page ledger.Page
	err := s.readIndexed(ctx, "list", func(db dbtx) error {
		rows, err := db.Query(ctx, s.q.listDeliveriesSQL(q.States), string(after), targets, optString(string(q.Ceremony)), states, q.Limit+1)
		if err != nil {
			return err
		}
		ds, err := collectDeliveries(rows)
		if err != nil {
			return err
		}
		page = ledger.Page{Deliveries: ds}
		if len(ds) > q.Limit {
			page.Deliveries = ds[:q.Limit]
			page.Next = storekit.EncodeCursor(ds[q.Limit-1].ID)
		}
		return nil
	})
	if err != nil {
		return ledger.Page{}, err
	}
	for i := range page.Deliveries {
		page.Deliveries[i] = page.Deliveries[i].Redacted()
	}
	return page, nil
}

// scanner is a pgx.Row or pgx.Rows.
type scanner interface{ Scan(dest ...any) error }

func scanDelivery(row scanner) (ledger.Delivery, error) {
	var r deliveryRow
	if err := row.Scan(pointers(r.readColumns())...); err != nil {
		return ledger.Delivery{}, err
	}
	return r.delivery(), nil
}

// collectDeliveries scans every row; nil when there are none, as memstore
// answers.
func collectDeliveries(rows pgx.Rows) ([]ledger.Delivery, error) {
	return pgx.AppendRows([]ledger.Delivery(nil), rows, func(row pgx.CollectableRow) (ledger.Delivery, error) { return scanDelivery(row) })
}

// writeDeliveries writes the changed records back, each guarded by the
// version read under its lock, together with their history entries (one
// INSERT for all) and the changes of the terminal counts (one upsert), in
// one round trip. With a non-nil counts it adds the changes of the counts
// there instead, for the caller to write once at the end of its
// transaction (see Lease).
func (s *Store) writeDeliveries(ctx context.Context, tx pgx.Tx, cs []deliveryChange, counts deliveryCounts) error {
	b := &pgx.Batch{}
	flush := counts == nil
	if flush {
		counts = deliveryCounts{}
	}
	for _, c := range cs {
		r, err := newDeliveryRow(c.after)
		if err != nil {
			return err
		}
		b.Queue(s.q.updateDelivery, updateArgs(c.before.Version, pointers(r.columns()), entryParam(s.cfg.noHistory, c.t))...)
		counts.change(&c.before, &c.after)
	}
	updates := b.Len()
	if flush {
		counts.queue(b, s.q, false)
	}
	done, err := execBatch(ctx, tx, b)
	if err != nil {
		return err
	}
	for _, ok := range done[:updates] {
		if !ok {
			return errRowChanged
		}
	}
	return nil
}

// execBatch sends b in one round trip and reports, per statement, whether
// it affected a row.
func execBatch(ctx context.Context, tx pgx.Tx, b *pgx.Batch) (affected []bool, err error) {
	if b.Len() == 0 {
		return nil, nil
	}
	br := tx.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	affected = make([]bool, b.Len())
	for i := range affected {
		tag, err := br.Exec()
		if err != nil {
			return nil, err
		}
		affected[i] = tag.RowsAffected() == 1
	}
	return affected, nil
}
