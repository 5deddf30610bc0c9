package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/leaseledger/ledger"
)

type openCounts struct{ deliveries, entries int }

var openStates = []ledger.DeliveryState{ledger.DeliveryStateOffered, ledger.DeliveryStateLeased, ledger.DeliveryStateAcknowledged}

func (f *fleet) openCounts(ctx context.Context) (openCounts, error) {
	var c openCounts
	err := f.eachDelivery(ctx, openStates, func(ledger.Delivery) { c.deliveries++ })
	if err != nil {
		return c, err
	}
	for _, id := range f.entries {
		e, err := f.outbox.FindByID(ctx, id)
		if err != nil {
			return c, err
		}
		if !e.Status.Terminal() {
			c.entries++
		}
	}
	return c, nil
}

// eachDelivery pages through the ledger with List.
func (f *fleet) eachDelivery(ctx context.Context, states []ledger.DeliveryState, fn func(ledger.Delivery)) error {
	q := ledger.ListQuery{States: states, Limit: ledger.MaxLimit}
	for {
		page, err := f.l.List(ctx, q)
		if err != nil {
			return err
		}
		for _, d := range page.Deliveries {
			fn(d)
		}
		if page.Next == "" {
			return nil
		}
		q.Cursor = page.Next
	}
}

// report prints what happened to every item and checks the invariants:
// nothing lost (every item enqueued exists and ended), nothing double-held
// (no two unexpired leases on one delivery at once), nothing processed
// without an acknowledgement by the same owner.
func (f *fleet) report(ctx context.Context, cfg config, now time.Time, out io.Writer) error {
	byState := map[string]int{}
	attempts := map[int]int{}
	var lost, unacked int
	var lapsed *ledger.Delivery
	for _, id := range f.ids {
		d, err := f.l.Get(ctx, id)
		if err != nil {
			lost++
			continue
		}
		if !d.State.Terminal() {
			lost++
		}
		key := string(d.State)
		switch {
		case d.Cause != nil:
			key += " (" + string(d.Cause.Kind) + ")"
		case d.State == ledger.DeliveryStateFailed && d.LastFailure != nil:
			key += " (" + string(d.LastFailure.Kind) + ")"
		}
		byState[key]++
		attempts[d.Attempts]++
		if d.State == ledger.DeliveryStateProcessed && (d.Ack == nil || d.Processing == nil) {
			unacked++
		}
		// The lapsed item with the most attempts has the richest story.
		if d.Cause != nil && d.Cause.Kind == ledger.CauseAcknowledgementLapsed && (lapsed == nil || d.Attempts > lapsed.Attempts) {
			lapsed = &d
		}
	}
	byStatus := map[string]int{}
	for _, id := range f.entries {
		e, err := f.outbox.FindByID(ctx, id)
		if err != nil {
			lost++
			continue
		}
		if !e.Status.Terminal() {
			lost++
		}
		key := string(e.Status)
		if e.DeadLetterReason != "" {
			key += " (" + e.DeadLetterReason + ")"
		}
		byStatus[key]++
	}
	doubleHeld := f.doubleHeld()

	fmt.Fprintf(out, "\nDeliveries by state (cause):\n")
	printCounts(out, byState)
	fmt.Fprintf(out, "\nAttempts per delivery:\n")
	for _, n := range sortedInts(attempts) {
		fmt.Fprintf(out, "  %d attempt(s)  %5d\n", n, attempts[n])
	}
	fmt.Fprintf(out, "\nOutbox entries by status:\n")
	printCounts(out, byStatus)
	fmt.Fprintf(out, "\nFleet: %d host crashes, %d leases reclaimed from old incarnations, %d stale calls answered lease_lost, %d answered ended, %d lost notices, %d fence rejections, %d outbox stalls, %d claim completions not applied\n",
		f.stats.crashes, f.stats.reclaimed, f.stats.leaseLost, f.stats.ended, f.stats.lostNotices, f.stats.fenceRejected, f.stats.stalls, f.stats.claimsLost)
	if lapsed != nil {
		if err := f.printLapsed(ctx, out, lapsed); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "\nInvariants: %d lost, %d double-held, %d processed without acknowledgement\n", lost, doubleHeld, unacked)
	if lost+doubleHeld+unacked > 0 {
		return fmt.Errorf("invariant failed: %d lost, %d double-held, %d processed without acknowledgement", lost, doubleHeld, unacked)
	}
	return nil
}

// printLapsed answers the operator's question about an item nobody came
// back about: its history, transition by transition, when the ledger keeps
// one, else what its record says.
func (f *fleet) printLapsed(ctx context.Context, out io.Writer, d *ledger.Delivery) error {
	fmt.Fprintf(out, "\nWhat happened to %s, which nobody came back about:\n", d.ID)
	h, ok := f.l.(ledger.Historian)
	if !ok {
		fmt.Fprintf(out, "  created %s for %s, leased %d time(s), acknowledged by %s at %s,\n  ended %s as %s: %s (%s)\n",
			d.CreatedAt.Format(time.TimeOnly), d.Target, d.Attempts, d.Ack.Owner, d.Ack.At.Format(time.TimeOnly),
			d.EndedAt.Format(time.TimeOnly), d.State, d.Cause.Kind, d.Cause.Detail)
		return nil
	}
	history, err := h.History(ctx, d.ID)
	if err != nil {
		return err
	}
	for _, t := range history {
		line := fmt.Sprintf("  %s  %-17s %-12s -> %-12s", t.At.Format(time.TimeOnly), t.Op, orDash(t.From), t.To)
		if t.Actor != "" {
			line += "  by " + t.Actor
		}
		if t.Reason != "" {
			line += "  (" + t.Reason + ")"
		}
		fmt.Fprintln(out, strings.TrimRight(line, " "))
	}
	return nil
}

// orDash shows an empty state (before creation) as "-".
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// doubleHeld counts deliveries granted while an earlier grant was still
// in force: neither expired nor ended by its holder or the ledger.
func (f *fleet) doubleHeld() int {
	n := 0
	for _, id := range sortedIDs(f.grants) {
		gs := f.grants[id]
		for i := 1; i < len(gs); i++ {
			prevEnd := gs[i-1].expires
			if !gs[i-1].ended.IsZero() && gs[i-1].ended.Before(prevEnd) {
				prevEnd = gs[i-1].ended
			}
			if gs[i].granted.Before(prevEnd) {
				n++
				break
			}
		}
	}
	return n
}

func printCounts(out io.Writer, m map[string]int) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(out, "  %-45s %5d\n", k, m[k])
	}
	if len(keys) == 0 {
		fmt.Fprintln(out, "  "+strings.Repeat("-", 5))
	}
}

func sortedInts(m map[int]int) []int {
	ks := make([]int, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Ints(ks)
	return ks
}
