package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/internal/pgtest"
	"github.com/leaseledger/ledger/pgstore"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// result is what one in-process run of ledgerctl produced.
type result struct {
	code           int
	stdout, stderr string
}

// cli runs ledgerctl in-process with env as its environment.
func cli(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	code := run(ctx, args, &out, &errOut, func(k string) string { return env[k] })
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// fixture is one test's database: a DSN, a fresh schema and a store on it
// for seeding and checking behind the command's back.
type fixture struct {
	t      *testing.T
	dsn    string
	schema string
	store  *pgstore.Store
	now    time.Time
}

// newFixture returns a fixture whose schema is not migrated yet.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool)
	store, err := pgstore.New(pool, pgstore.WithSchema(schema))
	require.NoError(t, err)
	// The command reads the wall clock, so seeds are placed relative to
	// it; nothing waits for time to pass.
	return &fixture{t: t, dsn: pgtest.DSN(t), schema: schema, store: store, now: time.Now()}
}

// migrated returns a fixture whose schema ledgerctl migrate has created.
func migrated(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t)
	r := f.run("migrate")
	require.Equal(t, exitOK, r.code, r.stderr)
	return f
}

// run runs ledgerctl on the fixture's database and schema.
func (f *fixture) run(args ...string) result {
	f.t.Helper()
	full := append([]string{}, args...)
	full = append(full, "-schema", f.schema)
	return cli(f.t, map[string]string{envDSN: f.dsn}, full...)
}

// enqueue seeds one delivery offered at f.now.
func (f *fixture) enqueue(id, target, ceremony string) {
	f.t.Helper()
	res, err := f.store.Enqueue(f.t.Context(), ledger.EnqueueRequest{
		ID: ledger.DeliveryID(id), Target: ledger.Target(target), Ceremony: ledger.CeremonyID(ceremony),
		Payload: []byte("payload of " + id),
	}, f.now.Add(-time.Hour))
	require.NoError(f.t, err)
	require.Equal(f.t, ledger.OutcomeApplied, res.Outcome)
}

// get reads one delivery back.
func (f *fixture) get(id string) ledger.Delivery {
	f.t.Helper()
	d, err := f.store.Get(f.t.Context(), ledger.DeliveryID(id))
	require.NoError(f.t, err)
	return d
}

// decode parses stdout as the single JSON document the command printed.
func decode[T any](t *testing.T, r result) T {
	t.Helper()
	require.Equal(t, exitOK, r.code, r.stderr)
	var v T
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	require.NoError(t, dec.Decode(&v), r.stdout)
	require.False(t, dec.More(), "more than one JSON document: %s", r.stdout)
	return v
}

func ids(ds []ledger.Delivery) []ledger.DeliveryID {
	out := []ledger.DeliveryID{}
	for _, d := range ds {
		out = append(out, d.ID)
	}
	return out
}

func TestMigrateThenListEmpty(t *testing.T) {
	t.Parallel()
	f := migrated(t)
	// Migrating again is harmless.
	r := f.run("migrate")
	require.Equal(t, exitOK, r.code, r.stderr)

	r = f.run("list")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "0 deliveries")
	assert.Contains(t, r.stdout, "last page")

	page := decode[listJSON](t, f.run("list", "-json"))
	assert.Empty(t, page.Deliveries)
	assert.Empty(t, page.Next)
}

