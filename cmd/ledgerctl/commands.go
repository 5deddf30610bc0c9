package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/pgstore"
	"github.com/leaseledger/ledger/storekit"
)

// listFlag is a repeatable flag whose values may also be comma lists.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for part := range strings.SplitSeq(v, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*l = append(*l, part)
		}
	}
	return nil
}

// invalidInput turns a validation error into an exit-1 message; other
// errors pass through unchanged.
func invalidInput(err error) error {
	if errors.Is(err, ledger.ErrInvalid) {
		return fail("invalid input: %v", err)
	}
	return err
}

// listJSON is the -json document of list.
type listJSON struct {
	Deliveries []ledger.Delivery `json:"deliveries"`
	Next       string            `json:"next"`
}

func setupList(fs *flag.FlagSet, c *common) func(context.Context, env, []string) error {
	var states, targets listFlag
	fs.Var(&states, "state", "only deliveries in this state (repeatable, or a comma list): "+stateNames())
	fs.Var(&targets, "target", "only deliveries for this target (repeatable, or a comma list)")
	ceremony := fs.String("ceremony", "", "only deliveries of this ceremony")
	limit := fs.Int("limit", 50, fmt.Sprintf("page size, 1 to %d", ledger.MaxLimit))
	cursor := fs.String("cursor", "", "the next cursor printed by the previous page")
	return func(ctx context.Context, e env, pos []string) error {
		if err := noArgs(pos); err != nil {
			return err
		}
		q := ledger.ListQuery{Ceremony: ledger.CeremonyID(*ceremony), Limit: *limit, Cursor: *cursor}
		for _, s := range states {
			st := ledger.DeliveryState(s)
			if !st.Valid() {
				return usage("invalid -state %q: want one of %s", s, stateNames())
			}
			q.States = append(q.States, st)
		}
		for _, t := range targets {
			q.Targets = append(q.Targets, ledger.Target(t))
		}
		// Checked before connecting, so a typo costs no round trip, and
		// refused as a usage error, as a bad flag is.
		if _, err := storekit.ValidateList(q); err != nil {
			return usage("invalid input: %v", err)
		}
		store, closePool, err := open(ctx, *c, false)
		if err != nil {
			return err
		}
		defer closePool()
		page, err := store.List(ctx, q)
		if err != nil {
			return invalidInput(err)
		}
		if c.json {
			out := listJSON{Deliveries: make([]ledger.Delivery, 0, len(page.Deliveries)), Next: page.Next}
			for _, d := range page.Deliveries {
				out.Deliveries = append(out.Deliveries, redact(d))
			}
			return writeJSON(e.stdout, out)
		}
		printList(e.stdout, page)
		return nil
	}
}

// stateNames lists the delivery states for help and messages.
func stateNames() string {
	var names []string
	for _, s := range ledger.DeliveryStates() {
		names = append(names, string(s))
	}
	return strings.Join(names, ", ")
}

// showJSON is the -json document of show: exactly one of Delivery and
// Entry is set, and Kind says which.
type showJSON struct {
	Kind     string              `json:"kind"` // "delivery" or "outbox_entry"
	Delivery *ledger.Delivery    `json:"delivery,omitempty"`
	Entry    *ledger.OutboxEntry `json:"outbox_entry,omitempty"`
	// History lists the record's transitions, oldest first.
	History []ledger.Transition `json:"history"`
	// The record as of now, which its fields alone do not say (see
	// recordNotes): its lease or claim ran out, its acknowledgement
	// deadline passed. Notes says the same, and what comes next, in
	// words.
	LeaseExpired bool     `json:"lease_expired,omitempty"`
	AckLapsed    bool     `json:"ack_lapsed,omitempty"`
	ClaimExpired bool     `json:"claim_expired,omitempty"`
	Notes        []string `json:"notes,omitempty"`
}

func setupShow(_ *flag.FlagSet, c *common) func(context.Context, env, []string) error {
	return func(ctx context.Context, e env, pos []string) error {
		id, err := exactlyOne(pos, "ID")
		if err != nil {
			return err
		}
		// Deliveries and outbox entries share the ID rule; checked before
		// connecting, as every input is.
		if err := storekit.ValidateGet(id); err != nil {
			return invalidInput(err)
		}
		store, closePool, err := open(ctx, *c, false)
		if err != nil {
			return err
		}
		defer closePool()
		d, err := store.Get(ctx, ledger.DeliveryID(id))
		switch {
		case err == nil:
			history, err := store.History(ctx, d.ID)
			if err != nil {
				return err
			}
			doc := showJSON{Kind: "delivery", History: history}
			doc.deliveryNotes(d, e.clock())
			if c.json {
				shown := redact(d)
				doc.Delivery = &shown
				return writeJSON(e.stdout, doc)
			}
			printDelivery(e.stdout, d)
			printNotes(e.stdout, doc.Notes)
			printHistory(e.stdout, history)
			return nil
		case !errors.Is(err, ledger.ErrNotFound):
			return invalidInput(err)
		}
		// Deliveries and outbox entries have separate ID spaces; an
		// operator holding an ID from a log need not know which it is.
		err = showEntry(ctx, e, c, store.Outbox(), id)
		if errors.Is(err, ledger.ErrNotFound) {
			return notFound("no delivery or outbox entry has ID %q, and no outbox entry has it as its idempotency key", id)
		}
		return err
	}
}

