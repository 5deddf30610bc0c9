package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/pgstore"
	"github.com/leaseledger/ledger/storekit"
)

// This file is the outbox commands: list, show and stats (redrive is in
// redrive.go), the outbox's twins of the delivery commands.

// outboxListJSON is the -json document of outbox list.
type outboxListJSON struct {
	Entries []ledger.OutboxEntry `json:"entries"`
	Next    string               `json:"next"`
}

func setupOutboxList(fs *flag.FlagSet, c *common) func(context.Context, env, []string) error {
	var statuses, providers listFlag
	fs.Var(&statuses, "status", "only entries in this status (repeatable, or a comma list): "+statusNames())
	fs.Var(&providers, "provider", "only entries for this provider (repeatable, or a comma list)")
	key := fs.String("key", "", "only the entries enqueued with this idempotency key")
	limit := fs.Int("limit", 50, fmt.Sprintf("page size, 1 to %d", ledger.MaxLimit))
	cursor := fs.String("cursor", "", "the next cursor printed by the previous page")
	return func(ctx context.Context, e env, pos []string) error {
		if err := noArgs(pos); err != nil {
			return err
		}
		q := ledger.OutboxListQuery{Providers: providers, IdempotencyKey: *key, Limit: *limit, Cursor: *cursor}
		for _, s := range statuses {
			q.Statuses = append(q.Statuses, ledger.OutboxStatus(s))
		}
		if _, err := storekit.ValidateOutboxList(q); err != nil {
			return usage("invalid input: %v", err)
		}
		store, closePool, err := open(ctx, *c, false)
		if err != nil {
			return err
		}
		defer closePool()
		page, err := store.Outbox().ListEntries(ctx, q)
		if err != nil {
			return invalidInput(err)
		}
		if c.json {
			out := outboxListJSON{Entries: make([]ledger.OutboxEntry, 0, len(page.Entries)), Next: page.Next}
			for _, en := range page.Entries {
				out.Entries = append(out.Entries, redactEntry(en))
			}
			return writeJSON(e.stdout, out)
		}
		printEntries(e.stdout, page)
		return nil
	}
}

// statusNames lists the outbox statuses for help and messages.
func statusNames() string {
	var names []string
	for _, s := range ledger.OutboxStatuses() {
		names = append(names, string(s))
	}
	return strings.Join(names, ", ")
}

// printEntries prints one page of outbox entries as a table and the next
// cursor.
func printEntries(w io.Writer, page ledger.OutboxPage) {
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tKEY\tSTATUS\tPROVIDER\tKIND\tATTEMPTS\tNEXT ATTEMPT AT\tUPDATED AT")
	for _, en := range page.Entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", display(string(en.ID)), display(en.Envelope.IdempotencyKey), en.Status,
			display(string(en.Envelope.Provider)), display(string(en.Envelope.Kind)),
			en.Attempts, fmtNextAttempt(en), fmtTime(en.UpdatedAt))
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\n%d outbox entries on this page\n", len(page.Entries))
	if page.Next == "" {
		fmt.Fprintln(w, "last page")
	} else {
		fmt.Fprintf(w, "next cursor: %s\n", page.Next)
	}
}

func setupOutboxShow(_ *flag.FlagSet, c *common) func(context.Context, env, []string) error {
	return func(ctx context.Context, e env, pos []string) error {
		id, err := exactlyOne(pos, "ID")
		if err != nil {
			return err
		}
		store, closePool, err := open(ctx, *c, false)
		if err != nil {
			return err
		}
		defer closePool()
		err = showEntry(ctx, e, c, store.Outbox(), id)
		if errors.Is(err, ledger.ErrNotFound) {
			return notFound("no outbox entry has ID or idempotency key %q", id)
		}
		return err
	}
}

// showEntry prints the outbox entry with ID or idempotency key id, and its
// history; an error matching ledger.ErrNotFound when there is none.
func showEntry(ctx context.Context, e env, c *common, o *pgstore.Outbox, id string) error {
	entry, err := findEntry(ctx, o, id)
	if err != nil {
		return err
	}
	history, err := o.EntryHistory(ctx, entry.ID)
	if err != nil {
		return err
	}
	doc := showJSON{Kind: "outbox_entry", History: history}
	doc.entryNotes(entry, e.clock())
	if c.json {
		shown := redactEntry(entry)
		doc.Entry = &shown
		return writeJSON(e.stdout, doc)
	}
	printEntry(e.stdout, entry)
	printNotes(e.stdout, doc.Notes)
	printHistory(e.stdout, history)
	return nil
}

