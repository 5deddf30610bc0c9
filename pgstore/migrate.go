package pgstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/leaseledger/ledger"
)

// migrationFS holds the versioned schema migrations, NNNN_name.sql, and
// in migrations/citus the forms some of them take on Citus (see
// citusForms). In them {schema} stands for the store's schema as a
// quoted identifier.
//
//go:embed migrations/*.sql migrations/citus/*.sql
var migrationFS embed.FS

// citusFormsDir holds, under the version and name of a migration, the
// form Migrate applies instead when the database has the citus
// extension: Citus refuses or mis-plans a few statements of the plain
// form on the tables of a distributed schema. A Citus form ends with
// the same tables, columns, constraints and indexes as the plain one,
// and the same behaviour; it may differ only in how it gets there (a
// sequence default instead of an identity column, a materialized CTE).
// Which form ran is not recorded: schema_migrations records the version
// and name either way, so a schema never runs a version twice.
const citusFormsDir = "migrations/citus"

// citusExtensionSQL answers whether the database has the citus
// extension, which makes Migrate apply the Citus forms of migrations.
const citusExtensionSQL = "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'citus')"

// schemaPlaceholder is replaced by the quoted schema name in migrations.
const schemaPlaceholder = "{schema}"

// ErrNewerSchema means the schema records a migration version higher than
// any this build knows: a newer build has migrated it. Migrate answers it
// (wrapped, with both versions) instead of running against a schema whose
// rules it cannot know; check for it with errors.Is.
var ErrNewerSchema = errors.New("pgstore: schema migrated by a newer build")

// Directives a migration file may carry on lines of their own in its
// leading comment block, before its first statement.
const (
	// directivePrefix starts every directive; an unknown one is an error,
	// so that a misspelt directive cannot silently change how a file runs.
	directivePrefix = "-- pgstore:"
	// directiveNoTx makes the file run outside a transaction, one
	// statement at a time: what CREATE INDEX CONCURRENTLY and DROP INDEX
	// CONCURRENTLY need. See runOutsideTx.
	directiveNoTx = directivePrefix + "no-transaction"
	// markerMigration starts each version in MigrationSQL's output.
	markerMigration = directivePrefix + "migration"
)

// migration is one migration file.
type migration struct {
	version int
	name    string
	sql     string
	// noTx: the file runs outside a transaction (directiveNoTx), as the
	// statements of steps, one at a time.
	noTx  bool
	steps []string
}

// id names m as its file does, without the extension: 0007_enqueued_target.
func (m migration) id() string { return fmt.Sprintf("%04d_%s", m.version, m.name) }

// loadMigrations returns the embedded migrations in version order.
func loadMigrations() ([]migration, error) { return readMigrations(migrationFS, "migrations") }

// citusForms returns the embedded Citus forms of migrations by version.
// Each must stand for a migration of ms, of the same name and run the
// same way (in a transaction or outside one).
func citusForms(ms []migration) (map[int]migration, error) {
	alts, err := readMigrations(migrationFS, citusFormsDir)
	if err != nil {
		return nil, err
	}
	byVersion := make(map[int]migration, len(ms))
	for _, m := range ms {
		byVersion[m.version] = m
	}
	forms := make(map[int]migration, len(alts))
	for _, a := range alts {
		m, ok := byVersion[a.version]
		if !ok || m.name != a.name || m.noTx != a.noTx {
			return nil, fmt.Errorf("citus form %s stands for no migration of that version, name and kind", a.id())
		}
		forms[a.version] = a
	}
	return forms, nil
}

// readMigrations reads and checks the migrations in dir of fsys, in
// version order.
func readMigrations(fsys fs.FS, dir string) ([]migration, error) {
	ms, err := readMigrationFiles(fsys, dir)
	if err != nil {
		return nil, err
	}
	return sortMigrations(ms)
}

// readMigrationFiles reads and parses the migrations in dir of fsys, in
// no particular order.
func readMigrationFiles(fsys fs.FS, dir string) ([]migration, error) {
	files, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, f := range files {
		base := strings.TrimSuffix(path.Base(f), ".sql")
		num, name, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 || len(num) != 4 || name == "" {
			return nil, fmt.Errorf("migration file %s: want NNNN_name.sql", f)
		}
		body, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, err
		}
		m, err := parseMigration(v, name, string(body))
		if err != nil {
			return nil, fmt.Errorf("migration file %s: %w", f, err)
		}
		ms = append(ms, m)
	}
	return ms, nil
}

