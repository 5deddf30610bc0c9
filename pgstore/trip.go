package pgstore

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// tripStatement is one statement of a one-trip transaction; scan, when
// not nil, is called for every row it returns.
type tripStatement struct {
	sql  string
	args []any
	scan func(pgx.Rows) error
}

// oneTrip runs stmts as a transaction of its own on a connection of the
// pool, in one round trip: the statements (set_config(..., true) and the
// like first, which end with the transaction) go as one pipeline that
// ends in a single Sync. Without a BEGIN, PostgreSQL runs such a pipeline as one
// implicit transaction: the settings last until its end, an error in any
// statement skips the rest and rolls the whole back, and the server
// commits it when it reaches the Sync, before it answers ReadyForQuery
// (PostgreSQL's documentation, the protocol chapter: "Extended Query"
// and "Pipelining"). TestOneTripIsOneImplicitTransaction pins this.
//
// The Sync goes with the statements, so the server commits whatever the
// client does meanwhile. A call given up while its statement waits (its
// context done) therefore does not drop the connection, which would let
// the statement run on and commit unheard: it asks the server to cancel
// the statement (a cancel request, as psql's Ctrl-C) and reads the
// answer, which says whether the transaction committed (the statement
// had finished) or not (it was cancelled). Only when no answer comes
// within tripCancelWait is the connection dropped, and the outcome
// unknown. A connection that was sent a cancel request is closed after
// the call: a cancel that arrives late would hit the next statement.
//
// committing reports that the outcome is unknown: the statements were
// sent and no answer came that says what became of them (tripOutcome).
// Otherwise an error means nothing was committed.
func (s *Store) oneTrip(ctx context.Context, stmts []tripStatement) (committing bool, err error) {
	return s.onTrip(ctx, func(tctx context.Context, conn *pgx.Conn) (bool, error) {
		b := &pgx.Batch{}
		for _, st := range stmts {
			b.Queue(st.sql, st.args...)
		}
		br := conn.SendBatch(tctx, b)
		failed, err := readTrip(br, stmts)
		return tripOutcome(failed, err, br.Close())
	})
}

// onTrip runs send, the round trip of an implicit transaction (see
// oneTrip), on a connection of the pool, under a context that ends only
// when the call's does and the server has not answered a cancel request
// within tripCancelWait; send returns what tripOutcome says of it.
func (s *Store) onTrip(ctx context.Context, send func(ctx context.Context, conn *pgx.Conn) (committing bool, err error)) (committing bool, err error) {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	// A connection whose answers were not all read is closed by the
	// driver; the pool then drops it.
	defer pc.Release()
	if err := ctx.Err(); err != nil {
		return false, err
	}
	conn := pc.Conn()
	tctx, endTrip := context.WithCancel(context.WithoutCancel(ctx))
	defer endTrip()
	cancelled := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(cancelled)
		wctx, cancel := context.WithTimeout(tctx, tripCancelWait)
		defer cancel()
		_ = conn.PgConn().CancelRequest(wctx)
		<-wctx.Done()
		endTrip() // no answer in time: the driver drops the connection
	})
	committing, err = send(tctx, conn)
	endTrip()
	if !stop() {
		<-cancelled
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tripCancelWait)
		defer cancel()
		_ = conn.Close(cctx)
	}
	return committing, err
}

// tripCancelWait bounds how long oneTrip waits, once its context is done,
// for the answer to its cancel request, and how long it spends closing
// the connection after.
const tripCancelWait = 5 * time.Second

// rollbackTimeout bounds a ROLLBACK sent after a failure, when the
// caller's context may be done and the connection may be gone.
const rollbackTimeout = 5 * time.Second

