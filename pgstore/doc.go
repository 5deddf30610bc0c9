// Package pgstore is the PostgreSQL store of both ledger contracts, for
// production workers on many machines, through pgx/v5.
//
// A Store is a ledger.Ledger and a ledger.BatchEnqueuer; its Outbox is a
// ledger.ClaimStore and a ledger.OutboxBatchEnqueuer over the same pool
// and schema. (One Go type cannot be both contracts: both have Enqueue and
// MarkFailed, with different signatures.) Both pass the public conformance
// suite in package ledgertest.
//
// # Setup
//
//	pool, err := pgxpool.New(ctx, os.Getenv("LEDGER_DATABASE_URL"))
//	store, err := pgstore.New(pool, pgstore.WithSchema("leaseledger"))
//	err = store.Migrate(ctx) // idempotent; safe from many processes at once
//	outbox := store.Outbox()
//
// Migrate creates the schema when it is missing and applies the embedded,
// versioned migrations (migrations/NNNN_name.sql) in one transaction under
// a transaction-scoped advisory lock, recording them in
// schema_migrations; a migration that builds indexes on large tables
// (CREATE INDEX CONCURRENTLY) runs statement by statement outside the
// transaction instead, so that writers go on. It refuses a schema that a
// newer build migrated (ErrNewerSchema). MigrationSQL gives the same SQL
// to teams that apply schema changes with their own tool, and
// MigrationStatus the applied and pending versions. Every statement names
// the schema, so the store works whatever the connection's search_path.
// It needs PostgreSQL 13 or newer.
//
// # The model
//
// SQL chooses which rows a call touches and in what order; the root
// package's pure transition functions decide what happens to them, so
// pgstore and memstore produce the same records and outcomes for the same
// calls. A single-record transition is one transaction that locks the row
// (SELECT ... FOR UPDATE), applies the state machine in Go and writes the
// new record back only when the call applied, re-checking the version it
// read; a call that does not apply writes nothing. Concurrent
// single-record transitions share such a transaction (see Group commit
// below). Lease and the claims
// are one statement each (FOR UPDATE SKIP LOCKED, then UPDATE ...
// RETURNING), so concurrent callers on any number of machines never get
// the same record; that statement is the grant transition written in SQL,
// and a test compares it with storekit.Delivery.Grant and
// storekit.OutboxEntry.Grant field by field. Sweeps (Expire, ExpireCeremony,
// Supersede and Lease's incarnation rule) lock their candidates in ID
// order in batches of 500 (FOR UPDATE, not SKIP LOCKED: a sweep waits for
// a row another call holds rather than miss it) and commit each batch on
// its own, so a large backlog never holds thousands of locks at once; when
// a batch fails, the batches before it stay applied and the next sweep
// picks up the rest. The Lease calls of one agent take turns on a
// transaction-scoped advisory lock, so that of two overlapping calls by
// different incarnations the later one takes back what the earlier one
// granted, as the incarnation rule asks.
//
// Every time is the caller's now, normalised to UTC microseconds; the
// store never reads the database clock or the wall clock for a decision.
// The outbox methods that carry no now stamp their timestamps with the
// clock of WithClock.
//
// # Transactions
//
// WithTx runs the store's calls inside the caller's pgx.Tx, so that an
// enqueue or a transition commits or rolls back with the caller's own
// writes (the transactional outbox). Each call then runs in a savepoint,
// every statement of it (reads and the clock read of WithDatabaseClock
// included); the store never commits or rolls back the caller's
// transaction, and a failed call leaves it usable.
//
//	tx, err := pool.Begin(ctx)
//	defer tx.Rollback(ctx)
//	// ... the caller's business writes on tx ...
//	_, err = store.WithTx(tx).Outbox().Enqueue(ctx, env)
//	err = tx.Commit(ctx)
//
// # Group commit
//
// A single-record transition mostly waits for its commit to be flushed.
// With group commit (WithGroupCommit, on by default), the transitions
// that many goroutines make at the same time are coalesced: the first
// caller to arrive leads a group, waits a short window
// (WithGroupCommitWindow) or until the group is full
// (WithGroupCommitMax), locks all its records in ID order, applies each
// call's step in arrival order exactly as it would apply alone, writes
// the changed records, their history and their counts back in one
// statement each, and commits once; every caller gets its own outcome
// and record. Under load, the next group fills while one commits, so the
// calls per second grow with the callers, not with the connections.
// There is no background goroutine. A group whose transaction fails runs
// each of its calls again on its own, so one bad call does not fail the
// others. A call whose context ends before its group is taken writes
// nothing; one whose context ends while its group runs returns an error
// and may have applied. Calls through WithTx never group.
//
// # Errors
//
// Business answers are outcomes, never errors. An error is ErrInvalid for
// a malformed call (nothing touched the database), ErrNotFound and
// ErrConflict where the contracts say so, ErrNotMigrated (which also
// matches ledger.ErrUnusable) when the schema or one of its tables does
// not exist, or a store failure wrapped as
// "pgstore: <operation>: ..." that still matches context.Canceled,
// context.DeadlineExceeded and *pgconn.PgError with errors.Is and
// errors.As. A call retries its transaction, a bounded number of times
// (WithMaxRetries), only after errors that cannot have applied anything:
// not sent at all (pgconn.SafeToRetry), serialization failure (40001) or
// deadlock (40P01); never inside a caller's transaction. A call whose
// context is cancelled or whose connection is lost returns an error and
// leaves no half-applied transition. When the answer to a COMMIT is lost
// (the connection dropped, a FATAL, a pooler's class 08 error) the
// completing calls (the transitions of a held delivery or claimed entry)
// read the row they wrote to learn the outcome and answer from it; only
// when the row cannot tell (it moved on since, or cannot be read) do they
// return an error saying the outcome is unknown. Then read the record
// (Get, FindByID) and compare it with what the call meant to write.
// Repeating the call is not enough for calls that end a record, which
// answer Ended the second time.
//
// Sweeps (Expire, ExpireCeremony, Supersede) commit in batches. When a
// batch fails, the result lists the IDs the earlier, committed batches
// changed, beside the error.
//
// # Wake-ups
//
// Workers poll; WithNotify and Listen let them poll at once when work
// arrives instead of up to a poll interval later. With WithNotify(true)
// the enqueue methods of both contracts run pg_notify in the transaction
// that inserts (only when they inserted something), so the notification
// is delivered when the work becomes visible, on commit. Listen holds one
// connection of its own that LISTENs, reconnects when it drops, and turns
// notifications into signals for dispatch.WithWake:
//
//	store, err := pgstore.New(pool, pgstore.WithNotify(true))
//	wake, err := store.Listen(ctx, pgstore.ChannelOutbox)
//	d, err := dispatch.NewDispatcher(store.Outbox(), emitter, dispatch.WithWake(wake))
//
// One channel serves all the loops of a process: a value wakes one idle
// loop. WithWakeInterval spaces the values, so that a steady rate of
// enqueues wakes a loop once per interval rather than once per enqueue,
// at the cost of latency (see DefaultWakeInterval).
//
// Notifications are hints: a lost one delays work by at most the poll
// interval. Both are off by default, and must stay off behind PgBouncer in
// transaction pooling mode, where LISTEN does not work.
//
// # History and stats
//
// Every applied transition of a delivery or an outbox entry appends its
// history entry to the record's own history column (migration 0012), in
// the UPDATE that writes the record: a rolled-back transition (a failed
// call, or the caller's transaction under WithTx) leaves no entry, a
// committed one always has its entry, and history costs no row, index
// entry or statement of its own. The creation's entry is implied by the
// record. Store.History and Outbox.EntryHistory read the entries (see
// ledger.Historian), together with any rows of delivery_history and
// outbox_entry_history, where entries were kept before migration 0012 and
// which migration 0013 moves into the records batch by batch; a purge
// deletes both with their record. WithoutHistory turns recording off.
//
// Store.Stats and Outbox.OutboxStats (see ledger.StatsReporter) count open
// records through the partial indexes on open rows, which the lease and
// claim statements read too, and terminal ones from count tables that
// every transition into a terminal state, and every purge, updates in its
// own transaction; a count is spread over 16 rows so that concurrent
// completions do not all wait on one. Their cost grows with the work in
// hand and the number of (target, ceremony) pairs that have ended records,
// never with the number of ended records themselves.
//
// # Leads
//
// Store and Outbox are a ledger.Elector over one table of named
// leadership leases (migration 0009), which dispatch.Sweeper uses so that
// of many processes one sweeps at a time. A lead is a row like every
// lease here: each call locks it, applies ledger.Lead's transition in Go
// and commits, so it works through PgBouncer in transaction pooling mode,
// and a holder that dies leaves a row whose expiry passes.
//
// # Guarantees and limits
//
// A record is durable (committed) when Enqueue returns without error, or
// when the caller commits under WithTx. Leases and claims are row state
// only: no session locks, no advisory session locks and no transaction
// outlive a call, and nothing depends on session state, so the store works
// through PgBouncer in transaction pooling mode (with prepared statements
// supported by PgBouncer 1.21 or newer, or a pool configured with
// pgx.QueryExecModeExec); Listen, the one exception, needs a session of
// its own. Delivery is at least once: a holder that stalls
// past its lease can still be working when another takes the delivery over;
// tokens, lease sequence numbers and processing fences are the hard
// guards, and claims do not make provider delivery exactly-once. Tokens
// stay in the database: records leave the store without them, and only
// the Lease or Claim a grant returns carries one. The
// caller's clock is trusted: workers with skewed clocks see leases expire
// at their own times.
//
// What a call reads grows with the work in hand, not with the table. A
// Lease reads the offerable rows it skips (held by concurrent callers) and
// the leases its agent's other incarnations hold, never the leases of its
// own incarnation. A claim of pending entries also reads the pending
// entries ahead of it whose claims are still in force: a claim changes no
// indexed column, so it is a HOT update that writes no index entry (the
// table's fillfactor of 80 leaves its page room for the new version), and
// the claimed entry keeps its place in the pending index. That is cheap
// while the claims in force number what the workers hold in hand (a few
// batches); a host that keeps many thousands of claims open for long pays
// for reading past them on every claim.
package pgstore
