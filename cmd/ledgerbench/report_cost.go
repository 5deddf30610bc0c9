package main

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
)

// The cost table: per item, what each store call a drain makes writes on
// the server. Heap tuples come from pg_stat_user_tables, summed over the
// store's tables; index entries from the B-tree records in the WAL the
// call wrote (pg_walinspect); WAL bytes from the WAL position before and
// after the call. See workloads_cost.go for how the calls are isolated.

// costLedger names the ledger a cost row belongs to.
type costLedger string

const (
	costOutbox   costLedger = "outbox"
	costDelivery costLedger = "delivery"
)

// costCall names a store call of the cost table.
type costCall string

const (
	callEnqueue      costCall = "enqueue (EnqueueBatch)"
	callClaim        costCall = "claim (ClaimPending)"
	callDelivered    costCall = "mark delivered (MarkClaimDelivered)"
	callLease        costCall = "lease (Lease)"
	callAcknowledge  costCall = "acknowledge (Acknowledge)"
	callProcessed    costCall = "processed (MarkProcessed)"
	callAckProcessed costCall = "acknowledge and processed (AcknowledgeProcessed)"
)

// tupleCounts are pg_stat_user_tables' row counters of one table, or
// their differences over a call.
type tupleCounts struct {
	Inserted   int64 `json:"inserted"`
	Updated    int64 `json:"updated"` // HOT updates included
	HOTUpdated int64 `json:"hot_updated"`
	Deleted    int64 `json:"deleted"`
}

func (a tupleCounts) minus(b tupleCounts) tupleCounts {
	return tupleCounts{a.Inserted - b.Inserted, a.Updated - b.Updated, a.HOTUpdated - b.HOTUpdated, a.Deleted - b.Deleted}
}

func (a tupleCounts) plus(b tupleCounts) tupleCounts {
	return tupleCounts{a.Inserted + b.Inserted, a.Updated + b.Updated, a.HOTUpdated + b.HOTUpdated, a.Deleted + b.Deleted}
}

// tableCounts are the counters of a schema's tables, by table name.
type tableCounts map[string]tupleCounts

// countsDelta returns what changed from before to after, leaving out the
// tables nothing happened to. A table that appeared in between counts
// from zero.
func countsDelta(before, after tableCounts) tableCounts {
	d := tableCounts{}
	for table, a := range after {
		if c := a.minus(before[table]); c != (tupleCounts{}) {
			d[table] = c
		}
	}
	return d
}

// sum adds up every table's counts.
func (t tableCounts) sum() tupleCounts {
	var s tupleCounts
	for _, c := range t {
		s = s.plus(c)
	}
	return s
}

// walRecordStat is what pg_get_wal_stats says of one record type over a
// range of WAL.
type walRecordStat struct {
	Count       int64 `json:"count"`
	RecordBytes int64 `json:"record_bytes"`
	FPIBytes    int64 `json:"fpi_bytes"` // full-page images carried by these records
}

// walRecords are the record types written over a range of WAL, keyed as
// pg_walinspect names them ("Btree/INSERT_LEAF").
type walRecords map[string]walRecordStat

// indexEntryRecords are the WAL records that each add one entry to a
// B-tree: an insert into a leaf page, an insert that splits a posting
// list, and a page split, which carries the entry that did not fit.
// Entries added to inner pages (INSERT_UPPER, INSERT_META) point at
// pages, not rows, and are left out; so are the inner splits among the
// SPLIT records, about one for every few hundred leaf splits.
var indexEntryRecords = []string{"Btree/INSERT_LEAF", "Btree/INSERT_POST", "Btree/SPLIT_L", "Btree/SPLIT_R"}

// indexEntries counts the B-tree entries the records added.
func (r walRecords) indexEntries() int64 {
	var n int64
	for _, k := range indexEntryRecords {
		n += r[k].Count
	}
	return n
}

// fpiBytes sums the full-page images of every record.
func (r walRecords) fpiBytes() int64 {
	var n int64
	for _, s := range r {
		n += s.FPIBytes
	}
	return n
}

// callMeasure is what one call cost over all its items, as measured.
type callMeasure struct {
	ledger   costLedger
	call     costCall
	items    int
	tables   tableCounts // differences over the call
	walBytes uint64
	records  walRecords // nil when pg_walinspect is not available
}

// costRow is one line of the cost table, per item.
type costRow struct {
	Ledger costLedger `json:"ledger"`
	Call   string     `json:"call"`
	Items  int        `json:"items"`
	// SumOf names the calls a total row adds up; empty for a call's row.
	SumOf          []costCall `json:"sum_of,omitempty"`
	HeapInserted   float64    `json:"heap_inserted_per_item"`
	HeapUpdated    float64    `json:"heap_updated_per_item"`
	HeapHOTUpdated float64    `json:"heap_hot_updated_per_item"`
	HeapDeleted    float64    `json:"heap_deleted_per_item"`
	// IndexEntries and FPIBytes are null when pg_walinspect was not
	// available.
	IndexEntries *float64 `json:"index_entries_per_item"`
	WALBytes     float64  `json:"wal_bytes_per_item"`
	FPIBytes     *float64 `json:"wal_fpi_bytes_per_item"`
	// Tables and WALRecords are a call's raw differences and counts, not
	// per item: where the per-item figures come from.
	Tables     tableCounts `json:"tables,omitempty"`
	WALRecords walRecords  `json:"wal_records,omitempty"`
}

