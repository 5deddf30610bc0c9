package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leaseledger/ledger"
)

// This file is the one place that decides what a driver error means:
// which errors are retried, how every error is wrapped, and how a call's
// transaction is run.

// SQLSTATE codes that are safe to retry: the transaction was rolled back
// as a whole, so running it again cannot apply anything twice.
const (
	sqlstateSerializationFailure = "40001"
	sqlstateDeadlockDetected     = "40P01"
)

// SQLSTATE codes that say the store's schema, one of its tables or one of
// their columns does not exist: the schema was never migrated, or not by
// this version (a migration that adds columns, such as 0010's redrive
// links, leaves an older schema with every table and without them).
// Every statement the store sends names only its own schema, tables and
// columns, so on a store call they can mean nothing else.
const (
	sqlstateUndefinedTable  = "42P01"
	sqlstateUndefinedColumn = "42703"
	sqlstateInvalidSchema   = "3F000"
)

// ErrNotMigrated is returned (wrapped: check it with errors.Is) by every
// call on a store whose schema, or one of whose tables, does not exist:
// Migrate was never run on it, or not by this version of the library. It
// also matches ledger.ErrUnusable, so that the loops of package dispatch
// stop on it instead of retrying a call that cannot succeed. The driver's
// error stays in the chain for errors.As.
var ErrNotMigrated = errors.New("pgstore: schema not migrated (run Store.Migrate, or ledgerctl migrate)")

// notMigratedError is ErrNotMigrated with the driver's error behind it.
type notMigratedError struct{ err error }

func (e *notMigratedError) Error() string { return ErrNotMigrated.Error() + ": " + e.err.Error() }

func (e *notMigratedError) Unwrap() error { return e.err }

// Is makes errors.Is match ErrNotMigrated and ledger.ErrUnusable.
func (e *notMigratedError) Is(target error) bool {
	return target == ErrNotMigrated || target == ledger.ErrUnusable
}

// notMigrated reports whether err says the store's schema, a table of it
// or a column of one does not exist.
func notMigrated(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case sqlstateUndefinedTable, sqlstateUndefinedColumn, sqlstateInvalidSchema:
		return true
	}
	return false
}

// retryable reports whether a failed transaction may be run again: the
// error happened before anything was sent, or the server rolled the
// transaction back because of a serialization failure or a deadlock. An
// error during COMMIT (the outcome is unknown) or a lost connection after
// a statement was sent is never retried.
func retryable(err error) bool {
	if pgconn.SafeToRetry(err) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == sqlstateSerializationFailure || pgErr.Code == sqlstateDeadlockDetected
	}
	return false
}

// wrap names the operation in err, keeping it inspectable with errors.Is
// and errors.As (context.Canceled, *pgconn.PgError, ledger.ErrNotFound...).
// When ctx is done but the driver's error does not say so, the context's
// error is added, so that a cancelled call always matches context.Canceled.
// A missing schema or table becomes ErrNotMigrated.
func wrap(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if notMigrated(err) && !errors.Is(err, ErrNotMigrated) {
		err = &notMigratedError{err: err}
	}
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		return fmt.Errorf("pgstore: %s: %w: %w", op, ctxErr, err)
	}
	return fmt.Errorf("pgstore: %s: %w", op, err)
}

// errRowChanged means a write-back found the row at another version than
// the one read under its lock: a bug (or someone editing the table by
// hand), never a business outcome. The transaction is rolled back.
var errRowChanged = errors.New("row changed under its lock")

// txFunc is one atomic unit of a call. It reports whether it wrote
// anything that must be kept: when it did not, the unit is rolled back,
// which also discards any placeholder it inserted only to lock (see
// MarkProcessed), so a call that does not apply writes nothing.
type txFunc func(tx pgx.Tx) (write bool, err error)

// inTx runs fn in a transaction of its own on the pool, or in a savepoint
// of the caller's transaction (WithTx), and commits it (releases the
// savepoint) when fn asks to. On the pool a safely retryable failure runs
// fn again, up to the configured number of times; fn must therefore reset
// whatever it collects at its start.
func (s *Store) inTx(ctx context.Context, op string, fn txFunc) error {
	return s.retry(ctx, op, func() error { return s.runTx(ctx, fn) })
}

