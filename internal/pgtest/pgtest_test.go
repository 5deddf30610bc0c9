package pgtest_test

import (
	"context"
	"strings"
	"testing"

	"github.com/leaseledger/ledger/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestSelectOne(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	var n int
	if err := pool.QueryRow(context.Background(), "select 1").Scan(&n); err != nil || n != 1 {
		t.Fatalf("select 1 = %d, %v", n, err)
	}
}

func TestSearchPathEmpty(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	// pg_catalog is searched implicitly, so look at the explicit part only.
	var schemas []string
	if err := pool.QueryRow(ctx, "select current_schemas(false)").Scan(&schemas); err != nil {
		t.Fatal(err)
	}
	if len(schemas) != 0 {
		t.Errorf("current_schemas(false) = %v, want empty", schemas)
	}
	_, err := pool.Exec(ctx, "create table unqualified (id int)")
	if err == nil || !strings.Contains(err.Error(), "no schema has been selected") {
		t.Errorf("unqualified create table: err = %v, want 'no schema has been selected'", err)
	}
}

func TestSchemaDroppedOnCleanup(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	exists := func(name string) bool {
		t.Helper()
		var ok bool
		if err := pool.QueryRow(ctx, "select exists (select from pg_namespace where nspname = $1)", name).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}

	var name string
	t.Run("inner", func(t *testing.T) {
		p := pgtest.Pool(t)
		name = pgtest.Schema(t, p)
		if other := pgtest.Schema(t, p); other == name {
			t.Errorf("Schema returned %q twice", name)
		}
		if exists(name) {
			t.Fatalf("Schema created %q; it must leave that to the migration", name)
		}
		q := `create schema ` + name + `; create table ` + name + `.item (id int); insert into ` + name + `.item values (1)`
		if _, err := p.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
		if !exists(name) {
			t.Fatal("schema not created")
		}
	})
	if name == "" {
		t.Fatal("inner test did not run")
	}
	if exists(name) {
		t.Errorf("schema %q still exists after the test's cleanup", name)
	}
}
