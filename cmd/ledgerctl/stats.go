package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// statsJSON is the -json document of stats.
type statsJSON struct {
	At         time.Time            `json:"at"`
	Filter     ledger.StatsFilter   `json:"filter"`
	Deliveries ledger.DeliveryStats `json:"deliveries"`
	Outbox     *ledger.OutboxStats  `json:"outbox,omitempty"`
}

func setupStats(fs *flag.FlagSet, c *common) func(context.Context, env, []string) error {
	target := fs.String("target", "", "count only deliveries for this target")
	ceremony := fs.String("ceremony", "", "count only deliveries of this ceremony")
	return func(ctx context.Context, e env, pos []string) error {
		if err := noArgs(pos); err != nil {
			return err
		}
		now := time.Now()
		filter := ledger.StatsFilter{Target: ledger.Target(*target), Ceremony: ledger.CeremonyID(*ceremony)}
		if err := storekit.ValidateStats(filter, now); err != nil {
			return usage("invalid input: %v", err)
		}
		store, closePool, err := open(ctx, *c, false)
		if err != nil {
			return err
		}
		defer closePool()
		out := statsJSON{At: ledger.Normalize(now), Filter: filter}
		if out.Deliveries, err = store.Stats(ctx, filter, now); err != nil {
			return invalidInput(err)
		}
		// Outbox entries have no target or ceremony: a filtered view
		// leaves them out rather than show counts the filter ignored.
		if filter == (ledger.StatsFilter{}) {
			o, err := store.Outbox().OutboxStats(ctx, now)
			if err != nil {
				return err
			}
			out.Outbox = &o
		}
		if c.json {
			return writeJSON(e.stdout, out)
		}
		printStats(e.stdout, out)
		return nil
	}
}

// printStats prints the counts as two small tables.
func printStats(w io.Writer, s statsJSON) {
	tw := newTable(w)
	d := s.Deliveries
	fmt.Fprintln(tw, "DELIVERIES\tCOUNT")
	for _, st := range ledger.DeliveryStates() {
		fmt.Fprintf(tw, "%s\t%d\n", st, d.ByState[st])
	}
	causes := make([]ledger.CauseKind, 0, len(d.ByCause))
	for k := range d.ByCause {
		causes = append(causes, k)
	}
	slices.Sort(causes)
	for _, k := range causes {
		fmt.Fprintf(tw, "expired: %s\t%d\n", display(string(k)), d.ByCause[k])
	}
	fmt.Fprintf(tw, "depth (offerable now)\t%d\n", d.Depth)
	fmt.Fprintf(tw, "lag (oldest offerable)\t%s\n", fmtLag(d.Lag, d.OldestAvailableAt))
	if o := s.Outbox; o != nil {
		fmt.Fprintln(tw, "\t")
		fmt.Fprintln(tw, "OUTBOX\tCOUNT")
		for _, st := range ledger.OutboxStatuses() {
			fmt.Fprintf(tw, "%s\t%d\n", st, o.ByStatus[st])
		}
		fmt.Fprintf(tw, "depth (claimable now)\t%d\n", o.Depth)
		fmt.Fprintf(tw, "lag (oldest due)\t%s\n", fmtLag(o.Lag, o.OldestDueAt))
	}
	_ = tw.Flush()
}

// fmtLag prints a lag with the instant it counts from.
func fmtLag(lag time.Duration, since time.Time) string {
	if since.IsZero() {
		return "-"
	}
	return fmt.Sprintf("%s (since %s)", lag.Round(time.Millisecond), fmtTime(since))
}

// printHistory prints a record's transitions, oldest first.
func printHistory(w io.Writer, history []ledger.Transition) {
	fmt.Fprintf(w, "\nhistory (%d transitions):\n", len(history))
	if len(history) == 0 {
		return
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "SEQ\tAT\tOP\tFROM\tTO\tACTOR\tREASON")
	for _, t := range history {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n",
			t.Seq, fmtTime(t.At), display(string(t.Op)), orDash(t.From), display(t.To), orDash(t.Actor), orDash(t.Reason))
	}
	_ = tw.Flush()
}
