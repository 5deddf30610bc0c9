package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// This file runs the migrations marked "-- pgstore:no-transaction": those
// that build or drop indexes with CREATE INDEX CONCURRENTLY and DROP INDEX
// CONCURRENTLY, which PostgreSQL runs only outside a transaction block,
// and which let writers go on while an index on a large table is built.
//
// Without a transaction there is no lock to take turns on that would
// outlive a statement and still work behind PgBouncer in transaction
// pooling mode (a session advisory lock would be held by whichever
// server connection the pooler gave out). So the steps are written to be
// run by several processes at once, or again after an interruption: every
// statement is idempotent (IF NOT EXISTS, IF EXISTS), a process re-reads
// schema_migrations before each step and stops when another has recorded
// the version, and the version is recorded, under the transactional lock,
// only after every step has taken effect. Two builds of one index do not
// run at once: CREATE INDEX CONCURRENTLY holds a lock on its table that
// another such build waits for, and then finds the index there.
//
// What IF NOT EXISTS cannot see is an index left INVALID: a concurrent
// build that failed or was cancelled (a lost connection, a cancelled
// context) leaves its index in the catalog, unusable and still updated by
// every write, and IF NOT EXISTS then skips it. Before and after each step
// the schema's INVALID indexes are therefore looked at: one that a
// CREATE INDEX is building right now (pg_stat_progress_create_index) is
// waited for; any other is a leftover, dropped with DROP INDEX
// CONCURRENTLY, and the step runs again.

// An index of an empty table is built (or dropped) without CONCURRENTLY.
// A concurrent build waits, after building, for every transaction of the
// database that holds a snapshot older than its own, in any schema: with
// many schemas in one database (test binaries sharing a server, users of
// pgstoretest, several stores side by side) the migration of a fresh
// schema would wait for whatever another schema runs, as long as it
// runs. A fresh table has nothing for writers to be kept from, so the
// runner, not the migration files (which stay as they were released),
// decides per step: it locks the table against writers and, finding it
// empty, runs the statement without CONCURRENTLY in that transaction,
// which waits only for the table's own users. A table with rows is built
// CONCURRENTLY, as the migration says; a step that waits logs, every
// waitReportInterval, which transactions it waits for, and an error
// that ends the wait names them (see reportWaits).

// waitReportInterval is how long a migration step waits before it
// reports (and then reports again) what it waits for.
const waitReportInterval = 5 * time.Second

// indexPollInterval is how often a step waiting for another process's
// index build looks again.
const indexPollInterval = 200 * time.Millisecond

// maxStepRuns bounds how many times one step runs when what it built is
// found INVALID afterwards (another process's build that failed, or an
// index dropped under it), so that a build that can never succeed fails
// the migration instead of looping.
const maxStepRuns = 5

// Statements of runOutsideTx, for the schema named by $1 where they take
// it as a parameter.
const (
	// invalidIndexesSQL answers whether index $2 of schema $1 is INVALID,
	// and whether a CREATE INDEX or REINDEX may be building it right now:
	// a build on its table is in progress, or one whose table this role
	// may not see.
	invalidIndexesSQL = `
SELECT c.relname, EXISTS (
	SELECT 1 FROM pg_catalog.pg_stat_progress_create_index p
	WHERE p.datid = d.oid AND p.pid <> pg_catalog.pg_backend_pid()
		AND (p.relid IS NULL OR p.relid = i.indrelid))
FROM pg_catalog.pg_index i
JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
CROSS JOIN (SELECT oid FROM pg_catalog.pg_database WHERE datname = pg_catalog.current_database()) d
WHERE n.nspname = $1 AND c.relname = $2 AND NOT i.indisvalid`

	// versionRecordedSQL answers whether version $1 is recorded; %s is
	// the schema's migrations table.
	versionRecordedSQL = "SELECT EXISTS (SELECT 1 FROM %s WHERE version = $1)"
)

// runOutsideTx applies m, a migration marked to run outside a
// transaction, one step (statement) at a time, and records it.
func (s *Store) runOutsideTx(ctx context.Context, m migration) error {
	quoted := pgx.Identifier{s.cfg.schema}.Sanitize()
	recorded := fmt.Sprintf(versionRecordedSQL, quoted+".schema_migrations")
	for i, step := range m.steps {
		var done bool
		if err := s.db.QueryRow(ctx, recorded, m.version).Scan(&done); err != nil {
			return err
		}
		if done {
			return nil // another process finished it
		}
		if err := s.runStep(ctx, fill(step, quoted), builtIndex(step)); err != nil {
			return fmt.Errorf("step %d (%s): %w", i+1, firstLine(step), err)
		}
	}
	return s.inTx(ctx, "migrate", func(tx pgx.Tx) (bool, error) {
		if _, err := tx.Exec(ctx, s.q.advisoryXL, migrationLockKey(s.cfg.schema)); err != nil {
			return false, err
		}
		var done bool
		if err := tx.QueryRow(ctx, recorded, m.version).Scan(&done); err != nil || done {
			return false, err
		}
		_, err := tx.Exec(ctx, s.q.recordMigration, m.version, m.name, s.cfg.clock())
		return err == nil, err
	})
}