// sortMigrations puts ms in version order and checks that no two share
// a version and that the first runs in a transaction.
func sortMigrations(ms []migration) ([]migration, error) {
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	if len(ms) > 0 && ms[0].noTx {
		// It creates schema_migrations, which the steps outside a
		// transaction read.
		return nil, fmt.Errorf("migration %s: the first migration must run in a transaction", ms[0].id())
	}
	for i := 1; i < len(ms); i++ {
		if ms[i].version == ms[i-1].version {
			return nil, fmt.Errorf("two migrations have version %d", ms[i].version)
		}
	}
	return ms, nil
}

// parseMigration reads a file's directives and checks its statements: a
// file that runs in a transaction may not build or drop an index
// CONCURRENTLY (PostgreSQL refuses it there), and one that runs outside
// may build or drop an index only CONCURRENTLY and idempotently, since a
// step interrupted half way runs again.
func parseMigration(version int, name, body string) (migration, error) {
	m := migration{version: version, name: name, sql: body}
	for line := range strings.Lines(body) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if !strings.HasPrefix(line, "--") {
			break // the leading comment block ends at the first statement
		}
		if !strings.HasPrefix(line, directivePrefix) {
			continue
		}
		switch line {
		case directiveNoTx:
			m.noTx = true
		default:
			return migration{}, fmt.Errorf("unknown directive %q (the one known is %q)", line, directiveNoTx)
		}
	}
	stmts, err := splitStatements(body)
	if err != nil {
		return migration{}, err
	}
	if len(stmts) == 0 {
		return migration{}, errors.New("no statements")
	}
	named := map[string]bool{} // the indexes built or dropped so far
	for _, st := range stmts {
		kind := indexStatementOf(st)
		for _, name := range kind.names {
			if m.noTx && named[name] {
				// Run by two processes at once, or again after an
				// interruption, a drop would undo a build of the same
				// name that another run has finished.
				return migration{}, fmt.Errorf("index %s is named by two statements: outside a transaction, build the new index under a new name, then drop the old one", strings.ToLower(name))
			}
			named[name] = true
		}
		switch {
		case !m.noTx && kind.concurrently:
			return migration{}, fmt.Errorf("statement %q runs CONCURRENTLY: the file needs the line %q", firstLine(st), directiveNoTx)
		case m.noTx && kind.create && !(kind.concurrently && kind.ifExists):
			return migration{}, fmt.Errorf("statement %q: outside a transaction an index is built with CREATE INDEX CONCURRENTLY IF NOT EXISTS", firstLine(st))
		case m.noTx && kind.drop && !(kind.concurrently && kind.ifExists):
			return migration{}, fmt.Errorf("statement %q: outside a transaction an index is dropped with DROP INDEX CONCURRENTLY IF EXISTS", firstLine(st))
		}
	}
	if m.noTx {
		m.steps = stmts
	}
	return m, nil
}

// firstLine is the start of a statement, for messages.
func firstLine(stmt string) string {
	line, _, _ := strings.Cut(stmt, "\n")
	return strings.TrimSpace(line)
}

// fill returns sql with the schema placeholder replaced by quoted.
func fill(sql, quoted string) string { return strings.ReplaceAll(sql, schemaPlaceholder, quoted) }

// migrationLockKey is the pg_advisory_xact_lock key that serialises
// migrations of one schema: processes migrating other schemas of the same
// database do not wait for each other.
func migrationLockKey(schema string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("leaseledger/pgstore migrate " + schema))
	return int64(h.Sum64())
}

// Migrate brings the store's schema up to date: it creates the schema if
// it is missing and applies every embedded migration not yet recorded in
// its schema_migrations table, in version order. It is a no-op when the
// schema is up to date, and answers ErrNewerSchema (wrapped), changing
// nothing, when the table records a version higher than this build knows.
//
// Migrations run in one transaction under a transaction-scoped advisory
// lock keyed by the schema name, except a migration marked to run outside
// a transaction (one that builds or drops an index CONCURRENTLY, so that
// writers are not blocked on a large table): it runs statement by
// statement, each on its own, and is recorded only once every statement
// has taken effect; an index a failed build left INVALID is dropped and
// built again. Several processes may call Migrate at once, also through
// PgBouncer in transaction pooling mode: they take turns on the lock for
// the transactional migrations, and the statements run outside a
// transaction are idempotent, so each process finds the work of the
// others done or finishes it. A Migrate that fails part way (a cancelled
// context, a lost connection) can simply be called again.
//
// Migrate on a store returned by WithTx runs in the caller's transaction,
// and the advisory lock is then held until that transaction ends; a
// pending migration that must run outside a transaction makes it fail
// with ErrInvalid, having applied nothing.
//
// An older build that must start against a schema a newer one migrated
// (during a rolling deployment) can recognise ErrNewerSchema and skip
// Migrate, at its own risk: a newer migration may have changed what the
// older code relies on.
func (s *Store) Migrate(ctx context.Context) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	ms, err := loadMigrations()
	if err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	return s.migrate(ctx, ms)
}

