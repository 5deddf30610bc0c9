package pgstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaseledger/ledger"
)

// This file is the outbox: the base OutboxStore methods and the claims of
// ClaimStore. Transitions work like the delivery ones (transition.go):
// lock the row, apply the state machine in Go, write back on a change.

// Enqueue adds an entry for env (see ledger.OutboxStore), stamped with the
// store's clock. The entry is committed when Enqueue returns without error
// (under WithTx: when the caller commits).
func (o *Outbox) Enqueue(ctx context.Context, env ledger.Envelope) (ledger.OutboxResult, error) {
	if err := o.s.check(ctx, ledger.ValidateEnvelope(env, o.s.cfg.maxPayload)); err != nil {
		return ledger.OutboxResult{}, err
	}
	rs, err := o.enqueue(ctx, "outbox enqueue", []ledger.Envelope{env})
	if err != nil {
		return ledger.OutboxResult{}, err
	}
	return outboxOut(rs[0], nil)
}

// EnqueueBatch enqueues envs in one transaction (see
// ledger.OutboxBatchEnqueuer): atomic for errors, one result per envelope
// in order, a repeated idempotency key judged against the entry it names.
// The new entries share one CreatedAt and are found and claimed in the
// order of envs.
func (o *Outbox) EnqueueBatch(ctx context.Context, envs []ledger.Envelope) ([]ledger.OutboxResult, error) {
	if err := o.s.check(ctx, ledger.ValidateEnvelopeBatch(envs, o.s.cfg.maxPayload)); err != nil {
		return nil, err
	}
	return outboxResultsOut(o.enqueue(ctx, "outbox enqueue batch", envs))
}

// enqueue works like Store.enqueue, keyed by the entry ID each envelope's
// idempotency key derives. The rows are inserted in ID order, their
// enqueue_seq in envelope order (see enqueueSeqs).
func (o *Outbox) enqueue(ctx context.Context, op string, envs []ledger.Envelope) ([]ledger.OutboxResult, error) {
	s := o.s
	now := ledger.Normalize(s.cfg.clock())
	var results []ledger.OutboxResult
	err := s.inTx(ctx, op, func(tx pgx.Tx) (bool, error) {
		records := make(map[ledger.OutboxEntryID]ledger.OutboxEntry, len(envs))
		var ids []ledger.OutboxEntryID
		for _, env := range envs {
			e := ledger.NewOutboxEntry(env, now)
			if _, dup := records[e.ID]; !dup {
				records[e.ID] = e
				ids = append(ids, e.ID)
			}
		}
		seqs, err := o.enqueueSeqs(ctx, tx, ids) // ids are in envelope order here
		if err != nil {
			return false, err
		}
		slices.Sort(ids) // as in Store.enqueue: no deadlock between batches
		b := &pgx.Batch{}
		for _, id := range ids {
			r, err := newOutboxRow(records[id])
			if err != nil {
				return false, err
			}
			args := pointers(r.columns())
			if seqs != nil {
				args = append(args, seqs[id])
			}
			if !s.cfg.noHistory {
				args = append(args, historyArgs(entryCreationOf(records[id]))...)
			}
			b.Queue(o.insertSQL(seqs != nil), args...)
		}
		inserted, err := execBatch(ctx, tx, b)
		if err != nil {
			return false, err
		}
		var taken []string
		fresh := make(map[ledger.OutboxEntryID]bool, len(ids))
		for i, id := range ids {
			fresh[id] = inserted[i]
			if !inserted[i] {
				taken = append(taken, string(id))
			}
		}
		if len(taken) > 0 {
			rows, err := tx.Query(ctx, s.q.entriesByID, taken)
			if err != nil {
				return false, err
			}
			existing, err := collectEntries(rows)
			if err != nil {
				return false, err
			}
			if len(existing) != len(taken) {
				return false, errRowChanged
			}
			for _, e := range existing {
				records[e.ID] = e
			}
		}
		results = make([]ledger.OutboxResult, len(envs))
		for i, env := range envs {
			id := ledger.OutboxEntryIDFor(env.IdempotencyKey)
			rec := records[id]
			if fresh[id] {
				results[i] = ledger.OutboxResult{Outcome: ledger.OutcomeApplied, Entry: rec.Clone()}
				fresh[id] = false
				continue
			}
			results[i] = ledger.OutboxResult{Outcome: rec.EnqueueAgain(env), Entry: rec.Clone()}
		}
		return s.notifyInserted(ctx, tx, ChannelOutbox, len(taken) < len(ids))
	})
	if err != nil {
		return nil, err
	}
	return results, nil
}