// read runs a read-only fn directly on the pool, retried like inTx, or,
// in the caller's transaction (WithTx), in a savepoint of its own that is
// rolled back after it: there a failed statement would abort the caller's
// transaction, which the store must never do.
func (s *Store) read(ctx context.Context, op string, fn func(db dbtx) error) error {
	if s.callerTx {
		return s.inTx(ctx, op, func(tx pgx.Tx) (bool, error) { return false, fn(tx) })
	}
	return s.retry(ctx, op, func() error { return fn(s.db) })
}

// readIndexed is read for the statements that read a range of rows in
// an index's order or count a part of a table (lists, finds, stats,
// counts): it runs fn after rangePrelude, so that their plans stay on the
// indexes whatever the planner believes of the tables.
// On the pool that takes a transaction of its own, rolled back after
// fn, which writes nothing; in the caller's transaction (WithTx) a
// savepoint, whose rollback also undoes the settings, so the caller's
// own statements never run under them.
func (s *Store) readIndexed(ctx context.Context, op string, fn func(db dbtx) error) error {
	return s.inTx(ctx, op, func(tx pgx.Tx) (bool, error) {
		if _, err := tx.Exec(ctx, rangePrelude); err != nil {
			return false, err
		}
		return false, fn(tx)
	})
}

// indexesFirst runs rangePrelude in tx, a transaction of the store's own
// that reads a range of rows and then writes (a sweep, a purge, a
// redrive by filter). In the caller's transaction (WithTx) it does
// nothing: the savepoint such a call commits would leave the setting on
// for the rest of the caller's transaction.
func (s *Store) indexesFirst(ctx context.Context, tx pgx.Tx) error {
	if s.callerTx {
		return nil
	}
	_, err := tx.Exec(ctx, rangePrelude)
	return err
}

// retry runs attempt until it succeeds, fails with an error that is not
// safe to retry, the retries are used up or ctx is done, and wraps the
// final error with op.
func (s *Store) retry(ctx context.Context, op string, attempt func() error) error {
	for n := 0; ; n++ {
		err := attempt()
		if err == nil {
			return nil
		}
		if s.callerTx || n >= s.cfg.maxRetries || ctx.Err() != nil || !retryable(err) {
			return wrap(ctx, op, err)
		}
		if werr := backoff(ctx, n); werr != nil {
			return wrap(ctx, op, errors.Join(err, werr))
		}
	}
}

// runTx is one attempt of inTx.
func (s *Store) runTx(ctx context.Context, fn txFunc) (err error) {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			// Roll back even when ctx is done, so a savepoint of the
			// caller's transaction is undone and the transaction stays
			// usable; bounded, as the connection may be gone.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = tx.Rollback(rctx)
		}
	}()
	write, err := fn(tx)
	if err != nil {
		return err
	}
	if !write {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return tx.Rollback(rctx)
	}
	if err := tx.Commit(ctx); err != nil {
		// Only a transaction of its own commits: a savepoint of the
		// caller's is released, and the caller's COMMIT decides.
		if unknown, _ := commitOutcome(err, false); unknown && !s.callerTx && !errors.Is(err, pgx.ErrTxCommitRollback) {
			return &unknownCommitError{err: err}
		}
		return err
	}
	return nil
}

// unknownCommitError is the error of a transaction whose COMMIT was sent
// and whose outcome is unknown (see commitOutcome). It is never retried;
// a call that wrote one record settles it by reading that record
// (settleAlone).
type unknownCommitError struct{ err error }

func (e *unknownCommitError) Error() string {
	return e.err.Error() + " (the outcome of its commit is unknown: the call may have applied)"
}

func (e *unknownCommitError) Unwrap() error { return e.err }

// settleAlone settles the unknown commit of a call that ran on its own
// and wrote one record of kind k, found at version before, as wrote
// (settle.go): when the record is what it wrote, the call applied and
// settleAlone returns nil; otherwise it returns err, which says the
// outcome is unknown, or, when nothing committed, that the call failed.
func settleAlone[R any](ctx context.Context, s *Store, k *recordKind[R], id string, before int64, wrote R, err error) error {
	var unknown *unknownCommitError
	if !errors.As(err, &unknown) {
		return err
	}
	if _, v := settleCommit(ctx, s, k, id, before, wrote); v == commitLanded {
		return nil
	}
	return err
}

// backoff waits before retry n+1: a few milliseconds, doubling, with
// jitter so that two transactions that deadlocked do not meet again.
func backoff(ctx context.Context, n int) error {
	d := time.Duration(2<<min(n, 6)) * time.Millisecond
	d += rand.N(d)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// noRows reports whether err says a query found no row.
func noRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }
