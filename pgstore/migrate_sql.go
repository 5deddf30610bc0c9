package pgstore

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// MigrationSQL returns the SQL of every embedded migration, in version
// order, with the schema filled in, for teams that apply schema changes
// with their own tool (goose, golang-migrate, Atlas, Flyway) rather than
// Migrate. Each version starts with a marker line
//
//	-- pgstore:migration 0001_init
//
// and ends with the INSERT that records it in the schema's
// schema_migrations table, so that Migrate, called afterwards, finds it
// applied and does nothing. The first version begins with CREATE SCHEMA
// IF NOT EXISTS. Run each version in one transaction, except a version
// whose text carries the line
//
//	-- pgstore:no-transaction
//
// which must run outside a transaction, one statement at a time (its
// index builds use CREATE INDEX CONCURRENTLY, and its data moves are DO
// blocks that commit batch by batch); its statements are idempotent, so
// an interrupted run can be repeated, after dropping any index the
// interruption left INVALID. A schema name that WithSchema
// would refuse is ErrInvalid. The output is the form for PostgreSQL: on
// Citus, Migrate applies other forms of a few versions (see
// migrations/README.md), so migrate a Citus database with Migrate.
func MigrationSQL(schema string) (string, error) {
	if err := checkSchema(schema); err != nil {
		return "", fmt.Errorf("pgstore: migration SQL: %w", err)
	}
	ms, err := loadMigrations()
	if err != nil {
		return "", fmt.Errorf("pgstore: migration SQL: %w", err)
	}
	quoted := pgx.Identifier{schema}.Sanitize()
	var b strings.Builder
	fmt.Fprintf(&b, "-- The schema migrations of leaseledger's pgstore for schema %s, versions\n", quoted)
	fmt.Fprintf(&b, "-- %04d to %04d, in the order to apply them. Each version starts with a\n", ms[0].version, ms[len(ms)-1].version)
	fmt.Fprintf(&b, "-- %q line and ends by recording itself in\n", markerMigration+" NNNN_name")
	fmt.Fprintf(&b, "-- %s.schema_migrations. Run each version in one transaction, except\n", quoted)
	fmt.Fprintf(&b, "-- one marked %q: run its statements one at a time,\n", directiveNoTx)
	b.WriteString("-- outside a transaction.\n")
	for i, m := range ms {
		fmt.Fprintf(&b, "\n%s %s\n", markerMigration, m.id())
		if i == 0 {
			fmt.Fprintf(&b, "CREATE SCHEMA IF NOT EXISTS %s;\n\n", quoted)
		}
		body := strings.TrimRight(fill(m.sql, quoted), "\n\t ")
		b.WriteString(body)
		if !strings.HasSuffix(body, ";") {
			b.WriteString(";")
		}
		fmt.Fprintf(&b, "\n\nINSERT INTO %s.schema_migrations (version, name, applied_at) VALUES (%d, '%s', now());\n",
			quoted, m.version, strings.ReplaceAll(m.name, "'", "''"))
	}
	return b.String(), nil
}

// SchemaVersion returns the highest migration version this build has: the
// version Migrate brings a schema to.
func SchemaVersion() int {
	ms, err := loadMigrations()
	if err != nil || len(ms) == 0 {
		// The migrations are embedded and checked by the tests; a build
		// that cannot read them has none to apply.
		return 0
	}
	return ms[len(ms)-1].version
}

// MigrationVersion is one schema version, as MigrationStatus reports it.
type MigrationVersion struct {
	// Version is the migration's number, and Name the rest of its file
	// name (0002_enqueue_order.sql: 2, "enqueue_order").
	Version int
	Name    string
	// AppliedAt is when the version was applied to the schema, zero while
	// it is pending.
	AppliedAt time.Time
	// Known reports whether this build has the migration: false for a
	// version a newer build applied.
	Known bool
	// NoTransaction reports a migration that runs outside a transaction
	// (MigrationSQL's "-- pgstore:no-transaction").
	NoTransaction bool
}

// Applied reports whether the version is applied to the schema.
func (v MigrationVersion) Applied() bool { return !v.AppliedAt.IsZero() }

// MigrationStatus returns every version this build knows and every
// version the schema records, in version order: applied (AppliedAt set),
// pending (AppliedAt zero) or applied by a newer build (Known false). It
// changes nothing; on a schema never migrated, every version is pending.
func (s *Store) MigrationStatus(ctx context.Context) ([]MigrationVersion, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	ms, err := loadMigrations()
	if err != nil {
		return nil, fmt.Errorf("pgstore: migration status: %w", err)
	}
	byVersion := map[int]*MigrationVersion{}
	for _, m := range ms {
		byVersion[m.version] = &MigrationVersion{Version: m.version, Name: m.name, Known: true, NoTransaction: m.noTx}
	}
	err = s.read(ctx, "migration status", func(db dbtx) error {
		var exists bool
		if err := db.QueryRow(ctx, s.q.migrationsTableExists, s.cfg.schema).Scan(&exists); err != nil || !exists {
			return err
		}
		rows, err := db.Query(ctx, "SELECT version, name, applied_at FROM "+
			pgx.Identifier{s.cfg.schema, "schema_migrations"}.Sanitize())
		if err != nil {
			return err
		}
		var (
			version int
			name    string
			at      time.Time
		)
		_, err = pgx.ForEachRow(rows, []any{&version, &name, &at}, func() error {
			v := byVersion[version]
			if v == nil {
				v = &MigrationVersion{Version: version, Name: name}
				byVersion[version] = v
			}
			v.AppliedAt = at.UTC()
			return nil
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]MigrationVersion, 0, len(byVersion))
	for _, v := range byVersion {
		out = append(out, *v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}
