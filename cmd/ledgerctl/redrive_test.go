package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/pgstore"
)

// failed seeds a delivery that failed for good an hour before f.now.
func (f *fixture) failed(id, target string) {
	f.t.Helper()
	f.enqueue(id, target, "")
	ctx := f.t.Context()
	lr, err := f.store.Lease(ctx, ledger.LeaseFilter{Targets: []ledger.Target{ledger.Target(target)}},
		ledger.Owner{Agent: "agent", Incarnation: "1"}, f.now.Add(-time.Hour), time.Minute, 1)
	require.NoError(f.t, err)
	require.Len(f.t, lr.Leased, 1)
	res, err := f.store.MarkFailed(ctx, lr.Leased[0].Lease, ledger.FailureReason{Message: "550", Permanent: true}, f.now.Add(-time.Hour))
	require.NoError(f.t, err)
	require.Equal(f.t, ledger.DeliveryStateFailed, res.Delivery.State)
}

// entry seeds an outbox entry for key with provider, ended as status
// (pending leaves it open), and returns its ID.
func (f *fixture) entry(key, provider string, status ledger.OutboxStatus) string {
	f.t.Helper()
	o := f.store.Outbox()
	ctx := f.t.Context()
	res, err := o.Enqueue(ctx, ledger.Envelope{Provider: provider, Kind: "notice", Payload: []byte(key), IdempotencyKey: key})
	require.NoError(f.t, err)
	id := res.Entry.ID
	switch status {
	case ledger.OutboxStatusDeadLettered:
		_, err = o.MarkDeadLettered(ctx, id, ledger.EmissionError{Code: "550"}, "no mailbox")
	case ledger.OutboxStatusFailed:
		_, err = o.MarkFailed(ctx, id, ledger.EmissionError{Message: "boom"}, nil)
	case ledger.OutboxStatusDelivered:
		_, err = o.MarkDelivered(ctx, id, ledger.EmissionResult{})
	}
	require.NoError(f.t, err)
	return string(id)
}

func TestRedriveByID(t *testing.T) {
	t.Parallel()
	f := migrated(t)
	f.failed("d1", "host-a")
	f.enqueue("open", "host-a", "")

	r := f.run("redrive", "d1")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "redrove d1 as d1/redrive")
	assert.Equal(t, ledger.DeliveryID("d1/redrive"), f.get("d1").RedrivenTo)
	assert.Equal(t, ledger.DeliveryStateOffered, f.get("d1/redrive").State)
	assert.Equal(t, ledger.DeliveryStateFailed, f.get("d1").State, "the original keeps its end")

	// Again: already done, said so, still success.
	r = f.run("redrive", "d1")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "already redriven as d1/redrive")
	doc := decode[redriveJSON](t, f.run("redrive", "-json", "d1"))
	assert.Equal(t, []redriveLine{{ID: "d1", Outcome: ledger.OutcomeRepeated, As: "d1/redrive"}}, doc.Records)
	assert.Zero(t, doc.Count)

	r = f.run("redrive", "open")
	assert.Equal(t, exitNotApplied, r.code)
	assert.Contains(t, r.stderr, "only failed and expired deliveries")
	r = f.run("redrive", "nope")
	assert.Equal(t, exitNotFound, r.code)

	// An outbox entry's ID works too, as in show.
	dead := f.entry("k1", "mail", ledger.OutboxStatusDeadLettered)
	r = f.run("redrive", dead)
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "as "+string(ledger.OutboxEntryIDFor("k1/redrive")))
}