// tripOutcome classifies how oneTrip's implicit transaction ended:
// failed is the error a statement answered with, err any other error
// while its answers were read (a scan that failed, a lost connection),
// and cerr the error of reading the rest up to ReadyForQuery, where the
// commit happens. It returns committing true when the outcome is
// unknown, and the error to report, nil when the transaction committed.
//
//   - A statement answered an ERROR (failedStatement): the server
//     aborted the transaction there and rolls it back at the Sync, so
//     nothing was committed, whatever the rest says.
//   - The request never went out (pgconn.SafeToRetry): nothing was
//     committed.
//   - Any other error while the answers were read (the connection lost,
//     or dropped when a cancel request went unanswered; a row the client
//     could not take): the server reads on to the Sync and commits
//     without the client, so the outcome is unknown, even when the rest
//     was read.
//   - Every answer read, and the end failed: as an error at COMMIT
//     (commitOutcome): a refused commit committed nothing, anything
//     else is unknown.
func tripOutcome(failed, err, cerr error) (committing bool, _ error) {
	switch {
	case failed != nil:
		return false, failed
	case err != nil && pgconn.SafeToRetry(err):
		return false, err
	case err != nil:
		return true, err
	}
	return commitOutcome(cerr, false)
}

// failedStatement reports whether err is the answer of a statement that
// failed in the server, after which PostgreSQL aborts the transaction:
// severity ERROR (a FATAL or PANIC may be sent by a pooler, or after the
// server committed) and not of SQLSTATE class 08, which a pooler sends
// when its link to the server drops, whatever the server did first.
func failedStatement(err error) bool {
	pgErr, ok := errorResponse(err)
	return ok && !strings.HasPrefix(pgErr.Code, "08")
}

// errorResponse returns the server's error response in err when its
// severity is ERROR, which PostgreSQL sends for a statement (or a
// COMMIT) it refused; FATAL and PANIC end the session and may come
// after a commit.
func errorResponse(err error) (*pgconn.PgError, bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return nil, false
	}
	severity := pgErr.SeverityUnlocalized
	if severity == "" { // servers before 9.6 send only the localised one
		severity = pgErr.Severity
	}
	return pgErr, severity == "ERROR"
}

// commitOutcome classifies how a round trip that carried COMMIT ended,
// given err and whether COMMIT answered COMMIT. It returns committing
// true when the outcome is unknown, and the error to report, nil when
// the transaction committed.
//
//   - COMMIT answered: the transaction is durable, whatever failed after
//     it (the connection dying before the batch's ReadyForQuery is an
//     error of the batch's close, not of the transaction).
//   - COMMIT answered ROLLBACK (the transaction was aborted by an
//     earlier error), or the batch was never sent (pgconn.SafeToRetry):
//     nothing was committed.
//   - An error response the server sends only for a transaction it
//     rolled back (refusedCommit): nothing was committed.
//   - Anything else is unknown: a lost connection; any FATAL or PANIC
//     (a backend can be ended, or the server crash, after the commit
//     record is written and before the answer is sent); and every error
//     of SQLSTATE class 08, which a pooler sends when its link to the
//     server drops, whether or not the server committed first
//     (PgBouncer's "server conn crashed?" is 08P01). The caller settles
//     an unknown outcome by reading what it wrote (settle.go).
func commitOutcome(err error, answered bool) (committing bool, _ error) {
	switch {
	case answered || err == nil:
		return false, nil
	case errors.Is(err, errRolledBack), pgconn.SafeToRetry(err), refusedCommit(err):
		return false, err
	}
	return true, err
}

// refusedCommit reports whether err is an error response after which
// PostgreSQL guarantees that the transaction was not committed: severity
// ERROR (a FATAL or PANIC may come after the commit record) with a code
// of class 40, "Transaction Rollback" (PostgreSQL's documentation,
// Appendix A), that says the transaction was rolled back:
//
//   - 40001 serialization_failure and 40P01 deadlock_detected: the
//     documentation's chapter on concurrency control says a transaction
//     that fails with either is rolled back as a whole and may be run
//     again (as retryable does). At COMMIT they come from the checks
//     that run before the commit record is written (deferred triggers
//     and constraints, serializable transactions' pre-commit check).
//
// Other ERROR responses (a statement timeout or a cancel that arrives
// while COMMIT runs, say) are left unknown rather than reasoned about:
// settling by reading costs one read, and only on a failure.
func refusedCommit(err error) bool {
	pgErr, ok := errorResponse(err)
	return ok && refusedCodes[pgErr.Code]
}

