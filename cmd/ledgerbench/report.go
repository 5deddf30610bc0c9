package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
)

// verdict is a target's result.
type verdict string

const (
	verdictPass verdict = "PASS"
	verdictFail verdict = "FAIL"
	// verdictNA: the target cannot be judged in this run (the run's
	// settings are not those the target is stated for).
	verdictNA verdict = "n/a"
)

// passIf is PASS when ok, else FAIL.
func passIf(ok bool) verdict {
	if ok {
		return verdictPass
	}
	return verdictFail
}

// ceilingRef says which server ceiling a figure is set against.
type ceilingRef string

const (
	// ceilingTxn: a rate against single-row UPDATE transactions/s, (i).
	ceilingTxn ceilingRef = "i"
	// ceilingRows: a rate against batched UPDATE rows/s, (ii).
	ceilingRows ceilingRef = "ii"
	// ceilingTxnTime: a latency against the mean time of one single-row
	// UPDATE transaction at the same concurrency (workers / (i)).
	ceilingTxnTime ceilingRef = "i time"
)

// ceilings is what the server itself does, measured in the same run with
// -workers sessions (see ceiling.go). They are context for the figures
// beside them: no target is stated against them any more, since no
// record with a state machine and a history approaches a single-column
// UPDATE.
type ceilings struct {
	Workers int     `json:"workers"`
	Seconds float64 `json:"seconds_each"`
	// UpdateTxnPerSec is (i): committed single-row UPDATE transactions/s.
	UpdateTxnPerSec float64 `json:"single_row_update_txn_per_s"`
	// UpdateTxnMillis is the mean time of one of them: workers / (i).
	UpdateTxnMillis float64 `json:"single_row_update_txn_ms"`
	// BatchedRowsPerSec is (ii): rows/s updated 1,000 per statement.
	BatchedRowsPerSec float64 `json:"batched_update_rows_per_s"`
}

// of returns the ceiling ref names, or 0 when there is none.
func (c *ceilings) of(ref ceilingRef) float64 {
	if c == nil {
		return 0
	}
	switch ref {
	case ceilingTxn:
		return c.UpdateTxnPerSec
	case ceilingRows:
		return c.BatchedRowsPerSec
	case ceilingTxnTime:
		return c.UpdateTxnMillis
	}
	return 0
}

// figure is one measured number, with its ratio to a ceiling and its
// target when it has them.
type figure struct {
	Workload     workloadName `json:"workload"`
	Name         string       `json:"figure"`
	Value        float64      `json:"value"`
	Unit         string       `json:"unit"`
	Ceiling      ceilingRef   `json:"ceiling,omitempty"`
	CeilingRatio *float64     `json:"ceiling_ratio,omitempty"`
	Target       string       `json:"target,omitempty"`
	Verdict      verdict      `json:"verdict,omitempty"`
	// NotMeasured says why the run could not measure the figure (its
	// Value is then 0 and means nothing); empty when it did.
	NotMeasured string `json:"not_measured,omitempty"`
}

// target is what a figure should reach and how to judge it.
type target struct {
	text  string
	check func(v float64) verdict
}

// below: less than limit, in the figure's unit.
func below(limit float64, unit string) *target {
	return &target{
		text:  fmt.Sprintf("< %g %s", limit, unit),
		check: func(v float64) verdict { return passIf(v < limit) },
	}
}

// atMost: at most limit, in the figure's unit.
func atMost(limit float64, unit string) *target {
	return &target{
		text:  fmt.Sprintf("<= %g%s", limit, unit),
		check: func(v float64) verdict { return passIf(v <= limit) },
	}
}

// when restricts t to runs whose settings are those it is stated for
// (described by cond); in other runs it is n/a.
func (t *target) when(applies bool, cond string) *target {
	c := *t
	c.text += " " + cond
	if !applies {
		c.check = func(float64) verdict { return verdictNA }
	}
	return &c
}

// settings echoes the run's flags in the report.
type settings struct {
	Workers          int            `json:"workers"`
	Items            int            `json:"items"`
	Batch            int            `json:"batch"`
	Duration         string         `json:"duration"`
	Rate             float64        `json:"rate"`
	ScaleMax         int            `json:"scale_max"`
	ScaleCalls       int            `json:"scale_calls"`
	SnapshotDuration string         `json:"snapshot_duration"`
	CeilingDuration  string         `json:"ceiling_duration"`
	MemoryItems      int            `json:"memory_items"`
	Workloads        []workloadName `json:"workloads"`
	GroupCommit      bool           `json:"group_commit"`
	Callers          int            `json:"callers"`
	// Fanout is the items of a batch a drain or steady worker completed
	// at once: -fanout resolved (0 is the batch size).
	Fanout int `json:"fanout"`
}

// report collects a run's figures; it is also the -json document.
type report struct {
	Store    storeKind `json:"store"`
	Server   string    `json:"server"`
	Settings settings  `json:"settings"`
	Ceilings *ceilings `json:"ceilings,omitempty"`
	Figures  []figure  `json:"results"`
	// Cost is the cost workload's table; nil when it did not run.
	Cost  *costReport `json:"cost,omitempty"`
	Notes []string    `json:"notes,omitempty"`
}

