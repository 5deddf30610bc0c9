package ledger

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestImportRule proves the dependency rule: the root package and the
// store writer's kit (storekit) need only the standard library and uuid
// (and the kit the root package); only pgstore and its test helper
// pgstoretest (and the programs and test harness that hand it a pool)
// import pgx; no library package imports anything outside the module,
// the standard library, uuid and, for the conformance suite, testify.
func TestImportRule(t *testing.T) {
	const module = "github.com/leaseledger/ledger"
	allowed := map[string]func(string) bool{
		".":        func(p string) bool { return p == "github.com/google/uuid" },
		"memstore": func(p string) bool { return strings.HasPrefix(p, module) },
		"dispatch": func(p string) bool { return strings.HasPrefix(p, module) },
		// shard composes any store: it sees only the contract, and the
		// store writer's kit for the sums and orders it merges.
		"shard": func(p string) bool { return p == module || p == module+"/storekit" || p == "github.com/google/uuid" },
		// The store writer's kit is the state machine over the contract's
		// records: nothing but them, the standard library and uuid.
		"storekit": func(p string) bool { return p == module || p == "github.com/google/uuid" },
		"ledgertest": func(p string) bool {
			return strings.HasPrefix(p, module) || strings.HasPrefix(p, "github.com/stretchr/testify/")
		},
		"pgstore": func(p string) bool {
			return strings.HasPrefix(p, module) || strings.HasPrefix(p, "github.com/jackc/pgx/v5")
		},
		"pgstore/pgstoretest": func(p string) bool {
			return strings.HasPrefix(p, module) || strings.HasPrefix(p, "github.com/jackc/pgx/v5")
		},
	}
	imports := map[string][]string{} // package dir -> non-test imports
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			imports[filepath.Dir(path)] = append(imports[filepath.Dir(path)], p)
		}
		return nil
	})
	require.NoError(t, err)
	require.Contains(t, imports, ".", "the walk must see the root package")
	require.Contains(t, imports, "storekit", "the walk must see the store writer's kit")

	for dir, ps := range imports {
		for _, p := range ps {
			if !strings.Contains(strings.Split(p, "/")[0], ".") {
				continue // the standard library
			}
			if strings.HasPrefix(p, "github.com/jackc/") {
				assert.True(t, strings.HasPrefix(dir, "pgstore") || strings.HasPrefix(dir, "internal") || strings.HasPrefix(dir, "cmd") ||
					strings.HasPrefix(dir, filepath.Join("otel", "cmd")),
					"%s imports %s: only pgstore, its test helper (and the programs and test harness that build its pool) may import pgx", dir, p)
			}
			if ok, ruled := allowed[dir]; ruled {
				assert.True(t, ok(p), "%s must not import %s", dir, p)
			}
		}
	}
}