// insertSQL returns the INSERT of an entry: with an explicit enqueue_seq
// or not, writing its creation entry into the history or not.
func (o *Outbox) insertSQL(withSeq bool) string {
	q, logged := o.s.q, !o.s.cfg.noHistory
	switch {
	case withSeq && logged:
		return q.insertEntryAtLogged
	case withSeq:
		return q.insertEntryAt
	case logged:
		return q.insertEntryLogged
	}
	return q.insertEntry
}

// enqueueSeqs returns the enqueue_seq to insert each of ids with (the
// distinct IDs of one call, in envelope order), or nil when the column
// default will do.
//
// FindPending and ClaimPending break ties on created_at by enqueue_seq, and
// every entry of one call shares one created_at, so enqueue_seq must follow
// the order of the envelopes. The rows, though, are inserted in ID order,
// so that two batches sharing keys wait for each other's keys in the same
// order and cannot deadlock; the column default would number them in that
// order. So a call of more than one entry takes its values from the
// identity's sequence in one round trip, sorts them (the order nextval ran
// in across the rows of one SELECT is not a promise PostgreSQL makes) and
// hands the k-th smallest to the k-th envelope. One INSERT ... SELECT FROM
// unnest(...) WITH ORDINALITY could number rows by ordinality without the
// round trip, but only by inserting them in ordinality order, which is the
// deadlock again, and it would need every column as an array. A single
// entry needs no reservation: the default numbers it as well as any.
//
// Values taken for keys that turn out to exist are lost; only the order of
// the values matters, never their density.
func (o *Outbox) enqueueSeqs(ctx context.Context, tx pgx.Tx, ids []ledger.OutboxEntryID) (map[ledger.OutboxEntryID]int64, error) {
	if len(ids) < 2 {
		return nil, nil
	}
	rows, err := tx.Query(ctx, o.s.q.reserveEnqueueSeqs, o.s.q.enqueueSeqName, len(ids))
	if err != nil {
		return nil, err
	}
	vals, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, err
	}
	if len(vals) != len(ids) {
		return nil, fmt.Errorf("took %d enqueue sequence values for %d entries", len(vals), len(ids))
	}
	slices.Sort(vals)
	seqs := make(map[ledger.OutboxEntryID]int64, len(ids))
	for i, id := range ids {
		seqs[id] = vals[i]
	}
	return seqs, nil
}

// Save writes entry's mutable fields when its Version is current (see
// ledger.OutboxStore): ErrConflict for a stale Version or an ended entry,
// ErrNotFound for an unknown ID.
func (o *Outbox) Save(ctx context.Context, entry ledger.OutboxEntry) (ledger.OutboxEntry, error) {
	if err := o.s.check(ctx, ledger.ValidateSave(entry)); err != nil {
		return ledger.OutboxEntry{}, err
	}
	return o.base(ctx, "save", how{op: ledger.OpSave}, entry.ID, func(e ledger.OutboxEntry, now time.Time) (ledger.OutboxEntry, error) {
		return e.Save(entry, now)
	})
}

// FindByID returns one entry, or an error matching ledger.ErrNotFound.
func (o *Outbox) FindByID(ctx context.Context, id ledger.OutboxEntryID) (ledger.OutboxEntry, error) {
	if err := o.s.check(ctx, ledger.ValidateGet(string(id))); err != nil {
		return ledger.OutboxEntry{}, err
	}
	var e ledger.OutboxEntry
	err := o.s.read(ctx, "find by id", func(db dbtx) error {
		var err error
		e, err = scanEntry(db.QueryRow(ctx, o.s.q.getEntry, string(id)))
		if noRows(err) {
			return ledger.ErrNotFound
		}
		return err
	})
	if err != nil {
		return ledger.OutboxEntry{}, err
	}
	return e.Redacted(), nil
}

// FindPending returns up to limit Pending entries, oldest first: CreatedAt,
// then enqueue order (see ledger.OutboxStore).
func (o *Outbox) FindPending(ctx context.Context, limit int) ([]ledger.OutboxEntry, error) {
	if err := o.s.check(ctx, ledger.ValidateFindPending(limit)); err != nil {
		return nil, err
	}
	return o.find(ctx, "find pending", o.s.q.findPending, limit)
}

// FindRetryReady returns up to limit RetryScheduled or Deferred entries
// due at now, earliest first (see ledger.OutboxStore).
func (o *Outbox) FindRetryReady(ctx context.Context, now time.Time, limit int) ([]ledger.OutboxEntry, error) {
	if err := o.s.check(ctx, ledger.ValidateFindRetryReady(now, limit)); err != nil {
		return nil, err
	}
	now, err := o.s.decisionTime(ctx, "find retry ready", now)
	if err != nil {
		return nil, err
	}
	return o.find(ctx, "find retry ready", o.s.q.findRetryReady, ledger.Normalize(now), limit)
}

