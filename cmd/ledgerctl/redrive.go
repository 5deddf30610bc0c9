package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/pgstore"
	"github.com/leaseledger/ledger/storekit"
)

// This file is redrive, of deliveries and outbox entries, and expire. A
// redrive by ID answers like abandon; a redrive by filter goes through
// RedriveMatching batch by batch, with the time it started as its cutoff
// (see ledger.RedriveQuery.Cutoff), and -dry-run pages through the same
// records without redriving them.

// redriveBatch is how many records one redrive call examines.
const redriveBatch = 100

// redriveLine is one record a redrive made or would make, in -json.
type redriveLine struct {
	ID string `json:"id"`
	// Key is an outbox entry's idempotency key, the name the business
	// knows it by; empty for deliveries.
	Key     string         `json:"key,omitempty"`
	Outcome ledger.Outcome `json:"outcome,omitempty"` // empty in a dry run
	// As is the ID the new record has, or would have.
	As string `json:"as,omitempty"`
	// Abandoned lists what the target's queue bound ended to make room.
	Abandoned []ledger.DeliveryID `json:"abandoned,omitempty"`
}

// redriveJSON is the -json document of redrive and outbox redrive.
type redriveJSON struct {
	DryRun bool `json:"dry_run"`
	// Count is how many records were redriven (would be, in a dry run).
	Count   int           `json:"count"`
	Records []redriveLine `json:"records"`
}

// redriveFilter is the filter flags both redrive commands share.
type redriveFilter struct {
	values      listFlag // -state or -status
	names       listFlag // -target or -provider
	key         *string  // -key, the outbox's only; nil for deliveries
	endedBefore *string
	all         *bool
	dryRun      *bool
}

func newRedriveFilter(fs *flag.FlagSet, valueFlag, valueHelp, nameFlag, nameHelp string) *redriveFilter {
	f := &redriveFilter{}
	fs.Var(&f.values, valueFlag, valueHelp+" (repeatable, or a comma list)")
	fs.Var(&f.names, nameFlag, nameHelp+" (repeatable, or a comma list)")
	f.endedBefore = fs.String("ended-before", "", "only what ended before now minus this duration (e.g. 24h) or before this RFC 3339 time")
	f.all = fs.Bool("all", false, "with no other filter: everything that can be redriven")
	f.dryRun = fs.Bool("dry-run", false, "print what would be redriven, and how many, and change nothing")
	return f
}

// any reports whether a filter flag was given.
func (f *redriveFilter) any() bool {
	return len(f.values) > 0 || len(f.names) > 0 || (f.key != nil && *f.key != "") || *f.endedBefore != "" || *f.all
}

// check refuses a call that mixes an ID with a filter, or gives neither,
// and returns the cutoff: -ended-before when given and earlier than start,
// else start, so that a pass never takes what its own redrives end.
func (f *redriveFilter) check(pos []string, start time.Time) (id string, cutoff time.Time, err error) {
	switch {
	case len(pos) > 0 && f.any():
		return "", time.Time{}, usage("give an ID or filter flags, not both")
	case len(pos) > 0:
		id, err := exactlyOne(pos, "ID")
		if err != nil {
			return "", time.Time{}, err
		}
		// An ID refused fails the command, as it does show's and
		// abandon's; deliveries and outbox entries share the rule.
		if err := storekit.ValidateGet(id); err != nil {
			return "", time.Time{}, invalidInput(err)
		}
		return id, time.Time{}, nil
	case !f.any():
		return "", time.Time{}, usage("give an ID, or filter flags (-all for everything that can be redriven)")
	}
	cutoff = start
	if *f.endedBefore != "" {
		t, err := parseCutoff("-ended-before", *f.endedBefore, start)
		if err != nil {
			return "", time.Time{}, err
		}
		cutoff = ledger.RedriveQuery{EndedBefore: t}.Cutoff(start)
	}
	return "", cutoff, nil
}

