package pgstore

import (
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// This file is the store's SQL (retention's two statements sit beside
// their method in purge.go). Every statement is built once, in
// newQueries, from the fragments below with the store's schema quoted as
// an identifier; methods only pick a statement and pass parameters. The
// column lists come from the row structs in row.go.
//
// Parameter conventions: the grant statements and FindRetryReady take $1
// the caller's now and $2 the limit, so the predicate fragments read the
// same wherever they are used; the sweeps take $1 the keyset (the last ID
// of the previous batch), $2 the batch size, then their own arguments.

// Predicates shared by several statements. Each one has a partial index
// in migrations/0001_init.sql (the pending one, since 0002, in
// migrations/0002_enqueue_order.sql).
const (
	// offerableWhere mirrors ledger.Delivery.Offerable: a Leased delivery's
	// available_at is its lease expiry (a CHECK constraint holds it there).
	offerableWhere = `state IN ('offered', 'leased') AND available_at <= $1 AND attempts < max_attempts`
	// offerableOrder mirrors ledger.Delivery.OfferedBefore.
	offerableOrder = `available_at, id`
	// expirableWhere mirrors ledger.Delivery.Expirable (a sweep: $3 is now).
	expirableWhere = `((state = 'leased' AND lease_expires_at <= $3) OR (state = 'acknowledged' AND ack_deadline <= $3))`
	// openWhere: every open state.
	openWhere = `state IN ('offered', 'leased', 'acknowledged')`
	// supersedableWhere mirrors ledger.Delivery.Supersedable.
	supersedableWhere = `state IN ('offered', 'leased')`

	// pendingWhere mirrors OutboxEntry.PendingClaimable (with
	// unclaimedWhere). pendingOrder is OutboxEntry.PendingBefore with ties
	// on created_at broken by enqueue order (enqueue_seq), as pendingBefore
	// in claim.go is in Go: a batch shares one created_at, and ids are
	// hashes. enqueue_seq comes from a sequence, so the id is not needed.
	pendingWhere = `status = 'pending'`
	pendingOrder = `created_at, enqueue_seq`
	// retryReadyWhere and retryOrder mirror OutboxEntry.RetryReady and
	// RetryBefore.
	retryReadyWhere = `status IN ('retry_scheduled', 'deferred') AND next_attempt_at <= $1`
	retryOrder      = `next_attempt_at, id`
	// unclaimedWhere: no claim in force at $1.
	unclaimedWhere = `(claim_token IS NULL OR claim_expires_at <= $1)`
)

// deliveryGrantSet expresses ledger.Delivery.Grant in SQL (the right-hand
// sides read the row as it was). Parameters: $1 now, $4 agent, $5
// incarnation, $6 expiry, $7..$9 the failure kind, message and permanence
// that Grant records when it takes over an expired lease (probed from
// Grant itself, see expiredLeaseFailure). The token comes from the granted
// CTE. A test compares the result with Grant field by field, and another
// checks that deliveryGrantColumns lists exactly the columns it sets.
const deliveryGrantSet = `
	state = 'leased',
	attempts = d.attempts + 1,
	lease_seq = d.lease_seq + 1,
	lease_agent = $4,
	lease_incarnation = $5,
	lease_token = granted.token,
	lease_granted_at = $1,
	lease_expires_at = $6,
	available_at = $6,
	ended_lease_token = NULL,
	ended_lease_seq = NULL,
	ended_lease_op = NULL,
	ended_lease_at = NULL,
	last_failure_kind = CASE WHEN d.state = 'leased' THEN $7 ELSE d.last_failure_kind END,
	last_failure_message = CASE WHEN d.state = 'leased' THEN $8 ELSE d.last_failure_message END,
	last_failure_permanent = CASE WHEN d.state = 'leased' THEN $9::boolean ELSE d.last_failure_permanent END,
	last_failure_agent = CASE WHEN d.state = 'leased' THEN d.lease_agent ELSE d.last_failure_agent END,
	last_failure_incarnation = CASE WHEN d.state = 'leased' THEN d.lease_incarnation ELSE d.last_failure_incarnation END,
	last_failure_at = CASE WHEN d.state = 'leased' THEN d.lease_expires_at ELSE d.last_failure_at END,
	updated_at = $1,
	version = d.version + 1`

// deliveryGrantColumns lists the columns deliveryGrantSet writes. The
// lease statements return their values from before the grant as well, so
// that Lease rebuilds each record as it was: for the order of the grants
// and for the history entry, which ledger.DeliveryTransition builds from
// the records before and after.
var deliveryGrantColumns = []string{
	"state", "attempts", "lease_seq", "lease_agent", "lease_incarnation", "lease_token",
	"lease_granted_at", "lease_expires_at", "available_at", "ended_lease_token", "ended_lease_seq",
	"ended_lease_op", "ended_lease_at", "last_failure_kind", "last_failure_message",
	"last_failure_permanent", "last_failure_agent", "last_failure_incarnation", "last_failure_at",
	"updated_at", "version",
}

// deliveryGrantIndexes are the positions of deliveryGrantColumns among a
// delivery row's columns. Computed once; never written.
var deliveryGrantIndexes = columnIndexes((&deliveryRow{}).columns(), deliveryGrantColumns)

// outboxGrantSet expresses ledger.OutboxEntry.Grant in SQL. Parameters: $1
// now, $4 worker, $5 expiry.
const outboxGrantSet = `
	attempts = d.attempts + 1,
	claim_seq = d.claim_seq + 1,
	claim_worker = $4,
	claim_token = granted.token,
	claim_claimed_at = $1,
	claim_expires_at = $5,
	ended_claim_token = NULL,
	ended_claim_seq = NULL,
	ended_claim_op = NULL,
	ended_claim_at = NULL,
	updated_at = $1,
	version = d.version + 1`

// outboxGrantColumns is deliveryGrantColumns for outboxGrantSet.
var outboxGrantColumns = []string{
	"attempts", "claim_seq", "claim_worker", "claim_token", "claim_claimed_at", "claim_expires_at",
	"ended_claim_token", "ended_claim_seq", "ended_claim_op", "ended_claim_at", "updated_at", "version",
}

// outboxGrantIndexes are the positions of outboxGrantColumns among an
// outbox row's columns. Computed once; never written.
var outboxGrantIndexes = columnIndexes((&outboxRow{}).columns(), outboxGrantColumns)

// grantTemplate picks up to $2 rows of table %[1]s matching %[2]s in order
// %[3]s, skipping rows other callers hold, pairs them with the tokens in
// $3, and applies the grant %[4]s to them, all in one statement, returning
// the columns %[5]s. %[6]s names extra picked columns carried through to
// RETURNING as they were before the grant (see grant in newQueries): the
// columns the grant writes, from which the caller rebuilds the record as
// it was, and, for the claims, enqueue_seq, which is no field of the
// record, and with which Outbox.claim restores ClaimPending's order.
const grantTemplate = `
WITH picked AS (
	SELECT id%[6]s FROM %[1]s
	WHERE %[2]s
	ORDER BY %[3]s
	LIMIT $2
	FOR UPDATE SKIP LOCKED
), granted AS (
	SELECT p.*, t.token
	FROM (SELECT picked.*, row_number() OVER () AS n FROM picked) AS p
	JOIN unnest($3::text[]) WITH ORDINALITY AS t(token, n) ON t.n = p.n
)
UPDATE %[1]s AS d SET %[4]s
FROM granted
WHERE d.id = granted.id
RETURNING %[5]s`

// queries holds every statement of one store, for one schema.
type queries struct {
	getDelivery, lockDelivery, deliveriesByID      string
	insertDelivery, updateDelivery, listDeliveries string
	// lease[byTargets][byCeremony] grants offerable deliveries; the
	// filters take $10 (targets) and then the next number (ceremony).
	lease                                     [2][2]string
	reclaimable, expirable, ceremonyOpen      string
	supersedable                              string
	ensureFence, lockFence, setFence          string
	getEntry, lockEntry, entriesByID          string
	insertEntry, updateEntry                  string
	findPending, findRetryReady               string
	claimPending, claimRetryReady             string
	migrationsTableExists, appliedMigrations  string
	recordMigration, createSchema, advisoryXL string

	// insertEntryAt is insertEntry with an explicit enqueue_seq as the
	// last parameter; reserveEnqueueSeqs takes $2 values from the
	// sequence named $1 (enqueueSeqName). See Outbox.enqueue.
	insertEntryAt, reserveEnqueueSeqs, enqueueSeqName string

	// The history (history.go): the inserts of a record that also write
	// its creation entry when they insert it, the multi-row inserts of
	// entries, and the reads.
	insertDeliveryLogged, insertEntryLogged, insertEntryAtLogged string
	insertDeliveryHistory, insertEntryHistory                    string
	deliveryHistory, entryHistory                                string

	// The counts (stats.go): stats[byTarget][byCeremony] and outboxStats
	// read them; add* change count rows, drop* delete the rows that
	// reached zero.
	stats                                 [2][2]string
	outboxStats                           string
	addDeliveryCounts, dropDeliveryCounts string
	addOutboxCounts, dropOutboxCounts     string
}

// newQueries builds the statements for schema, which New has validated.
func newQueries(schema string) *queries {
	s := pgx.Identifier{schema}.Sanitize()
	deliveries, fences, outbox := s+".deliveries", s+".target_fences", s+".outbox_entries"
	deliveryHistory, entryHistory := s+".delivery_history", s+".outbox_entry_history"
	dcols := columnNames((&deliveryRow{}).columns())
	ocols := columnNames((&outboxRow{}).columns())

	selectFrom := func(cols []string, table string) string {
		return "SELECT " + strings.Join(cols, ", ") + " FROM " + table
	}
	// sweep selects the next batch of up to $2 rows after the keyset $1,
	// locked (never skipped: a sweep must not miss rows), in id order, for
	// a sweep that applies the state machine in Go.
	sweep := func(where string) string {
		return selectFrom(dcols, deliveries) + " WHERE " + where + " AND id > $1 ORDER BY id LIMIT $2 FOR UPDATE"
	}
	// grant returns a grant statement that also returns the columns
	// carried as they were before the grant, after the new record's.
	grant := func(table, where, order, set string, cols, carried []string) string {
		picked, returning := "", qualified("d", cols)
		for _, c := range carried {
			picked += ", " + c + " AS was_" + c
			returning += ", granted.was_" + c
		}
		return fmt.Sprintf(grantTemplate, table, where, order, set, returning, picked)
	}
	claimCarried := append([]string{"enqueue_seq"}, outboxGrantColumns...)

	q := &queries{
		getDelivery:    selectFrom(dcols, deliveries) + " WHERE id = $1",
		lockDelivery:   selectFrom(dcols, deliveries) + " WHERE id = $1 FOR UPDATE",
		deliveriesByID: selectFrom(dcols, deliveries) + " WHERE id = ANY($1::text[])",
		insertDelivery: insert(deliveries, dcols),
		updateDelivery: update(deliveries, dcols),
		listDeliveries: selectFrom(dcols, deliveries) + ` WHERE id > $1
			AND (cardinality($2::text[]) = 0 OR target = ANY($2::text[]))
			AND ($3::text IS NULL OR ceremony = $3::text)
			AND (cardinality($4::text[]) = 0 OR state = ANY($4::text[]))
			ORDER BY id LIMIT $5`,
		// The incarnation rule mirrors ledger.Delivery.HeldByOtherIncarnation.
		reclaimable:  sweep(`state = 'leased' AND lease_agent = $3 AND lease_incarnation <> $4`),
		expirable:    sweep(expirableWhere),
		ceremonyOpen: sweep(openWhere + ` AND ceremony = $3`),
		supersedable: sweep(supersedableWhere + ` AND target = $3`),

		ensureFence: "INSERT INTO " + fences + " (target) VALUES ($1) ON CONFLICT (target) DO NOTHING",
		lockFence:   "SELECT highest FROM " + fences + " WHERE target = $1 FOR UPDATE",
		setFence:    "UPDATE " + fences + " SET highest = $2 WHERE target = $1",

		getEntry:        selectFrom(ocols, outbox) + " WHERE id = $1",
		lockEntry:       selectFrom(ocols, outbox) + " WHERE id = $1 FOR UPDATE",
		entriesByID:     selectFrom(ocols, outbox) + " WHERE id = ANY($1::text[])",
		insertEntry:     insert(outbox, ocols),
		updateEntry:     update(outbox, ocols),
		findPending:     selectFrom(ocols, outbox) + " WHERE " + pendingWhere + " ORDER BY " + pendingOrder + " LIMIT $1",
		findRetryReady:  selectFrom(ocols, outbox) + " WHERE " + retryReadyWhere + " ORDER BY " + retryOrder + " LIMIT $2",
		claimPending:    grant(outbox, pendingWhere+" AND "+unclaimedWhere, pendingOrder, outboxGrantSet, ocols, claimCarried),
		claimRetryReady: grant(outbox, retryReadyWhere+" AND "+unclaimedWhere, retryOrder, outboxGrantSet, ocols, claimCarried),

		createSchema: "CREATE SCHEMA IF NOT EXISTS " + s,
		advisoryXL:   "SELECT pg_catalog.pg_advisory_xact_lock($1)",
		migrationsTableExists: `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables
			WHERE schemaname = $1 AND tablename = 'schema_migrations')`,
		appliedMigrations: "SELECT version FROM " + s + ".schema_migrations ORDER BY version",
		recordMigration:   "INSERT INTO " + s + ".schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)",

		insertEntryAt: insert(outbox, append(slices.Clip(ocols), "enqueue_seq")),
		// The sequence's name is a parameter (a regclass) rather than a
		// string literal in the statement, so it needs no quoting.
		reserveEnqueueSeqs: "SELECT pg_catalog.nextval($1::regclass) FROM pg_catalog.generate_series(1, $2::integer)",
		enqueueSeqName:     s + ".outbox_entries_enqueue_seq",

		insertDeliveryHistory: insertHistory(deliveryHistory),
		insertEntryHistory:    insertHistory(entryHistory),
		deliveryHistory:       readHistory(deliveries, deliveryHistory),
		entryHistory:          readHistory(outbox, entryHistory),
	}
	q.insertDeliveryLogged = insertLogged(q.insertDelivery, deliveryHistory, len(dcols))
	q.insertEntryLogged = insertLogged(q.insertEntry, entryHistory, len(ocols))
	q.insertEntryAtLogged = insertLogged(q.insertEntryAt, entryHistory, len(ocols)+1)
	statsQueries(q, deliveries, s+".delivery_counts", outbox, s+".outbox_counts")
	for _, byTargets := range []bool{false, true} {
		for _, byCeremony := range []bool{false, true} {
			where, next := offerableWhere, 10
			if byTargets {
				where += fmt.Sprintf(" AND target = ANY($%d::text[])", next)
				next++
			}
			if byCeremony {
				where += fmt.Sprintf(" AND ceremony = $%d", next)
			}
			q.lease[b2i(byTargets)][b2i(byCeremony)] = grant(deliveries, where, offerableOrder, deliveryGrantSet, dcols, deliveryGrantColumns)
		}
	}
	return q
}

// insert returns an INSERT of every column that does nothing when the ID
// is taken; the caller tells by the rows affected.
func insert(table string, cols []string) string {
	return "INSERT INTO " + table + " (" + strings.Join(cols, ", ") + ") VALUES (" +
		placeholders(1, len(cols)) + ") ON CONFLICT (id) DO NOTHING"
}

// historyColumns are the columns of a history table, in the order of
// historyRows' arrays and historyArgs.
const historyColumns = "id, seq, op, from_state, to_state, outcome, actor, reason, at"

// historyValues are the values of historyColumns from the names of the
// same columns (unnest's or parameters): empty strings are stored as NULL.
const historyValues = "%s, %s, %s, NULLIF(%s, ''), %s, %s, NULLIF(%s, ''), NULLIF(%s, ''), %s"

// insertHistory returns the insert of many history rows, one array per
// column (see historyRows).
func insertHistory(table string) string {
	return "INSERT INTO " + table + " (" + historyColumns + ") SELECT " +
		fmt.Sprintf(historyValues, "id", "seq", "op", "from_state", "to_state", "outcome", "actor", "reason", "at") +
		` FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
			$9::timestamptz[]) AS u(id, seq, op, from_state, to_state, outcome, actor, reason, at)`
}

// insertLogged wraps insert, a record's INSERT ... ON CONFLICT DO NOTHING
// with n parameters, so that it also writes the record's creation entry
// into table, from the parameters after the record's (historyArgs), when
// and only when it inserts the record: the rows affected then still say
// whether it did, and an enqueue costs no round trip more.
func insertLogged(insert, table string, n int) string {
	p := func(i int) string { return fmt.Sprintf("$%d", n+i) }
	return "WITH inserted AS (" + insert + " RETURNING id) INSERT INTO " + table + " (" + historyColumns + ") SELECT " +
		fmt.Sprintf(historyValues, "id", p(1)+"::bigint", p(2)+"::text", p(3)+"::text", p(4)+"::text",
			p(5)+"::text", p(6)+"::text", p(7)+"::text", p(8)+"::timestamptz") + " FROM inserted"
}

// readHistory returns the history of the record $1 of table: no row when
// there is no such record, one row of NULLs when it has no history rows,
// else its rows in order.
func readHistory(table, history string) string {
	return "SELECT h.seq, h.op, h.from_state, h.to_state, h.outcome, h.actor, h.reason, h.at FROM " +
		table + " AS r LEFT JOIN " + history + " AS h ON h.id = r.id WHERE r.id = $1 ORDER BY h.seq"
}

// update returns the write-back of a whole record: $1 the ID, $2 the
// version the caller read (under its row lock, so the check is a second
// guard, never the first), then every column but id. cols must start with
// id.
func update(table string, cols []string) string {
	return "UPDATE " + table + " SET (" + strings.Join(cols[1:], ", ") + ") = (" +
		placeholders(3, len(cols)-1) + ") WHERE id = $1 AND version = $2"
}

// updateArgs returns the arguments of an update statement for a row whose
// column pointers are ptrs (id first).
func updateArgs(oldVersion int64, ptrs []any) []any {
	args := make([]any, 0, len(ptrs)+1)
	args = append(args, ptrs[0], oldVersion)
	return append(args, ptrs[1:]...)
}

func placeholders(from, n int) string {
	ps := make([]string, n)
	for i := range ps {
		ps[i] = fmt.Sprintf("$%d", from+i)
	}
	return strings.Join(ps, ", ")
}

func qualified(alias string, cols []string) string {
	qs := make([]string, len(cols))
	for i, c := range cols {
		qs[i] = alias + "." + c
	}
	return strings.Join(qs, ", ")
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
