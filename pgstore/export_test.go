package pgstore

import (
	"context"
	"io/fs"
)

// What the external tests (package pgstore_test) borrow from the internal
// ones: the explain fixture's raw inserts of terminal records, and the
// migration runner's splitter of statements.
var (
	InsertTerminalDeliveries = insertTerminalDeliveries
	InsertTerminalEntries    = insertTerminalEntries
	SplitStatements          = splitStatements
)

// MigrateWith is Migrate with the migration files at the root of extra
// (NNNN_name.sql) added to the embedded ones: the tests' fixtures of
// migrations this build does not have.
func (s *Store) MigrateWith(ctx context.Context, extra fs.FS) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	more, err := readMigrationFiles(extra, ".")
	if err != nil {
		return err
	}
	if ms, err = sortMigrations(append(ms, more...)); err != nil {
		return err
	}
	return s.migrate(ctx, ms)
}