func TestListFiltersAndPages(t *testing.T) {
	t.Parallel()
	f := migrated(t)
	f.enqueue("d1", "host-a", "c1")
	f.enqueue("d2", "host-b", "c1")
	f.enqueue("d3", "host-a", "c2")
	f.enqueue("d4", "host-c", "")
	f.enqueue("d5", "host-b", "c2")
	leased, err := f.store.Lease(t.Context(), ledger.LeaseFilter{Targets: []ledger.Target{"host-c"}},
		ledger.Owner{Agent: "agent", Incarnation: "1"}, f.now, time.Hour, 1)
	require.NoError(t, err)
	require.Len(t, leased.Leased, 1)

	page := decode[listJSON](t, f.run("list", "-json", "-state", "leased"))
	assert.Equal(t, []ledger.DeliveryID{"d4"}, ids(page.Deliveries))
	require.NotNil(t, page.Deliveries[0].Lease)
	assert.Empty(t, page.Deliveries[0].Lease.Token, "tokens stay out of the output")

	page = decode[listJSON](t, f.run("list", "-json", "-state", "offered,leased", "-target", "host-a", "-target", "host-c"))
	assert.Equal(t, []ledger.DeliveryID{"d1", "d3", "d4"}, ids(page.Deliveries))

	page = decode[listJSON](t, f.run("list", "-json", "-ceremony", "c2"))
	assert.Equal(t, []ledger.DeliveryID{"d3", "d5"}, ids(page.Deliveries))

	// Follow the cursor page by page: every delivery once, in ID order.
	var all []ledger.DeliveryID
	cursor := ""
	for range 5 {
		page = decode[listJSON](t, f.run("list", "-json", "-limit", "2", "-cursor", cursor))
		assert.LessOrEqual(t, len(page.Deliveries), 2)
		all = append(all, ids(page.Deliveries)...)
		if cursor = page.Next; cursor == "" {
			break
		}
	}
	assert.Equal(t, []ledger.DeliveryID{"d1", "d2", "d3", "d4", "d5"}, all)

	// The table prints the same cursor the JSON carries.
	first := decode[listJSON](t, f.run("list", "-json", "-limit", "2"))
	require.NotEmpty(t, first.Next)
	r := f.run("list", "-limit", "2")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "next cursor: "+first.Next)
	assert.Contains(t, r.stdout, "d2")
	assert.NotContains(t, r.stdout, "d3")

	// Flag values refused before connecting are usage errors, as an
	// unknown flag is.
	for _, args := range [][]string{{"-state", "bogus"}, {"-limit", "0"}, {"-limit", "-1"}, {"-limit", "1001"}, {"-cursor", "nope"}} {
		r = f.run(append([]string{"list"}, args...)...)
		assert.Equal(t, exitUsage, r.code, args)
		assert.Empty(t, r.stdout, args)
	}
}

func TestShow(t *testing.T) {
	t.Parallel()
	f := migrated(t)
	f.enqueue("d1", "host-a", "c1")
	_, err := f.store.Enqueue(t.Context(), ledger.EnqueueRequest{ID: "d-md", Target: "host-a",
		Metadata: ledger.Metadata{"traceparent": "00-abc-01", "note": "two\nlines"}}, time.Now())
	require.NoError(t, err)
	entry, err := f.store.Outbox().Enqueue(t.Context(), ledger.Envelope{
		Provider: "mail", Kind: "welcome", Payload: []byte("hi"), IdempotencyKey: "key-1",
		Metadata: ledger.Metadata{"tenant": "acme"},
	})
	require.NoError(t, err)
	entryID := string(entry.Entry.ID)
	require.NotEmpty(t, entryID)

	r := f.run("show", "d1")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "d1")
	assert.Contains(t, r.stdout, "host-a")
	assert.Contains(t, r.stdout, string(ledger.DeliveryStateOffered))
	assert.Regexp(t, `(?m)^metadata: +-$`, r.stdout, "no metadata prints a dash")

	// Metadata: one key a line, in key order, values quoted.
	r = f.run("show", "d-md")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Regexp(t, `(?m)^metadata: +note = "two\\nlines"\n +traceparent = "00-abc-01"$`, r.stdout)
	doc := decode[showJSON](t, f.run("show", "-json", "d-md"))
	require.NotNil(t, doc.Delivery)
	assert.Equal(t, ledger.Metadata{"traceparent": "00-abc-01", "note": "two\nlines"}, doc.Delivery.Metadata)

	// Flags after the ID work too.
	doc = decode[showJSON](t, f.run("show", "d1", "-json"))
	assert.Equal(t, "delivery", doc.Kind)
	require.NotNil(t, doc.Delivery)
	assert.Equal(t, f.get("d1"), *doc.Delivery)
	assert.Nil(t, doc.Entry)

	r = f.run("show", entryID)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "key-1")
	assert.Regexp(t, `(?m)^metadata: +tenant = "acme"$`, r.stdout)
	doc = decode[showJSON](t, f.run("show", "-json", entryID))
	assert.Equal(t, "outbox_entry", doc.Kind)
	require.NotNil(t, doc.Entry)
	assert.Equal(t, entry.Entry.ID, doc.Entry.ID)
	assert.Equal(t, ledger.OutboxStatusPending, doc.Entry.Status)

	r = f.run("show", "nope")
	assert.Equal(t, exitNotFound, r.code)
	assert.Contains(t, r.stderr, "nope")
	assert.Empty(t, r.stdout)

	assert.Equal(t, exitUsage, f.run("show").code)
	assert.Equal(t, exitUsage, f.run("show", "a", "b").code)
}