// newReport starts the report of a run with cfg on server.
func newReport(cfg config, server string) *report {
	return &report{
		Store:  cfg.store,
		Server: server,
		Settings: settings{
			Workers: cfg.workers, Items: cfg.items, Batch: cfg.batch,
			Duration: cfg.duration.String(), Rate: cfg.rate,
			ScaleMax: cfg.scaleMax, ScaleCalls: cfg.scaleCalls,
			SnapshotDuration: cfg.snapshotDuration.String(), CeilingDuration: cfg.ceilingDuration.String(),
			MemoryItems: cfg.memoryItems, Workloads: cfg.workloads,
			GroupCommit: cfg.groupCommit, Callers: cfg.callers, Fanout: cfg.completeFanout(),
		},
	}
}

func (r *report) setCeilings(c *ceilings) { r.Ceilings = c }

func (r *report) note(s string) { r.Notes = append(r.Notes, s) }

// add records a figure. On PostgreSQL a figure with a ceiling gets its
// ratio to it, as context; in memory there is none. A target, when the
// figure has one, is judged at once.
func (r *report) add(w workloadName, name string, value float64, unit string, ref ceilingRef, t *target) {
	f := figure{Workload: w, Name: name, Value: value, Unit: unit}
	if ref != "" && r.Ceilings.of(ref) > 0 {
		ratio := value / r.Ceilings.of(ref)
		f.Ceiling, f.CeilingRatio = ref, &ratio
	}
	if t != nil {
		f.Target, f.Verdict = t.text, t.check(value)
	}
	r.Figures = append(r.Figures, f)
}

// addNotMeasured records a figure the run could not measure, and why.
func (r *report) addNotMeasured(w workloadName, name, unit, why string) {
	r.Figures = append(r.Figures, figure{Workload: w, Name: name, Unit: unit, NotMeasured: why})
}

// write prints the report as a table, or as one JSON document.
func (r *report) write(w io.Writer, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false) // targets read "<= 1.5x", not "\u003c="
		return enc.Encode(r)
	}
	fmt.Fprintf(w, "store: %s\n", r.Server)
	s := r.Settings
	fmt.Fprintf(w, "settings: workers %d, items %d, batch %d, fanout %d, steady %s at %g items/s, scale-max %d, snapshot %s, group commit %t, callers %d\n",
		s.Workers, s.Items, s.Batch, s.Fanout, s.Duration, s.Rate, s.ScaleMax, s.SnapshotDuration, s.GroupCommit, s.Callers)
	if c := r.Ceilings; c != nil {
		fmt.Fprintf(w, "ceilings (%d sessions, %gs each): (i) %.0f single-row UPDATE txn/s (%.2f ms each); (ii) %.0f rows/s in UPDATEs of 1,000 rows\n",
			c.Workers, c.Seconds, c.UpdateTxnPerSec, c.UpdateTxnMillis, c.BatchedRowsPerSec)
	}
	if err := r.writeFigures(w); err != nil {
		return err
	}
	if r.Cost != nil {
		fmt.Fprintln(w)
		if err := r.Cost.write(w); err != nil {
			return err
		}
	}
	for _, f := range r.Figures {
		if f.NotMeasured != "" {
			fmt.Fprintf(w, "note: %s %s not measured: %s\n", f.Workload, f.Name, f.NotMeasured)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	return nil
}

// writeFigures prints the figures' table, if there are any.
func (r *report) writeFigures(w io.Writer) error {
	if len(r.Figures) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKLOAD\tFIGURE\tVALUE\tUNIT\tCEILING RATIO\tTARGET\tRESULT")
	for _, f := range r.Figures {
		ratio := "-"
		if f.CeilingRatio != nil {
			ratio = formatRatio(*f.CeilingRatio) + "x (" + string(f.Ceiling) + ")"
		}
		tgt, res := "-", "-"
		if f.Target != "" {
			tgt, res = f.Target, string(f.Verdict)
		}
		value := formatValue(f.Value, f.Unit)
		if f.NotMeasured != "" {
			value = "not measured"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", f.Workload, f.Name, value, f.Unit, ratio, tgt, res)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Ceilings != nil {
		fmt.Fprintln(w, "\nceiling ratio: a rate over (i) or (ii); a latency over (i time), the mean single-row UPDATE transaction at the same concurrency. Context only: no figure is judged against a ceiling.")
	}
	return nil
}

// formatValue prints v with the precision its unit needs.
func formatValue(v float64, unit string) string {
	switch {
	case unit == "ms" && v < 1:
		// In memory a call takes microseconds.
		return fmt.Sprintf("%.4f", v)
	case unit == "ms" || unit == "x":
		return fmt.Sprintf("%.2f", v)
	case unit == "MiB":
		return fmt.Sprintf("%.1f", v)
	case v >= 100 || v == float64(int64(v)):
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// formatRatio keeps two significant digits of small ratios, which a
// store far below a ceiling has.
func formatRatio(r float64) string {
	switch {
	case r >= 100:
		return fmt.Sprintf("%.0f", r)
	case r >= 0.1:
		return fmt.Sprintf("%.2f", r)
	}
	return fmt.Sprintf("%.4f", r)
}
