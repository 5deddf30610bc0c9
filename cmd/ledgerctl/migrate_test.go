package main

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger/internal/pgtest"
	"github.com/leaseledger/ledger/pgstore"
)

func TestMigratePrint(t *testing.T) {
	t.Parallel()
	// No database: -print needs none.
	r := cli(t, nil, "migrate", "-print", "-schema", "billing")
	require.Equal(t, exitOK, r.code, r.stderr)
	want, err := pgstore.MigrationSQL("billing")
	require.NoError(t, err)
	assert.Equal(t, want, r.stdout)
	assert.Contains(t, r.stdout, "-- pgstore:migration 0001_init\nCREATE SCHEMA IF NOT EXISTS \"billing\";")
	assert.NotContains(t, r.stdout, "{schema}")

	r = cli(t, nil, "migrate", "-print", "-schema", "no-such-name")
	assert.Equal(t, exitFailed, r.code)
	assert.Contains(t, r.stderr, "invalid -schema")
	assert.Empty(t, r.stdout)

	for _, args := range [][]string{
		{"migrate", "-print", "-status"},
		{"migrate", "-print", "-json"},
	} {
		assert.Equal(t, exitUsage, cli(t, nil, args...).code, args)
	}
}

func TestMigrateStatus(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	type status struct {
		Schema   string          `json:"schema"`
		Versions []migrationJSON `json:"versions"`
	}
	before := decode[status](t, f.run("migrate", "-status", "-json"))
	require.NotEmpty(t, before.Versions)
	for _, v := range before.Versions {
		assert.Equal(t, "pending", v.State, v.Version)
		assert.Nil(t, v.AppliedAt)
	}
	r := f.run("migrate", "-status")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^0001 +init +pending +-$`, r.stdout)
	assert.Contains(t, r.stdout, fmt.Sprintf("0 applied, %d pending", len(before.Versions)))

	require.Equal(t, exitOK, f.run("migrate").code)
	after := decode[status](t, f.run("migrate", "-status", "-json"))
	require.Len(t, after.Versions, len(before.Versions))
	for _, v := range after.Versions {
		assert.Equal(t, "applied", v.State, v.Version)
		assert.NotNil(t, v.AppliedAt)
	}

	// A version from a newer build: listed, and migrate refuses.
	_, err := pgtest.Pool(t).Exec(t.Context(), "INSERT INTO "+pgx.Identifier{f.schema, "schema_migrations"}.Sanitize()+
		" (version, name, applied_at) VALUES (9999, 'from_the_future', now())")
	require.NoError(t, err)
	r = f.run("migrate", "-status")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^9999 +from_the_future +newer `, r.stdout)
	assert.Contains(t, r.stdout, "1 from a newer build")
	r = f.run("migrate")
	assert.Equal(t, exitFailed, r.code)
	assert.Contains(t, r.stderr, "newer build")
}
