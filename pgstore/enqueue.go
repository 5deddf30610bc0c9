package pgstore

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// This file is Enqueue and EnqueueBatch of both contracts. A batch of new
// IDs takes one round trip: up to arrayEnqueueMax IDs, one statement over
// arrays (enqueue_arrays.go); a larger one, a COPY and its notification
// in one simple query (enqueue_copy.go). A call that finds an ID taken
// there, or runs in the caller's transaction or under a queue bound,
// takes the careful path, as follows. One call is one transaction (in
// three round trips on the store's own: see enqueue_tx.go): it reads
// which of its IDs are taken (with, for a batch of outbox entries, the
// enqueue order it reserves), copies the new records in with COPY, in ID
// order, and answers every request against the record its ID holds.
// COPY writes a batch's rows a page at a time and runs no statement per
// row; it has no ON CONFLICT, so an ID taken between the read and the
// copy (another enqueue of the same ID, in a transaction that committed
// meanwhile) fails the copy with a unique violation, and the call runs
// again: it then finds the ID taken.
//
// The history entry of a record's creation is not written: the record
// implies it (creation_implied, migrations/0008; see impliedCreation).

// maxEnqueueRaces bounds how many times a call runs again after losing
// an ID to a concurrent enqueue; each time one ID at least is settled.
const maxEnqueueRaces = 8

// sqlstateUniqueViolation is a COPY that lost an ID to another enqueue.
const sqlstateUniqueViolation = "23505"

// sqlstateInternalError is how Citus reports every error a worker raised
// in a COPY it forwarded (a unique violation among them): it passes the
// worker's message and detail on, not its SQLSTATE.
const sqlstateInternalError = "XX000"

// lostRace reports whether err is a copy that lost an ID to another
// enqueue, which the call answers by running again.
func lostRace(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == sqlstateUniqueViolation {
		return true
	}
	var lost *lostCopyError
	return errors.As(err, &lost)
}

// lostCopyError is a COPY through Citus that lost an ID to another
// enqueue: copyFailed tells it from other internal errors by its message.
// The driver's error stays in the chain for errors.As.
type lostCopyError struct{ err error }

func (e *lostCopyError) Error() string { return e.err.Error() }

func (e *lostCopyError) Unwrap() error { return e.err }

// citusLostCopy reports whether err is the error Citus raises for a COPY
// into table whose row a worker refused as a duplicate of its primary
// key: SQLSTATE XX000 with the worker's message, which names the
// constraint of the shard (deliveries_pkey_102008) or of the table. Any
// other XX000 is left as it is: it is a real internal error.
func citusLostCopy(err error, table string) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != sqlstateInternalError {
		return false
	}
	name, ok := strings.CutPrefix(pgErr.Message, `duplicate key value violates unique constraint "`)
	if !ok {
		return false
	}
	name, ok = strings.CutSuffix(name, `"`)
	if !ok {
		return false
	}
	suffix, ok := strings.CutPrefix(name, table+"_pkey")
	if !ok {
		return false
	}
	if suffix == "" {
		return true
	}
	digits, ok := strings.CutPrefix(suffix, "_")
	return ok && digits != "" && strings.Trim(digits, "0123456789") == ""
}

// enqueueOnce runs attempt, in a transaction of its own or a savepoint of
// the caller's, again while it loses an ID to a concurrent enqueue: a
// redrive's enqueue (runEnqueue is the enqueues' own).
func (s *Store) enqueueOnce(ctx context.Context, op string, attempt txFunc) error {
	for n := 0; ; n++ {
		err := s.inTx(ctx, op, attempt)
		if err == nil || !lostRace(err) || n >= maxEnqueueRaces || ctx.Err() != nil {
			return err
		}
	}
}

// copyFailed is the error of a COPY into table that failed with err:
// on Citus, one that lost an ID to another enqueue is marked as a lost
// race (see citusLostCopy).
func copyFailed(err error, table pgx.Identifier) error {
	if citusLostCopy(err, table[len(table)-1]) {
		return &lostCopyError{err: err}
	}
	return err
}