func TestAbandon(t *testing.T) {
	t.Parallel()
	f := migrated(t)
	f.enqueue("d1", "host-a", "")
	f.enqueue("d2", "host-a", "")

	r := f.run("abandon", "d1", "-cause", string(ledger.CauseBindingRevoked), "-detail", "host retired")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "abandoned d1")
	d := f.get("d1")
	assert.Equal(t, ledger.DeliveryStateExpired, d.State)
	assert.Equal(t, &ledger.Cause{Kind: ledger.CauseBindingRevoked, Detail: "host retired"}, d.Cause)
	assert.Equal(t, ledger.DeliveryStateOffered, f.get("d2").State, "only the named delivery ends")

	// The history names the operator, not "nobody".
	h, err := f.store.History(t.Context(), "d1")
	require.NoError(t, err)
	assert.Equal(t, osUser(os.Getenv)()+" via ledgerctl", h[len(h)-1].Actor)

	// Again: already ended, said so, not applied (exit 4, as a redrive
	// that does not apply), nothing changed.
	r = f.run("abandon", "d1", "-cause", "other")
	require.Equal(t, exitNotApplied, r.code, r.stderr)
	assert.Contains(t, r.stderr, "already ended")
	assert.Equal(t, d, f.get("d1"))

	r = f.run("abandon", "-json", "-cause", "other", "d1")
	assert.Equal(t, exitNotApplied, r.code, "the document comes with the exit code")
	var doc abandonJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc), r.stdout)
	assert.Equal(t, ledger.OutcomeEnded, doc.Outcome)
	assert.Equal(t, ledger.DeliveryID("d1"), doc.Delivery.ID)

	r = f.run("abandon", "nope", "-cause", "x")
	assert.Equal(t, exitNotFound, r.code)
	assert.Contains(t, r.stderr, "nope")

	assert.Equal(t, exitUsage, f.run("abandon", "d2").code, "missing -cause")
	assert.Equal(t, exitUsage, f.run("abandon", "-cause", "x").code, "missing ID")
	assert.Equal(t, exitUsage, f.run("abandon", "d2", "-cause", "bad\x01kind").code, "invalid cause")
	assert.Equal(t, ledger.DeliveryStateOffered, f.get("d2").State, "rejected calls change nothing")
}

