package pgstore

import (
	"context"
	"embed"
	"fmt"
	"hash/fnv"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// migrationFS holds the versioned schema migrations, NNNN_name.sql. In
// them {schema} stands for the store's schema as a quoted identifier.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

// schemaPlaceholder is replaced by the quoted schema name in migrations.
const schemaPlaceholder = "{schema}"

// migration is one embedded migration file.
type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations returns the embedded migrations in version order.
func loadMigrations() ([]migration, error) {
	files, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, f := range files {
		base := strings.TrimSuffix(path.Base(f), ".sql")
		num, name, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 {
			return nil, fmt.Errorf("migration file %s: want NNNN_name.sql", f)
		}
		body, err := migrationFS.ReadFile(f)
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: name, sql: string(body)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i := 1; i < len(ms); i++ {
		if ms[i].version == ms[i-1].version {
			return nil, fmt.Errorf("two migrations have version %d", ms[i].version)
		}
	}
	return ms, nil
}

// migrationLockKey is the pg_advisory_xact_lock key that serialises
// migrations of one schema: processes migrating other schemas of the same
// database do not wait for each other.
func migrationLockKey(schema string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("leaseledger/pgstore migrate " + schema))
	return int64(h.Sum64())
}

// Migrate brings the store's schema up to date: it creates the schema if
// it is missing and applies, in one transaction, every embedded migration
// not yet recorded in its schema_migrations table. It is a no-op when the
// schema is up to date. Several processes may call it at once: a
// transaction-scoped advisory lock, keyed by the schema name, makes them
// take turns, and each finds the work done by the one before. Versions
// recorded in the table that this build does not know (a newer build
// migrated first) are left alone, so a rolling deployment may run old and
// new builds side by side as long as migrations only add.
//
// Migrate on a store returned by WithTx runs in the caller's transaction;
// the advisory lock is then held until that transaction ends.
func (s *Store) Migrate(ctx context.Context) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	ms, err := loadMigrations()
	if err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	quoted := pgx.Identifier{s.cfg.schema}.Sanitize()
	return s.inTx(ctx, "migrate", func(tx pgx.Tx) (bool, error) {
		if _, err := tx.Exec(ctx, s.q.advisoryXL, migrationLockKey(s.cfg.schema)); err != nil {
			return false, err
		}
		if _, err := tx.Exec(ctx, s.q.createSchema); err != nil {
			return false, err
		}
		applied := map[int]bool{}
		var exists bool
		if err := tx.QueryRow(ctx, s.q.migrationsTableExists, s.cfg.schema).Scan(&exists); err != nil {
			return false, err
		}
		if exists {
			rows, err := tx.Query(ctx, s.q.appliedMigrations)
			if err != nil {
				return false, err
			}
			versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
			if err != nil {
				return false, err
			}
			for _, v := range versions {
				applied[v] = true
			}
		}
		for _, m := range ms {
			if applied[m.version] {
				continue
			}
			// No arguments: pgx sends it over the simple protocol, which
			// runs the file's several statements in order.
			if _, err := tx.Exec(ctx, strings.ReplaceAll(m.sql, schemaPlaceholder, quoted)); err != nil {
				return false, fmt.Errorf("migration %04d_%s: %w", m.version, m.name, err)
			}
			if _, err := tx.Exec(ctx, s.q.recordMigration, m.version, m.name, s.cfg.clock()); err != nil {
				return false, err
			}
		}
		return true, nil
	})
}