// findEntry returns the outbox entry whose ID is id or, when none has,
// the one enqueued with idempotency key id: the key is the name the
// business knows an entry by (an order number), and an entry's ID is not
// always derived from it (a redriven entry's comes from its new key). An
// error matching ledger.ErrNotFound when neither finds one.
func findEntry(ctx context.Context, o *pgstore.Outbox, id string) (ledger.OutboxEntry, error) {
	entry, err := o.FindByID(ctx, ledger.OutboxEntryID(id))
	switch {
	case err == nil:
		return entry, nil
	case !errors.Is(err, ledger.ErrNotFound):
		return ledger.OutboxEntry{}, invalidInput(err)
	}
	page, err := o.ListEntries(ctx, ledger.OutboxListQuery{IdempotencyKey: id, Limit: 1})
	switch {
	case err != nil:
		return ledger.OutboxEntry{}, invalidInput(err)
	case len(page.Entries) == 0:
		return ledger.OutboxEntry{}, ledger.ErrNotFound
	}
	return page.Entries[0], nil
}

// deliveryNotes sets what d's fields do not say by themselves at now.
func (doc *showJSON) deliveryNotes(d ledger.Delivery, now time.Time) {
	now = ledger.Normalize(now)
	switch {
	case d.State == ledger.DeliveryStateLeased && d.Lease != nil && d.Lease.ExpiredAt(now):
		doc.LeaseExpired = true
		next := "Lease offers it again, and a sweep (ledgerctl expire) puts it back to offered"
		if d.Attempts >= d.Policy.MaxAttempts {
			next = "its attempts are used up, so a sweep (ledgerctl expire) ends it as failed"
		}
		doc.Notes = append(doc.Notes, fmt.Sprintf("the lease of %s ran out at %s, %s ago: %s",
			d.Lease.Owner, fmtTime(d.Lease.ExpiresAt), ago(now, d.Lease.ExpiresAt), next))
	case d.State == ledger.DeliveryStateAcknowledged && d.Ack != nil && !now.Before(d.Ack.Deadline):
		doc.AckLapsed = true
		doc.Notes = append(doc.Notes, fmt.Sprintf("the acknowledgement deadline passed at %s, %s ago: a sweep (ledgerctl expire) ends it as expired (%s)",
			fmtTime(d.Ack.Deadline), ago(now, d.Ack.Deadline), ledger.CauseAcknowledgementLapsed))
	}
}

// entryNotes is deliveryNotes for outbox entries.
func (doc *showJSON) entryNotes(en ledger.OutboxEntry, now time.Time) {
	now = ledger.Normalize(now)
	if en.Claim != nil && en.Claim.ExpiredAt(now) {
		doc.ClaimExpired = true
		doc.Notes = append(doc.Notes, fmt.Sprintf("the claim of %s ran out at %s, %s ago: the entry can be claimed again",
			en.Claim.Worker, fmtTime(en.Claim.ExpiresAt), ago(now, en.Claim.ExpiresAt)))
	}
}

// ago prints how long before now t was, to the second.
func ago(now, t time.Time) time.Duration { return now.Sub(t).Round(time.Second) }

// printNotes prints show's notes, if any, after the record's fields.
func printNotes(w io.Writer, notes []string) {
	for _, n := range notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// outboxStatsJSON is the -json document of outbox stats.
type outboxStatsJSON struct {
	At     time.Time          `json:"at"`
	Outbox ledger.OutboxStats `json:"outbox"`
}

func setupOutboxStats(_ *flag.FlagSet, c *common) func(context.Context, env, []string) error {
	return func(ctx context.Context, e env, pos []string) error {
		if err := noArgs(pos); err != nil {
			return err
		}
		store, closePool, err := open(ctx, *c, false)
		if err != nil {
			return err
		}
		defer closePool()
		now := e.clock()
		o, err := store.Outbox().OutboxStats(ctx, now)
		if err != nil {
			return invalidInput(err)
		}
		if c.json {
			return writeJSON(e.stdout, outboxStatsJSON{At: ledger.Normalize(now), Outbox: o})
		}
		tw := newTable(e.stdout)
		fmt.Fprintln(tw, "OUTBOX\tCOUNT")
		for _, st := range ledger.OutboxStatuses() {
			fmt.Fprintf(tw, "%s\t%d\n", st, o.ByStatus[st])
		}
		fmt.Fprintf(tw, "depth (claimable now)\t%d\n", o.Depth)
		fmt.Fprintf(tw, "lag (oldest due)\t%s\n", fmtLag(o.Lag, o.OldestDueAt))
		return tw.Flush()
	}
}
