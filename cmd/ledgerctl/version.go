package main

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/leaseledger/ledger/pgstore"
)

// versionJSON is the -json document of version.
type versionJSON struct {
	// Version is the module version ledgerctl was built from, "(devel)"
	// for a build from a checkout.
	Version string `json:"version"`
	Go      string `json:"go"`
	// SchemaVersion is the migration Migrate brings a schema to.
	SchemaVersion int `json:"schema_version"`
}

// setupVersion is the version command; it needs no database.
func setupVersion(_ *flag.FlagSet, c *common) func(context.Context, env, []string) error {
	return func(_ context.Context, e env, pos []string) error {
		if err := noArgs(pos); err != nil {
			return err
		}
		v := versionJSON{Version: "(unknown)", Go: runtime.Version(), SchemaVersion: pgstore.SchemaVersion()}
		if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
			v.Version = info.Main.Version
		}
		if c.json {
			return writeJSON(e.stdout, v)
		}
		fmt.Fprintf(e.stdout, "ledgerctl %s (%s), schema version %d\n", v.Version, v.Go, v.SchemaVersion)
		return nil
	}
}
