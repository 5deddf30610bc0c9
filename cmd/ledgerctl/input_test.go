package main

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/internal/pgtest"
)

// TestInputIsCheckedBeforeConnecting: every malformed input is refused
// with an invalid-input message before ledgerctl connects. The DSN names
// a port nothing listens on, so a command that connected first would say
// it cannot connect instead.
func TestInputIsCheckedBeforeConnecting(t *testing.T) {
	t.Parallel()
	env := map[string]string{envDSN: "postgres://ops@127.0.0.1:1/ledger?connect_timeout=5"}
	for name, args := range map[string][]string{
		"show: zero-width space":             {"show", "x1\u200b"},
		"show: right-to-left override":       {"show", "\u202edi"},
		"show: control character":            {"show", "x\x1b[2J"},
		"show: oversize":                     {"show", strings.Repeat("x", ledger.MaxNameBytes+1)},
		"abandon: invisible ID":              {"abandon", "d1\u200b", "-cause", "queue_bounded"},
		"abandon: invisible cause":           {"abandon", "d1", "-cause", "queue\u00a0bounded"},
		"abandon: NUL in detail":             {"abandon", "d1", "-cause", "k", "-detail", "a\x00b"},
		"expire-ceremony: invisible ID":      {"expire-ceremony", "c\u2060", "-cause", "ceremony_ended"},
		"purge: before 1970":                 {"purge", "-older-than", "0001-01-01T00:00:00Z"},
		"purge: after 2262":                  {"purge", "-older-than", "3000-01-01T00:00:00Z"},
		"purge: duration back before 1970":   {"purge", "-older-than", "1000000h"},
		"list: invisible target":             {"list", "-target", "h\u200b"},
		"list: limit 0":                      {"list", "-limit", "0"},
		"stats: invisible ceremony":          {"stats", "-ceremony", "c\ufeff"},
		"migrate: system schema":             {"migrate", "-schema", "pg_catalog"},
		"list: information_schema":           {"list", "-schema", "information_schema"},
		"show: schema starting with pg_":     {"show", "d1", "-schema", "pg_ledger"},
		"abandon: cause with a line break":   {"abandon", "d1", "-cause", "a\nb"},
		"expire-ceremony: oversize ceremony": {"expire-ceremony", strings.Repeat("c", 256), "-cause", "k"},
	} {
		r := cli(t, env, args...)
		assert.Equal(t, exitFailed, r.code, "%s: %s", name, r.stderr)
		assert.Contains(t, r.stderr, "invalid", name)
		assert.NotContains(t, r.stderr, "cannot connect", "%s: checked before connecting", name)
		assert.NotContains(t, r.stderr, "purged", "%s: nothing was purged, and nothing is said to be", name)
		assert.Empty(t, r.stdout, name)
		assert.False(t, strings.ContainsFunc(r.stderr, func(r rune) bool { return r != '\n' && hidden(r) }),
			"%s: the message escapes what does not show: %q", name, r.stderr)
	}
}

func TestDisplayEscapesWhatDoesNotShow(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"x1":                 "x1",
		"Zürich 東京 e\u0301":  "Zürich 東京 e\u0301",
		"x1\u200b":           `"x1\u200b"`,
		"abc\u202edef":       `"abc\u202edef"`,
		"\x1b[31mred\x1b[0m": `"\u001b[31mred\u001b[0m"`,
		"two\nlines":         `"two\nlines"`,
		"tab\there":          `"tab\there"`,
		"x\u00a0y":           `"x\u00a0y"`,
		"x\u3164":            `"x\u3164"`,
		"tag\U000E0041":      `"tag\U000e0041"`,
		"bad\xffutf8":        `"bad\xffutf8"`,
		`say "hi"`:           `"say \"hi\""`,
		`back\slash`:         `"back\\slash"`,
		`"x1\u200b"`:         `"\"x1\\u200b\""`,
	} {
		assert.Equal(t, want, display(in), "%q", in)
	}
	assert.NotEqual(t, display("x1"), display("x1\u200b"), "look-alikes are told apart")
	assert.Equal(t, `no delivery has ID "x" \u202e here`, clean("no delivery has ID \"x\" \u202e here"))
	assert.Equal(t, "plain message", clean("plain message"))
	assert.Equal(t, `4 bytes: "a\u001b\u0000\xff"`, fmtPayload([]byte("a\x1b\x00\xff")))
}

// TestTextOutputEscapesWhatDoesNotShow: records written before names
// refused invisible characters, and free text (which may hold anything but
// NUL), reach the terminal escaped in every text output.
func TestTextOutputEscapesWhatDoesNotShow(t *testing.T) {
	t.Parallel()
	f := migrated(t)
	ctx := t.Context()
	f.enqueue("x1", "host-a", "")
	f.enqueue("look", "host-a", "")
	// A look-alike of x1, as older versions accepted: x1 and a zero-width
	// space. The library refuses to write one now, so it goes in by hand.
	_, err := f.store.Abandon(ctx, "look", ledger.Cause{Kind: "queue_bounded", Detail: "line one\nline two \x1b[2J \u202eesrever"}, f.now)
	require.NoError(t, err)
	pool := pgtest.Pool(t)
	_, err = pool.Exec(ctx, "UPDATE "+pgx.Identifier{f.schema, "deliveries"}.Sanitize()+" SET id = 'x1' || chr(8203) WHERE id = 'look'")
	require.NoError(t, err)

	noHidden := func(out string) {
		t.Helper()
		assert.False(t, strings.ContainsFunc(out, func(r rune) bool { return r != '\n' && hidden(r) }), "raw hidden characters in:\n%s", out)
	}
	r := f.run("list")
	require.Equal(t, exitOK, r.code, r.stderr)
	noHidden(r.stdout)
	assert.Contains(t, r.stdout, `"x1\u200b"`, "the look-alike is shown escaped")
	assert.Contains(t, r.stdout, "\nx1 ", "the plain one as it is")

	r = f.run("show", "x1\u200b")
	assert.Equal(t, exitFailed, r.code, "an invisible ID is refused as input")

	// show of the record itself goes through its history and fields.
	_, err = pool.Exec(ctx, "UPDATE "+pgx.Identifier{f.schema, "deliveries"}.Sanitize()+" SET id = 'look' WHERE id = 'x1' || chr(8203)")
	require.NoError(t, err)
	r = f.run("show", "look")
	require.Equal(t, exitOK, r.code, r.stderr)
	noHidden(r.stdout)
	assert.Contains(t, r.stdout, `"line one\nline two \u001b[2J \u202eesrever"`)
	for _, line := range strings.Split(r.stdout, "\n") {
		assert.NotEqual(t, "line two", strings.TrimSpace(line), "a free-text line break never starts a line of its own")
	}
}