// enqueue offers the first request of every ID and answers each request
// against the record its ID holds, as Enqueue and EnqueueBatch describe.
func (s *Store) enqueue(ctx context.Context, op string, reqs []ledger.EnqueueRequest, now time.Time) ([]ledger.DeliveryResult, error) {
	now = ledger.Normalize(now)
	records := make(map[ledger.DeliveryID]ledger.Delivery, len(reqs))
	var ids []string
	for _, req := range reqs {
		if _, dup := records[req.ID]; !dup {
			records[req.ID] = storekit.NewDelivery(req, s.cfg.defaults, now)
			ids = append(ids, string(req.ID))
		}
	}
	// Copied in ID order, so that two calls sharing IDs wait for each
	// other in the same order instead of deadlocking.
	slices.Sort(ids)
	if s.arrayEnqueue(len(ids), s.cfg.bounds.Any()) {
		taken, err := s.enqueueByArrays(ctx, op, ids, records)
		if err != nil {
			return nil, err
		}
		if !taken {
			return s.deliveryResults(reqs, map[ledger.DeliveryID]ledger.Delivery{}, records), nil
		}
	}
	columns := append(enqueueCopyNames(columnNames((&deliveryRow{}).columns())), metadataColumn, "creation_implied")
	if s.copyEnqueue(len(ids), s.cfg.bounds.Any()) {
		w, n, err := s.deliveryRows(ids, nil, records, len(columns))
		if err != nil {
			return nil, err
		}
		taken, err := s.copyTrip(ctx, op, "deliveries", columns, w, n, ChannelDeliveries)
		if err != nil {
			return nil, err
		}
		if !taken {
			return s.deliveryResults(reqs, map[ledger.DeliveryID]ledger.Delivery{}, records), nil
		}
	}
	var results []ledger.DeliveryResult
	var existing []ledger.Delivery
	err := s.runEnqueue(ctx, op, ChannelDeliveries, enqueueSteps{queue: func(b *pgx.Batch) {
		b.Queue(s.q.deliveriesByID, ids)
	}, read: func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		existing, err = collectDeliveries(rows)
		return err
	}, write: func(tx pgx.Tx) (bool, error) {
		held := make(map[ledger.DeliveryID]ledger.Delivery, len(existing))
		for _, d := range existing {
			held[d.ID] = d
		}
		w, fresh, err := s.deliveryRows(ids, held, records, len(columns))
		if err != nil {
			return false, err
		}
		if err := copyBinary(ctx, tx, pgx.Identifier{s.cfg.schema, "deliveries"}, columns, w, fresh); err != nil {
			return false, err
		}
		var abandoned map[ledger.Target][]ledger.Delivery
		if s.cfg.bounds.Any() && fresh > 0 {
			var err error
			if abandoned, err = s.boundEnqueued(ctx, tx, ids, held, records, now); err != nil {
				return false, err
			}
		}
		results = s.deliveryResults(reqs, held, records)
		if abandoned != nil {
			reportAbandoned(reqs, results, abandoned)
		}
		return fresh > 0, nil
	}})
	if err != nil {
		return nil, err
	}
	return results, nil
}

// enqueue adds an entry for the first envelope of every idempotency key,
// stamped with the store's clock, and answers each envelope against the
// entry its key names, as Outbox.Enqueue and EnqueueBatch describe. The
// entries of a batch take their enqueue_seq in envelope order (see
// enqueueSeqs).
func (o *Outbox) enqueue(ctx context.Context, op string, envs []ledger.Envelope) ([]ledger.OutboxResult, error) {
	s := o.s
	now := ledger.Normalize(s.cfg.clock())
	records := make(map[ledger.OutboxEntryID]ledger.OutboxEntry, len(envs))
	var order []ledger.OutboxEntryID // distinct IDs in envelope order
	// envIDs[i] is envs[i]'s entry ID: a SHA-1 of its key, worked out
	// once per envelope.
	envIDs := make([]ledger.OutboxEntryID, len(envs))
	for i, env := range envs {
		e := storekit.NewOutboxEntry(env, now)
		envIDs[i] = e.ID
		if _, dup := records[e.ID]; !dup {
			records[e.ID] = e
			order = append(order, e.ID)
		}
	}
	if s.arrayEnqueue(len(order), false) {
		taken, err := o.enqueueByArrays(ctx, op, order, records)
		if err != nil {
			return nil, err
		}
		if !taken {
			return entryResults(envs, envIDs, map[ledger.OutboxEntryID]ledger.OutboxEntry{}, records), nil
		}
	}
	columns := append(enqueueCopyNames(columnNames((&outboxRow{}).columns())), metadataColumn, "creation_implied")
	if s.copyEnqueue(len(order), false) {
		// In envelope order, numbered by the column's default.
		w, n, err := o.entryRows(order, nil, records, nil, len(columns))
		if err != nil {
			return nil, err
		}
		taken, err := s.copyTrip(ctx, op, "outbox_entries", columns, w, n, ChannelOutbox)
		if err != nil {
			return nil, err
		}
		if !taken {
			return entryResults(envs, envIDs, map[ledger.OutboxEntryID]ledger.OutboxEntry{}, records), nil
		}
	}
	ids := slices.Clone(order)
	slices.Sort(ids) // copied in ID order, as deliveries are
	idStrings := make([]string, len(ids))
	for i, id := range ids {
		idStrings[i] = string(id)
	}
	if len(order) > 1 {
		columns = append(columns, "enqueue_seq")
	}
	var results []ledger.OutboxResult
	var existing []ledger.OutboxEntry
	var vals []int64
	err := s.runEnqueue(ctx, op, ChannelOutbox, enqueueSteps{queue: func(b *pgx.Batch) {
		b.Queue(s.q.entriesByID, idStrings)
		if len(order) > 1 {
			b.Queue(s.q.reserveEnqueueSeqs, s.q.enqueueSeqName, len(order))
		}
	}, read: func(br pgx.BatchResults) (err error) {
		existing, vals, err = readTakenAndSeqs(br, len(order) > 1)
		return err
	}, write: func(tx pgx.Tx) (bool, error) {
		held := make(map[ledger.OutboxEntryID]ledger.OutboxEntry, len(existing))
		for _, e := range existing {
			held[e.ID] = e
		}
		w, fresh, err := o.entryRows(ids, held, records, enqueueSeqs(order, vals), len(columns))
		if err != nil {
			return false, err
		}
		if err := copyBinary(ctx, tx, pgx.Identifier{s.cfg.schema, "outbox_entries"}, columns, w, fresh); err != nil {
			return false, err
		}
		results = entryResults(envs, envIDs, held, records)
		return fresh > 0, nil
	}})
	if err != nil {
		return nil, err
	}
	return results, nil
}