// causeFlags registers -cause and -detail and returns the cause they make.
func causeFlags(fs *flag.FlagSet) func() (ledger.Cause, error) {
	kind := fs.String("cause", "", "why the delivery ends (required), e.g. "+string(ledger.CauseBindingRevoked))
	detail := fs.String("detail", "", "free text recorded with the cause")
	return func() (ledger.Cause, error) {
		if *kind == "" {
			return ledger.Cause{}, usage("missing -cause KIND")
		}
		cause := ledger.Cause{Kind: ledger.CauseKind(*kind), Detail: *detail}
		if err := storekit.ValidateCause(cause); err != nil {
			return ledger.Cause{}, usage("invalid input: %v", err)
		}
		return cause, nil
	}
}

// causeCall does what abandon and expire-ceremony share before their call:
// take the one positional ID (named what), the cause flags, check the
// call's whole input with validate (given the ID, the cause and now), and
// only then open the store. The caller closes the pool.
func causeCall(ctx context.Context, c common, pos []string, what string, cause func() (ledger.Cause, error),
	validate func(id string, cause ledger.Cause, now time.Time) error) (string, ledger.Cause, *pgstore.Store, func(), error) {
	id, err := exactlyOne(pos, what)
	if err != nil {
		return "", ledger.Cause{}, nil, nil, err
	}
	cs, err := cause()
	if err != nil {
		return "", ledger.Cause{}, nil, nil, err
	}
	if err := validate(id, cs, time.Now()); err != nil {
		return "", ledger.Cause{}, nil, nil, invalidInput(err)
	}
	store, closePool, err := open(ctx, c, false)
	if err != nil {
		return "", ledger.Cause{}, nil, nil, err
	}
	return id, cs, store, closePool, nil
}

// abandonJSON is the -json document of abandon.
type abandonJSON struct {
	Outcome  ledger.Outcome  `json:"outcome"`
	Delivery ledger.Delivery `json:"delivery"`
}

func setupAbandon(fs *flag.FlagSet, c *common) func(context.Context, env, []string) error {
	cause := causeFlags(fs)
	return func(ctx context.Context, e env, pos []string) error {
		id, cs, store, closePool, err := causeCall(ctx, *c, pos, "delivery ID", cause, func(id string, cs ledger.Cause, now time.Time) error {
			return storekit.ValidateAbandon(ledger.DeliveryID(id), cs, now)
		})
		if err != nil {
			return err
		}
		defer closePool()
		res, err := store.Abandon(ctx, ledger.DeliveryID(id), cs, time.Now())
		if err != nil {
			return invalidInput(err)
		}
		if res.Outcome == ledger.OutcomeNotFound {
			return notFound("no delivery has ID %q", id)
		}
		if c.json {
			if err := writeJSON(e.stdout, abandonJSON{Outcome: res.Outcome, Delivery: redact(res.Delivery)}); err != nil || res.Applied() {
				return err
			}
		} else if res.Applied() {
			fmt.Fprintf(e.stdout, "abandoned %s: now %s (cause %s)\n", display(id), res.Delivery.State, display(string(cs.Kind)))
			return nil
		}
		// Not applied is exit 4, as for every command: the operator's
		// cause was not recorded, whatever ended the delivery before.
		if res.Outcome == ledger.OutcomeEnded {
			return notApplied("%s already ended: %s at %s; nothing changed", display(id), res.Delivery.State, fmtTime(res.Delivery.EndedAt))
		}
		return notApplied("%s: %s; nothing changed", display(id), res.Outcome)
	}
}

// sweepJSON is the -json document of expire-ceremony.
type sweepJSON struct {
	Ceremony ledger.CeremonyID   `json:"ceremony"`
	Changed  []ledger.DeliveryID `json:"changed"`
}

func setupExpireCeremony(fs *flag.FlagSet, c *common) func(context.Context, env, []string) error {
	cause := causeFlags(fs)
	return func(ctx context.Context, e env, pos []string) error {
		id, cs, store, closePool, err := causeCall(ctx, *c, pos, "ceremony ID", cause, func(id string, cs ledger.Cause, now time.Time) error {
			return storekit.ValidateExpireCeremony(ledger.CeremonyID(id), cs, now)
		})
		if err != nil {
			return err
		}
		defer closePool()
		stop := e.during("expire-ceremony")
		res, err := store.ExpireCeremony(ctx, ledger.CeremonyID(id), cs, time.Now())
		stop()
		// A batched sweep may fail after earlier batches committed: say
		// what did change before the error.
		changed := res.Changed
		if changed == nil {
			changed = []ledger.DeliveryID{}
		}
		if err != nil {
			if len(changed) > 0 {
				fmt.Fprintf(e.stderr, "ledgerctl: expired %d deliveries before the error\n", len(changed))
			}
			return invalidInput(err)
		}
		if c.json {
			return writeJSON(e.stdout, sweepJSON{Ceremony: ledger.CeremonyID(id), Changed: changed})
		}
		fmt.Fprintf(e.stdout, "expired %d open deliveries of ceremony %s (cause %s)\n", len(changed), display(id), display(string(cs.Kind)))
		for _, d := range changed {
			fmt.Fprintf(e.stdout, "  %s\n", display(string(d)))
		}
		return nil
	}
}