func TestRedriveByFilter(t *testing.T) {
	t.Parallel()
	f := migrated(t)
	f.failed("f-a", "host-a")
	f.failed("f-b", "host-b")
	f.enqueue("x-a", "host-a", "")
	res, err := f.store.Abandon(t.Context(), "x-a", ledger.Cause{Kind: "operator"}, f.now.Add(-time.Minute))
	require.NoError(t, err)
	require.True(t, res.Applied())
	f.enqueue("open", "host-a", "")
	before := f.all()

	r := f.run("redrive", "-target", "host-a", "-dry-run")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "would redrive f-a as f-a/redrive")
	assert.Contains(t, r.stdout, "would redrive x-a as x-a/redrive")
	assert.Contains(t, r.stdout, "would redrive 2 deliveries")
	assert.NotContains(t, r.stdout, "f-b")
	assert.Equal(t, before, f.all(), "a dry run changes nothing")

	dry := decode[redriveJSON](t, f.run("redrive", "-json", "-state", "failed", "-dry-run"))
	assert.True(t, dry.DryRun)
	assert.Equal(t, 2, dry.Count)

	doc := decode[redriveJSON](t, f.run("redrive", "-json", "-state", "failed"))
	assert.Equal(t, 2, doc.Count)
	assert.ElementsMatch(t, []string{"f-a", "f-b"}, []string{doc.Records[0].ID, doc.Records[1].ID})
	assert.Equal(t, ledger.DeliveryStateExpired, f.get("x-a").State, "-state failed leaves the expired one")
	assert.Empty(t, f.get("x-a").RedrivenTo)

	r = f.run("redrive", "-all")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "redrove 1 deliveries")
	r = f.run("redrive", "-all")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "redrove 0 deliveries")

	for _, args := range [][]string{
		{"redrive"},                                // neither an ID nor a filter
		{"redrive", "f-a", "-state", "failed"},     // both
		{"redrive", "-state", "processed"},         // not redrivable
		{"redrive", "-ended-before", "yesterday"},  // not a time
		{"redrive", "-target", "bad\x01name"},      // not a name
		{"redrive", "f-a", "-new-id", "bad\x00id"}, // not an ID
	} {
		assert.Equal(t, exitUsage, f.run(args...).code, args)
	}
}

// all returns every delivery, through the store.
func (f *fixture) all() []ledger.Delivery {
	f.t.Helper()
	p, err := f.store.List(f.t.Context(), ledger.ListQuery{Limit: ledger.MaxLimit})
	require.NoError(f.t, err)
	return p.Deliveries
}

func TestOutboxCommands(t *testing.T) {
	t.Parallel()
	f := migrated(t)
	dead := f.entry("k-dead", "mail", ledger.OutboxStatusDeadLettered)
	failed := f.entry("k-failed", "sms", ledger.OutboxStatusFailed)
	pending := f.entry("k-pending", "mail", ledger.OutboxStatusPending)
	f.entry("k-done", "mail", ledger.OutboxStatusDelivered)

	page := decode[outboxListJSON](t, f.run("outbox", "list", "-status", "dead_lettered", "-provider", "mail", "-json"))
	require.Len(t, page.Entries, 1)
	assert.Equal(t, ledger.OutboxEntryID(dead), page.Entries[0].ID)
	r := f.run("outbox", "list", "-provider", "mail")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, pending)
	assert.Contains(t, r.stdout, "3 outbox entries on this page")
	assert.NotContains(t, r.stdout, failed)
	assert.Equal(t, exitUsage, f.run("outbox", "list", "-status", "lost").code)
	assert.Equal(t, exitUsage, f.run("outbox", "list", "-limit", "-1").code)

	stats := decode[outboxStatsJSON](t, f.run("outbox", "stats", "-json"))
	assert.Equal(t, int64(1), stats.Outbox.ByStatus[ledger.OutboxStatusDeadLettered])
	assert.Equal(t, int64(1), stats.Outbox.ByStatus[ledger.OutboxStatusPending])
	assert.Equal(t, int64(1), stats.Outbox.Depth)

	show := decode[showJSON](t, f.run("outbox", "show", dead, "-json"))
	require.NotNil(t, show.Entry)
	assert.Equal(t, ledger.OutboxStatusDeadLettered, show.Entry.Status)
	assert.Len(t, show.History, 2)
	assert.Equal(t, exitNotFound, f.run("outbox", "show", "nope").code)

	// Redrive by filter: only the dead-lettered mail.
	r = f.run("outbox", "redrive", "-status", "dead_lettered", "-dry-run")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "would redrive 1 outbox entries")
	doc := decode[redriveJSON](t, f.run("outbox", "redrive", "-provider", "mail", "-json"))
	assert.Equal(t, 1, doc.Count)
	assert.Equal(t, dead, doc.Records[0].ID)
	got, err := f.store.Outbox().FindByID(t.Context(), ledger.OutboxEntryIDFor("k-dead/redrive"))
	require.NoError(t, err)
	assert.Equal(t, ledger.OutboxStatusPending, got.Status)

	r = f.run("outbox", "redrive", failed, "-new-key", "k-failed-again")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, string(ledger.OutboxEntryIDFor("k-failed-again")))
	r = f.run("outbox", "redrive", pending)
	assert.Equal(t, exitNotApplied, r.code)
	assert.Contains(t, r.stderr, "only failed and dead-lettered entries")

	r = f.run("outbox")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, "list, show, stats, redrive")
}