func TestExpireCeremony(t *testing.T) {
	t.Parallel()
	f := migrated(t)
	f.enqueue("a1", "host-a", "c1")
	f.enqueue("a2", "host-b", "c1")
	f.enqueue("b1", "host-a", "c2")

	doc := decode[sweepJSON](t, f.run("expire-ceremony", "c1", "-cause", string(ledger.CauseCeremonyEnded), "-json"))
	assert.Equal(t, ledger.CeremonyID("c1"), doc.Ceremony)
	assert.Equal(t, []ledger.DeliveryID{"a1", "a2"}, doc.Changed)
	for _, id := range []string{"a1", "a2"} {
		d := f.get(id)
		assert.Equal(t, ledger.DeliveryStateExpired, d.State)
		assert.Equal(t, ledger.CauseCeremonyEnded, d.Cause.Kind)
	}
	assert.Equal(t, ledger.DeliveryStateOffered, f.get("b1").State)

	r := f.run("expire-ceremony", "c1", "-cause", string(ledger.CauseCeremonyEnded))
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "expired 0 ")

	assert.Equal(t, exitUsage, f.run("expire-ceremony", "c2").code)
	assert.Equal(t, ledger.DeliveryStateOffered, f.get("b1").State)
}

func TestPurge(t *testing.T) {
	t.Parallel()
	f := migrated(t)
	ctx := t.Context()
	old := f.now.Add(-48 * time.Hour)
	cause := ledger.Cause{Kind: ledger.CauseQueueBounded}

	// More than one batch of old, ended deliveries, so the loop must go on.
	const oldCount = ledger.MaxLimit + 3
	reqs := make([]ledger.EnqueueRequest, 0, ledger.MaxLimit)
	for i := range ledger.MaxLimit {
		reqs = append(reqs, ledger.EnqueueRequest{ID: ledger.DeliveryID(fmt.Sprintf("old-%04d", i)), Target: "t", Ceremony: "old"})
	}
	_, err := f.store.EnqueueBatch(ctx, reqs, old.Add(-time.Hour))
	require.NoError(t, err)
	for i := ledger.MaxLimit; i < oldCount; i++ {
		_, err := f.store.Enqueue(ctx, ledger.EnqueueRequest{ID: ledger.DeliveryID(fmt.Sprintf("old-%04d", i)), Target: "t", Ceremony: "old"}, old.Add(-time.Hour))
		require.NoError(t, err)
	}
	swept, err := f.store.ExpireCeremony(ctx, "old", cause, old)
	require.NoError(t, err)
	require.Len(t, swept.Changed, oldCount)

	f.enqueue("recent", "t", "")
	_, err = f.store.Abandon(ctx, "recent", cause, f.now.Add(-time.Minute))
	require.NoError(t, err)
	f.enqueue("open", "t", "")

	// Outbox entries stamp their times with the store's clock: one that
	// ended long ago, one still pending.
	oldOutbox, err := pgstore.New(pgtest.Pool(t), pgstore.WithSchema(f.schema), pgstore.WithClock(func() time.Time { return old }))
	require.NoError(t, err)
	ended, err := oldOutbox.Outbox().Enqueue(ctx, ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: "ended"})
	require.NoError(t, err)
	_, err = oldOutbox.Outbox().MarkDelivered(ctx, ended.Entry.ID, ledger.EmissionResult{ProviderRef: "r"})
	require.NoError(t, err)
	pending, err := f.store.Outbox().Enqueue(ctx, ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: "pending"})
	require.NoError(t, err)

	doc := decode[purgeJSON](t, f.run("purge", "-older-than", "24h", "-json"))
	assert.Equal(t, int64(oldCount), doc.Deliveries)
	assert.Equal(t, int64(1), doc.OutboxEntries)
	_, err = f.store.Get(ctx, "old-0000")
	require.ErrorIs(t, err, ledger.ErrNotFound)
	_, err = f.store.Outbox().FindByID(ctx, ended.Entry.ID)
	require.ErrorIs(t, err, ledger.ErrNotFound)
	assert.Equal(t, ledger.DeliveryStateExpired, f.get("recent").State)
	assert.Equal(t, ledger.DeliveryStateOffered, f.get("open").State)
	_, err = f.store.Outbox().FindByID(ctx, pending.Entry.ID)
	require.NoError(t, err)

	// An RFC 3339 cut-off after the recent end takes it too; open work stays.
	r := f.run("purge", "-older-than", f.now.Add(time.Hour).Format(time.RFC3339))
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "purged 1 deliveries and 0 outbox entries")
	_, err = f.store.Get(ctx, "recent")
	require.ErrorIs(t, err, ledger.ErrNotFound)
	assert.Equal(t, ledger.DeliveryStateOffered, f.get("open").State)

	assert.Equal(t, exitUsage, f.run("purge").code)
	assert.Equal(t, exitUsage, f.run("purge", "-older-than", "yesterday").code)
	assert.Equal(t, exitUsage, f.run("purge", "-older-than", "-1h").code)
}

