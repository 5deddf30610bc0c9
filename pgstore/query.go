package pgstore

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/leaseledger/ledger"
)

// This file is the store's SQL (retention's two statements sit beside
// their method in purge.go, and the leads' in lead.go). Every statement is built once, in
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
	// offerableWhere mirrors storekit.Delivery.Offerable: a Leased delivery's
	// available_at is its lease expiry (a CHECK constraint holds it there).
	offerableWhere = `state IN ('offered', 'leased') AND available_at <= $1 AND attempts < max_attempts`
	// offerableOrder mirrors storekit.OfferedBefore.
	offerableOrder = `available_at, id`
	// expirableWhere mirrors storekit.Delivery.Expirable (a sweep: $3 is now).
	expirableWhere = `((state = 'leased' AND lease_expires_at <= $3) OR (state = 'acknowledged' AND ack_deadline <= $3))`
	// reclaimableWhere: the leases of agent $3 held by another incarnation
	// than $4, which the incarnation rule takes back.
	reclaimableWhere = `state = 'leased' AND lease_agent = $3 AND lease_incarnation <> $4`
	// reclaimFirst (on the deliveries table %[1]s) holds a lease
	// statement back while agent $4 has leases under another incarnation
	// than $5 (reclaimableWhere, read on either side of $5 as the
	// reclaimable statement does): the incarnation rule takes those back
	// before anything is granted, and Lease's one round trip (leaseTrip),
	// which sends the grant before it knows, must then grant nothing.
	// Uncorrelated, each is one probe of deliveries_leased_idx, run once.
	reclaimFirst = `NOT EXISTS (SELECT FROM %[1]s WHERE state = 'leased' AND lease_agent = $4 AND lease_incarnation < $5)` +
		` AND NOT EXISTS (SELECT FROM %[1]s WHERE state = 'leased' AND lease_agent = $4 AND lease_incarnation > $5)`
	// openWhere: every open state.
	openWhere = `state IN ('offered', 'leased', 'acknowledged')`
	// supersedableWhere mirrors storekit.Delivery.Supersedable.
	supersedableWhere = `state IN ('offered', 'leased')`
	// queuedWhere mirrors storekit.Delivery.Queued: a target's queue, which
	// deliveries_offerable_target_idx holds by target.
	queuedWhere = `state IN ('offered', 'leased')`

	// pendingWhere mirrors OutboxEntry.PendingClaimable, less the claim
	// (see claimTemplate). pendingOrder is OutboxEntry.PendingBefore with ties
	// on created_at broken by enqueue order (enqueue_seq), as pendingBefore
	// in claim.go is in Go: a batch shares one created_at, and ids are
	// hashes. enqueue_seq comes from a sequence, so the id is not needed.
	pendingWhere = `status = 'pending'`
	pendingOrder = `created_at, enqueue_seq`
	// retryReadyWhere and retryOrder mirror OutboxEntry.RetryReady and
	// RetryBefore.
	retryReadyWhere = `status IN ('retry_scheduled', 'deferred') AND next_attempt_at <= $1`
	retryOrder      = `next_attempt_at, id`
)

// idsIn is the set of IDs $1 as a subquery, for "id IN "+idsIn, and
// unnestIDs wraps the unnest of $1 and the columns beside it the same
// way: every statement that finds records by ID reaches them from the
// IDs, one primary key lookup each, whatever the planner believes of the
// table. pgx prepares every statement and PostgreSQL may keep a generic
// plan of it, costed once; a table that has never been analysed (a new
// deployment, a table just truncated) is costed as ten pages, and
// "id = ANY($1)", or a join to an unnest of $1 (ten rows to a generic
// plan), is then cheaper read whole and hashed than looked up, and stays
// so in the cached plan as the table grows. A LIMIT whose count is not a
// constant is taken by the planner to keep a tenth of its input: one row
// of the ten, which a nested loop into the primary key serves best. The
// count is the array's length, so the LIMIT keeps every ID; with the
// array bound (a custom plan) the planner sees its true length. Tested by
// TestExplainGenericPlansOnUnanalysedTables.
const idsIn = "(SELECT i.id FROM unnest($1::text[]) AS i(id) LIMIT cardinality($1::text[]))"