func TestExpireAndPurgeDryRun(t *testing.T) {
	t.Parallel()
	f := migrated(t)
	f.enqueue("d1", "host-a", "")
	f.enqueue("d2", "host-a", "")
	lr, err := f.store.Lease(t.Context(), ledger.LeaseFilter{}, ledger.Owner{Agent: "agent", Incarnation: "1"}, f.now.Add(-time.Hour), time.Minute, 1)
	require.NoError(t, err)
	require.Len(t, lr.Leased, 1)
	held := lr.Leased[0].Delivery.ID

	// show says what the fields alone do not: the lease ran out.
	r := f.run("show", string(held))
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "note: the lease of agent/1 ran out at")
	doc := decode[showJSON](t, f.run("show", string(held), "-json"))
	assert.True(t, doc.LeaseExpired)
	assert.NotEmpty(t, doc.Notes)
	other := decode[showJSON](t, f.run("show", "d2", "-json"))
	assert.False(t, other.LeaseExpired)
	assert.Empty(t, other.Notes)

	ex := decode[expireJSON](t, f.run("expire", "-json"))
	assert.Equal(t, []ledger.DeliveryID{held}, ex.Changed)
	assert.Equal(t, ledger.DeliveryStateOffered, f.get(string(held)).State)
	r = f.run("expire")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "expired 0 deliveries")

	f.failed("gone", "host-b")
	f.entry("k1", "mail", ledger.OutboxStatusDelivered)
	before := f.all()
	dry := decode[purgeJSON](t, f.run("purge", "-older-than", "1s", "-dry-run", "-json"))
	assert.True(t, dry.DryRun)
	assert.Equal(t, int64(1), dry.Deliveries)
	assert.Equal(t, int64(0), dry.OutboxEntries, "the entry ended less than a second ago")
	assert.Equal(t, before, f.all(), "a dry run deletes nothing")
	r = f.run("purge", "-older-than", f.now.Add(time.Hour).Format(time.RFC3339), "-dry-run")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "would purge 1 deliveries and 1 outbox entries")
}

func TestHelpIsTheCommandTable(t *testing.T) {
	t.Parallel()
	r := cli(t, nil, "help")
	require.Equal(t, exitOK, r.code)
	for _, c := range commands() {
		assert.Contains(t, r.stdout, strings.TrimSpace("  "+c.name+" "+c.synopsis)+"\n", c.name)
		assert.Contains(t, r.stdout, c.help, c.name)
	}
	assert.Contains(t, r.stdout, "  stats ")
	r = cli(t, nil, "help", "outbox", "redrive")
	assert.Equal(t, exitOK, r.code)
	assert.Contains(t, r.stderr, "-dry-run")
	assert.Contains(t, r.stderr, "usage: ledgerctl outbox redrive")
}

func TestCommonFlagsBeforeTheCommand(t *testing.T) {
	t.Parallel()
	f := migrated(t)
	f.enqueue("d1", "host-a", "")
	env := map[string]string{envDSN: f.dsn}
	page := decode[listJSON](t, cli(t, env, "-json", "-schema", f.schema, "list"))
	assert.Equal(t, []ledger.DeliveryID{"d1"}, ids(page.Deliveries))
	page = decode[listJSON](t, cli(t, nil, "-dsn", f.dsn, "-schema", f.schema, "list", "-json"))
	assert.Equal(t, []ledger.DeliveryID{"d1"}, ids(page.Deliveries))
	// After the command wins over before it.
	r := cli(t, env, "-schema", "nosuchschema", "list", "-schema", f.schema)
	assert.Equal(t, exitOK, r.code, r.stderr)
	assert.Equal(t, exitUsage, cli(t, env, "-nosuchflag", "list").code)
}

func TestVersion(t *testing.T) {
	t.Parallel()
	r := cli(t, nil, "version")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "ledgerctl ")
	v := decode[versionJSON](t, cli(t, nil, "-json", "version"))
	assert.Equal(t, pgstore.SchemaVersion(), v.SchemaVersion)
	assert.GreaterOrEqual(t, v.SchemaVersion, 10)
	assert.NotEmpty(t, v.Go)
}