// deliveryResults answers reqs: a request whose ID held a record (held)
// against it, the others Applied with the record made for them
// (records); a later request with the ID of an earlier one is judged
// against the record the earlier one made. held gains those records.
func (s *Store) deliveryResults(reqs []ledger.EnqueueRequest, held, records map[ledger.DeliveryID]ledger.Delivery) []ledger.DeliveryResult {
	results := make([]ledger.DeliveryResult, len(reqs))
	for i, req := range reqs {
		if d, ok := held[req.ID]; ok {
			results[i] = ledger.DeliveryResult{Outcome: storekit.Delivery(d).EnqueueAgain(req, s.cfg.defaults), Delivery: d.Clone()}
			continue
		}
		d := records[req.ID]
		results[i] = ledger.DeliveryResult{Outcome: ledger.OutcomeApplied, Delivery: d.Clone()}
		held[req.ID] = d // later requests with this ID are judged against it
	}
	return results
}

// entryResults answers envs, whose entry IDs are envIDs, as
// deliveryResults answers requests.
func entryResults(envs []ledger.Envelope, envIDs []ledger.OutboxEntryID, held, records map[ledger.OutboxEntryID]ledger.OutboxEntry) []ledger.OutboxResult {
	results := make([]ledger.OutboxResult, len(envs))
	for i, env := range envs {
		id := envIDs[i]
		if e, ok := held[id]; ok {
			results[i] = ledger.OutboxResult{Outcome: storekit.OutboxEntry(e).EnqueueAgain(env), Entry: e.Clone()}
			continue
		}
		e := records[id]
		results[i] = ledger.OutboxResult{Outcome: ledger.OutcomeApplied, Entry: e.Clone()}
		held[id] = e
	}
	return results
}

// readTakenAndSeqs reads the results of the read of the entries whose
// IDs are taken and, for a batch (seqs), of the reservation of its
// enqueue_seq values, which go in one round trip.
func readTakenAndSeqs(br pgx.BatchResults, seqs bool) (_ []ledger.OutboxEntry, vals []int64, err error) {
	rows, err := br.Query()
	if err != nil {
		return nil, nil, err
	}
	existing, err := collectEntries(rows)
	if err != nil {
		return nil, nil, err
	}
	if seqs {
		rows, err := br.Query()
		if err != nil {
			return nil, nil, err
		}
		if vals, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
			return nil, nil, err
		}
	}
	return existing, vals, nil
}

// enqueueSeqs hands the reserved enqueue_seq values vals to the entries
// order, the distinct IDs of one call in envelope order: the k-th
// smallest to the k-th. nil when there is no reservation (a single
// entry, which the column default numbers as well as any).
//
// FindPending and ClaimPending break ties on created_at by enqueue_seq,
// and every entry of one call shares one created_at, so enqueue_seq must
// follow the order of the envelopes; the rows, though, are copied in ID
// order, and the column default would number them in that order. So a
// batch takes its values from the identity's sequence in the round trip
// that reads its taken IDs, sorted here (the order nextval ran in across
// the rows of one SELECT is not a promise PostgreSQL makes). Values taken
// for IDs that turn out to exist are lost; only their order matters.
func enqueueSeqs(order []ledger.OutboxEntryID, vals []int64) map[ledger.OutboxEntryID]int64 {
	if len(vals) == 0 {
		return nil
	}
	slices.Sort(vals)
	seqs := make(map[ledger.OutboxEntryID]int64, len(order))
	for i, id := range order {
		seqs[id] = vals[i]
	}
	return seqs
}
