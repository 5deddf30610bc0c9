package console

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/leaseledger/ledger"
)

// This file turns records into the views the templates print. A view
// holds strings and numbers only, and has no field for a lease or claim
// token: a template cannot print what it is never given.

// payloadShown bounds how much of a payload a page shows.
const payloadShown = 4 << 10

// payloadView is a payload as a page shows it: as text when it is
// printable UTF-8 (and the operator did not ask for hex), else as a hex
// dump; at most payloadShown bytes of it either way. The template prints
// both as text: a payload is never interpreted.
type payloadView struct {
	Size      int
	Text      string
	Hex       string
	Truncated bool
}

func newPayloadView(p []byte, forceHex bool) payloadView {
	v := payloadView{Size: len(p)}
	if len(p) > payloadShown {
		p, v.Truncated = p[:payloadShown], true
	}
	if !forceHex && printable(p, v.Truncated) {
		v.Text = string(p)
	} else if len(p) > 0 {
		v.Hex = hex.Dump(p)
	}
	return v
}

// printable reports whether p reads as text: valid UTF-8 (a truncated
// payload may end inside a character) with no control or invisible
// characters but line breaks and tabs.
func printable(p []byte, truncated bool) bool {
	for len(p) > 0 {
		r, n := utf8.DecodeRune(p)
		if r == utf8.RuneError && n <= 1 {
			return truncated && len(p) < utf8.UTFMax && !utf8.FullRune(p)
		}
		if r != '\n' && r != '\t' && r != '\r' && (unicode.IsControl(r) || unicode.Is(unicode.Cf, r)) {
			return false
		}
		p = p[n:]
	}
	return true
}

// fmtTime prints a time for operators, in UTC to the second, or "-".
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// fmtExact prints a time to the microsecond, for the record pages.
func fmtExact(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000000Z")
}

// fmtAge prints how long before now t was, or "-" for the zero time.
func fmtAge(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	if d < 0 {
		return "in " + roundAge(-d)
	}
	return roundAge(d) + " ago"
}

func roundAge(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Minute).String()
}

// field is one row of a record page: a name, a value, and an optional
// link for the value.
type field struct {
	Name, Value, Link string
}

// deliveryView is a delivery as its page shows it.
type deliveryView struct {
	ID, State, Target, Ceremony string
	Open                        bool
	Fields                      []field
	Payload                     payloadView
	// MovedFrom is the target the delivery was enqueued for, once a Follow
	// supersession moved it: the record it is linked to.
	MovedFrom string
}

// rowView is one line of a list of deliveries or entries.
type rowView struct {
	ID, State, Key, Ceremony, Attempts, Available, Updated, Ended string
	// IdemKey is an outbox entry's idempotency key.
	IdemKey string
	// Reason is why the record ended badly: its cause, its last failure
	// or its dead-letter reason; shown in the dead letters.
	Reason string
	// RedrivenTo and RedrivenLink name the record a redrive made of this
	// one, if any.
	RedrivenTo, RedrivenLink string
}

// available prints when a record is next offered (claimed), or "-" when
// it is not waiting for that: an ended record keeps its last time, which
// may lie in the future (a retry scheduled, then abandoned) and reads as
// a promise.
func available(t time.Time, waiting bool) string {
	if !waiting {
		return "-"
	}
	return fmtTime(t)
}

func deliveryRow(d ledger.Delivery) rowView {
	v := rowView{
		ID: string(d.ID), State: string(d.State), Key: string(d.Target), Ceremony: string(d.Ceremony),
		Attempts:  fmt.Sprintf("%d/%d", d.Attempts, d.Policy.MaxAttempts),
		Available: available(d.AvailableAt, d.State == ledger.DeliveryStateOffered || d.State == ledger.DeliveryStateLeased),
		Updated:   fmtTime(d.UpdatedAt), Ended: fmtTime(d.EndedAt),
	}
	switch {
	case d.Cause != nil:
		v.Reason = joinReason(string(d.Cause.Kind), d.Cause.Detail)
	case d.LastFailure != nil:
		v.Reason = joinReason(string(d.LastFailure.Kind), d.LastFailure.Message)
	}
	if d.RedrivenTo != "" {
		v.RedrivenTo, v.RedrivenLink = string(d.RedrivenTo), listURL("/delivery", "id", string(d.RedrivenTo))
	}
	return v
}

func entryRow(e ledger.OutboxEntry) rowView {
	v := rowView{
		ID: string(e.ID), State: string(e.Status), Key: e.Envelope.Provider, Ceremony: e.Envelope.Kind,
		IdemKey: e.Envelope.IdempotencyKey, Attempts: strconv.Itoa(e.Attempts),
		Available: available(e.NextAttemptAt, !e.Status.Terminal()), Updated: fmtTime(e.UpdatedAt), Ended: fmtTime(e.EndedAt),
	}
	switch {
	case e.DeadLetterReason != "":
		v.Reason = e.DeadLetterReason
	case e.LastError != nil:
		v.Reason = joinReason(e.LastError.Code, e.LastError.Message)
	}
	if e.RedrivenTo != "" {
		v.RedrivenTo, v.RedrivenLink = string(e.RedrivenTo), listURL("/entry", "id", string(e.RedrivenTo))
	}
	return v
}