func (o *Outbox) find(ctx context.Context, op, query string, args ...any) ([]ledger.OutboxEntry, error) {
	var es []ledger.OutboxEntry
	err := o.s.read(ctx, op, func(db dbtx) error {
		rows, err := db.Query(ctx, query, args...)
		if err != nil {
			return err
		}
		es, err = collectEntries(rows)
		return err
	})
	if err != nil {
		return nil, err
	}
	return entriesOut(es, nil)
}

// MarkDelivered ends the entry as Delivered, ignoring any claim (see
// ledger.OutboxStore).
func (o *Outbox) MarkDelivered(ctx context.Context, id ledger.OutboxEntryID, result ledger.EmissionResult) (ledger.OutboxEntry, error) {
	if err := o.s.check(ctx, ledger.ValidateMarkDelivered(id, result)); err != nil {
		return ledger.OutboxEntry{}, err
	}
	return o.base(ctx, "mark delivered", how{op: ledger.OpMarkDelivered}, id, func(e ledger.OutboxEntry, now time.Time) (ledger.OutboxEntry, error) {
		return e.MarkDelivered(result, now)
	})
}

// MarkFailed records a failed emission: RetryScheduled at nextRetry, or
// Failed when nextRetry is nil (see ledger.OutboxStore).
func (o *Outbox) MarkFailed(ctx context.Context, id ledger.OutboxEntryID, emissionErr ledger.EmissionError, nextRetry *time.Time) (ledger.OutboxEntry, error) {
	if err := o.s.check(ctx, ledger.ValidateMarkEntryFailed(id, emissionErr, nextRetry)); err != nil {
		return ledger.OutboxEntry{}, err
	}
	return o.base(ctx, "mark failed", how{op: ledger.OpMarkFailed}, id, func(e ledger.OutboxEntry, now time.Time) (ledger.OutboxEntry, error) {
		return e.MarkFailed(emissionErr, nextRetry, now)
	})
}

// MarkDeadLettered ends the entry as DeadLettered (see ledger.OutboxStore).
func (o *Outbox) MarkDeadLettered(ctx context.Context, id ledger.OutboxEntryID, emissionErr ledger.EmissionError, reason string) (ledger.OutboxEntry, error) {
	if err := o.s.check(ctx, ledger.ValidateMarkDeadLettered(id, emissionErr, reason)); err != nil {
		return ledger.OutboxEntry{}, err
	}
	return o.base(ctx, "mark dead lettered", how{op: ledger.OpMarkDeadLettered}, id, func(e ledger.OutboxEntry, now time.Time) (ledger.OutboxEntry, error) {
		return e.MarkDeadLettered(emissionErr, reason, now)
	})
}

// base runs a base-contract transition on the locked entry id, stamped
// with the store's clock: ErrNotFound when there is none, the state
// machine's error (ErrConflict), and a write only when the entry changed
// (a repeat of the completion that ended it changes nothing), recorded as
// made by h. On any error it returns the zero entry.
func (o *Outbox) base(ctx context.Context, op string, h how, id ledger.OutboxEntryID, step func(e ledger.OutboxEntry, now time.Time) (ledger.OutboxEntry, error)) (ledger.OutboxEntry, error) {
	s := o.s
	var out ledger.OutboxEntry
	err := s.inTx(ctx, op, func(tx pgx.Tx) (bool, error) {
		out = ledger.OutboxEntry{}
		old, err := scanEntry(tx.QueryRow(ctx, s.q.lockEntry, string(id)))
		if noRows(err) {
			return false, ledger.ErrNotFound
		}
		if err != nil {
			return false, err
		}
		out = old
		e, err := step(old, ledger.Normalize(s.cfg.clock()))
		if err != nil {
			return false, err
		}
		if e.Version == old.Version {
			return false, nil
		}
		out = e
		return true, s.writeEntry(ctx, tx, entryChangeOf(h, old, e))
	})
	if err != nil {
		return ledger.OutboxEntry{}, err
	}
	return entryOut(out, nil)
}

// ClaimPending claims Pending entries (see ledger.ClaimStore) in one
// statement that skips rows other workers hold; they come oldest first:
// CreatedAt, then enqueue order.
func (o *Outbox) ClaimPending(ctx context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	if err := o.s.check(ctx, ledger.ValidateClaimRequest(req)); err != nil {
		return nil, err
	}
	return o.claim(ctx, "claim pending", o.s.q.claimPending, req)
}

