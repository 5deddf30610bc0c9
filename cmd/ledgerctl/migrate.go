package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/pgstore"
)

// setupMigrate is the migrate command: apply the pending migrations, or
// with -print write their SQL (no database needed), or with -status list
// the applied and pending versions.
func setupMigrate(fs *flag.FlagSet, c *common) func(context.Context, env, []string) error {
	printSQL := fs.Bool("print", false, "print the SQL of every migration, schema filled in, and change nothing (no database needed)")
	status := fs.Bool("status", false, "list the applied and pending migration versions, and change nothing")
	return func(ctx context.Context, e env, pos []string) error {
		if err := noArgs(pos); err != nil {
			return err
		}
		switch {
		case *printSQL && *status:
			return usage("-print and -status exclude each other")
		case *printSQL && c.json:
			return usage("-print writes SQL, not JSON")
		case *printSQL:
			sql, err := pgstore.MigrationSQL(c.schema)
			if errors.Is(err, ledger.ErrInvalid) {
				return fail("invalid -schema %q: %v", c.schema, err)
			}
			if err != nil {
				return err
			}
			_, err = io.WriteString(e.stdout, sql)
			return err
		}
		store, closePool, err := open(ctx, *c, true)
		if err != nil {
			return err
		}
		defer closePool()
		if *status {
			versions, err := store.MigrationStatus(ctx)
			if err != nil {
				return err
			}
			return printMigrationStatus(e, c, versions)
		}
		if err := store.Migrate(ctx); err != nil {
			return err
		}
		if c.json {
			return writeJSON(e.stdout, map[string]any{"schema": c.schema, "migrated": true})
		}
		fmt.Fprintf(e.stdout, "schema %s is migrated\n", c.schema)
		return nil
	}
}

// migrationJSON is one version in migrate -status -json.
type migrationJSON struct {
	Version       int        `json:"version"`
	Name          string     `json:"name"`
	State         string     `json:"state"` // applied, pending or newer
	AppliedAt     *time.Time `json:"applied_at,omitempty"`
	NoTransaction bool       `json:"no_transaction,omitempty"`
}

// migrationState names a version's state as migrate -status prints it.
func migrationState(v pgstore.MigrationVersion) string {
	switch {
	case !v.Known:
		return "newer" // recorded by a build newer than this one
	case v.Applied():
		return "applied"
	default:
		return "pending"
	}
}

// printMigrationStatus prints migrate -status: a table, or -json.
func printMigrationStatus(e env, c *common, versions []pgstore.MigrationVersion) error {
	counts := map[string]int{}
	out := make([]migrationJSON, 0, len(versions))
	for _, v := range versions {
		m := migrationJSON{Version: v.Version, Name: v.Name, State: migrationState(v), NoTransaction: v.NoTransaction}
		if v.Applied() {
			at := v.AppliedAt
			m.AppliedAt = &at
		}
		counts[m.State]++
		out = append(out, m)
	}
	if c.json {
		return writeJSON(e.stdout, map[string]any{"schema": c.schema, "versions": out})
	}
	tw := newTable(e.stdout)
	fmt.Fprintln(tw, "VERSION\tNAME\tSTATE\tAPPLIED AT")
	for _, m := range out {
		at := "-"
		if m.AppliedAt != nil {
			at = fmtTime(*m.AppliedAt)
		}
		note := ""
		if m.NoTransaction {
			note = "\t(runs outside a transaction)"
		}
		fmt.Fprintf(tw, "%04d\t%s\t%s\t%s%s\n", m.Version, m.Name, m.State, at, note)
	}
	_ = tw.Flush() // a failed write to stdout has nowhere better to go
	fmt.Fprintf(e.stdout, "\nschema %s: %d applied, %d pending", c.schema, counts["applied"], counts["pending"])
	if counts["newer"] > 0 {
		fmt.Fprintf(e.stdout, ", %d from a newer build (migrate refuses this schema)", counts["newer"])
	}
	fmt.Fprintln(e.stdout)
	return nil
}
