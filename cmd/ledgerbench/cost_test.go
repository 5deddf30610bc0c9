package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseLSN(t *testing.T) {
	for _, tc := range []struct {
		text string
		pos  uint64
	}{
		{"0/0", 0},
		{"0/16B3748", 0x16B3748},
		{"16/B374D848", 0x16<<32 | 0xB374D848},
		{"FFFFFFFF/FFFFFFFF", 1<<64 - 1},
	} {
		got, err := parseLSN(tc.text)
		require.NoError(t, err, tc.text)
		assert.Equal(t, tc.pos, got, tc.text)
		assert.Equal(t, tc.text, formatLSN(got), "formatLSN is parseLSN's inverse")
	}
	for _, bad := range []string{"", "16", "x/1", "1/y", "100000000/0", "0/100000000"} {
		_, err := parseLSN(bad)
		assert.Error(t, err, "%q", bad)
	}
}

func TestCostPerItem(t *testing.T) {
	before := meterReading{lsn: 1000, client: 2 * time.Millisecond, server: 10 * time.Millisecond}
	after := meterReading{lsn: 1000 + 4*3027, client: 2*time.Millisecond + 4*187*time.Microsecond, server: 50 * time.Millisecond}
	c := costPerItem(before, after, 4)
	assert.Equal(t, 3027.0, c.walBytes)
	assert.Equal(t, 187.0, c.clientMicros)
	assert.Equal(t, 10_000.0, c.serverMicros)

	// In memory there is no WAL position: no WAL, not a negative one.
	c = costPerItem(meterReading{client: time.Millisecond}, meterReading{client: 3 * time.Millisecond}, 2)
	assert.Zero(t, c.walBytes)
	assert.Equal(t, 1000.0, c.clientMicros)
}

func TestParseProcStat(t *testing.T) {
	// Fields 3 on: state, ppid (4), ..., utime (14), stime (15), cutime
	// (16), cstime (17), then more. The command name holds a space and
	// parentheses of its own.
	line := "4242 (postgres: a) b) S 4200 4242 4242 0 -1 4194560 100 0 0 0 " +
		"7 3 20 30 20 0 1 0 100 1000 10 18446744073709551615\n"
	st, err := parseProcStat(line)
	require.NoError(t, err)
	assert.Equal(t, procStat{ppid: 4200, own: 10, children: 50}, st)

	for _, bad := range []string{"", "4242 postgres S 1", "4242 (postgres) S 1 2 3", "4242 (x) S 1 2 3 4 5 6 7 8 9 10 u 3 20 30"} {
		_, err := parseProcStat(bad)
		assert.Error(t, err, "%q", bad)
	}
}

// TestServerCPU reads a made-up process tree: the postmaster's own time
// and that of its ended children, plus the time of its live children, and
// nothing of the other processes.
func TestServerCPU(t *testing.T) {
	root := t.TempDir()
	proc := func(pid, ppid int, utime, stime, cutime, cstime uint64) {
		t.Helper()
		dir := filepath.Join(root, strconv.Itoa(pid))
		require.NoError(t, os.Mkdir(dir, 0o755))
		fields := []string{strconv.Itoa(pid), "(postgres)", "S", strconv.Itoa(ppid)}
		for range 9 { // fields 5 to 13
			fields = append(fields, "0")
		}
		for _, v := range []uint64{utime, stime, cutime, cstime} {
			fields = append(fields, strconv.FormatUint(v, 10))
		}
		fields = append(fields, "20", "0", "1")
		require.NoError(t, os.WriteFile(filepath.Join(dir, "stat"), []byte(strings.Join(fields, " ")+"\n"), 0o644))
	}
	proc(100, 1, 5, 5, 30, 20)     // the postmaster: 10 own, 50 of ended children
	proc(101, 100, 200, 100, 0, 0) // a backend: 300
	proc(102, 100, 1, 1, 7, 7)     // the checkpointer: 2 (its children's time is not the server's to count twice)
	proc(200, 1, 999, 999, 0, 0)   // someone else
	proc(201, 101, 999, 0, 0, 0)   // a grandchild: not a server process
	require.NoError(t, os.Mkdir(filepath.Join(root, "self"), 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(root, "300"), 0o755)) // ended while listed: no stat

	got, err := serverCPU(root, 100)
	require.NoError(t, err)
	assert.Equal(t, ticksToDuration(10+50+300+2), got)
	assert.Equal(t, 3620*time.Millisecond, got, "a clock tick is 10 ms")

	_, err = serverCPU(root, 999)
	assert.Error(t, err, "no such postmaster")
}

