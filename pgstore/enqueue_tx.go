package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// This file runs an enqueue's transaction in as few round trips as its
// statements allow: three on the store's own transaction, where inTx
// would spend five (BEGIN, the reads, the COPY, the notification,
// COMMIT).
//
//  1. BEGIN, queued at the head of the batch of the call's reads (which
//     IDs are taken; for an outbox batch, the enqueue order it reserves);
//  2. the writes: one COPY (queue bounds, when set, add their
//     statements);
//  3. the notification, when a row was inserted, with COMMIT.
//
// The notification rides with COMMIT because only then does the call
// know that it inserted a row; one sent in a transaction that does not
// commit is never delivered.

// enqueueSteps are the parts of one attempt of an enqueue.
type enqueueSteps struct {
	// queue queues the call's reads into b.
	queue func(b *pgx.Batch)
	// read reads their results, in order.
	read func(br pgx.BatchResults) error
	// write writes the new records in tx and reports whether it
	// inserted any.
	write func(tx pgx.Tx) (inserted bool, err error)
}

// runEnqueue runs st as one transaction, in a transaction of its own
// (enqueueTrips) or a savepoint of the caller's, notifying ch when it
// inserted a row, and runs it again while it loses an ID to a
// concurrent enqueue.
func (s *Store) runEnqueue(ctx context.Context, op string, ch Channel, st enqueueSteps) error {
	for n := 0; ; n++ {
		var err error
		if s.callerTx {
			err = s.inTx(ctx, op, func(tx pgx.Tx) (bool, error) {
				b := &pgx.Batch{}
				st.queue(b)
				br := tx.SendBatch(ctx, b)
				err := st.read(br)
				if cerr := br.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					return false, err
				}
				inserted, err := st.write(tx)
				if err != nil {
					return false, err
				}
				return s.notifyInserted(ctx, tx, ch, inserted)
			})
		} else {
			err = s.retry(ctx, op, func() error { return s.enqueueTrips(ctx, ch, st) })
		}
		if err == nil || !lostRace(err) || n >= maxEnqueueRaces || ctx.Err() != nil {
			return err
		}
	}
}

// enqueueTrips is one attempt of st in a transaction of the store's own,
// in the round trips this file describes. Its errors mean what runTx's
// do: an unknownCommitError when COMMIT was sent and the outcome is
// unknown, else nothing was committed.
func (s *Store) enqueueTrips(ctx context.Context, ch Channel, st enqueueSteps) (err error) {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// A connection released inside a transaction (a rollback that
	// failed) is closed by the pool, never reused.
	defer pc.Release()
	conn := pc.Conn()
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	st.queue(b)
	br := conn.SendBatch(ctx, b)
	tx := br.Tx()
	ended := false // COMMIT was sent: nothing more goes on the connection
	defer func() {
		if err != nil && !ended {
			// Bounded, and even when ctx is done, so that the connection
			// goes back to the pool outside a transaction.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
			defer cancel()
			_ = tx.Rollback(rctx)
		}
	}()
	if _, err = br.Exec(); err == nil { // BEGIN
		err = st.read(br)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	inserted, err := st.write(tx)
	if err != nil {
		return err
	}
	if !inserted {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		return tx.Rollback(rctx)
	}
	fb := &pgx.Batch{}
	if s.cfg.notify {
		name, err := s.ChannelName(ch)
		if err != nil {
			return err
		}
		fb.Queue(notifySQL, name)
	}
	fb.Queue("COMMIT")
	last := fb.Len() - 1
	reached := -1 // the last statement answered without an error
	ended = true
	err = send(ctx, conn, fb, func(i int, tag pgconn.CommandTag) error {
		if i == last && tag.String() != "COMMIT" {
			return errRolledBack
		}
		reached = i
		return nil
	})
	if err == nil {
		return nil
	}
	if reached < last-1 && failedStatement(err) {
		// The notification failed: the server skipped COMMIT, and the
		// aborted transaction waits for its ROLLBACK.
		ended = false
		return err
	}
	if committing, err := commitOutcome(err, reached == last); committing {
		return &unknownCommitError{err: err}
	} else if err != nil {
		return err
	}
	return nil
}
