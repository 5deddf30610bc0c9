package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// This file is the outbox: the base OutboxStore methods and the claims of
// ClaimStore. Transitions work like the delivery ones (transition.go):
// lock the row, apply the state machine in Go, write back on a change.

// Enqueue adds an entry for env (see ledger.OutboxStore), stamped with the
// store's clock. The entry is committed when Enqueue returns without error
// (under WithTx: when the caller commits).
func (o *Outbox) Enqueue(ctx context.Context, env ledger.Envelope) (ledger.OutboxResult, error) {
	if err := o.s.check(ctx, storekit.ValidateEnvelope(env, o.s.cfg.maxPayload)); err != nil {
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
//
// A batch of new keys is one round trip. Two batches of more than 100
// keys that enqueue some of the same new keys at once, in different
// orders, may wait for each other until the server's deadlock_timeout
// (a second by default) ends one of them, which then takes a slower
// path and answers as usual: one of the two answers each shared key
// Applied, the other Repeated.
func (o *Outbox) EnqueueBatch(ctx context.Context, envs []ledger.Envelope) ([]ledger.OutboxResult, error) {
	if err := o.s.check(ctx, storekit.ValidateEnvelopeBatch(envs, o.s.cfg.maxPayload)); err != nil {
		return nil, err
	}
	return outboxResultsOut(o.enqueue(ctx, "outbox enqueue batch", envs))
}

// Save writes entry's mutable fields when its Version is current (see
// ledger.OutboxStore): ErrConflict for a stale Version or an ended entry,
// ErrNotFound for an unknown ID.
func (o *Outbox) Save(ctx context.Context, entry ledger.OutboxEntry) (ledger.OutboxEntry, error) {
	if err := o.s.check(ctx, storekit.ValidateSave(entry)); err != nil {
		return ledger.OutboxEntry{}, err
	}
	return o.base(ctx, "save", how{op: ledger.OpSave}, entry.ID, func(e ledger.OutboxEntry, now time.Time) (ledger.OutboxEntry, error) {
		return storekit.OutboxEntry(e).Save(entry, now)
	})
}

// FindByID returns one entry, or an error matching ledger.ErrNotFound.
func (o *Outbox) FindByID(ctx context.Context, id ledger.OutboxEntryID) (ledger.OutboxEntry, error) {
	if err := o.s.check(ctx, storekit.ValidateGet(string(id))); err != nil {
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
	if err := o.s.check(ctx, storekit.ValidateFindPending(limit)); err != nil {
		return nil, err
	}
	return o.find(ctx, "find pending", o.s.q.findPending, limit)
}

// FindRetryReady returns up to limit RetryScheduled or Deferred entries
// due at now, earliest first (see ledger.OutboxStore).
func (o *Outbox) FindRetryReady(ctx context.Context, now time.Time, limit int) ([]ledger.OutboxEntry, error) {
	if err := o.s.check(ctx, storekit.ValidateFindRetryReady(now, limit)); err != nil {
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
	err := o.s.readIndexed(ctx, op, func(db dbtx) error {
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
	if err := o.s.check(ctx, storekit.ValidateMarkDelivered(id, result)); err != nil {
		return ledger.OutboxEntry{}, err
	}
	return o.base(ctx, "mark delivered", how{op: ledger.OpMarkDelivered}, id, func(e ledger.OutboxEntry, now time.Time) (ledger.OutboxEntry, error) {
		return storekit.OutboxEntry(e).MarkDelivered(result, now)
	})
}

// MarkFailed records a failed emission: RetryScheduled at nextRetry, or
// Failed when nextRetry is nil (see ledger.OutboxStore).
func (o *Outbox) MarkFailed(ctx context.Context, id ledger.OutboxEntryID, emissionErr ledger.EmissionError, nextRetry *time.Time) (ledger.OutboxEntry, error) {
	if err := o.s.check(ctx, storekit.ValidateMarkEntryFailed(id, emissionErr, nextRetry)); err != nil {
		return ledger.OutboxEntry{}, err
	}
	return o.base(ctx, "mark failed", how{op: ledger.OpMarkFailed}, id, func(e ledger.OutboxEntry, now time.Time) (ledger.OutboxEntry, error) {
		return storekit.OutboxEntry(e).MarkFailed(emissionErr, nextRetry, now)
	})
}

// MarkDeadLettered ends the entry as DeadLettered (see ledger.OutboxStore).
func (o *Outbox) MarkDeadLettered(ctx context.Context, id ledger.OutboxEntryID, emissionErr ledger.EmissionError, reason string) (ledger.OutboxEntry, error) {
	if err := o.s.check(ctx, storekit.ValidateMarkDeadLettered(id, emissionErr, reason)); err != nil {
		return ledger.OutboxEntry{}, err
	}
	return o.base(ctx, "mark dead lettered", how{op: ledger.OpMarkDeadLettered}, id, func(e ledger.OutboxEntry, now time.Time) (ledger.OutboxEntry, error) {
		return storekit.OutboxEntry(e).MarkDeadLettered(emissionErr, reason, now)
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
	if err := o.s.check(ctx, storekit.ValidateClaimRequest(req)); err != nil {
		return nil, err
	}
	return o.claim(ctx, "claim pending", o.s.q.claimPending, req)
}

// ClaimRetryReady claims due RetryScheduled and Deferred entries (see
// ledger.ClaimStore); they come earliest due first.
func (o *Outbox) ClaimRetryReady(ctx context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	if err := o.s.check(ctx, storekit.ValidateClaimRequest(req)); err != nil {
		return nil, err
	}
	return o.claim(ctx, "claim retry ready", o.s.q.claimRetryReady, req)
}

// ClaimDue claims due RetryScheduled and Deferred entries, then Pending
// ones, in one statement (see ledger.DueClaimer): what ClaimRetryReady and
// then ClaimPending with the rest of the limit would claim.
func (o *Outbox) ClaimDue(ctx context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	if err := o.s.check(ctx, storekit.ValidateClaimRequest(req)); err != nil {
		return nil, err
	}
	return o.claim(ctx, "claim due", o.s.q.claimDue, req)
}

// claim runs a claim statement (claimTemplate: storekit.OutboxEntry.Grant in
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
		tokens[i] = string(storekit.NewToken())
	}
	var out []ledger.ClaimedEntry
	var pos []tuplePos // by claim
	entry := claimEntryArgs(req.Worker, now)
	args := []any{now, req.Limit, tokens, req.Worker, now.Add(req.LeaseDuration.Truncate(time.Microsecond)),
		entry[0], entry[1], !s.cfg.noHistory}
	var r outboxRow
	var tid pgtype.TID
	ptrs := append(pointers(r.readColumns()), &tid) // Scan writes every field of r, every row
	scan := func(rows pgx.Rows) error {
		if err := rows.Scan(ptrs...); err != nil {
			return err
		}
		e := r.entry()
		if e.Claim == nil {
			return errRowChanged
		}
		out = append(out, ledger.ClaimedEntry{Claim: *e.Claim, Entry: e})
		pos = append(pos, posOf(tid))
		return nil
	}
	if s.callerTx {
		err = s.inTx(ctx, op, func(tx pgx.Tx) (bool, error) {
			out, pos = nil, nil
			rows, err := tx.Query(ctx, query, args...)
			if err != nil {
				return false, err
			}
			defer rows.Close()
			for rows.Next() {
				if err := scan(rows); err != nil {
					return false, err
				}
			}
			if err := rows.Err(); err != nil {
				return false, err
			}
			return len(out) > 0, nil
		})
	} else if err = s.claims.enter(ctx); err == nil {
		err = s.trip(ctx, op, []tripStatement{{sql: grantPrelude}, {sql: query, args: args, scan: scan}}, func() { out, pos = nil, nil })
		s.claims.leave()
	} else {
		err = wrap(ctx, op, err)
	}
	if err != nil {
		return nil, err
	}
	if s.held != nil {
		for i, ce := range out {
			s.held.keepEntry(ce.Entry.Clone(), pos[i])
		}
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
//
// wrote, when not nil, is what a held write of the call wrote, taken for
// not committed (see deliveryCompletion.wrote): an entry exactly so is
// answered Applied, and nothing is written.
func (o *Outbox) completeClaimAlone(ctx context.Context, op string, h how, id ledger.OutboxEntryID, apply claimApply, wrote *ledger.OutboxEntry) (ledger.OutboxResult, error) {
	s := o.s
	var res ledger.OutboxResult
	var before int64 // the version the write found
	err := s.inTx(ctx, op, func(tx pgx.Tx) (bool, error) {
		res = ledger.OutboxResult{}
		old, err := scanEntry(tx.QueryRow(ctx, s.q.lockEntry, string(id)))
		before = old.Version
		if noRows(err) {
			res.Outcome = ledger.OutcomeNotFound
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if wrote != nil && s.held.entries.kind.same(old, *wrote) {
			res = ledger.OutboxResult{Outcome: ledger.OutcomeApplied, Entry: old}
			return false, nil
		}
		e, outcome := apply(old, ledger.Normalize(s.cfg.clock()))
		if outcome != ledger.OutcomeApplied {
			res = ledger.OutboxResult{Outcome: outcome, Entry: old}
			return false, nil
		}
		res = ledger.OutboxResult{Outcome: outcome, Entry: e}
		return true, s.writeEntry(ctx, tx, entryChangeOf(h, old, e))
	})
	if err != nil && res.Applied() && s.held != nil {
		// The commit's outcome may be unknown: the row tells.
		err = settleAlone(ctx, s, s.held.entries.kind, string(id), before, res.Entry, err)
	}
	if err != nil {
		return ledger.OutboxResult{}, err
	}
	s.held.settledEntry(id, res)
	return res, nil
}

// MarkClaimDelivered ends the claimed entry as Delivered (see
// ledger.ClaimStore).
func (o *Outbox) MarkClaimDelivered(ctx context.Context, claim ledger.Claim, result ledger.EmissionResult) (ledger.OutboxResult, error) {
	return o.completeOne(ctx, &ledger.ClaimCompletion{Claim: claim, Op: ledger.OpMarkDelivered, Result: result})
}

// MarkClaimFailed records a failed emission under the claim (see
// ledger.ClaimStore).
func (o *Outbox) MarkClaimFailed(ctx context.Context, claim ledger.Claim, emissionErr ledger.EmissionError, nextRetry *time.Time) (ledger.OutboxResult, error) {
	return o.completeOne(ctx, &ledger.ClaimCompletion{Claim: claim, Op: ledger.OpMarkFailed, Error: emissionErr, NextRetry: nextRetry})
}

// MarkClaimDeadLettered ends the claimed entry as DeadLettered (see
// ledger.ClaimStore).
func (o *Outbox) MarkClaimDeadLettered(ctx context.Context, claim ledger.Claim, emissionErr ledger.EmissionError, reason string) (ledger.OutboxResult, error) {
	return o.completeOne(ctx, &ledger.ClaimCompletion{Claim: claim, Op: ledger.OpMarkDeadLettered, Error: emissionErr, Reason: reason})
}

// ReleaseClaim gives the claim back without counting the attempt (see
// ledger.ClaimStore). reason is not stored in the entry; it is the reason
// of the call's history entry.
func (o *Outbox) ReleaseClaim(ctx context.Context, claim ledger.Claim, reason string) (ledger.OutboxResult, error) {
	return o.completeOne(ctx, &ledger.ClaimCompletion{Claim: claim, Op: ledger.OpReleaseClaim, Reason: reason})
}

// SaveClaim writes a provider-directed transition under the claim (see
// ledger.ClaimStore). An entry whose ID is not the claim's is ErrInvalid:
// the call would otherwise write one entry's fields onto another.
func (o *Outbox) SaveClaim(ctx context.Context, claim ledger.Claim, entry ledger.OutboxEntry) (ledger.OutboxResult, error) {
	return o.completeOne(ctx, &ledger.ClaimCompletion{Claim: claim, Op: ledger.OpSaveClaim, Entry: entry})
}

// completeOne validates and runs one claim completion, grouped with the
// calls of other goroutines when it can be (see completeClaim).
func (o *Outbox) completeOne(ctx context.Context, c *ledger.ClaimCompletion) (ledger.OutboxResult, error) {
	if err := o.s.check(ctx, storekit.ValidateClaimCompletion(c)); err != nil {
		return ledger.OutboxResult{}, err
	}
	return outboxOut(o.completeClaim(ctx, claimCompletionOf(c)))
}

// claimCompletionOf returns the state machine step of the claim
// completion c, which ValidateClaimCompletion accepted, with what its
// history entry records: the claim's worker as the actor, and for a
// release the caller's reason, which the entry does not keep.
//
// Each step keeps only the parts of c it needs: the closure is on the
// heap for as long as the call waits for its group, and c, with the
// entry a SaveClaim carries, is several times the size of any one step's
// arguments.
func claimCompletionOf(c *ledger.ClaimCompletion) entryCompletion {
	claim := c.Claim
	ec := entryCompletion{h: how{op: c.Op, actor: claim.Worker}, id: claim.EntryID}
	switch c.Op {
	case ledger.OpMarkDelivered:
		result := c.Result
		ec.op, ec.apply = "mark claim delivered", func(e ledger.OutboxEntry, now time.Time) (ledger.OutboxEntry, ledger.Outcome) {
			return storekit.OutboxEntry(e).MarkClaimDelivered(claim, result, now)
		}
	case ledger.OpMarkFailed:
		emitErr, next := c.Error, c.NextRetry
		ec.op, ec.apply = "mark claim failed", func(e ledger.OutboxEntry, now time.Time) (ledger.OutboxEntry, ledger.Outcome) {
			return storekit.OutboxEntry(e).MarkClaimFailed(claim, emitErr, next, now)
		}
	case ledger.OpMarkDeadLettered:
		emitErr, reason := c.Error, c.Reason
		ec.op, ec.apply = "mark claim dead lettered", func(e ledger.OutboxEntry, now time.Time) (ledger.OutboxEntry, ledger.Outcome) {
			return storekit.OutboxEntry(e).MarkClaimDeadLettered(claim, emitErr, reason, now)
		}
	case ledger.OpReleaseClaim:
		reason := c.Reason
		ec.h.reason = &reason
		ec.op, ec.apply = "release claim", func(e ledger.OutboxEntry, now time.Time) (ledger.OutboxEntry, ledger.Outcome) {
			return storekit.OutboxEntry(e).ReleaseClaim(claim, now)
		}
	case ledger.OpSaveClaim:
		saved := c.Entry
		ec.op, ec.apply = "save claim", func(e ledger.OutboxEntry, now time.Time) (ledger.OutboxEntry, ledger.Outcome) {
			return storekit.OutboxEntry(e).SaveClaim(claim, saved, now)
		}
	}
	return ec
}

func scanEntry(row scanner) (ledger.OutboxEntry, error) {
	var r outboxRow
	if err := row.Scan(pointers(r.readColumns())...); err != nil {
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
	b.Queue(s.q.updateEntry, updateArgs(c.before.Version, pointers(r.columns()), entryParam(s.cfg.noHistory, c.t))...)
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