func TestCountsDelta(t *testing.T) {
	before := tableCounts{
		"deliveries":       {Inserted: 10, Updated: 4, HOTUpdated: 1},
		"delivery_history": {Inserted: 10},
		"target_fences":    {Inserted: 2},
	}
	after := tableCounts{
		"deliveries":       {Inserted: 10, Updated: 14, HOTUpdated: 3},
		"delivery_history": {Inserted: 20},
		"target_fences":    {Inserted: 2},
		"delivery_counts":  {Inserted: 1, Updated: 9, HOTUpdated: 9, Deleted: 1},
	}
	d := countsDelta(before, after)
	assert.Equal(t, tableCounts{
		"deliveries":       {Updated: 10, HOTUpdated: 2},
		"delivery_history": {Inserted: 10},
		"delivery_counts":  {Inserted: 1, Updated: 9, HOTUpdated: 9, Deleted: 1},
	}, d, "untouched tables are left out; a new table counts from zero")
	assert.Equal(t, tupleCounts{Inserted: 11, Updated: 19, HOTUpdated: 11, Deleted: 1}, d.sum())
}

func TestWALRecordCounts(t *testing.T) {
	r := walRecords{
		"Btree/INSERT_LEAF":  {Count: 1492, FPIBytes: 8000},
		"Btree/INSERT_POST":  {Count: 3},
		"Btree/SPLIT_L":      {Count: 2},
		"Btree/SPLIT_R":      {Count: 3},
		"Btree/INSERT_UPPER": {Count: 4},
		"Btree/NEWROOT":      {Count: 3},
		"Btree/DEDUP":        {Count: 6},
		"Heap/INSERT":        {Count: 295, FPIBytes: 192},
	}
	assert.Equal(t, int64(1500), r.indexEntries(), "leaf inserts, posting-list inserts and splits; inner pages left out")
	assert.Equal(t, int64(8192), r.fpiBytes())
}

// costFixture is a measured outbox drain of 4 items, and a delivery
// enqueue.
func costFixture(records bool) *costReport {
	rec := func(leaf int64, fpi int64) walRecords {
		if !records {
			return nil
		}
		return walRecords{"Btree/INSERT_LEAF": {Count: leaf, FPIBytes: fpi}, "Heap/INSERT": {Count: 4}}
	}
	c := &costReport{}
	c.addCall(callMeasure{ledger: costOutbox, call: callEnqueue, items: 4, walBytes: 2500,
		tables: tableCounts{"outbox_entries": {Inserted: 4}}, records: rec(8, 0)})
	c.addCall(callMeasure{ledger: costDelivery, call: callEnqueue, items: 4, walBytes: 2800,
		tables: tableCounts{"deliveries": {Inserted: 4}}, records: rec(12, 0)})
	c.addCall(callMeasure{ledger: costOutbox, call: callClaim, items: 4, walBytes: 4160,
		tables: tableCounts{"outbox_entries": {Updated: 4}, "outbox_entry_history": {Inserted: 4}}, records: rec(12, 8192)})
	c.addCall(callMeasure{ledger: costOutbox, call: callDelivered, items: 4, walBytes: 3810,
		tables: tableCounts{"outbox_entries": {Updated: 4, HOTUpdated: 1}, "outbox_counts": {Updated: 2, HOTUpdated: 2}}, records: rec(9, 0)})
	return c
}