func setupRedrive(fs *flag.FlagSet, c *common) func(context.Context, env, []string) error {
	f := newRedriveFilter(fs, "state", "only deliveries in this state: failed, expired", "target", "only deliveries for this target")
	newID := fs.String("new-id", "", "with an ID: the new delivery's ID (default ID/redrive)")
	return func(ctx context.Context, e env, pos []string) error {
		start := e.clock()
		id, cutoff, err := f.check(pos, start)
		if err != nil {
			return err
		}
		q := ledger.RedriveQuery{EndedBefore: cutoff, Limit: redriveBatch}
		for _, s := range f.values {
			q.States = append(q.States, ledger.DeliveryState(s))
		}
		for _, t := range f.names {
			q.Targets = append(q.Targets, ledger.Target(t))
		}
		if id == "" {
			if _, err := storekit.ValidateRedriveQuery(q, start); err != nil {
				return usage("invalid input: %v", err)
			}
		} else if err := storekit.ValidateRedrive(ledger.RedriveRequest{ID: ledger.DeliveryID(id), NewID: ledger.DeliveryID(*newID)}, start); err != nil {
			return usage("invalid input: %v", err)
		}
		store, closePool, err := open(ctx, *c, false)
		if err != nil {
			return err
		}
		defer closePool()
		if id != "" {
			return redriveOne(ctx, e, c, store, id, *newID, *f.dryRun, start)
		}
		if *f.dryRun {
			return redriveDryRun(ctx, e, c, store, q, start)
		}
		return redriveMatching(ctx, e, c, store, q, start)
	}
}

// redriveOne redrives the delivery id, or the outbox entry with that ID
// (or idempotency key) when no delivery has it. With dryRun it says what
// the redrive would answer, as the root package decides it for the
// record as it stands (storekit.Delivery.Redrive), and writes nothing.
func redriveOne(ctx context.Context, e env, c *common, store *pgstore.Store, id, newID string, dryRun bool, now time.Time) error {
	var res ledger.RedriveResult
	if dryRun {
		d, err := store.Get(ctx, ledger.DeliveryID(id))
		switch {
		case errors.Is(err, ledger.ErrNotFound):
			res.Outcome = ledger.OutcomeNotFound
		case err != nil:
			return invalidInput(err)
		default:
			as := storekit.Delivery(d).RedriveAs(ledger.DeliveryID(newID))
			_, err := store.Get(ctx, as)
			if err != nil && !errors.Is(err, ledger.ErrNotFound) {
				return invalidInput(err)
			}
			res.Original, res.Redriven.ID = d, as
			_, _, res.Outcome = storekit.Delivery(d).Redrive(ledger.DeliveryID(newID), err == nil, now)
		}
	} else {
		var err error
		if res, err = store.Redrive(ctx, ledger.RedriveRequest{ID: ledger.DeliveryID(id), NewID: ledger.DeliveryID(newID)}, now); err != nil {
			return invalidInput(err)
		}
	}
	if res.Outcome == ledger.OutcomeNotFound {
		if newID != "" {
			return notFound("no delivery has ID %q", id)
		}
		return redriveEntryOne(ctx, e, c, store.Outbox(), id, "", dryRun)
	}
	line := redriveLine{ID: id, Outcome: res.Outcome, As: string(res.Redriven.ID), Abandoned: res.Abandoned}
	return printRedriveOne(e, c, line, dryRun, string(res.Original.State), string(res.Original.RedrivenTo), "failed and expired deliveries")
}

