package pgstore

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSplitStatements(t *testing.T) {
	for name, tc := range map[string]struct {
		sql  string
		want []string
	}{
		"Plain": {
			sql:  "CREATE TABLE a (x int);\nCREATE TABLE b (y int);\n",
			want: []string{"CREATE TABLE a (x int)", "CREATE TABLE b (y int)"},
		},
		"LeadingAndTrailingComments": {
			sql:  "-- header; with a semicolon\n\n-- more\nSELECT 1;\n-- trailing; comment\n",
			want: []string{"SELECT 1"},
		},
		"NoFinalSemicolon": {
			sql:  "SELECT 1;\nSELECT 2\n",
			want: []string{"SELECT 1", "SELECT 2"},
		},
		"SemicolonsInStringsAndIdentifiers": {
			sql:  `SELECT 'a;b', 'it''s;', "we;ird""name" FROM t; SELECT 2;`,
			want: []string{`SELECT 'a;b', 'it''s;', "we;ird""name" FROM t`, "SELECT 2"},
		},
		"EscapeStrings": {
			sql:  `SELECT E'a\';b'; SELECT 'x\'; SELECT 3;`,
			want: []string{`SELECT E'a\';b'`, `SELECT 'x\'`, "SELECT 3"},
		},
		"NestedBlockComments": {
			sql:  "SELECT /* a; /* b; */ c; */ 1; SELECT 2;",
			want: []string{"SELECT /* a; /* b; */ c; */ 1", "SELECT 2"},
		},
		"DollarQuotes": {
			sql:  "DO $$ BEGIN PERFORM 1; END $$; DO $fn$ SELECT '$$;' $fn$; SELECT $1;",
			want: []string{"DO $$ BEGIN PERFORM 1; END $$", "DO $fn$ SELECT '$$;' $fn$", "SELECT $1"},
		},
		"CommentMarkersInStrings": {
			sql:  "SELECT '-- not a comment;', '/* nor; this'; SELECT 2;",
			want: []string{"SELECT '-- not a comment;', '/* nor; this'", "SELECT 2"},
		},
		"OnlyComments": {
			sql:  "-- nothing\n/* at all; */\n;\n",
			want: nil,
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := splitStatements(tc.sql)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}

	for name, sql := range map[string]string{
		"UnterminatedString":     "SELECT 'abc;",
		"UnterminatedIdentifier": `SELECT "abc;`,
		"UnterminatedComment":    "SELECT /* a /* b */ 1;",
		"UnterminatedDollar":     "DO $x$ BEGIN END;",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := splitStatements(sql)
			require.Error(t, err)
		})
	}

	// Every embedded migration splits into statements that each start
	// with a keyword, and none is cut inside its text.
	t.Run("EmbeddedMigrations", func(t *testing.T) {
		ms, err := loadMigrations()
		require.NoError(t, err)
		for _, m := range ms {
			stmts, err := splitStatements(m.sql)
			require.NoError(t, err, m.id())
			require.NotEmpty(t, stmts, m.id())
			for _, st := range stmts {
				first := strings.Fields(st)[0]
				assert.Contains(t, []string{"CREATE", "ALTER", "DROP", "UPDATE", "INSERT", "SELECT", "DO"}, first, "%s: %q", m.id(), st)
			}
		}
	})
}

func TestIndexStatementOf(t *testing.T) {
	for stmt, want := range map[string]indexStatement{
		"CREATE INDEX a ON t (x)":                                  {create: true},
		"create unique index concurrently if not exists a on t(x)": {create: true, concurrently: true, ifExists: true, names: []string{"A"}},
		"CREATE INDEX CONCURRENTLY a ON t (x)":                     {create: true, concurrently: true},
		`CREATE INDEX IF NOT EXISTS "Odd" ON t (x)`:                {create: true, ifExists: true, names: []string{"ODD"}},
		"DROP INDEX {schema}.a":                                    {drop: true},
		"DROP INDEX CONCURRENTLY IF EXISTS {schema}.a":             {drop: true, concurrently: true, ifExists: true, names: []string{"A"}},
		"DROP INDEX IF EXISTS a, {schema}.b CASCADE":               {drop: true, ifExists: true, names: []string{"A", "B"}},
		"REINDEX (VERBOSE, CONCURRENTLY) INDEX a":                  {concurrently: true},
		"REINDEX INDEX a":                                          {},
		"CREATE TABLE a (x int)":                                   {},
		"REFRESH MATERIALIZED VIEW CONCURRENTLY v":                 {},
	} {
		assert.Equal(t, want, indexStatementOf(stmt), stmt)
	}
}