// builtIndex names the index step builds, "" for a step that builds
// none. The migration's parser allows a build only as CREATE INDEX
// CONCURRENTLY IF NOT EXISTS name, of an unquoted name, which PostgreSQL
// folds to lower case.
func builtIndex(step string) string {
	if st := indexStatementOf(step); st.create && len(st.names) == 1 {
		return strings.ToLower(st.names[0])
	}
	return ""
}

// runStep runs one statement outside a transaction until it has taken
// effect: when it builds index (not ""), that index is left valid.
//
// Only the step's own index is looked at. Another process may be
// building another index of the same migration at the same moment, which
// is INVALID until its build ends; a look at every INVALID index of the
// schema could take that build for a failed one and drop it after it
// succeeded, once the other process had already recorded the version.
func (s *Store) runStep(ctx context.Context, stmt, index string) (err error) {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer pc.Release()
	conn := pc.Conn()
	waits := s.reportWaits(ctx, conn.PgConn().PID(), firstLine(stmt))
	defer func() {
		if w := waits(); err != nil && w != "" {
			err = fmt.Errorf("%w (waiting for %s)", err, w)
		}
	}()
	// A leftover INVALID index would be kept by IF NOT EXISTS, plainly
	// as well: settle it first.
	if _, err := s.settleIndex(ctx, conn, index); err != nil {
		return err
	}
	if done, err := s.runStepPlainly(ctx, conn, stmt); done || err != nil {
		return err
	}
	for run := 1; ; run++ {
		if _, err := s.settleIndex(ctx, conn, index); err != nil {
			return err
		}
		// No arguments: the simple protocol, where one statement is its
		// own implicit transaction, as CONCURRENTLY needs.
		_, err := conn.Exec(ctx, stmt)
		if err != nil && !((duplicateRelation(err) || retryable(err)) && run < maxStepRuns) {
			return err
		}
		// A duplicate relation error means another process created the
		// same index between the look and the statement; a deadlock, that
		// two processes built it at once and the server gave up one of
		// the builds, leaving its index INVALID. Either way: wait for the
		// build in progress, drop a leftover, and run the (idempotent)
		// statement again.
		dropped, serr := s.settleIndex(ctx, conn, index)
		if serr != nil {
			return serr
		}
		if err == nil && !dropped {
			return nil
		}
		if run >= maxStepRuns {
			return fmt.Errorf("still an INVALID index after %d runs", run)
		}
	}
}

// concurrentlyWord is CONCURRENTLY as a word of an index statement.
var concurrentlyWord = regexp.MustCompile(`(?i)\s+CONCURRENTLY\b`)

// builtOn finds the table of a CREATE INDEX statement of the schema:
// ON [ONLY] "schema".table.
var builtOn = regexp.MustCompile(`(?is)\bON\s+(?:ONLY\s+)?"(?:[^"]|"")*"\.([A-Za-z_][A-Za-z0-9_$]*)`)

// indexTableSQL names the table of index $2 of schema $1.
const indexTableSQL = `SELECT t.relname FROM pg_catalog.pg_index i
JOIN pg_catalog.pg_class x ON x.oid = i.indexrelid
JOIN pg_catalog.pg_namespace n ON n.oid = x.relnamespace
JOIN pg_catalog.pg_class t ON t.oid = i.indrelid
WHERE n.nspname = $1 AND x.relname = $2`