// printRedriveOne prints the answer of a redrive by ID (or, with dryRun,
// the answer it would get); only Applied and Repeated (the record is
// redriven, as asked) are success, anything else exits 4 (not applied),
// a dry run too, so that a script can test a redrive before making it.
func printRedriveOne(e env, c *common, line redriveLine, dryRun bool, state, redrivenTo, what string) error {
	ok := line.Outcome == ledger.OutcomeApplied || line.Outcome == ledger.OutcomeRepeated
	if c.json {
		n := 0
		if line.Outcome == ledger.OutcomeApplied {
			n = 1
		}
		if err := writeJSON(e.stdout, redriveJSON{DryRun: dryRun, Count: n, Records: []redriveLine{line}}); err != nil || ok {
			return err
		}
		return notApplied("%s: %s", display(line.ID), line.Outcome)
	}
	switch line.Outcome {
	case ledger.OutcomeApplied:
		if dryRun {
			fmt.Fprintf(e.stdout, "would redrive %s as %s\n", display(line.ID), display(line.As))
			return nil
		}
		fmt.Fprintf(e.stdout, "redrove %s as %s\n", display(line.ID), display(line.As))
		for _, a := range line.Abandoned {
			fmt.Fprintf(e.stdout, "  abandoned %s: its target's queue was over its bound\n", display(string(a)))
		}
		return nil
	case ledger.OutcomeRepeated:
		fmt.Fprintf(e.stdout, "%s was already redriven as %s; nothing changed\n", display(line.ID), display(redrivenTo))
		return nil
	case ledger.OutcomeWrongState:
		return notApplied("%s is %s: only %s can be redriven", display(line.ID), state, what)
	case ledger.OutcomeConflict:
		if redrivenTo != "" {
			return notApplied("%s was already redriven as %s", display(line.ID), display(redrivenTo))
		}
		return notApplied("%s: the new ID is taken by another record", display(line.ID))
	}
	return notApplied("%s: %s", display(line.ID), line.Outcome)
}

// redriveMatching redrives everything q matches, batch by batch.
func redriveMatching(ctx context.Context, e env, c *common, store *pgstore.Store, q ledger.RedriveQuery, now time.Time) error {
	out := redriveJSON{Records: []redriveLine{}}
	p := e.progress("redrive")
	for {
		b, err := store.RedriveMatching(ctx, q, now)
		for _, r := range b.Results {
			out.Records = append(out.Records, redriveLine{ID: string(r.Original.ID), Outcome: r.Outcome,
				As: string(storekit.Delivery(r.Original).RedriveAs("")), Abandoned: r.Abandoned})
		}
		out.Count += b.Redriven()
		if err != nil {
			if out.Count > 0 {
				fmt.Fprintf(e.stderr, "ledgerctl: redrove %d deliveries before the error\n", out.Count)
			}
			return invalidInput(err)
		}
		p.report("%d deliveries redriven", out.Count)
		if b.Next == "" {
			break
		}
		q.Cursor = b.Next
		now = e.clock()
	}
	return printRedriveMatching(e, c, out, "deliveries")
}

// printRedriveMatching prints what a redrive by filter did, or would do.
func printRedriveMatching(e env, c *common, out redriveJSON, what string) error {
	if c.json {
		return writeJSON(e.stdout, out)
	}
	for _, l := range out.Records {
		switch {
		case out.DryRun:
			fmt.Fprintf(e.stdout, "would redrive %s%s as %s\n", display(l.ID), keyNote(l.Key), display(l.As))
		case l.Outcome == ledger.OutcomeApplied:
			fmt.Fprintf(e.stdout, "redrove %s%s as %s\n", display(l.ID), keyNote(l.Key), display(l.As))
		default:
			fmt.Fprintf(e.stdout, "did not redrive %s%s: %s\n", display(l.ID), keyNote(l.Key), l.Outcome)
		}
		for _, a := range l.Abandoned {
			fmt.Fprintf(e.stdout, "  abandoned %s: its target's queue was over its bound\n", display(string(a)))
		}
	}
	verb := "redrove"
	if out.DryRun {
		verb = "would redrive"
	}
	fmt.Fprintf(e.stdout, "%s %d %s\n", verb, out.Count, what)
	return nil
}

// keyNote is " (key K)" for an outbox entry's line, "" for a delivery's.
func keyNote(key string) string {
	if key == "" {
		return ""
	}
	return " (key " + display(key) + ")"
}