// migrate applies the pending migrations of ms in order: the
// transactional ones in one transaction, up to the first that runs
// outside a transaction, which runOutsideTx then applies; and so on until
// none is pending.
func (s *Store) migrate(ctx context.Context, ms []migration) error {
	quoted := pgx.Identifier{s.cfg.schema}.Sanitize()
	forms, err := citusForms(ms)
	if err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	for {
		var outside *migration
		var refused error // ErrNewerSchema, returned as it is
		err := s.inTx(ctx, "migrate", func(tx pgx.Tx) (bool, error) {
			outside, refused = nil, nil
			if _, err := tx.Exec(ctx, s.q.advisoryXL, migrationLockKey(s.cfg.schema)); err != nil {
				return false, err
			}
			if _, err := tx.Exec(ctx, s.q.createSchema); err != nil {
				return false, err
			}
			applied, err := s.appliedVersions(ctx, tx)
			if err != nil {
				return false, err
			}
			if refused = s.checkNotNewer(applied, ms); refused != nil {
				return false, nil
			}
			var citus bool
			if err := tx.QueryRow(ctx, citusExtensionSQL).Scan(&citus); err != nil {
				return false, err
			}
			for _, m := range ms {
				if f, ok := forms[m.version]; ok && citus {
					m = f
				}
				if applied[m.version] {
					continue
				}
				if m.noTx {
					if s.callerTx {
						return false, &ledger.InvalidError{Field: "tx", Reason: "migration " + m.id() +
							" must run outside a transaction: call Migrate on a store made by New, not WithTx"}
					}
					outside = &m
					break
				}
				if err := runStatements(ctx, tx, m, quoted); err != nil {
					return false, err
				}
				if _, err := tx.Exec(ctx, s.q.recordMigration, m.version, m.name, s.cfg.clock()); err != nil {
					return false, err
				}
			}
			return true, nil
		})
		switch {
		case err != nil:
			return err
		case refused != nil:
			return refused
		case outside == nil:
			return nil
		}
		if err := s.runOutsideTx(ctx, *outside); err != nil {
			return wrap(ctx, "migrate", fmt.Errorf("migration %s: %w", outside.id(), err))
		}
	}
}

// runStatements runs the statements of m, a migration that runs in a
// transaction, in tx, one at a time: Citus refuses a string of several
// statements that touches a distributed table, and on PostgreSQL one at
// a time in one transaction does what the whole file at once did.
func runStatements(ctx context.Context, tx pgx.Tx, m migration, quoted string) error {
	stmts, err := splitStatements(m.sql)
	if err != nil {
		return fmt.Errorf("migration %s: %w", m.id(), err)
	}
	for i, st := range stmts {
		// No arguments: pgx sends it over the simple protocol, as it is.
		if _, err := tx.Exec(ctx, fill(st, quoted)); err != nil {
			return fmt.Errorf("migration %s, statement %d (%s): %w", m.id(), i+1, firstLine(st), err)
		}
	}
	return nil
}

// appliedVersions reads the versions schema_migrations records, none when
// the table does not exist yet.
func (s *Store) appliedVersions(ctx context.Context, db dbtx) (map[int]bool, error) {
	applied := map[int]bool{}
	var exists bool
	if err := db.QueryRow(ctx, s.q.migrationsTableExists, s.cfg.schema).Scan(&exists); err != nil {
		return nil, err
	}
	if !exists {
		return applied, nil
	}
	rows, err := db.Query(ctx, s.q.appliedMigrations)
	if err != nil {
		return nil, err
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, err
	}
	for _, v := range versions {
		applied[v] = true
	}
	return applied, nil
}

// checkNotNewer answers ErrNewerSchema when applied holds a version above
// the highest of ms.
func (s *Store) checkNotNewer(applied map[int]bool, ms []migration) error {
	known := 0
	if len(ms) > 0 {
		known = ms[len(ms)-1].version
	}
	newest := 0
	for v := range applied {
		newest = max(newest, v)
	}
	if newest > known {
		return fmt.Errorf("%w: schema %s records version %04d, this build knows versions up to %04d",
			ErrNewerSchema, s.cfg.schema, newest, known)
	}
	return nil
}