func TestJSONDurationsAreNanosecondsNamedSo(t *testing.T) {
	t.Parallel()
	f := migrated(t)
	f.enqueue("d1", "host-a", "")
	for _, args := range [][]string{{"stats", "-json"}, {"outbox", "stats", "-json"}, {"show", "d1", "-json"}, {"list", "-json"}} {
		r := f.run(args...)
		require.Equal(t, exitOK, r.code, r.stderr)
		var doc any
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
		for _, k := range jsonKeys(doc) {
			for _, word := range []string{"lag", "backoff", "window", "duration", "timeout"} {
				if strings.Contains(k, word) {
					assert.True(t, strings.HasSuffix(k, "_ns"), "%v: key %q holds a duration without its unit", args, k)
				}
			}
		}
	}
}

// jsonKeys returns every object key in a decoded JSON document.
func jsonKeys(v any) []string {
	var keys []string
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			keys = append(keys, k)
			keys = append(keys, jsonKeys(c)...)
		}
	case []any:
		for _, c := range x {
			keys = append(keys, jsonKeys(c)...)
		}
	}
	return keys
}

// stepClock is a clock that moves on by step at every reading.
type stepClock struct {
	mu   sync.Mutex
	now  time.Time
	step time.Duration
}

func (c *stepClock) read() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(c.step)
	return c.now
}

// TestProgressDuringOneCall: a command whose batches run inside one
// library call prints the same lines, paced by the ticker, and none
// after it stopped them.
func TestProgressDuringOneCall(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	clock := &stepClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), step: 700 * time.Millisecond}
	ticks := make(chan time.Time)
	stopped := false
	e := env{stderr: &stderr, clock: clock.read, tick: func(d time.Duration) (<-chan time.Time, func()) {
		assert.Equal(t, progressEvery, d)
		return ticks, func() { stopped = true }
	}}
	tick := func() {
		select {
		case ticks <- time.Time{}:
		case <-time.After(10 * time.Second):
			t.Fatal("the progress loop took no tick")
		}
	}
	stop := e.during("expire") // the clock reads 0.7s
	tick()                     // 1.4s: 0.7s in, too soon
	tick()                     // 2.1s: 1.4s in, the first line
	tick()                     // 2.8s: within a second of it
	stop()
	assert.True(t, stopped, "the ticker is stopped")
	assert.Equal(t, "ledgerctl: expire: still running after 1.4s\n", stderr.String())
	select {
	case ticks <- time.Time{}:
		t.Fatal("a tick was taken after stop")
	default:
	}
	// Without a ticker (the tests' in-process runs) nothing is started.
	env{stderr: &stderr, clock: clock.read}.during("expire")()
}

func TestProgressLine(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	clock := &stepClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), step: 400 * time.Millisecond}
	p := env{stderr: &stderr, clock: clock.read}.progress("purge")
	p.report("%d done", 1) // 0.4s: too soon
	p.report("%d done", 2) // 0.8s: too soon
	assert.Empty(t, stderr.String(), "a command that ends within a second prints no progress")
	p.report("%d done", 3) // 1.2s: the first line
	p.report("%d done", 4) // 1.6s: within a second of it
	p.report("%d done", 5) // 2.0s
	p.report("%d done", 6) // 2.4s: the next line
	assert.Equal(t, "ledgerctl: purge: 3 done after 1.2s\nledgerctl: purge: 6 done after 2.4s\n", stderr.String())

	// In a whole command: the lines go to stderr, the JSON on stdout stays
	// one document.
	f := migrated(t)
	f.failed("d1", "host-a")
	var out, errOut bytes.Buffer
	clock.step = 1500 * time.Millisecond
	code := runEnv(context.Background(), []string{"redrive", "-all", "-json", "-schema", f.schema},
		env{stdout: &out, stderr: &errOut, getenv: func(string) string { return f.dsn }, clock: clock.read})
	require.Equal(t, exitOK, code, errOut.String())
	assert.Contains(t, errOut.String(), "ledgerctl: redrive: 1 deliveries redriven after")
	var doc redriveJSON
	require.NoError(t, json.Unmarshal(out.Bytes(), &doc))
	assert.Equal(t, 1, doc.Count)
}