// runStepPlainly runs stmt, a CONCURRENTLY index statement, without
// CONCURRENTLY when its table is empty, in a transaction on conn that
// locks the table against writers first (and against other migrations of
// it: the lock is self-exclusive, so two processes do not build one
// index at once) and checks it is empty under that lock. done is false
// when the statement is not such a statement, or the table has rows: it
// must then run CONCURRENTLY.
func (s *Store) runStepPlainly(ctx context.Context, conn *pgx.Conn, stmt string) (done bool, err error) {
	st := indexStatementOf(stmt)
	if !st.concurrently || !st.ifExists || (!st.create && !st.drop) {
		return false, nil
	}
	var table string
	switch {
	case st.create:
		m := builtOn.FindStringSubmatch(stmt)
		if m == nil {
			return false, nil
		}
		table = strings.ToLower(m[1])
	case len(st.names) == 1:
		err := conn.QueryRow(ctx, indexTableSQL, s.cfg.schema, strings.ToLower(st.names[0])).Scan(&table)
		if noRows(err) {
			return false, nil // no such index: the statement does nothing
		}
		if err != nil {
			return false, err
		}
	default:
		return false, nil
	}
	// A drop takes the table's ACCESS EXCLUSIVE lock anyway; a build
	// needs SHARE, and SHARE ROW EXCLUSIVE adds that two builders take
	// turns.
	mode := "SHARE ROW EXCLUSIVE"
	if st.drop {
		mode = "ACCESS EXCLUSIVE"
	}
	quoted := pgx.Identifier{s.cfg.schema, table}.Sanitize()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "LOCK TABLE "+quoted+" IN "+mode+" MODE"); err != nil {
		return false, err
	}
	var rows bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT FROM "+quoted+")").Scan(&rows); err != nil {
		return false, err
	}
	if rows {
		return false, nil
	}
	if _, err := tx.Exec(ctx, concurrentlyWord.ReplaceAllString(stmt, "")); err != nil {
		return false, err
	}
	return true, tx.Commit(ctx)
}

// waitingForSQL describes the sessions that block backend $1: those
// pg_blocking_pids names (lock waits, a concurrent index build's waits
// for older transactions among them), with what they run and since when.
const waitingForSQL = `SELECT pg_catalog.string_agg(pg_catalog.format('pid %s (%s, %s since %s, database %s: %s)',
	a.pid, coalesce(nullif(a.application_name, ''), 'no application name'), coalesce(a.state, 'unknown state'),
	coalesce(pg_catalog.to_char(a.xact_start, 'YYYY-MM-DD HH24:MI:SS TZ'), 'no transaction'), a.datname,
	pg_catalog.left(coalesce(a.query, ''), 120)), '; ' ORDER BY a.pid)
FROM pg_catalog.pg_stat_activity a WHERE a.pid = ANY (pg_catalog.pg_blocking_pids($1))`

// reportWaits watches backend pid, which runs migration step what, until
// the returned function is called: every waitReportInterval that it
// waits for other sessions it logs them, as a warning. The returned
// function stops the watch and returns the last sessions seen, "" when
// none.
func (s *Store) reportWaits(ctx context.Context, pid uint32, what string) func() string {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var mu sync.Mutex
	var last string
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(waitReportInterval)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			}
			var w *string
			if err := s.pool.QueryRow(wctx, waitingForSQL, int32(pid)).Scan(&w); err != nil || w == nil {
				continue
			}
			mu.Lock()
			last = *w
			mu.Unlock()
			s.cfg.logger.LogAttrs(wctx, slog.LevelWarn, "pgstore: migrate: a step waits for other sessions",
				slog.String("schema", s.cfg.schema), slog.String("step", what), slog.String("waiting_for", *w))
		}
	}()
	return func() string {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}

// duplicateRelation reports whether err is PostgreSQL's answer to two
// sessions creating one relation at once.
func duplicateRelation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "42P07" || pgErr.Code == "23505")
}

// settleIndex returns when index (if not "") is not INVALID: it waits
// for a build in progress and drops the leftover of a failed one,
// reporting whether it dropped it. It runs on conn, the step's own
// connection: a step that took a second one from the pool while holding
// the first could wait for ever when concurrent migrations hold every
// connection of a small pool, each waiting for its second.
func (s *Store) settleIndex(ctx context.Context, conn *pgx.Conn, index string) (dropped bool, err error) {
	for index != "" {
		rows, err := conn.Query(ctx, invalidIndexesSQL, s.cfg.schema, index)
		if err != nil {
			return dropped, err
		}
		type invalid struct {
			name     string
			building bool
		}
		found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (invalid, error) {
			var v invalid
			return v, r.Scan(&v.name, &v.building)
		})
		if err != nil {
			return dropped, err
		}
		if len(found) == 0 {
			return dropped, nil
		}
		waiting := false
		for _, ix := range found {
			if ix.building {
				waiting = true
				continue
			}
			drop := "DROP INDEX CONCURRENTLY IF EXISTS " + pgx.Identifier{s.cfg.schema, ix.name}.Sanitize()
			if _, err := conn.Exec(ctx, drop); err != nil {
				return dropped, fmt.Errorf("dropping INVALID index %s: %w", ix.name, err)
			}
			dropped = true
		}
		if waiting {
			t := time.NewTimer(indexPollInterval)
			select {
			case <-ctx.Done():
				t.Stop()
				return dropped, ctx.Err()
			case <-t.C:
			}
		}
	}
	return false, nil
}