// redriveDryRun lists, page by page, the deliveries a redrive by q at now
// would take, and changes nothing.
func redriveDryRun(ctx context.Context, e env, c *common, store *pgstore.Store, q ledger.RedriveQuery, now time.Time) error {
	out := redriveJSON{DryRun: true, Records: []redriveLine{}}
	lq := ledger.ListQuery{Targets: q.Targets, States: q.States, Limit: ledger.MaxLimit}
	if len(lq.States) == 0 {
		lq.States = []ledger.DeliveryState{ledger.DeliveryStateFailed, ledger.DeliveryStateExpired}
	}
	p := e.progress("redrive -dry-run")
	for {
		page, err := store.List(ctx, lq)
		if err != nil {
			return invalidInput(err)
		}
		for _, d := range page.Deliveries {
			if q.Matches(d, now) {
				out.Records = append(out.Records, redriveLine{ID: string(d.ID), As: string(storekit.Delivery(d).RedriveAs(""))})
			}
		}
		out.Count = len(out.Records)
		p.report("%d deliveries found", out.Count)
		if page.Next == "" {
			break
		}
		lq.Cursor = page.Next
	}
	return printRedriveMatching(e, c, out, "deliveries")
}

func setupOutboxRedrive(fs *flag.FlagSet, c *common) func(context.Context, env, []string) error {
	f := newRedriveFilter(fs, "status", "only entries in this status: failed, dead_lettered", "provider", "only entries for this provider")
	f.key = fs.String("key", "", "only the entry enqueued with this idempotency key")
	key := fs.String("new-key", "", "with an ID: the new entry's idempotency key (default KEY/redrive)")
	return func(ctx context.Context, e env, pos []string) error {
		start := e.clock()
		id, cutoff, err := f.check(pos, start)
		if err != nil {
			return err
		}
		q := ledger.RedriveEntryQuery{EndedBefore: cutoff, Limit: redriveBatch, Providers: f.names, IdempotencyKey: *f.key}
		for _, s := range f.values {
			q.Statuses = append(q.Statuses, ledger.OutboxStatus(s))
		}
		if id == "" {
			if _, err := storekit.ValidateRedriveEntryQuery(q); err != nil {
				return usage("invalid input: %v", err)
			}
		} else if err := storekit.ValidateRedriveEntry(ledger.RedriveEntryRequest{ID: ledger.OutboxEntryID(id), IdempotencyKey: *key}); err != nil {
			return usage("invalid input: %v", err)
		}
		store, closePool, err := open(ctx, *c, false)
		if err != nil {
			return err
		}
		defer closePool()
		o := store.Outbox()
		switch {
		case id != "":
			return redriveEntryOne(ctx, e, c, o, id, *key, *f.dryRun)
		case *f.dryRun:
			return redriveEntriesDryRun(ctx, e, c, o, q)
		}
		out := redriveJSON{Records: []redriveLine{}}
		p := e.progress("outbox redrive")
		for {
			b, err := o.RedriveEntriesMatching(ctx, q)
			for _, r := range b.Results {
				out.Records = append(out.Records, redriveLine{ID: string(r.Original.ID), Key: r.Original.Envelope.IdempotencyKey,
					Outcome: r.Outcome, As: string(storekit.OutboxEntry(r.Original).RedriveAs(""))})
			}
			out.Count += b.Redriven()
			if err != nil {
				if out.Count > 0 {
					fmt.Fprintf(e.stderr, "ledgerctl: redrove %d outbox entries before the error\n", out.Count)
				}
				return invalidInput(err)
			}
			p.report("%d outbox entries redriven", out.Count)
			if b.Next == "" {
				break
			}
			q.Cursor = b.Next
		}
		return printRedriveMatching(e, c, out, "outbox entries")
	}
}

