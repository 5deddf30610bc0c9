package pgstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leaseledger/ledger"
)

// This file enqueues a batch too large for the arrays (more than
// arrayEnqueueMax new IDs) in one round trip, when it can: it copies the
// new records in without first reading which IDs are taken, and lets
// the primary key say so. The COPY and the notification go as one simple
// query, which PostgreSQL runs as one implicit transaction (the protocol
// chapter, "Multiple Statements in a Simple Query"): it commits both when
// the server reaches the end of the query string, and rolls both back
// when either fails. So a batch of new IDs costs one round trip and two
// statements, where the careful path (enqueue_tx.go) spends three round
// trips and five statements: BEGIN, the read of the taken IDs (with the
// reservation of the enqueue order, for the outbox), the COPY, the
// notification and COMMIT.
//
// A batch with an ID already taken fails the COPY with a unique
// violation, which writes nothing, and the call takes the careful path,
// which reads the taken IDs and answers each against its record. Only
// batches that repeat IDs (a producer retrying a call) pay for both.
//
// The outbox's rows go in envelope order and take their enqueue_seq from
// the column's default, which numbers the rows of one COPY in the order
// they come: the order FindPending and ClaimPending break ties by
// (migrations/0002). The careful path copies in ID order instead, so that
// two calls sharing new IDs wait for each other in one order; here two
// such calls (two producers enqueueing the same keys at once, in orders
// of their own) may each wait for an ID the other copied first. The
// server then ends one of them with a deadlock error after its
// deadlock_timeout (a second by default), which rolls it back whole, and
// that call takes the careful path. Deliveries have no enqueue order and
// keep ID order on both paths.

// copyEnqueue reports whether an enqueue of n distinct IDs goes by a
// one-trip COPY: n too large for the arrays, on the store's own
// transaction, with no queue bounds to apply (bounded: see arrayEnqueue),
// whose statements must run between the COPY and the commit.
func (s *Store) copyEnqueue(n int, bounded bool) bool {
	return n > arrayEnqueueMax && !s.callerTx && !bounded
}

// copyTrip copies the n rows of w into table's columns and notifies ch
// (when notifications are on) in one implicit transaction of its own, in
// one round trip, retried like inTx after an error that is safe to retry.
// taken reports that an ID was taken, or that the copy deadlocked with
// another enqueue, and nothing written: the caller takes the careful
// path. When the outcome of the commit is unknown the error is an
// unknownCommitError.
func (s *Store) copyTrip(ctx context.Context, op, table string, columns []string, w *copyWriter, n int, ch Channel) (taken bool, _ error) {
	data, err := w.finish()
	if err != nil {
		return false, err
	}
	ident := pgx.Identifier{s.cfg.schema, table}
	sql := copyStatement(ident, columns)
	if s.cfg.notify {
		name, err := s.ChannelName(ch)
		if err != nil {
			return false, err
		}
		// NOTIFY, not pg_notify: a simple query takes no parameters, and
		// the channel is an identifier, quoted as every other one is.
		sql += "; NOTIFY " + pgx.Identifier{name}.Sanitize()
	}
	err = s.retry(ctx, op, func() error {
		committing, err := s.onTrip(ctx, func(tctx context.Context, conn *pgx.Conn) (bool, error) {
			tag, err := conn.PgConn().CopyFrom(tctx, bytes.NewReader(data), sql)
			if failedStatement(err) {
				// Refused: the implicit transaction rolled back whole.
				return false, copyFailed(err, ident)
			}
			if committing, err := tripOutcome(nil, err, nil); committing || err != nil {
				return committing, err
			}
			// Without the notification the tag is the COPY's own.
			if !s.cfg.notify && tag.RowsAffected() != int64(n) {
				return false, fmt.Errorf("copied %d rows of %d", tag.RowsAffected(), n)
			}
			return false, nil
		})
		if committing {
			return &unknownCommitError{err: err}
		}
		if lostRace(err) || deadlocked(err) {
			// Not retried here: the careful path settles it.
			return errCopyTaken
		}
		return err
	})
	if errors.Is(err, errCopyTaken) {
		return true, nil
	}
	return false, err
}

// errCopyTaken is copyTrip's attempt that found an ID taken or
// deadlocked; it never leaves copyTrip.
var errCopyTaken = errors.New("pgstore: an ID of the copy was taken")

// deadlocked reports whether err is the server's deadlock error, after
// which it rolled the transaction back.
func deadlocked(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == sqlstateDeadlockDetected
}

// deliveryRows writes the rows of the records of ids not in held, in the
// order of ids, to a new copyWriter, and returns it with their number.
func (s *Store) deliveryRows(ids []string, held map[ledger.DeliveryID]ledger.Delivery, records map[ledger.DeliveryID]ledger.Delivery, columns int) (*copyWriter, int, error) {
	w := newCopyWriter(len(ids), 256)
	var r deliveryRow // every record's row in turn
	f := newCopyFields(r.columns())
	n := 0
	for _, id := range ids {
		if _, ok := held[ledger.DeliveryID(id)]; ok {
			continue
		}
		d := records[ledger.DeliveryID(id)]
		row, err := newDeliveryRow(d)
		if err != nil {
			return nil, 0, err
		}
		r = row
		w.row(columns)
		w.fields(f)
		w.metadata(d.Metadata)
		w.boolean(!s.cfg.noHistory)
		n++
	}
	return w, n, nil
}

// entryRows writes the rows of the entries of ids not in held, in the
// order of ids, to a new copyWriter, and returns it with their number;
// with seqs, each row ends with its entry's enqueue_seq.
func (o *Outbox) entryRows(ids []ledger.OutboxEntryID, held map[ledger.OutboxEntryID]ledger.OutboxEntry, records map[ledger.OutboxEntryID]ledger.OutboxEntry, seqs map[ledger.OutboxEntryID]int64, columns int) (*copyWriter, int, error) {
	w := newCopyWriter(len(ids), 192)
	var r outboxRow // every entry's row in turn
	f := newCopyFields(r.columns())
	n := 0
	for _, id := range ids {
		if _, ok := held[id]; ok {
			continue
		}
		e := records[id]
		row, err := newOutboxRow(e)
		if err != nil {
			return nil, 0, err
		}
		r = row
		w.row(columns)
		w.fields(f)
		w.metadata(e.Envelope.Metadata)
		w.boolean(!o.s.cfg.noHistory)
		if seqs != nil {
			w.int8(seqs[id])
		}
		n++
	}
	return w, n, nil
}