// joinReason prints "kind: text", or the one that is set.
func joinReason(kind, text string) string {
	switch {
	case kind == "":
		return text
	case text == "":
		return kind
	}
	return kind + ": " + text
}

// metadataFields returns one field per metadata key, in key order:
// "metadata traceparent" and its value.
func metadataFields(md ledger.Metadata) []field {
	var out []field
	for _, k := range sortedKeys(md) {
		out = append(out, field{Name: "metadata " + k, Value: md[k]})
	}
	if len(out) == 0 {
		out = append(out, field{Name: "metadata", Value: "-"})
	}
	return out
}

func newDeliveryView(d ledger.Delivery, now time.Time, forceHex bool) deliveryView {
	v := deliveryView{
		ID: string(d.ID), State: string(d.State), Target: string(d.Target), Ceremony: string(d.Ceremony),
		Open: !d.State.Terminal(), Payload: newPayloadView(d.Payload, forceHex), MovedFrom: string(d.EnqueuedTarget),
	}
	add := func(name, value string) { v.Fields = append(v.Fields, field{Name: name, Value: value}) }
	link := func(name, value, href string) {
		v.Fields = append(v.Fields, field{Name: name, Value: value, Link: href})
	}
	link("target", string(d.Target), listURL("/deliveries", "target", string(d.Target)))
	if d.EnqueuedTarget != "" {
		link("enqueued for", string(d.EnqueuedTarget)+" (moved by a Follow supersession)",
			listURL("/deliveries", "target", string(d.EnqueuedTarget)))
	}
	if d.Ceremony != "" {
		link("ceremony", string(d.Ceremony), listURL("/deliveries", "ceremony", string(d.Ceremony)))
	} else {
		add("ceremony", "-")
	}
	v.Fields = append(v.Fields, metadataFields(d.Metadata)...)
	p := d.Policy
	add("policy", fmt.Sprintf("max attempts %d, backoff %s..%s, ack window %s", p.MaxAttempts, p.BackoffBase, p.BackoffMax, p.AckWindow))
	add("attempts", fmt.Sprintf("%d of %d", d.Attempts, p.MaxAttempts))
	if d.State == ledger.DeliveryStateOffered || d.State == ledger.DeliveryStateLeased {
		add("available at", fmtExact(d.AvailableAt)+" ("+fmtAge(d.AvailableAt, now)+")")
	} else {
		add("available at", "- (not waiting to be offered)")
	}
	add("lease seq", strconv.FormatInt(d.LeaseSeq, 10))
	if l := d.Lease; l != nil {
		state := "in force"
		if l.ExpiredAt(now) {
			state = "ran out " + fmtAge(l.ExpiresAt, now)
		}
		add("lease", fmt.Sprintf("held by %s, seq %d, granted %s, expires %s (%s)",
			l.Owner, l.Seq, fmtExact(l.GrantedAt), fmtExact(l.ExpiresAt), state))
	} else {
		add("lease", "-")
	}
	if g := d.EndedLease; g != nil {
		add("ended lease", fmt.Sprintf("seq %d ended by %s at %s", g.Seq, g.Op, fmtExact(g.At)))
	}
	if a := d.Ack; a != nil {
		add("acknowledged", fmt.Sprintf("by %s at %s, deadline %s", a.Owner, fmtExact(a.At), fmtExact(a.Deadline)))
		add("observation", orDash(a.Observation))
	}
	if pr := d.Processing; pr != nil {
		fence := "none"
		if pr.Fence != nil {
			fence = strconv.FormatInt(int64(*pr.Fence), 10)
		}
		add("processed", fmt.Sprintf("action %s, fence %s, at %s", pr.Action, fence, fmtExact(pr.At)))
	}
	add("activations", strconv.Itoa(d.Activations))
	if a := d.LastActivation; a != nil {
		add("last activation", fmt.Sprintf("%s at %s: %s", a.Result, fmtExact(d.LastActivationAt), orDash(a.Detail)))
	}
	if f := d.LastFailure; f != nil {
		perm := ""
		if f.Permanent {
			perm = " (permanent)"
		}
		add("last failure", fmt.Sprintf("%s%s by %s at %s: %s", f.Kind, perm, f.Owner, fmtExact(f.At), orDash(f.Message)))
	}
	if c := d.Cause; c != nil {
		add("cause", fmt.Sprintf("%s: %s", c.Kind, orDash(c.Detail)))
	}
	if d.RedrivenFrom != "" {
		link("redriven from", string(d.RedrivenFrom), listURL("/delivery", "id", string(d.RedrivenFrom)))
	}
	if d.RedrivenTo != "" {
		link("redriven as", string(d.RedrivenTo), listURL("/delivery", "id", string(d.RedrivenTo)))
	}
	add("created at", fmtExact(d.CreatedAt))
	add("updated at", fmtExact(d.UpdatedAt))
	add("ended at", fmtExact(d.EndedAt))
	add("version", strconv.FormatInt(d.Version, 10))
	return v
}

