package main

import (
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// TestOutboxByKey: an outbox entry is found by the idempotency key the
// business knows, in show, outbox show, outbox list -key and outbox
// redrive, also when its ID is not derived from that key (a redriven
// entry's comes from its new key).
func TestOutboxByKey(t *testing.T) {
	t.Parallel()
	f := migrated(t)
	dead := f.entry("ord-22649-03", "mail", ledger.OutboxStatusDeadLettered)
	f.entry("ord-1", "mail", ledger.OutboxStatusPending)

	for _, args := range [][]string{{"show", "ord-22649-03", "-json"}, {"outbox", "show", "ord-22649-03", "-json"}} {
		doc := decode[showJSON](t, f.run(args...))
		require.NotNil(t, doc.Entry, args)
		assert.Equal(t, ledger.OutboxEntryID(dead), doc.Entry.ID, args)
	}
	page := decode[outboxListJSON](t, f.run("outbox", "list", "-key", "ord-22649-03", "-json"))
	require.Len(t, page.Entries, 1)
	assert.Equal(t, ledger.OutboxEntryID(dead), page.Entries[0].ID)
	r := f.run("outbox", "list")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "KEY")
	assert.Contains(t, r.stdout, "ord-22649-03")
	assert.Equal(t, exitNotFound, f.run("outbox", "show", "ord-nope").code)

	// Redrive by key, under a key of the caller's: the new entry is found
	// by its key too, and the dry run said what the run then did.
	r = f.run("outbox", "redrive", "ord-22649-03", "-new-key", "ord-22649-03-again", "-dry-run")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "would redrive "+dead)
	r = f.run("outbox", "redrive", "ord-22649-03", "-new-key", "ord-22649-03-again")
	require.Equal(t, exitOK, r.code, r.stderr)
	doc := decode[showJSON](t, f.run("show", "ord-22649-03-again", "-json"))
	require.NotNil(t, doc.Entry)
	assert.Equal(t, ledger.OutboxStatusPending, doc.Entry.Status)
	assert.Equal(t, ledger.OutboxEntryID(dead), doc.Entry.RedrivenFrom)
	h := doc.History
	orig := decode[showJSON](t, f.run("outbox", "show", dead, "-json"))
	assert.Equal(t, osUser(os.Getenv)()+" via ledgerctl", orig.History[len(orig.History)-1].Actor, "the history names the operator")
	assert.NotEmpty(t, h)

	// A redrive by filter and its dry run name the key of each entry.
	f.entry("ord-7", "sms", ledger.OutboxStatusFailed)
	dry := decode[redriveJSON](t, f.run("outbox", "redrive", "-key", "ord-7", "-dry-run", "-json"))
	require.Len(t, dry.Records, 1)
	assert.Equal(t, "ord-7", dry.Records[0].Key)
	r = f.run("outbox", "redrive", "-key", "ord-7")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "(key ord-7)")
	assert.Contains(t, r.stdout, "redrove 1 outbox entries")
}

// TestRedriveByIDDryRun: a redrive by ID takes -dry-run, answers what the
// redrive would, with the same exit code, and writes nothing.
func TestRedriveByIDDryRun(t *testing.T) {
	t.Parallel()
	f := migrated(t)
	f.failed("d1", "host-a")
	f.enqueue("open", "host-a", "")
	before := f.all()
	r := f.run("redrive", "d1", "-dry-run")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "would redrive d1 as d1/redrive")
	r = f.run("redrive", "open", "-dry-run")
	assert.Equal(t, exitNotApplied, r.code)
	assert.Equal(t, exitNotFound, f.run("redrive", "nope", "-dry-run").code)
	assert.Equal(t, before, f.all(), "a dry run changes nothing")
	assert.Equal(t, exitOK, f.run("redrive", "d1").code)
	r = f.run("redrive", "d1", "-dry-run")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "already redriven as d1/redrive")
}

