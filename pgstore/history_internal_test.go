package pgstore

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// TestHistoryEntryEncoding: appendEntry writes JSON that encoding/json
// reads as the same values, and parseEntries reads back what it wrote,
// for strings that need escaping and for the empty fields written as
// null.
func TestHistoryEntryEncoding(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 123456789, time.FixedZone("x", 3600))
	ts := []ledger.Transition{
		{Seq: 1, Op: ledger.OpEnqueue, To: "offered", Outcome: ledger.OutcomeApplied, At: at},
		{Seq: 2, Op: ledger.OpLease, From: "offered", To: "leased", Outcome: ledger.OutcomeApplied, Actor: "a\"b\\c", At: at.Add(time.Second)},
		{Seq: 1 << 40, Op: ledger.OpReleaseClaim, From: "pending", To: "pending", Outcome: ledger.OutcomeApplied,
			Reason: "quote \" backslash \\ nul-free \x01\x1f tab\t newline\n é 日本 \u2028 ]}", At: time.Unix(0, 0)},
	}
	var buf []byte
	for _, tr := range ts {
		buf = appendEntry(buf, tr)
	}
	var generic [][]any
	require.NoError(t, json.Unmarshal(buf, &generic), "%s", buf)
	require.Len(t, generic, 3)
	require.Nil(t, generic[0][2], "an empty from is null")
	require.Nil(t, generic[0][5], "an empty actor is null")
	require.Nil(t, generic[0][6], "an empty reason is null")
	require.Equal(t, "2030-01-02T02:04:05.123456Z", generic[0][7], "microseconds, in UTC")

	got, err := parseEntries(buf)
	require.NoError(t, err)
	want := make([]ledger.Transition, len(ts))
	for i, tr := range ts {
		tr.At = ledger.Normalize(tr.At)
		want[i] = tr
	}
	require.Equal(t, want, got)

	// What PostgreSQL writes for an entry built in SQL: an offset, not Z.
	got, err = parseEntries([]byte(`[[2, "claim", "pending", "pending", "applied", "w", null, "2030-01-02T03:04:05.5+01:00"]]`))
	require.NoError(t, err)
	require.Equal(t, []ledger.Transition{{Seq: 2, Op: ledger.OpClaim, From: "pending", To: "pending", Outcome: ledger.OutcomeApplied,
		Actor: "w", At: time.Date(2030, 1, 2, 2, 4, 5, 500000000, time.UTC)}}, got)

	got, err = parseEntries(nil)
	require.NoError(t, err)
	require.Empty(t, got)
	_, err = parseEntries([]byte(`[[1, "enqueue"]]`))
	require.Error(t, err, "an entry without its time")
}

// TestHistoryBitIsNoColumn: the mask bit that stands for the history
// column is past every column of both tables.
func TestHistoryBitIsNoColumn(t *testing.T) {
	for _, cols := range [][]column{(&deliveryRow{}).columns(), (&outboxRow{}).columns()} {
		require.Less(t, len(cols), 63)
	}
}