// ClaimRetryReady claims due RetryScheduled and Deferred entries (see
// ledger.ClaimStore); they come earliest due first.
func (o *Outbox) ClaimRetryReady(ctx context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	if err := o.s.check(ctx, ledger.ValidateClaimRequest(req)); err != nil {
		return nil, err
	}
	return o.claim(ctx, "claim retry ready", o.s.q.claimRetryReady, req)
}

// claim runs a claim statement (claimTemplate: ledger.OutboxEntry.Grant in
// SQL, its history entries written by the same statement) and returns the
// claims in the statement's order.
func (o *Outbox) claim(ctx context.Context, op, query string, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	s := o.s
	now, err := s.decisionTime(ctx, op, req.Now)
	if err != nil {
		return nil, err
	}
	now = ledger.Normalize(now)
	tokens := make([]string, req.Limit)
	for i := range tokens {
		tokens[i] = string(ledger.NewToken())
	}
	var out []ledger.ClaimedEntry
	err = s.inTx(ctx, op, func(tx pgx.Tx) (bool, error) {
		out = nil
		rows, err := tx.Query(ctx, query, now, req.Limit, tokens, req.Worker, now.Add(req.LeaseDuration.Truncate(time.Microsecond)),
			string(ledger.OpClaim), string(ledger.OutcomeApplied), !s.cfg.noHistory)
		if err != nil {
			return false, err
		}
		defer rows.Close()
		var r outboxRow
		ptrs := pointers(r.columns()) // Scan writes every field of r, every row
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				return false, err
			}
			e := r.entry()
			if e.Claim == nil {
				return false, errRowChanged
			}
			out = append(out, ledger.ClaimedEntry{Claim: *e.Claim, Entry: e})
		}
		if err := rows.Err(); err != nil {
			return false, err
		}
		return len(out) > 0, nil
	})
	if err != nil {
		return nil, err
	}
	return claimedOut(out, nil)
}

// claimApply is the state machine step of one claim completion.
type claimApply func(e ledger.OutboxEntry, now time.Time) (ledger.OutboxEntry, ledger.Outcome)

// completeClaimAlone runs apply on the locked entry of claim, in a
// transaction of its own, stamped with the store's clock:
// OutcomeNotFound when there is none, a write only on OutcomeApplied,
// recorded as made by h. completeClaim (group_tx.go) groups it with
// others when it can.
func (o *Outbox) completeClaimAlone(ctx context.Context, op string, h how, claim ledger.Claim, apply claimApply) (ledger.OutboxResult, error) {
	s := o.s
	var res ledger.OutboxResult
	err := s.inTx(ctx, op, func(tx pgx.Tx) (bool, error) {
		res = ledger.OutboxResult{}
		old, err := scanEntry(tx.QueryRow(ctx, s.q.lockEntry, string(claim.EntryID)))
		if noRows(err) {
			res.Outcome = ledger.OutcomeNotFound
			return false, nil
		}
		if err != nil {
			return false, err
		}
		e, outcome := apply(old, ledger.Normalize(s.cfg.clock()))
		if outcome != ledger.OutcomeApplied {
			res = ledger.OutboxResult{Outcome: outcome, Entry: old}
			return false, nil
		}
		res = ledger.OutboxResult{Outcome: outcome, Entry: e}
		return true, s.writeEntry(ctx, tx, entryChangeOf(h, old, e))
	})
	if err != nil {
		return ledger.OutboxResult{}, err
	}
	return res, nil
}

// MarkClaimDelivered ends the claimed entry as Delivered (see
// ledger.ClaimStore).
func (o *Outbox) MarkClaimDelivered(ctx context.Context, claim ledger.Claim, result ledger.EmissionResult) (ledger.OutboxResult, error) {
	if err := o.s.check(ctx, ledger.ValidateMarkClaimDelivered(claim, result)); err != nil {
		return ledger.OutboxResult{}, err
	}
	return outboxOut(o.completeClaim(ctx, "mark claim delivered", how{op: ledger.OpMarkDelivered, actor: claim.Worker}, claim, func(e ledger.OutboxEntry, now time.Time) (ledger.OutboxEntry, ledger.Outcome) {
		return e.MarkClaimDelivered(claim, result, now)
	}))
}