// entryView is an outbox entry as its page shows it.
type entryView struct {
	ID, Status, Provider string
	Open                 bool
	Fields               []field
	Payload              payloadView
}

func newEntryView(e ledger.OutboxEntry, now time.Time, forceHex bool) entryView {
	v := entryView{ID: string(e.ID), Status: string(e.Status), Provider: e.Envelope.Provider,
		Open: !e.Status.Terminal(), Payload: newPayloadView(e.Envelope.Payload, forceHex)}
	add := func(name, value string) { v.Fields = append(v.Fields, field{Name: name, Value: value}) }
	v.Fields = append(v.Fields, field{Name: "provider", Value: e.Envelope.Provider, Link: listURL("/entries", "provider", e.Envelope.Provider)})
	add("kind", e.Envelope.Kind)
	add("idempotency key", e.Envelope.IdempotencyKey)
	v.Fields = append(v.Fields, metadataFields(e.Envelope.Metadata)...)
	add("attempts", strconv.Itoa(e.Attempts))
	if e.Status.Terminal() {
		add("next attempt at", "-")
	} else {
		add("next attempt at", fmtExact(e.NextAttemptAt))
	}
	if le := e.LastError; le != nil {
		add("last error", fmt.Sprintf("%s: %s", orDash(le.Code), orDash(le.Message)))
	}
	if r := e.Result; r != nil {
		add("result", fmt.Sprintf("provider ref %s: %s", orDash(r.ProviderRef), orDash(r.Detail)))
	}
	if e.DeadLetterReason != "" {
		add("dead letter reason", e.DeadLetterReason)
	}
	add("claim seq", strconv.FormatInt(e.ClaimSeq, 10))
	if c := e.Claim; c != nil {
		state := "in force"
		if c.ExpiredAt(now) {
			state = "ran out " + fmtAge(c.ExpiresAt, now)
		}
		add("claim", fmt.Sprintf("held by %s, seq %d, claimed %s, expires %s (%s)",
			c.Worker, c.Seq, fmtExact(c.ClaimedAt), fmtExact(c.ExpiresAt), state))
	} else {
		add("claim", "-")
	}
	if g := e.EndedClaim; g != nil {
		add("ended claim", fmt.Sprintf("seq %d ended by %s at %s", g.Seq, g.Op, fmtExact(g.At)))
	}
	if e.RedrivenFrom != "" {
		v.Fields = append(v.Fields, field{Name: "redriven from", Value: string(e.RedrivenFrom), Link: listURL("/entry", "id", string(e.RedrivenFrom))})
	}
	if e.RedrivenTo != "" {
		v.Fields = append(v.Fields, field{Name: "redriven as", Value: string(e.RedrivenTo), Link: listURL("/entry", "id", string(e.RedrivenTo))})
	}
	add("created at", fmtExact(e.CreatedAt))
	add("updated at", fmtExact(e.UpdatedAt))
	add("ended at", fmtExact(e.EndedAt))
	add("version", strconv.FormatInt(e.Version, 10))
	return v
}

// stepView is one transition of a record's history, for the timeline.
type stepView struct {
	Seq                         int64
	At, Op, From, To, Actor     string
	Reason                      string
	Ended, Failed, WithinAState bool
	// Link points at the records a supersession moved the delivery
	// between, or at the other record of a redrive, when the step is
	// one.
	Link, LinkText string
}

// redriveLinks are the records a record's redrive steps link to: page is
// the item page ("/delivery" or "/entry"), from the record it was
// redriven from (its creation step), to the one it was redriven as (the
// step that ended its redrive). Empty IDs link nothing.
type redriveLinks struct {
	page, from, to string
}

func newSteps(hist []ledger.Transition, target string, rd redriveLinks) []stepView {
	out := make([]stepView, len(hist))
	for i, t := range hist {
		s := stepView{
			Seq: t.Seq, At: fmtExact(t.At), Op: string(t.Op), From: orDash(t.From), To: t.To,
			Actor: t.Actor, Reason: t.Reason, WithinAState: t.From == t.To,
		}
		s.Ended = ledger.DeliveryState(t.To).Terminal() || ledger.OutboxStatus(t.To).Terminal()
		s.Failed = t.To == string(ledger.DeliveryStateFailed) || t.To == string(ledger.OutboxStatusDeadLettered) || t.To == string(ledger.DeliveryStateExpired)
		if t.Op == ledger.OpSupersede && target != "" {
			s.Link, s.LinkText = listURL("/deliveries", "target", target), "deliveries of "+target
		}
		// The record's own fields, not the step's free-text reason, name
		// the other record: a creation by redrive came from rd.from, any
		// other redrive step made rd.to.
		if t.Op == ledger.OpRedrive {
			switch {
			case t.From == "" && rd.from != "":
				s.Link, s.LinkText = listURL(rd.page, "id", rd.from), "the record it was redriven from"
			case t.From != "" && rd.to != "":
				s.Link, s.LinkText = listURL(rd.page, "id", rd.to), "the record it was redriven as"
			}
		}
		out[i] = s
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