// redriveEntryOne redrives the outbox entry with ID (or idempotency key)
// id under key; with dryRun it says what the redrive would answer
// (storekit.OutboxEntry.Redrive) and writes nothing.
func redriveEntryOne(ctx context.Context, e env, c *common, o *pgstore.Outbox, id, key string, dryRun bool) error {
	entry, err := findEntry(ctx, o, id)
	if errors.Is(err, ledger.ErrNotFound) {
		return notFound("no delivery or outbox entry has ID %q, and no outbox entry has it as its idempotency key", id)
	}
	if err != nil {
		return err
	}
	var res ledger.RedriveEntryResult
	if dryRun {
		as := storekit.OutboxEntry(entry).RedriveAs(key)
		_, err := o.FindByID(ctx, as)
		if err != nil && !errors.Is(err, ledger.ErrNotFound) {
			return invalidInput(err)
		}
		res.Original, res.Redriven.ID = entry, as
		_, _, res.Outcome = storekit.OutboxEntry(entry).Redrive(key, err == nil, time.Now())
	} else if res, err = o.RedriveEntry(ctx, ledger.RedriveEntryRequest{ID: entry.ID, IdempotencyKey: key}); err != nil {
		return invalidInput(err)
	}
	if res.Outcome == ledger.OutcomeNotFound { // purged meanwhile
		return notFound("no outbox entry has ID %q", entry.ID)
	}
	line := redriveLine{ID: string(entry.ID), Key: entry.Envelope.IdempotencyKey, Outcome: res.Outcome, As: string(res.Redriven.ID)}
	return printRedriveOne(e, c, line, dryRun, string(res.Original.Status), string(res.Original.RedrivenTo), "failed and dead-lettered entries")
}

// redriveEntriesDryRun is redriveDryRun for outbox entries.
func redriveEntriesDryRun(ctx context.Context, e env, c *common, o *pgstore.Outbox, q ledger.RedriveEntryQuery) error {
	out := redriveJSON{DryRun: true, Records: []redriveLine{}}
	lq := ledger.OutboxListQuery{Providers: q.Providers, Statuses: q.Statuses, IdempotencyKey: q.IdempotencyKey, Limit: ledger.MaxLimit}
	if len(lq.Statuses) == 0 {
		lq.Statuses = []ledger.OutboxStatus{ledger.OutboxStatusFailed, ledger.OutboxStatusDeadLettered}
	}
	p := e.progress("outbox redrive -dry-run")
	for {
		page, err := o.ListEntries(ctx, lq)
		if err != nil {
			return invalidInput(err)
		}
		for _, en := range page.Entries {
			if q.Matches(en) {
				out.Records = append(out.Records, redriveLine{ID: string(en.ID), Key: en.Envelope.IdempotencyKey, As: string(storekit.OutboxEntry(en).RedriveAs(""))})
			}
		}
		out.Count = len(out.Records)
		p.report("%d outbox entries found", out.Count)
		if page.Next == "" {
			break
		}
		lq.Cursor = page.Next
	}
	return printRedriveMatching(e, c, out, "outbox entries")
}

// expireJSON is the -json document of expire.
type expireJSON struct {
	At      time.Time           `json:"at"`
	Changed []ledger.DeliveryID `json:"changed"`
}

// setupExpire is the expire command: one run of the sweep a sweeper runs
// on its own, for an operator who wants it now.
func setupExpire(_ *flag.FlagSet, c *common) func(context.Context, env, []string) error {
	return func(ctx context.Context, e env, pos []string) error {
		if err := noArgs(pos); err != nil {
			return err
		}
		store, closePool, err := open(ctx, *c, false)
		if err != nil {
			return err
		}
		defer closePool()
		now := ledger.Normalize(e.clock())
		stop := e.during("expire")
		res, err := store.Expire(ctx, now)
		stop()
		out := expireJSON{At: now, Changed: res.Changed}
		if out.Changed == nil {
			out.Changed = []ledger.DeliveryID{}
		}
		if err != nil {
			// The sweep commits in batches: say what did change.
			if len(out.Changed) > 0 {
				fmt.Fprintf(e.stderr, "ledgerctl: expired %d deliveries before the error\n", len(out.Changed))
			}
			return invalidInput(err)
		}
		if c.json {
			return writeJSON(e.stdout, out)
		}
		for _, id := range out.Changed {
			fmt.Fprintf(e.stdout, "  %s\n", display(string(id)))
		}
		fmt.Fprintf(e.stdout, "expired %d deliveries whose lease or acknowledgement deadline had passed at %s\n", len(out.Changed), fmtTime(now))
		return nil
	}
}