// refusedCodes are the SQLSTATE codes refusedCommit accepts (see there
// for why each). A variable only so that a test can misclassify one and
// show that a held write still answers truly (deliveryCompletion.wrote).
var refusedCodes = map[string]bool{sqlstateSerializationFailure: true, sqlstateDeadlockDetected: true}

// readTrip reads the results of the batch oneTrip sends. failed is the
// error a statement answered with (failedStatement); err is any other.
func readTrip(br pgx.BatchResults, stmts []tripStatement) (failed, err error) {
	split := func(err error) (error, error) {
		if failedStatement(err) {
			return err, nil
		}
		return nil, err
	}
	for _, st := range stmts {
		if st.scan == nil {
			if _, err := br.Exec(); err != nil {
				return split(err)
			}
			continue
		}
		rows, err := br.Query()
		if err != nil {
			return split(err)
		}
		for rows.Next() {
			if err := st.scan(rows); err != nil {
				rows.Close()
				return nil, err
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return split(err)
		}
	}
	return nil, nil
}

// trip runs oneTrip, retrying it like inTx after an error that is safe
// to retry; reset clears what scan collected before each attempt. The
// error is wrapped with op; when the outcome of the commit is unknown it
// says so.
func (s *Store) trip(ctx context.Context, op string, stmts []tripStatement, reset func()) error {
	for n := 0; ; n++ {
		reset()
		committing, err := s.oneTrip(ctx, stmts)
		if err == nil {
			return nil
		}
		if committing {
			return wrap(ctx, op, errHeldUnknown(err))
		}
		if n >= s.cfg.maxRetries || ctx.Err() != nil || !retryable(err) {
			return wrap(ctx, op, err)
		}
		if werr := backoff(ctx, n); werr != nil {
			return wrap(ctx, op, errors.Join(err, werr))
		}
	}
}

// grantPrelude keeps the grant statements on their indexes. A grant
// picks the open rows in delivery order and stops at the limit, and looks
// for the claims (or leases) that ran out through their own index. A
// planner that believes only a few rows match (a table filled since its
// statistics were last gathered, as after a burst of enqueues) prefers a
// bitmap scan, which reads every matching row and sorts them all, or
// even a sequential scan, so that each grant would read the whole
// backlog until autovacuum analyzes the table. Both settings end with
// the transaction.
const grantPrelude = "SELECT pg_catalog.set_config('enable_seqscan', 'off', true), pg_catalog.set_config('enable_bitmapscan', 'off', true)"

// leasePrelude is grantPrelude and the lease's lock of its agent ($1, as
// advisoryXL takes it) in one statement, so that a lease's one round trip
// sends three statements rather than four: at a steady rate, where a lease
// grants a few deliveries, each statement is a noticeable part of what a
// delivery costs the server.
const leasePrelude = grantPrelude + ", pg_catalog.pg_advisory_xact_lock($1)"

// rangePrelude keeps the statements that read a range of rows on their
// indexes: the sweeps, purges and redrives by filter, one transaction per
// batch, and readIndexed's lists, finds, stats and counts. Their generic
// plans, made while a table is new and never analysed (costed as ten
// pages) or small, would read the table whole, and keep doing so as it
// grows until the next ANALYZE. Bitmap scans stay allowed: a sweep's
// predicate is an OR of two partial indexes, which only a bitmap scan
// reads together. The setting ends with the transaction.
const rangePrelude = "SELECT pg_catalog.set_config('enable_seqscan', 'off', true)"

// grantsInFlight is how many lease (or claim) statements one Store runs
// at once; further callers wait their turn in the process. Concurrent
// grants pick from the same head of one index and skip each other's
// locked rows: with many loops in one process (say 64 workers of one
// host) each grant would step over the rows the others are granting,
// and the loops would slow each other down as they are added. Two keep
// one grant deciding while the other commits.
const grantsInFlight = 2

// gate bounds the grants of one kind a Store runs at once.
type gate chan struct{}

func newGate() gate { return make(gate, grantsInFlight) }

// enter waits for a turn, or for ctx to end; the caller calls leave when
// entered.
func (g gate) enter(ctx context.Context) error {
	select {
	case g <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g gate) leave() { <-g }