func TestCostRows(t *testing.T) {
	c := costFixture(true)
	require.Len(t, c.Calls, 4)
	claim := c.Calls[2]
	assert.Equal(t, costOutbox, claim.Ledger)
	assert.Equal(t, string(callClaim), claim.Call)
	assert.Equal(t, 1.0, claim.HeapInserted)
	assert.Equal(t, 1.0, claim.HeapUpdated)
	assert.Equal(t, 1040.0, claim.WALBytes)
	require.NotNil(t, claim.IndexEntries)
	assert.Equal(t, 3.0, *claim.IndexEntries)
	assert.Equal(t, 2048.0, *claim.FPIBytes)

	// Only the outbox's calls are all there: its total, per item, adds
	// up its three calls and nothing of the delivery ledger's.
	require.Len(t, c.Totals, 1)
	tot := c.Totals[0]
	assert.Equal(t, costOutbox, tot.Ledger)
	assert.Equal(t, []costCall{callEnqueue, callClaim, callDelivered}, tot.SumOf)
	assert.Equal(t, 4, tot.Items)
	assert.Equal(t, 2.0, tot.HeapInserted)
	assert.Equal(t, 2.5, tot.HeapUpdated, "4 + 4 + 2 updates over 4 items")
	assert.Equal(t, 0.75, tot.HeapHOTUpdated)
	assert.Equal(t, (2500.0+4160+3810)/4, tot.WALBytes)
	require.NotNil(t, tot.IndexEntries)
	assert.Equal(t, (8.0+12+9)/4, *tot.IndexEntries)
	assert.Equal(t, 2048.0, *tot.FPIBytes)

	var out bytes.Buffer
	require.NoError(t, c.write(&out))
	text := out.String()
	assert.Contains(t, text, costTitle+": each call made for every item before the next call starts;")
	assert.Contains(t, fieldsOf(text), "outbox claim (ClaimPending) 4 1.00 1.00 0.00 0.00 3.00 1040 2048")
	assert.Contains(t, fieldsOf(text), "outbox drained entry: enqueue, claim, delivered 4 2.00 2.50 0.75 0.00 7.25 2618 2048")
	assert.NotContains(t, text, "not measured")
}

// TestCostRowsWithoutWALInspect: without pg_walinspect the heap and WAL
// byte figures stay, the index entries and full-page images read "-" in
// the table and null in the JSON, and the table says why.
func TestCostRowsWithoutWALInspect(t *testing.T) {
	c := costFixture(false)
	c.IndexEntriesNotMeasured = "pg_walinspect is not available (permission denied)"
	require.Len(t, c.Totals, 1)
	assert.Nil(t, c.Totals[0].IndexEntries)
	assert.Equal(t, (2500.0+4160+3810)/4, c.Totals[0].WALBytes)

	var out bytes.Buffer
	require.NoError(t, c.write(&out))
	assert.Contains(t, fieldsOf(out.String()), "outbox claim (ClaimPending) 4 1.00 1.00 0.00 0.00 - 1040 -")
	assert.Contains(t, out.String(), "\nindex entries and full-page images not measured: pg_walinspect is not available (permission denied)\n")

	b, err := json.Marshal(c)
	require.NoError(t, err)
	var doc struct {
		Why   string           `json:"index_entries_not_measured"`
		Calls []map[string]any `json:"calls"`
	}
	require.NoError(t, json.Unmarshal(b, &doc))
	assert.Equal(t, c.IndexEntriesNotMeasured, doc.Why)
	require.Len(t, doc.Calls, 4)
	v, ok := doc.Calls[2]["index_entries_per_item"]
	assert.True(t, ok, "the field is there")
	assert.Nil(t, v, "and null")
	assert.Equal(t, 1040.0, doc.Calls[2]["wal_bytes_per_item"])
	assert.Equal(t, map[string]any{"outbox_entries": map[string]any{"inserted": 0.0, "updated": 4.0, "hot_updated": 0.0, "deleted": 0.0},
		"outbox_entry_history": map[string]any{"inserted": 4.0, "updated": 0.0, "hot_updated": 0.0, "deleted": 0.0}},
		doc.Calls[2]["tables"], "the raw counts behind the row")
}

// fieldsOf returns text's lines, each with its columns one space apart.
func fieldsOf(text string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		out = append(out, strings.Join(strings.Fields(l), " "))
	}
	return out
}