// MarkClaimFailed records a failed emission under the claim (see
// ledger.ClaimStore).
func (o *Outbox) MarkClaimFailed(ctx context.Context, claim ledger.Claim, emissionErr ledger.EmissionError, nextRetry *time.Time) (ledger.OutboxResult, error) {
	if err := o.s.check(ctx, ledger.ValidateMarkClaimFailed(claim, emissionErr, nextRetry)); err != nil {
		return ledger.OutboxResult{}, err
	}
	return outboxOut(o.completeClaim(ctx, "mark claim failed", how{op: ledger.OpMarkFailed, actor: claim.Worker}, claim, func(e ledger.OutboxEntry, now time.Time) (ledger.OutboxEntry, ledger.Outcome) {
		return e.MarkClaimFailed(claim, emissionErr, nextRetry, now)
	}))
}

// MarkClaimDeadLettered ends the claimed entry as DeadLettered (see
// ledger.ClaimStore).
func (o *Outbox) MarkClaimDeadLettered(ctx context.Context, claim ledger.Claim, emissionErr ledger.EmissionError, reason string) (ledger.OutboxResult, error) {
	if err := o.s.check(ctx, ledger.ValidateMarkClaimDeadLettered(claim, emissionErr, reason)); err != nil {
		return ledger.OutboxResult{}, err
	}
	return outboxOut(o.completeClaim(ctx, "mark claim dead lettered", how{op: ledger.OpMarkDeadLettered, actor: claim.Worker}, claim, func(e ledger.OutboxEntry, now time.Time) (ledger.OutboxEntry, ledger.Outcome) {
		return e.MarkClaimDeadLettered(claim, emissionErr, reason, now)
	}))
}

// ReleaseClaim gives the claim back without counting the attempt (see
// ledger.ClaimStore). reason is not stored in the entry; it is the reason
// of the call's history entry.
func (o *Outbox) ReleaseClaim(ctx context.Context, claim ledger.Claim, reason string) (ledger.OutboxResult, error) {
	if err := o.s.check(ctx, ledger.ValidateReleaseClaim(claim, reason)); err != nil {
		return ledger.OutboxResult{}, err
	}
	return outboxOut(o.completeClaim(ctx, "release claim", how{op: ledger.OpReleaseClaim, actor: claim.Worker, reason: &reason}, claim, func(e ledger.OutboxEntry, now time.Time) (ledger.OutboxEntry, ledger.Outcome) {
		return e.ReleaseClaim(claim, now)
	}))
}

// SaveClaim writes a provider-directed transition under the claim (see
// ledger.ClaimStore). An entry whose ID is not the claim's is ErrInvalid:
// the call would otherwise write one entry's fields onto another.
func (o *Outbox) SaveClaim(ctx context.Context, claim ledger.Claim, entry ledger.OutboxEntry) (ledger.OutboxResult, error) {
	if err := o.s.check(ctx, ledger.ValidateSaveClaim(claim, entry)); err != nil {
		return ledger.OutboxResult{}, err
	}
	return outboxOut(o.completeClaim(ctx, "save claim", how{op: ledger.OpSaveClaim, actor: claim.Worker}, claim, func(e ledger.OutboxEntry, now time.Time) (ledger.OutboxEntry, ledger.Outcome) {
		return e.SaveClaim(claim, entry, now)
	}))
}

func scanEntry(row scanner) (ledger.OutboxEntry, error) {
	var r outboxRow
	if err := row.Scan(pointers(r.columns())...); err != nil {
		return ledger.OutboxEntry{}, err
	}
	return r.entry(), nil
}

// collectEntries scans every row; nil when there are none.
func collectEntries(rows pgx.Rows) ([]ledger.OutboxEntry, error) {
	return pgx.AppendRows([]ledger.OutboxEntry(nil), rows, func(row pgx.CollectableRow) (ledger.OutboxEntry, error) { return scanEntry(row) })
}

// writeEntry writes the changed entry back, guarded by the version read
// under its lock, with its history entry and the change of the terminal
// counts, in one round trip.
func (s *Store) writeEntry(ctx context.Context, tx pgx.Tx, c entryChange) error {
	r, err := newOutboxRow(c.after)
	if err != nil {
		return err
	}
	b := &pgx.Batch{}
	b.Queue(s.q.updateEntry, updateArgs(c.before.Version, pointers(r.columns()))...)
	if !s.cfg.noHistory {
		var hist historyRows
		hist.add(string(c.after.ID), c.t)
		hist.queue(b, s.q.insertEntryHistory)
	}
	counts := outboxCounts{}
	counts.change(&c.before, &c.after)
	counts.queue(b, s.q, false)
	done, err := execBatch(ctx, tx, b)
	if err != nil {
		return err
	}
	if !done[0] {
		return errRowChanged
	}
	return nil
}
