package pgstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaseledger/ledger"
)

// This file is the enqueue of a small batch in one statement and one
// round trip: the rows go as one binary array parameter per column, and
// INSERT ... SELECT FROM unnest(...) adds them in ID order; with
// notifications on, the same statement notifies the ledger's channel
// (PostgreSQL delivers identical notifications of one transaction once).
// It runs as an implicit transaction (as oneTrip's), committed at the
// Sync that ends it.
//
// The insert is for IDs that are free, which they are but for a retry of
// an enqueue: when one is taken, the insert fails with a unique violation
// and writes nothing, and the call runs again by the COPY path (enqueue.go,
// enqueue_tx.go), which reads the records that hold the IDs taken and
// judges each request against its record. No ON CONFLICT: its speculative
// insertion writes a WAL record more per row (measured: 4.1 WAL records
// per entry against 3.1), to spare only the retries.
//
// The COPY path stays for large batches, where COPY writes pages at a
// time; for queue bounds, whose checks need the call's reads in its
// transaction; and in the caller's transaction (WithTx). Against it, a
// batch of five here is one statement instead of six (BEGIN, the read of
// taken IDs, the enqueue_seq values, COPY, the notification, COMMIT) and
// one round trip instead of three.
//
// The values go pre-encoded, through pgconn, because pgx would box every
// element of every array to encode it. The statement is prepared once
// per connection, under a name of its text, when the pool's connections
// cache their statements (pgx's default); in the pool's other modes it
// goes unnamed, parsed with every call, as the store's other statements
// then do; and a pool of the simple protocol enqueues by COPY.

// arrayEnqueueMax is the largest batch (distinct IDs) enqueued by arrays;
// a larger one goes by COPY.
const arrayEnqueueMax = 100

// elementOID is the type of the column c, as copyWriter.field writes it;
// 0 for a field of a type it cannot write, which it fails on (as
// TestEnqueueCopyTypes would).
func elementOID(c column) uint32 {
	switch c.ptr.(type) {
	case *string, **string:
		return oidText
	case *[]byte:
		return oidBytea
	case *int64, **int64:
		if int4Columns[c.name] {
			return oidInt4
		}
		return oidInt8
	case **bool:
		return oidBool
	case *time.Time, **time.Time:
		return oidTimestamptz
	}
	return 0
}

// enqueueColumns returns the columns an enqueue writes, cols being a
// row's (as the COPY writes them: enqueueCopyNames, then the metadata
// and creation_implied), and their element types.
func enqueueColumns(cols []column) ([]string, []uint32) {
	cols = enqueueCopyColumns(cols)
	names := make([]string, 0, len(cols)+2)
	oids := make([]uint32, 0, len(cols)+2)
	for _, c := range cols {
		names = append(names, c.name)
		oids = append(oids, elementOID(c))
	}
	names = append(names, metadataColumn, "creation_implied")
	oids = append(oids, oidJSONB, oidBool)
	return names, oids
}

// arrayParams builds one binary array parameter per column, a row at a
// time.
type arrayParams struct {
	cols []binArray
}

func newArrayParams(oids []uint32, rows, perValue int) *arrayParams {
	a := &arrayParams{cols: make([]binArray, len(oids))}
	for i, oid := range oids {
		a.cols[i] = newBinArray(oid, rows, perValue)
	}
	return a
}

// record writes one record's row: the fields of f's scratch row (in the
// order of enqueueCopyColumns), then its metadata and creation_implied.
func (a *arrayParams) record(f copyFields, md ledger.Metadata, creationImplied bool) {
	for i, c := range f.cols {
		a.cols[i].w.value(c.name, c.ptr, f.int4[i])
	}
	n := len(a.cols)
	a.cols[n-2].w.metadata(md)
	a.cols[n-1].w.boolean(creationImplied)
	for i := range a.cols {
		a.cols[i].n++
	}
}

// values finishes the arrays and returns them, one parameter each.
func (a *arrayParams) values() ([][]byte, error) { return finishArrays(a.cols) }

// arrayInsert is the statement that inserts the rows of the arrays
// $1... into table's columns names (of element types oids), in ID order.
// seq: the rows take enqueue_seq values from the sequence $n+1, in the
// arrays' order (see enqueueSeqs: the k-th row the k-th smallest value
// taken, whatever order nextval ran in). The values are counted out by
// an unnest of the IDs, not by generate_series: its generic estimate
// (1,000 rows) would make PostgreSQL plan the statement anew with every
// call (TestEnqueueByArraysKeepsAGenericPlan). notify: the rows notify the
// channel $n+1 (after seq's parameter).
func arrayInsert(table string, names []string, oids []uint32, seq, notify bool) string {
	arrays := make([]string, len(names))
	for i := range names {
		arrays[i] = fmt.Sprintf("pg_catalog.unnest($%d::%s[])", i+1, sqlTypes[oids[i]])
	}
	next := len(names) + 1
	// unnest of many arrays is a form the parser knows only unqualified;
	// ROWS FROM is what it stands for.
	from := "ROWS FROM (" + strings.Join(arrays, ", ") + ")"
	cols := strings.Join(names, ", ")
	var b strings.Builder
	if seq {
		fmt.Fprintf(&b, `WITH seqs AS (SELECT v, pg_catalog.row_number() OVER (ORDER BY v) AS ord
	FROM (SELECT pg_catalog.nextval($%d::regclass) AS v FROM pg_catalog.unnest($1::%s[])) AS s) `,
			next, sqlTypes[oids[0]])
		next++
		fmt.Fprintf(&b, "INSERT INTO %s (%s, enqueue_seq) SELECT %s, seqs.v FROM %s WITH ORDINALITY AS u(%s, ord) JOIN seqs USING (ord)",
			table, cols, qualified("u", names), from, cols)
	} else {
		fmt.Fprintf(&b, "INSERT INTO %s (%s) SELECT %s FROM %s AS u(%s)", table, cols, qualified("u", names), from, cols)
	}
	b.WriteString(" ORDER BY u.id")
	if notify {
		fmt.Fprintf(&b, " RETURNING pg_catalog.pg_notify($%d::text, '')", next)
	}
	return b.String()
}