// unnestIDs returns the unnest of params (whose first is $1, the IDs) as
// the rows u(aliases), driven as idsIn is.
func unnestIDs(params, aliases []string) string {
	return "(SELECT * FROM unnest(" + strings.Join(params, ", ") + ") AS u(" + strings.Join(aliases, ", ") +
		") LIMIT cardinality($1::text[])) AS u"
}

// deliveryGrantSet expresses storekit.Delivery.Grant in SQL (the right-hand
// sides read the row as it was). Parameters: $1 now, $4 agent, $5
// incarnation, $6 expiry, $7..$9 the failure kind, message and permanence
// that Grant records when it takes over an expired lease (probed from
// Grant itself, see grantProbe). The token comes from the granted CTE. A
// test compares the result with Grant field by field.
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

// outboxGrantSet expresses storekit.OutboxEntry.Grant in SQL. Parameters: $1
// now, $4 worker, $5 expiry. Attempts stops at ledger.MaxCount, the
// integer column's largest value, as Grant does: one more would fail the
// statement, and with it every claim behind the entry.
const outboxGrantSet = `
	attempts = LEAST(d.attempts, 2147483646) + 1,
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

// pairTokens closes a grant statement's picked CTE and pairs each picked
// row with a token of $3, one each, in the granted CTE; the updated CTE
// opens next. The n-th picked row takes the array's n-th element: a join
// with unnest($3) instead let the planner, for a generic plan, rescan the
// whole array for every picked row (a nested loop, 10,000 comparisons for
// a grant of 100) once the UPDATE found its rows by position. A row past
// the array's end, which the LIMIT of $2 (the number of tokens) leaves
// none of, gets no token and is not granted.
//
// A picked row carries its tuple's position (ctid AS tid) beside its ID,
// and the UPDATE finds it there (grantedRow) rather than again through
// the primary key, which a grant of 100 spent 400 buffer hits on. The
// position is that of the version the pick locked, which no one else can
// change before the statement ends.
//
// When the pick had to lock a version newer than the statement's
// snapshot (another transaction changed the row after the snapshot,
// before the lock, and it still qualified), the UPDATE, which reads by
// that snapshot, does not see that version and leaves the row alone: the
// grant returns one record fewer, and the row, unchanged, is free again
// at commit. The ID is matched too, so a position can never name another
// record.
const pairTokens = `), granted AS (
	SELECT p.*, ($3::text[])[p.n] AS token
	FROM (SELECT picked.*, row_number() OVER () AS n FROM picked) AS p
	WHERE p.n <= cardinality($3::text[])
), updated AS (`

// grantedRow is the condition by which a grant's UPDATE finds the rows
// it picked (see pairTokens).
const grantedRow = `d.ctid = granted.tid AND d.id = granted.id`

// leaseTemplate is the lease statement: storekit.Delivery.Grant in SQL
// (deliveryGrantSet) over up to $2 offerable rows of %[1]s matching %[2]s
// in delivery order (offerableOrder), skipping rows other callers hold,
// each paired with a token of $3. It appends each grant's history entry
// to the record's own (migrations/0012) when $14 is true, and returns the
// granted records (%[3]s, unqualified column names), each followed by the
// position of the version written (position.go), in delivery order: the
// order of the records as they were offered, which the grant changed.
//
// One statement instead of an UPDATE and a read-back of the old values:
// a lease's cost is then one round trip and the rows it writes, and a
// batch of 100 costs little more than a batch of 1. The history entry is storekit.DeliveryTransition of a grant, whose
// only varying parts are the state the record was in and, for a grant
// over an expired lease, the reason, probed from the state machine (see
// leaseReason). Parameters beside deliveryGrantSet's, the entry's parts
// as JSON text (leaseEntryArgs): $10 the operation, $11 the new state, the
// outcome and the actor, $12 the time, $13 that reason; $14 whether
// history is on; the filters take $15 (targets) and the next number
// (ceremony). The entry is put together as text and cast once: Citus
// refuses a function that is not immutable over a column in an UPDATE,
// as jsonb_build_array is, and the record's state and version are the
// only parts that come from the row. The conformance suite and the
// differential test, which compares every history with memstore's,
// prove it equal to the Go transition.
const leaseTemplate = `
WITH picked AS (
	SELECT id, ctid AS tid, state AS was_state, available_at AS was_available_at FROM %[1]s
	WHERE %[2]s
	ORDER BY ` + offerableOrder + `
	LIMIT $2
	FOR UPDATE SKIP LOCKED
` + pairTokens + `
	UPDATE %[1]s AS d SET ` + deliveryGrantSet + `,
	history = CASE WHEN $14::boolean THEN coalesce(d.history, '[]'::jsonb) || ('[[' || (d.version + 1)::text || ',' ||
		$10::text || ',"' || d.state || '",' || $11::text || ',' ||
		CASE WHEN d.state = 'leased' THEN $13::text ELSE 'null' END || ',' || $12::text || ']]')::jsonb ELSE d.history END
	FROM granted
	WHERE ` + grantedRow + `
	RETURNING %[4]s, d.ctid AS tid, granted.was_state, granted.was_available_at
)
SELECT %[3]s, tid FROM updated ORDER BY was_available_at, id`

// claimSource is where a claim statement picks from: the entries
// matching where, in order, the key of that order as (at, seq, id) and
// the class the source comes in among the sources of one statement.
type claimSource struct {
	where, order string
	at, seq      string
	class        int
}

// claimPicks returns the CTEs that pick the candidates of src, named
// fresh_<n> and lapsed_<n>: up to $2 unclaimed entries in order, and
// every entry whose claim ran out at $1 (migration 0008 indexes both), each
// as (id, tid, class, at, seq), locked, skipping rows other callers hold. The
// first $2 of all candidates in (class, at, seq, id) order are then exactly
// the first $2 claimable entries, though only the unclaimed head of the
// queue and the lapsed claims were read.
func claimPicks(table string, n int, src claimSource) (ctes, union string) {
	cols := fmt.Sprintf("id, ctid AS tid, %d AS class, %s AS at, %s AS seq", src.class, src.at, src.seq)
	ctes = fmt.Sprintf(`fresh_%[1]d AS (
	SELECT %[2]s FROM %[3]s
	WHERE %[4]s AND claim_token IS NULL
	ORDER BY %[5]s
	LIMIT $2
	FOR UPDATE SKIP LOCKED
), lapsed_%[1]d AS (
	SELECT %[2]s FROM %[3]s
	WHERE claim_token IS NOT NULL AND claim_expires_at <= $1 AND %[4]s
	FOR UPDATE SKIP LOCKED
)`, n, cols, table, src.where, src.order)
	union = fmt.Sprintf("SELECT * FROM fresh_%[1]d UNION ALL SELECT * FROM lapsed_%[1]d", n)
	return ctes, union
}

// claimTemplate is leaseTemplate for the outbox: storekit.OutboxEntry.Grant
// in SQL (outboxGrantSet) over up to $2 rows picked by %[2]s (the CTEs of
// claimPicks) from %[3]s (their union), in (class, at, seq, id) order,
// each paired with a token of $3, the history entries appended by the
// same statement when $8 is true, and the claimed entries (%[4]s), each
// followed by the position of the version written, returned in order
// %[6]s, which a claim does not change. A claim changes neither the status
// nor the last error, so its entry (storekit.EntryTransition) goes from
// the status to itself and has no reason. Parameters beside
// outboxGrantSet's, the entry's parts as JSON text (claimEntryArgs): $6
// the operation, $7 the outcome, the actor (the worker), the reason and
// the time; $8 whether history is on. The entry is put together as
// leaseTemplate's is. %[1]s is the table, %[5]s its columns qualified by
// d.
const claimTemplate = `
WITH %[2]s, picked AS (
	SELECT id, tid FROM (%[3]s) AS c
	ORDER BY class, at, seq, id
	LIMIT $2
` + pairTokens + `
	UPDATE %[1]s AS d SET ` + outboxGrantSet + `,
	history = CASE WHEN $8::boolean THEN coalesce(d.history, '[]'::jsonb) || ('[[' || (d.version + 1)::text || ',' ||
		$6::text || ',"' || d.status || '","' || d.status || '",' || $7::text || ']]')::jsonb ELSE d.history END
	FROM granted
	WHERE ` + grantedRow + `
	RETURNING %[5]s, d.enqueue_seq, d.ctid AS tid
)
SELECT %[4]s, tid FROM updated ORDER BY %[6]s`

// dueOrder orders what ClaimDue returns: retry-ready entries first, as
// retryOrder, then pending ones, as pendingOrder.
const dueOrder = `status = 'pending', CASE WHEN status = 'pending' THEN created_at ELSE next_attempt_at END,
	CASE WHEN status = 'pending' THEN enqueue_seq END, id`

// findTemplate is FindPending and FindRetryReady: up to %[5]s rows of
// %[2]s matching %[3]s, claimed or not, in order %[4]s. The unclaimed ones
// come from the index the claims read, the claimed ones from the index of
// claims (migrations/0008).
const findTemplate = `SELECT %[1]s FROM (
	(SELECT %[1]s, enqueue_seq FROM %[2]s WHERE %[3]s AND claim_token IS NULL ORDER BY %[4]s LIMIT %[5]s)
	UNION ALL
	(SELECT %[1]s, enqueue_seq FROM %[2]s WHERE claim_token IS NOT NULL AND %[3]s)
) AS f ORDER BY %[4]s LIMIT %[5]s`

// queries holds every statement of one store, for one schema.
type queries struct {
	getDelivery, lockDelivery, deliveriesByID string
	updateDelivery, listDeliveries            string
	// deliveryIDsIn and entryIDsIn read which of the IDs $1 are held
	// (FindDeliveryIDs, FindEntryIDs).
	deliveryIDsIn, entryIDsIn string
	// lease[byTargets][byCeremony] grants offerable deliveries (see
	// leaseTemplate).
	lease [2][2]string
	// grantFailure and grantReason are what a grant over an expired lease
	// records, probed from the state machine (grantProbe): the lease
	// statements' parameters $7 to $9 and $13.
	grantFailure                              ledger.Failure
	grantReason                               string
	reclaimable, expirable, ceremonyOpen      string
	supersedable                              string
	ensureFence, lockFence, setFence          string
	getEntry, lockEntry, entriesByID          string
	updateEntry                               string
	findPending, findRetryReady               string
	claimPending, claimRetryReady, claimDue   string
	migrationsTableExists, appliedMigrations  string
	recordMigration, createSchema, advisoryXL string

	// reserveEnqueueSeqs takes $2 values from the sequence named $1
	// (enqueueSeqName). See Outbox.enqueue.
	reserveEnqueueSeqs, enqueueSeqName string

	// The reads of history (history.go).
	deliveryHistory, entryHistory string

	// The counts (stats.go): stats[byTarget][byCeremony] and outboxStats
	// read them; add* change count rows, drop* delete the rows that
	// reached zero.
	stats                                 [2][2]string
	outboxStats                           string
	addDeliveryCounts, dropDeliveryCounts string
	addOutboxCounts, dropOutboxCounts     string

	// browse holds the reads of operators' tools (browse.go).
	browse browseQueries

	// Bounded queues (bound.go): the length of target $1's queue,
	// counted up to $2; its $2 oldest Offered rows, locked.
	queueLength, oldestOffered string

	// Redrive (redrive.go): the insert of one new record, with
	// creation_implied false and its creation entry as its history (the
	// parameter after the record's columns and metadata); the
	// redrivable records after the position ($1, $2), ended before $3,
	// of the states $4 and targets (providers) $5, up to $6, locked.
	insertDelivery, insertEntry             string
	redrivableDeliveries, redrivableEntries string
	// redrivableEntriesByKey is redrivableEntries for one idempotency
	// key, $8, and the ID it fixes, $7.
	redrivableEntriesByKey string

	// The enqueues of small batches (enqueue_arrays.go), by notify: for
	// entries also by whether they take enqueue_seq values ([seq][notify]).
	enqueueDeliveries [2]arrayStatement
	enqueueEntries    [2][2]arrayStatement
	// deliveryArrays and entryArrays are the element types of their
	// arrays, in the order of enqueueColumns.
	deliveryArrays, entryArrays []uint32
}

// newQueries builds the statements for schema, which New has validated.
func newQueries(schema string) *queries {
	s := pgx.Identifier{schema}.Sanitize()
	deliveries, fences, outbox := s+".deliveries", s+".target_fences", s+".outbox_entries"
	deliveryHistory, entryHistory := s+".delivery_history", s+".outbox_entry_history"
	// Reads return every column; the write-backs write the columns a
	// transition can change, which are all but the ones enqueue alone
	// writes (see row.go).
	dcols := columnNames((&deliveryRow{}).readColumns())
	ocols := columnNames((&outboxRow{}).readColumns())
	dwrite := dcols[:len(dcols)-readOnlyColumns]
	owrite := ocols[:len(ocols)-readOnlyColumns]

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
	// The claim sources: pending entries, oldest first, and retry-ready
	// ones, earliest due first, which come first when both are claimed.
	pendingSource := claimSource{where: pendingWhere, order: pendingOrder, at: "created_at", seq: "enqueue_seq", class: 1}
	retryReadySource := claimSource{where: retryReadyWhere, order: retryOrder, at: "next_attempt_at", seq: "0::bigint", class: 0}
	// claim returns the claim statement over srcs, whose entries it
	// returns in order.
	claim := func(order string, srcs ...claimSource) string {
		var ctes, unions []string
		for n, src := range srcs {
			c, u := claimPicks(outbox, n, src)
			ctes, unions = append(ctes, c), append(unions, u)
		}
		return fmt.Sprintf(claimTemplate, outbox, strings.Join(ctes, ", "), strings.Join(unions, " UNION ALL "),
			strings.Join(ocols, ", "), qualified("d", ocols), order)
	}

	q := &queries{
		getDelivery:    selectFrom(dcols, deliveries) + " WHERE id = $1",
		lockDelivery:   selectFrom(dcols, deliveries) + " WHERE id = $1 FOR UPDATE",
		deliveriesByID: selectFrom(dcols, deliveries) + " WHERE id IN " + idsIn,
		deliveryIDsIn:  "SELECT id FROM " + deliveries + " WHERE id IN " + idsIn,
		entryIDsIn:     "SELECT id FROM " + outbox + " WHERE id IN " + idsIn,
		updateDelivery: update(deliveries, dwrite),
		listDeliveries: selectFrom(dcols, deliveries) + ` WHERE id > $1
			AND (cardinality($2::text[]) = 0 OR target = ANY($2::text[]))
			AND ($3::text IS NULL OR ceremony = $3::text)
			AND (cardinality($4::text[]) = 0 OR state = ANY($4::text[]))
			ORDER BY id LIMIT $5`,
		// The incarnation rule mirrors storekit.Delivery.HeldByOtherIncarnation.
		// Every Lease runs it, and it must not read the leases the calling
		// incarnation holds, or a Lease would pay for all of them to take
		// back nothing. lease_incarnation <> $4 cannot bound an index scan,
		// and the planner, left to choose, may read the agent's leases
		// whole or even walk the primary key in id order; so the IDs are
		// gathered first from the two ranges of deliveries_leased_idx on
		// either side of $4, then looked up by primary key and locked in
		// id order. The outer query repeats no condition, which the planner
		// would serve from deliveries_leased_idx again: the sweep checks
		// each locked record in Go (HeldByOtherIncarnation) anyway, and
		// leaves one that changed meanwhile alone.
		reclaimable: selectFrom(dcols, deliveries) + ` WHERE id = ANY(ARRAY(
			SELECT id FROM ` + deliveries + ` WHERE ` + reclaimableWhere + ` AND lease_incarnation < $4 AND id > $1
			UNION ALL
			SELECT id FROM ` + deliveries + ` WHERE ` + reclaimableWhere + ` AND lease_incarnation > $4 AND id > $1
		)) ORDER BY id LIMIT $2 FOR UPDATE`,
		expirable:    sweep(expirableWhere),
		ceremonyOpen: sweep(openWhere + ` AND ceremony = $3`),
		supersedable: sweep(supersedableWhere + ` AND target = $3`),

		ensureFence: "INSERT INTO " + fences + " (target) VALUES ($1) ON CONFLICT (target) DO NOTHING",
		lockFence:   "SELECT highest FROM " + fences + " WHERE target = $1 FOR UPDATE",
		setFence:    "UPDATE " + fences + " SET highest = $2 WHERE target = $1",

		getEntry:    selectFrom(ocols, outbox) + " WHERE id = $1",
		lockEntry:   selectFrom(ocols, outbox) + " WHERE id = $1 FOR UPDATE",
		entriesByID: selectFrom(ocols, outbox) + " WHERE id IN " + idsIn,
		updateEntry: update(outbox, owrite),
		// The finds return claimed entries too: the unclaimed ones in
		// order from the claims' own index, and the claimed ones, work in
		// hand, through the index of claims.
		findPending:     fmt.Sprintf(findTemplate, strings.Join(ocols, ", "), outbox, pendingWhere, pendingOrder, "$1"),
		findRetryReady:  fmt.Sprintf(findTemplate, strings.Join(ocols, ", "), outbox, retryReadyWhere, retryOrder, "$2"),
		claimPending:    claim(pendingOrder, pendingSource),
		claimRetryReady: claim(retryOrder, retryReadySource),
		claimDue:        claim(dueOrder, retryReadySource, pendingSource),

		createSchema: "CREATE SCHEMA IF NOT EXISTS " + s,
		advisoryXL:   "SELECT pg_catalog.pg_advisory_xact_lock($1)",
		migrationsTableExists: `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables
			WHERE schemaname = $1 AND tablename = 'schema_migrations')`,
		appliedMigrations: "SELECT version FROM " + s + ".schema_migrations ORDER BY version",
		recordMigration:   "INSERT INTO " + s + ".schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)",

		// The sequence's name is a parameter (a regclass) rather than a
		// string literal in the statement, so it needs no quoting.
		reserveEnqueueSeqs: "SELECT pg_catalog.nextval($1::regclass) FROM pg_catalog.generate_series(1, $2::integer)",
		enqueueSeqName:     s + ".outbox_entries_enqueue_seq",

		deliveryHistory: readHistory(deliveries, deliveryHistory),
		entryHistory:    readHistory(outbox, entryHistory),
	}
	// The count's ORDER BY is the index's own order: without it, the
	// planner may read a target that holds most of the open rows from
	// the start of the table, or through another index, instead of its
	// own range of deliveries_offerable_target_idx.
	q.queueLength = "SELECT count(*) FROM (SELECT 1 FROM " + deliveries + " WHERE target = $1 AND " + queuedWhere +
		" ORDER BY " + offerableOrder + " LIMIT $2) AS q"
	q.oldestOffered = selectFrom(dcols, deliveries) + " WHERE target = $1 AND state = 'offered' ORDER BY " + offerableOrder + " LIMIT $2 FOR UPDATE SKIP LOCKED"
	var dnames, onames []string
	dnames, q.deliveryArrays = enqueueColumns((&deliveryRow{}).columns())
	onames, q.entryArrays = enqueueColumns((&outboxRow{}).columns())
	for notify := range 2 {
		q.enqueueDeliveries[notify] = newArrayStatement(arrayInsert(deliveries, dnames, q.deliveryArrays, false, notify == 1))
		for seq := range 2 {
			q.enqueueEntries[seq][notify] = newArrayStatement(arrayInsert(outbox, onames, q.entryArrays, seq == 1, notify == 1))
		}
	}
	q.insertDelivery = "INSERT INTO " + deliveries + " (" + strings.Join(dcols, ", ") + ", creation_implied, history) VALUES (" +
		placeholders(1, len(dcols)) + fmt.Sprintf(", false, $%d::text::jsonb)", len(dcols)+1)
	q.insertEntry = "INSERT INTO " + outbox + " (" + strings.Join(ocols, ", ") + ", creation_implied, history) VALUES (" +
		placeholders(1, len(ocols)) + fmt.Sprintf(", false, $%d::text::jsonb)", len(ocols)+1)
	// Both walk the index of ended records (migrations/0004) from the
	// position on, the keyset (ended_at, id).
	redrivable := func(cols []string, table, state, filter string) string {
		return selectFrom(cols, table) + ` WHERE ended_at IS NOT NULL AND (ended_at, id) > ($1::timestamptz, $2::text)
			AND ended_at < $3 AND redriven_to IS NULL
			AND ` + state + ` = ANY($4::text[]) AND (cardinality($5::text[]) = 0 OR ` + filter + ` = ANY($5::text[]))
			ORDER BY ended_at, id LIMIT $6 FOR UPDATE`
	}
	q.redrivableDeliveries = redrivable(dcols, deliveries, "state", "target")
	q.redrivableEntries = redrivable(ocols, outbox, "status", "provider")
	// One key's entry: its ID is the key's (ledger.OutboxEntryIDFor),
	// $7, found through the primary key, not by walking every ended entry.
	q.redrivableEntriesByKey = strings.Replace(q.redrivableEntries, "WHERE ended_at IS NOT NULL", "WHERE id = $7 AND idempotency_key = $8 AND ended_at IS NOT NULL", 1)
	q.grantFailure, q.grantReason = grantProbe()
	q.browse = newBrowseQueries(schema, dcols, ocols)
	statsQueries(q, deliveries, s+".delivery_counts", outbox, s+".outbox_counts")
	for _, byTargets := range []bool{false, true} {
		for _, byCeremony := range []bool{false, true} {
			where, next := offerableWhere+" AND "+fmt.Sprintf(reclaimFirst, deliveries), 15
			if byTargets {
				where += fmt.Sprintf(" AND target = ANY($%d::text[])", next)
				next++
			}
			if byCeremony {
				where += fmt.Sprintf(" AND ceremony = $%d", next)
			}
			q.lease[b2i(byTargets)][b2i(byCeremony)] = fmt.Sprintf(leaseTemplate, deliveries, where,
				strings.Join(dcols, ", "), qualified("d", dcols))
		}
	}
	return q
}

// readHistory returns the history of the record $1 of table: no row when
// there is no such record, one row of NULLs when it has no rows in the
// history table, else those rows in order; every row also carries the
// record's own history column (migrations/0012), whether its creation is
// implied (migrations/0008) and when it was created.
func readHistory(table, history string) string {
	return "SELECT r.history, h.seq, h.op, h.from_state, h.to_state, h.outcome, h.actor, h.reason, h.at, r.creation_implied, r.created_at FROM " +
		table + " AS r LEFT JOIN " + history + " AS h ON h.id = r.id WHERE r.id = $1 ORDER BY h.seq"
}

// update returns the write-back of a whole record: $1 the ID, $2 the
// version the caller read (under its row lock, so the check is a second
// guard, never the first), then every column but id, then the history
// entries to append (historyLog.of; NULL for none). cols must start with
// id.
func update(table string, cols []string) string {
	return "UPDATE " + table + " SET (" + strings.Join(cols[1:], ", ") + ") = (" +
		placeholders(3, len(cols)-1) + "), " + historyAppend("", fmt.Sprintf("$%d::text", len(cols)+2)) +
		" WHERE id = $1 AND version = $2"
}

// updateArgs returns the arguments of an update statement for a row whose
// column pointers are ptrs (id first), appending the history entries
// hist (nil for none).
func updateArgs(oldVersion int64, ptrs []any, hist *string) []any {
	args := make([]any, 0, len(ptrs)+2)
	args = append(args, ptrs[0], oldVersion)
	args = append(args, ptrs[1:]...)
	return append(args, hist)
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