// row divides what the call cost by its items.
func (m callMeasure) row() costRow {
	items := float64(max(m.items, 1))
	per := func(v int64) float64 { return float64(v) / items }
	s := m.tables.sum()
	r := costRow{
		Ledger: m.ledger, Call: string(m.call), Items: m.items,
		HeapInserted: per(s.Inserted), HeapUpdated: per(s.Updated),
		HeapHOTUpdated: per(s.HOTUpdated), HeapDeleted: per(s.Deleted),
		WALBytes: float64(m.walBytes) / items,
		Tables:   m.tables, WALRecords: m.records,
	}
	if m.records != nil {
		idx, fpi := per(m.records.indexEntries()), per(m.records.fpiBytes())
		r.IndexEntries, r.FPIBytes = &idx, &fpi
	}
	return r
}

// totalRow adds up the per-item figures of the rows of l's calls, in
// calls' order, into a row named name: what one item costs over the
// calls a drain makes on it. It is false when a call has no row (the run
// stopped before it).
func totalRow(rows []costRow, l costLedger, name string, calls ...costCall) (costRow, bool) {
	t := costRow{Ledger: l, Call: name, SumOf: calls}
	idx, fpi, measured := 0.0, 0.0, true
	for i, c := range calls {
		j := slices.IndexFunc(rows, func(r costRow) bool { return r.Ledger == l && r.Call == string(c) })
		if j < 0 {
			return costRow{}, false
		}
		r := rows[j]
		if i == 0 || r.Items < t.Items {
			t.Items = r.Items
		}
		t.HeapInserted += r.HeapInserted
		t.HeapUpdated += r.HeapUpdated
		t.HeapHOTUpdated += r.HeapHOTUpdated
		t.HeapDeleted += r.HeapDeleted
		t.WALBytes += r.WALBytes
		if r.IndexEntries == nil || r.FPIBytes == nil {
			measured = false
			continue
		}
		idx += *r.IndexEntries
		fpi += *r.FPIBytes
	}
	if measured {
		t.IndexEntries, t.FPIBytes = &idx, &fpi
	}
	return t, true
}

// costReport is the cost workload's part of the report.
type costReport struct {
	// NotMeasured says why the workload measured nothing (in memory:
	// "PostgreSQL only"); empty when it ran.
	NotMeasured string `json:"not_measured,omitempty"`
	// IndexEntriesNotMeasured says why the index entries and full-page
	// image bytes are missing; empty when they were measured.
	IndexEntriesNotMeasured string `json:"index_entries_not_measured,omitempty"`
	// Calls has a row per store call, Totals a row per drained item.
	Calls  []costRow `json:"calls,omitempty"`
	Totals []costRow `json:"totals,omitempty"`
}

// costDrains are the total rows: the calls each drain (and the delivery
// drain of dispatch.Worker, which closes a delivery in one call) makes on
// an item.
var costDrains = []struct {
	ledger costLedger
	name   string
	calls  []costCall
}{
	{costOutbox, "drained entry: enqueue, claim, delivered", []costCall{callEnqueue, callClaim, callDelivered}},
	{costDelivery, "drained delivery: enqueue, lease, acknowledge, processed", []costCall{callEnqueue, callLease, callAcknowledge, callProcessed}},
	{costDelivery, "the same with AcknowledgeProcessed (as dispatch.Worker)", []costCall{callEnqueue, callLease, callAckProcessed}},
}

// addCall records a call's measure and refreshes the totals.
func (c *costReport) addCall(m callMeasure) {
	c.Calls = append(c.Calls, m.row())
	c.Totals = c.Totals[:0]
	for _, d := range costDrains {
		if t, ok := totalRow(c.Calls, d.ledger, d.name, d.calls...); ok {
			c.Totals = append(c.Totals, t)
		}
	}
}

// costTitle heads the cost table.
const costTitle = "cost per item, by store call (workload cost)"

// write prints the cost table.
func (c *costReport) write(w io.Writer) error {
	if c.NotMeasured != "" {
		_, err := fmt.Fprintf(w, "%s: %s\n", costTitle, c.NotMeasured)
		return err
	}
	fmt.Fprintf(w, "%s: each call made for every item before the next call starts;\n", costTitle)
	fmt.Fprintln(w, "heap tuples from pg_stat_user_tables, index entries from the B-tree records in the WAL, WAL bytes from the WAL position")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LEDGER\tCALL\tITEMS\tHEAP INS\tHEAP UPD\tOF WHICH HOT\tHEAP DEL\tINDEX ENTRIES\tWAL BYTES\tOF WHICH FPI")
	for _, rows := range [][]costRow{c.Calls, c.Totals} {
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t%.0f\t%s\n", r.Ledger, r.Call, r.Items,
				r.HeapInserted, r.HeapUpdated, r.HeapHOTUpdated, r.HeapDeleted,
				optional(r.IndexEntries, "%.2f"), r.WALBytes, optional(r.FPIBytes, "%.0f"))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if c.IndexEntriesNotMeasured != "" {
		fmt.Fprintf(w, "index entries and full-page images not measured: %s\n", c.IndexEntriesNotMeasured)
	}
	return nil
}

// optional formats *v, or "-" when there is none.
func optional(v *float64, format string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf(format, *v)
}