// arrayEnqueue reports whether an enqueue of n distinct IDs goes by
// arrays, bounded saying whether queue bounds apply to it (to
// deliveries, when set; never to the outbox): see this file's comment.
func (s *Store) arrayEnqueue(n int, bounded bool) bool {
	return n <= arrayEnqueueMax && !s.callerTx && !bounded && !s.arrays.get().simple
}

// insertArrays runs st with params (the arrays, then any scalar
// parameters, in formats) as an implicit transaction of its own, in one
// round trip, retried like inTx after an error that is safe to retry.
// taken reports that an ID was taken, and nothing written. When the
// outcome of the commit is unknown the error is an unknownCommitError.
func (s *Store) insertArrays(ctx context.Context, op string, table string, st arrayStatement, params [][]byte, formats []int16) (taken bool, _ error) {
	err := s.retry(ctx, op, func() error {
		committing, err := s.onTrip(ctx, func(tctx context.Context, conn *pgx.Conn) (bool, error) {
			res, err := s.arrays.get().exec(tctx, conn, st, params, formats)
			if err != nil {
				return false, err
			}
			if failedStatement(res.Err) {
				// Refused: nothing was written. copyFailed tells a taken
				// ID through Citus, as for a COPY.
				return false, copyFailed(res.Err, pgx.Identifier{table})
			}
			return tripOutcome(nil, res.Err, nil)
		})
		if committing {
			return &unknownCommitError{err: err}
		}
		return err
	})
	if lostRace(err) {
		return true, nil
	}
	return false, err
}

// channelParam is the name of ch's channel as the array statements take
// it, or nothing when notifications are off.
func (s *Store) channelParam(ch Channel) ([][]byte, error) {
	if !s.cfg.notify {
		return nil, nil
	}
	name, err := s.ChannelName(ch)
	if err != nil {
		return nil, err
	}
	return [][]byte{[]byte(name)}, nil
}

// enqueueByArrays is Store.enqueue of the records of ids, none of them
// taken, by arrays. taken reports that one was, and nothing written.
func (s *Store) enqueueByArrays(ctx context.Context, op string, ids []string, records map[ledger.DeliveryID]ledger.Delivery) (taken bool, _ error) {
	notify, err := s.channelParam(ChannelDeliveries)
	if err != nil {
		return false, err
	}
	n := len(s.q.deliveryArrays)
	a := newArrayParams(s.q.deliveryArrays, len(ids), 24)
	var r deliveryRow // every record's row in turn
	f := newCopyFields(r.columns())
	for _, id := range ids {
		d := records[ledger.DeliveryID(id)]
		row, err := newDeliveryRow(d)
		if err != nil {
			return false, err
		}
		r = row
		a.record(f, d.Metadata, !s.cfg.noHistory)
	}
	vals, err := a.values()
	if err != nil {
		return false, err
	}
	st := s.q.enqueueDeliveries[b2i(notify != nil)]
	return s.insertArrays(ctx, op, "deliveries", st, append(vals, notify...), arrayFormats(n, len(notify)))
}

// enqueueByArrays is Outbox.enqueue of the entries of order (distinct
// IDs, in envelope order, which their enqueue_seq values follow), none of
// them taken, by arrays. taken reports that one was, and nothing written.
func (o *Outbox) enqueueByArrays(ctx context.Context, op string, order []ledger.OutboxEntryID, records map[ledger.OutboxEntryID]ledger.OutboxEntry) (taken bool, _ error) {
	s := o.s
	notify, err := s.channelParam(ChannelOutbox)
	if err != nil {
		return false, err
	}
	n := len(s.q.entryArrays)
	a := newArrayParams(s.q.entryArrays, len(order), 24)
	var r outboxRow // every entry's row in turn
	f := newCopyFields(r.columns())
	for _, id := range order {
		e := records[id]
		row, err := newOutboxRow(e)
		if err != nil {
			return false, err
		}
		r = row
		a.record(f, e.Envelope.Metadata, !s.cfg.noHistory)
	}
	vals, err := a.values()
	if err != nil {
		return false, err
	}
	// One entry takes its enqueue_seq from the column's default, as well
	// as from any value taken here.
	seq := len(order) > 1
	var scalars [][]byte
	if seq {
		scalars = append(scalars, []byte(s.q.enqueueSeqName))
	}
	scalars = append(scalars, notify...)
	st := s.q.enqueueEntries[b2i(seq)][b2i(notify != nil)]
	return s.insertArrays(ctx, op, "outbox_entries", st, append(vals, scalars...), arrayFormats(n, len(scalars)))
}