func TestBadDSN(t *testing.T) {
	t.Parallel()
	// Port 1 refuses at once; the password must not reach the message.
	dsn := "postgres://ops:s3cret@127.0.0.1:1/ledger?connect_timeout=5"
	r := cli(t, nil, "list", "-dsn", dsn)
	assert.Equal(t, exitFailed, r.code)
	assert.Contains(t, r.stderr, "cannot connect to 127.0.0.1:1/ledger")
	assert.NotContains(t, r.stderr, "s3cret")

	// The environment variable is the default.
	r = cli(t, map[string]string{envDSN: dsn}, "show", "x")
	assert.Equal(t, exitFailed, r.code)
	assert.Contains(t, r.stderr, "cannot connect to")

	r = cli(t, nil, "list", "-dsn", "postgres://ops:s3cret@[bad")
	assert.Equal(t, exitFailed, r.code)
	assert.Contains(t, r.stderr, "cannot connect to")

	r = cli(t, nil, "list")
	assert.Equal(t, exitUsage, r.code, "no DSN at all")
	assert.Contains(t, r.stderr, envDSN)
}

func TestUnmigratedSchema(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, args := range [][]string{{"list"}, {"show", "x"}, {"abandon", "x", "-cause", "k"}, {"purge", "-older-than", "1h"}} {
		r := f.run(args...)
		assert.Equal(t, exitFailed, r.code, args)
		assert.Contains(t, r.stderr, "schema "+f.schema+" is not migrated: run ledgerctl migrate", args)
	}
}

func TestUsage(t *testing.T) {
	t.Parallel()
	r := cli(t, nil, "frobnicate")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, "frobnicate")

	assert.Equal(t, exitUsage, cli(t, nil).code)
	assert.Equal(t, exitUsage, cli(t, nil, "list", "-nosuchflag").code)
	assert.Equal(t, exitUsage, cli(t, nil, "migrate", "extra").code)

	r = cli(t, nil, "-h")
	assert.Equal(t, exitOK, r.code)
	assert.Contains(t, r.stdout, "exit codes")
	r = cli(t, map[string]string{envDSN: "postgres://ops:s3cret@db/ledger"}, "abandon", "-h")
	assert.Equal(t, exitOK, r.code)
	assert.Contains(t, r.stderr, "-cause")
	assert.NotContains(t, r.stderr+r.stdout, "s3cret", "help never shows the DSN")

	r = cli(t, nil, "list", "-dsn", "postgres://127.0.0.1:1/x", "-schema", "bad-name")
	assert.Equal(t, exitFailed, r.code)
	assert.Contains(t, r.stderr, "invalid -schema")
}

func TestParseCutoff(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	got, err := parseCutoff("-older-than", "36h", now)
	require.NoError(t, err)
	assert.Equal(t, now.Add(-36*time.Hour), got)
	got, err = parseCutoff("-older-than", "2025-12-01T00:00:00+01:00", now)
	require.NoError(t, err)
	assert.Equal(t, time.Date(2025, 11, 30, 23, 0, 0, 0, time.UTC), got)
	_, err = parseCutoff("-older-than", "0s", now)
	assert.Error(t, err)
}