func TestParseMigration(t *testing.T) {
	t.Run("NoTransactionSteps", func(t *testing.T) {
		m, err := parseMigration(8, "x", "-- 0008_x: two steps\n-- pgstore:no-transaction\n\n"+
			"CREATE INDEX CONCURRENTLY IF NOT EXISTS a ON {schema}.t (x);\n"+
			"DROP INDEX CONCURRENTLY IF EXISTS {schema}.b;\n")
		require.NoError(t, err)
		assert.True(t, m.noTx)
		assert.Equal(t, []string{
			"CREATE INDEX CONCURRENTLY IF NOT EXISTS a ON {schema}.t (x)",
			"DROP INDEX CONCURRENTLY IF EXISTS {schema}.b",
		}, m.steps)
	})

	t.Run("TransactionalByDefault", func(t *testing.T) {
		m, err := parseMigration(8, "x", "-- a comment that names pgstore:no-transaction\nCREATE INDEX a ON {schema}.t (x);\n")
		require.NoError(t, err)
		assert.False(t, m.noTx)
		assert.Nil(t, m.steps)
	})

	// A directive after the first statement is a comment, not a
	// directive: the file runs in a transaction.
	t.Run("DirectiveOnlyInTheHeader", func(t *testing.T) {
		m, err := parseMigration(8, "x", "SELECT 1;\n-- pgstore:no-transaction\n")
		require.NoError(t, err)
		assert.False(t, m.noTx)
	})

	for name, body := range map[string]string{
		"UnknownDirective":          "-- pgstore:no-transactions\nSELECT 1;",
		"ConcurrentlyInTransaction": "CREATE INDEX CONCURRENTLY IF NOT EXISTS a ON {schema}.t (x);",
		"ReindexConcurrentlyInTx":   "REINDEX INDEX CONCURRENTLY {schema}.a;",
		"BuildNotConcurrently":      "-- pgstore:no-transaction\nCREATE INDEX IF NOT EXISTS a ON {schema}.t (x);",
		"BuildNotIdempotent":        "-- pgstore:no-transaction\nCREATE INDEX CONCURRENTLY a ON {schema}.t (x);",
		"DropNotConcurrently":       "-- pgstore:no-transaction\nDROP INDEX IF EXISTS {schema}.a;",
		"DropNotIdempotent":         "-- pgstore:no-transaction\nDROP INDEX CONCURRENTLY {schema}.a;",
		"NameBuiltAndDropped": "-- pgstore:no-transaction\nDROP INDEX CONCURRENTLY IF EXISTS {schema}.a;\n" +
			"CREATE INDEX CONCURRENTLY IF NOT EXISTS a ON {schema}.t (x);",
		"NoStatements": "-- only a comment\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := parseMigration(8, "x", body)
			require.Error(t, err)
		})
	}

	t.Run("FirstMigrationRunsInATransaction", func(t *testing.T) {
		_, err := readMigrations(fstest.MapFS{
			"0001_a.sql": {Data: []byte("-- pgstore:no-transaction\nCREATE INDEX CONCURRENTLY IF NOT EXISTS a ON t (x);")},
		}, ".")
		require.Error(t, err)
	})

	t.Run("FileNames", func(t *testing.T) {
		for _, name := range []string{"1_a.sql", "0000_a.sql", "0001.sql", "0001_.sql", "abcd_a.sql"} {
			_, err := readMigrations(fstest.MapFS{name: {Data: []byte("SELECT 1;")}}, ".")
			require.Error(t, err, name)
		}
		_, err := readMigrations(fstest.MapFS{
			"0001_a.sql": {Data: []byte("SELECT 1;")},
			"0001_b.sql": {Data: []byte("SELECT 1;")},
		}, ".")
		require.Error(t, err, "two files of one version")
	})
}