// TestDryRunIsWhatTheRunDoes: for every filter flag of both redrive
// commands, alone, the IDs a dry run lists are exactly those the real
// command then redrives, on fixtures where each flag leaves some records
// out (a flag the dry run ignored would list more).
func TestDryRunIsWhatTheRunDoes(t *testing.T) {
	t.Parallel()
	ids := func(doc redriveJSON) []string {
		var out []string
		for _, l := range doc.Records {
			if !doc.DryRun && l.Outcome != ledger.OutcomeApplied {
				continue
			}
			out = append(out, l.ID)
		}
		sort.Strings(out)
		return out
	}
	deliveries := [][]string{
		{"-state", "failed"},
		{"-state", "expired"},
		{"-target", "host-a"},
		{"-ended-before", "30m"},
		{"-all"},
	}
	for _, flags := range deliveries {
		t.Run("redrive"+strings.Join(flags, ""), func(t *testing.T) {
			t.Parallel()
			f := migrated(t)
			f.failed("f-a", "host-a") // ended an hour ago
			f.failed("f-b", "host-b")
			for _, id := range []string{"x-a", "x-b"} {
				target := "host-" + id[2:]
				f.enqueue(id, target, "")
				res, err := f.store.Abandon(t.Context(), ledger.DeliveryID(id), ledger.Cause{Kind: "operator"}, time.Now())
				require.NoError(t, err)
				require.True(t, res.Applied())
			}
			f.enqueue("open", "host-a", "")
			dry := decode[redriveJSON](t, f.run(append([]string{"redrive", "-json", "-dry-run"}, flags...)...))
			require.NotEmpty(t, dry.Records, "the fixture has something for %v", flags)
			real := decode[redriveJSON](t, f.run(append([]string{"redrive", "-json"}, flags...)...))
			assert.Equal(t, ids(dry), ids(real), "dry run and run of %v", flags)
			assert.Equal(t, dry.Count, real.Count)
			if flags[0] != "-all" {
				assert.Less(t, len(dry.Records), 4, "%v leaves something out", flags)
			}
		})
	}
	entries := [][]string{
		{"-status", "failed"},
		{"-status", "dead_lettered"},
		{"-provider", "mail"},
		{"-key", "k-2"},
		{"-ended-before", "ENDED"},
		{"-all"},
	}
	for _, flags := range entries {
		t.Run("outbox-redrive"+strings.Join(flags, ""), func(t *testing.T) {
			t.Parallel()
			f := migrated(t)
			f.entry("k-1", "mail", ledger.OutboxStatusDeadLettered)
			f.entry("k-2", "sms", ledger.OutboxStatusFailed)
			mid := time.Now()
			f.entry("k-3", "mail", ledger.OutboxStatusFailed)
			f.entry("k-4", "sms", ledger.OutboxStatusDeadLettered)
			f.entry("k-5", "mail", ledger.OutboxStatusPending)
			flags := append([]string{}, flags...)
			if len(flags) > 1 && flags[1] == "ENDED" {
				flags[1] = mid.UTC().Format(time.RFC3339Nano)
			}
			dry := decode[redriveJSON](t, f.run(append([]string{"outbox", "redrive", "-json", "-dry-run"}, flags...)...))
			require.NotEmpty(t, dry.Records, "the fixture has something for %v", flags)
			real := decode[redriveJSON](t, f.run(append([]string{"outbox", "redrive", "-json"}, flags...)...))
			assert.Equal(t, ids(dry), ids(real), "dry run and run of %v", flags)
			assert.Equal(t, dry.Count, real.Count)
			if flags[0] != "-all" {
				assert.Less(t, len(dry.Records), 4, "%v leaves something out", flags)
			}
		})
	}
}

// TestExitCodesAreOneTable: ledgerctl help, help of a group and every
// command's -h print the same table of exit codes, and a call that does
// not apply exits 4 whichever command made it.
func TestExitCodesAreOneTable(t *testing.T) {
	t.Parallel()
	r := cli(t, nil, "help")
	require.Equal(t, exitOK, r.code)
	assert.Contains(t, r.stdout, exitCodesText)
	r = cli(t, nil, "help", "outbox")
	require.Equal(t, exitOK, r.code)
	assert.Contains(t, r.stdout, "outbox list")
	assert.Contains(t, r.stdout, "outbox redrive")
	assert.NotContains(t, r.stdout, "expire-ceremony", "the outbox's commands only")
	assert.Contains(t, r.stdout, exitCodesText)
	r = cli(t, nil, "outbox", "-h")
	require.Equal(t, exitOK, r.code)
	assert.Contains(t, r.stdout, "outbox show")
	for _, c := range commands() {
		r := cli(t, nil, append(strings.Fields(c.name), "-h")...)
		require.Equal(t, exitOK, r.code, c.name)
		assert.Contains(t, r.stderr, exitCodesText, c.name)
	}
	assert.Equal(t, exitUsage, cli(t, nil, "help", "nothing").code)
	// serve prints no document: no -json in its help.
	r = cli(t, nil, "serve", "-h")
	assert.NotContains(t, r.stderr, "-json")
	r = cli(t, nil, "list", "-h")
	assert.Contains(t, r.stderr, "-json")
}

// TestEndedRecordsShowNoFutureAvailability: an ended delivery keeps its
// last AvailableAt, which list and show print as "-" rather than as a
// time it will be offered.
func TestEndedRecordsShowNoFutureAvailability(t *testing.T) {
	t.Parallel()
	f := migrated(t)
	f.enqueue("d1", "host-a", "")
	ctx := t.Context()
	lr, err := f.store.Lease(ctx, ledger.LeaseFilter{}, ledger.Owner{Agent: "a", Incarnation: "1"}, f.now, time.Minute, 1)
	require.NoError(t, err)
	require.Len(t, lr.Leased, 1)
	res, err := f.store.MarkFailed(ctx, lr.Leased[0].Lease, ledger.FailureReason{Message: "later"}, f.now)
	require.NoError(t, err)
	later := res.Delivery.AvailableAt
	require.True(t, later.After(f.now))
	_, err = f.store.Abandon(ctx, "d1", ledger.Cause{Kind: "operator"}, f.now)
	require.NoError(t, err)
	for _, args := range [][]string{{"list"}, {"show", "d1"}} {
		r := f.run(args...)
		require.Equal(t, exitOK, r.code, r.stderr)
		assert.NotContains(t, r.stdout, fmtTime(later), args)
	}
}