// purgeJSON is the -json document of purge. With -dry-run the counts are
// what a purge would delete now.
type purgeJSON struct {
	OlderThan     time.Time `json:"older_than"`
	DryRun        bool      `json:"dry_run"`
	Deliveries    int64     `json:"deliveries"`
	OutboxEntries int64     `json:"outbox_entries"`
}

func setupPurge(fs *flag.FlagSet, c *common) func(context.Context, env, []string) error {
	olderThan := fs.String("older-than", "", "delete what ended before now minus this duration (e.g. 720h) or before this RFC 3339 time (required)")
	dryRun := fs.Bool("dry-run", false, "count what would be deleted, and delete nothing")
	return func(ctx context.Context, e env, pos []string) error {
		if err := noArgs(pos); err != nil {
			return err
		}
		if *olderThan == "" {
			return usage("missing -older-than DURATION|RFC3339")
		}
		cutoff, err := parseCutoff("-older-than", *olderThan, e.clock())
		if err != nil {
			return err
		}
		// A cut-off the library refuses (before 1970, after 2262) is
		// refused here, before connecting.
		if err := storekit.ValidatePurge(cutoff, ledger.MaxLimit); err != nil {
			return fail("invalid -older-than %q: %v", *olderThan, err)
		}
		store, closePool, err := open(ctx, *c, false)
		if err != nil {
			return err
		}
		defer closePool()
		out := purgeJSON{OlderThan: cutoff, DryRun: *dryRun}
		if *dryRun {
			if out.Deliveries, err = store.CountPurgeable(ctx, cutoff); err != nil {
				return invalidInput(err)
			}
			if out.OutboxEntries, err = store.Outbox().CountPurgeable(ctx, cutoff); err != nil {
				return invalidInput(err)
			}
		} else if err := purge(ctx, e, store, cutoff, &out); err != nil {
			return err
		}
		if c.json {
			return writeJSON(e.stdout, out)
		}
		verb := "purged"
		if *dryRun {
			verb = "would purge"
		}
		fmt.Fprintf(e.stdout, "%s %d deliveries and %d outbox entries that ended before %s\n",
			verb, out.Deliveries, out.OutboxEntries, fmtTime(cutoff))
		return nil
	}
}

// purge deletes what ended before cutoff, in batches of MaxLimit that keep
// each statement bounded; a short batch means nothing purgeable is left
// (or the rest is locked, which the next purge takes).
func purge(ctx context.Context, e env, store *pgstore.Store, cutoff time.Time, out *purgeJSON) error {
	p := e.progress("purge")
	for {
		n, err := store.PurgeDeliveries(ctx, cutoff, ledger.MaxLimit)
		out.Deliveries += int64(n)
		if err != nil {
			if out.Deliveries > 0 {
				fmt.Fprintf(e.stderr, "ledgerctl: purged %d deliveries before the error\n", out.Deliveries)
			}
			return invalidInput(err)
		}
		p.report("%d deliveries purged", out.Deliveries)
		if n < ledger.MaxLimit {
			break
		}
	}
	outbox := store.Outbox()
	for {
		n, err := outbox.PurgeEntries(ctx, cutoff, ledger.MaxLimit)
		out.OutboxEntries += int64(n)
		if err != nil {
			if out.Deliveries+out.OutboxEntries > 0 {
				fmt.Fprintf(e.stderr, "ledgerctl: purged %d deliveries and %d outbox entries before the error\n", out.Deliveries, out.OutboxEntries)
			}
			return invalidInput(err)
		}
		p.report("%d deliveries and %d outbox entries purged", out.Deliveries, out.OutboxEntries)
		if n < ledger.MaxLimit {
			break
		}
	}
	return nil
}

// parseCutoff reads a cutoff flag (-older-than, -ended-before): a positive
// Go duration counted back from now, or an RFC 3339 time. A value it
// cannot read is a usage error.
func parseCutoff(flagName, v string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(v); err == nil {
		if d <= 0 {
			return time.Time{}, usage("invalid %s %q: the duration must be positive", flagName, v)
		}
		return now.Add(-d).UTC(), nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, usage("invalid %s %q: want a duration such as 720h or an RFC 3339 time", flagName, v)
	}
	return t.UTC(), nil
}
