package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/leaseledger/ledger"
)

// payloadPreview bounds how much of a payload show prints.
const payloadPreview = 64

// newTable returns a tabwriter for aligned columns; callers Flush it.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// fmtTime prints a time for humans, or "-" for the zero time.
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// orDash prints "-" for an empty value, so columns stay aligned, and any
// other value as display does.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return display(s)
}

// hidden reports whether r must not reach a terminal as itself: a
// character that is not printable, or one that names refuse because it
// shows as nothing or as something else (ledger.Invisible: control and
// format characters such as U+202E, which reverses the rest of a line,
// zero-width characters, spaces other than U+0020).
func hidden(r rune) bool { return ledger.Invisible(r) || !unicode.IsPrint(r) }

// display returns a value read from the ledger (a name or free text) as
// every text output of ledgerctl prints it: unchanged when each of its
// characters shows as itself, else quoted, with Go's escapes for every
// character hidden reports and for invalid UTF-8. So an escape sequence
// cannot move the cursor or recolour the terminal, a value cannot reverse
// a line or break a table into two, and two IDs that differ only in a
// character that does not show never look alike ("x1" and "x1\u200b"). A
// value holding a quote or a backslash is quoted too, so that no plain
// value reads like a quoted one.
func display(s string) string {
	if utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool { return hidden(r) || r == '"' || r == '\\' }) < 0 {
		return s
	}
	var b strings.Builder
	b.WriteByte('"')
	escape(&b, s, true)
	b.WriteByte('"')
	return b.String()
}

// clean returns a message with every hidden character and invalid byte
// escaped, and nothing else changed: messages quote the values they
// name already, and only what would not show must not pass through.
func clean(msg string) string {
	if utf8.ValidString(msg) && strings.IndexFunc(msg, hidden) < 0 {
		return msg
	}
	var b strings.Builder
	escape(&b, msg, false)
	return b.String()
}

// escape writes s to b with every hidden character and invalid byte
// escaped, and, when quoting, its quotes and backslashes too.
func escape(b *strings.Builder, s string, quoting bool) {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(b, `\x%02x`, s[i])
		case quoting && (r == '"' || r == '\\'):
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case hidden(r) && r <= 0xffff:
			fmt.Fprintf(b, `\u%04x`, r)
		case hidden(r):
			fmt.Fprintf(b, `\U%08x`, r)
		default:
			b.WriteRune(r)
		}
		i += size
	}
}

// fmtPayload prints a payload's size and a quoted preview: payloads are
// opaque bytes, possibly binary, so the preview is always quoted, with
// everything that does not show escaped.
func fmtPayload(p []byte) string {
	if len(p) == 0 {
		return "(empty)"
	}
	preview := p
	suffix := ""
	if len(preview) > payloadPreview {
		preview, suffix = preview[:payloadPreview], "..."
	}
	var b strings.Builder
	b.WriteByte('"')
	escape(&b, string(preview), true)
	b.WriteByte('"')
	return fmt.Sprintf("%d bytes: %s%s", len(p), b.String(), suffix)
}

// metadataLines prints metadata one key a line, in key order, with the
// value quoted: values are free text and may hold line breaks. "-" when
// there is none.
func metadataLines(md ledger.Metadata) []string {
	if len(md) == 0 {
		return []string{"-"}
	}
	lines := make([]string, 0, len(md))
	for _, k := range slices.Sorted(maps.Keys(md)) {
		lines = append(lines, fmt.Sprintf("%s = %q", k, md[k]))
	}
	return lines
}

// metadataRows writes the metadata rows of a record to tw, the first
// under the label "metadata", the others under it.
func metadataRows(tw io.Writer, md ledger.Metadata) {
	for i, l := range metadataLines(md) {
		label := "metadata:"
		if i > 0 {
			label = ""
		}
		fmt.Fprintf(tw, "%s\t%s\n", label, l)
	}
}

// fmtAvailable is when d is offered, or "-" when it is not waiting to be
// offered: an ended delivery keeps its last AvailableAt, which may lie in
// the future (a retry scheduled, then abandoned) and reads as a promise.
func fmtAvailable(d ledger.Delivery) string {
	if d.State.Terminal() || d.State == ledger.DeliveryStateAcknowledged {
		return "-"
	}
	return fmtTime(d.AvailableAt)
}

// fmtNextAttempt is fmtAvailable for outbox entries.
func fmtNextAttempt(e ledger.OutboxEntry) string {
	if e.Status.Terminal() {
		return "-"
	}
	return fmtTime(e.NextAttemptAt)
}

// printList prints one page of deliveries as a table and the next cursor.
func printList(w io.Writer, page ledger.Page) {
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tSTATE\tTARGET\tCEREMONY\tATTEMPTS\tAVAILABLE AT\tUPDATED AT")
	for _, d := range page.Deliveries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", display(string(d.ID)), d.State, display(string(d.Target)), orDash(string(d.Ceremony)),
			d.Attempts, d.Policy.MaxAttempts, fmtAvailable(d), fmtTime(d.UpdatedAt))
	}
	_ = tw.Flush() // a failed write to stdout has nowhere better to go
	fmt.Fprintf(w, "\n%d deliveries on this page\n", len(page.Deliveries))
	if page.Next == "" {
		fmt.Fprintln(w, "last page")
	} else {
		fmt.Fprintf(w, "next cursor: %s\n", page.Next)
	}
}

// printDelivery prints every field of a delivery, one per line. Lease
// tokens are left out: they are the holder's secret, and an operator never
// needs one to act (abandon needs only the ID).
func printDelivery(w io.Writer, d ledger.Delivery) {
	tw := newTable(w)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("delivery", display(string(d.ID)))
	row("state", display(string(d.State)))
	row("target", display(string(d.Target)))
	row("ceremony", orDash(string(d.Ceremony)))
	row("payload", fmtPayload(d.Payload))
	metadataRows(tw, d.Metadata)
	row("policy", fmt.Sprintf("max attempts %d, backoff %s..%s, ack window %s",
		d.Policy.MaxAttempts, d.Policy.BackoffBase, d.Policy.BackoffMax, d.Policy.AckWindow))
	row("attempts", fmt.Sprintf("%d of %d", d.Attempts, d.Policy.MaxAttempts))
	row("available at", fmtAvailable(d))
	row("lease seq", strconv.FormatInt(d.LeaseSeq, 10))
	if l := d.Lease; l != nil {
		row("lease", fmt.Sprintf("held by %s, seq %d, granted %s, expires %s",
			fmtOwner(l.Owner), l.Seq, fmtTime(l.GrantedAt), fmtTime(l.ExpiresAt)))
	} else {
		row("lease", "-")
	}
	if g := d.EndedLease; g != nil {
		row("ended lease", fmt.Sprintf("seq %d ended by %s at %s", g.Seq, display(string(g.Op)), fmtTime(g.At)))
	}
	if a := d.Ack; a != nil {
		row("acknowledged", fmt.Sprintf("by %s at %s, deadline %s", fmtOwner(a.Owner), fmtTime(a.At), fmtTime(a.Deadline)))
		row("observation", orDash(a.Observation))
	}
	if p := d.Processing; p != nil {
		fence := "none"
		if p.Fence != nil {
			fence = strconv.FormatInt(int64(*p.Fence), 10)
		}
		row("processed", fmt.Sprintf("action %s, fence %s, at %s", display(string(p.Action)), fence, fmtTime(p.At)))
	}
	row("activations", strconv.Itoa(d.Activations))
	if a := d.LastActivation; a != nil {
		row("last activation", fmt.Sprintf("%s at %s: %s", display(string(a.Result)), fmtTime(d.LastActivationAt), orDash(a.Detail)))
	}
	if f := d.LastFailure; f != nil {
		perm := ""
		if f.Permanent {
			perm = " (permanent)"
		}
		row("last failure", fmt.Sprintf("%s%s by %s at %s: %s", display(string(f.Kind)), perm, fmtOwner(f.Owner), fmtTime(f.At), orDash(f.Message)))
	}
	if c := d.Cause; c != nil {
		row("cause", fmt.Sprintf("%s: %s", display(string(c.Kind)), orDash(c.Detail)))
	}
	if d.RedrivenFrom != "" {
		row("redriven from", string(d.RedrivenFrom))
	}
	if d.RedrivenTo != "" {
		row("redriven as", string(d.RedrivenTo))
	}
	row("created at", fmtTime(d.CreatedAt))
	row("updated at", fmtTime(d.UpdatedAt))
	row("ended at", fmtTime(d.EndedAt))
	row("version", strconv.FormatInt(d.Version, 10))
	_ = tw.Flush()
}

// printEntry prints every field of an outbox entry, one per line, claim
// tokens left out as lease tokens are.
func printEntry(w io.Writer, e ledger.OutboxEntry) {
	tw := newTable(w)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("outbox entry", display(string(e.ID)))
	row("status", display(string(e.Status)))
	row("provider", display(e.Envelope.Provider))
	row("kind", display(e.Envelope.Kind))
	row("idempotency key", display(e.Envelope.IdempotencyKey))
	row("payload", fmtPayload(e.Envelope.Payload))
	metadataRows(tw, e.Envelope.Metadata)
	row("attempts", strconv.Itoa(e.Attempts))
	row("next attempt at", fmtNextAttempt(e))
	if le := e.LastError; le != nil {
		row("last error", fmt.Sprintf("%s: %s", orDash(le.Code), orDash(le.Message)))
	}
	if r := e.Result; r != nil {
		row("result", fmt.Sprintf("provider ref %s: %s", orDash(r.ProviderRef), orDash(r.Detail)))
	}
	if e.DeadLetterReason != "" {
		row("dead letter reason", display(e.DeadLetterReason))
	}
	row("claim seq", strconv.FormatInt(e.ClaimSeq, 10))
	if c := e.Claim; c != nil {
		row("claim", fmt.Sprintf("held by %s, seq %d, claimed %s, expires %s",
			display(c.Worker), c.Seq, fmtTime(c.ClaimedAt), fmtTime(c.ExpiresAt)))
	} else {
		row("claim", "-")
	}
	if g := e.EndedClaim; g != nil {
		row("ended claim", fmt.Sprintf("seq %d ended by %s at %s", g.Seq, display(string(g.Op)), fmtTime(g.At)))
	}
	if e.RedrivenFrom != "" {
		row("redriven from", string(e.RedrivenFrom))
	}
	if e.RedrivenTo != "" {
		row("redriven as", string(e.RedrivenTo))
	}
	row("created at", fmtTime(e.CreatedAt))
	row("updated at", fmtTime(e.UpdatedAt))
	row("ended at", fmtTime(e.EndedAt))
	row("version", strconv.FormatInt(e.Version, 10))
	_ = tw.Flush()
}

// fmtOwner prints an owner as "agent/incarnation", each part as display
// does.
func fmtOwner(o ledger.Owner) string { return display(o.Agent) + "/" + display(o.Incarnation) }

// redact returns d without its lease tokens, for -json output: tokens are
// the holder's secret and scripts never need them. The pointers are
// copied, so the caller's record is untouched.
func redact(d ledger.Delivery) ledger.Delivery {
	if d.Lease != nil {
		l := *d.Lease
		l.Token = ""
		d.Lease = &l
	}
	if d.EndedLease != nil {
		g := *d.EndedLease
		g.Token = ""
		d.EndedLease = &g
	}
	return d
}

// redactEntry is redact for outbox entries and their claim tokens.
func redactEntry(e ledger.OutboxEntry) ledger.OutboxEntry {
	if e.Claim != nil {
		c := *e.Claim
		c.Token = ""
		e.Claim = &c
	}
	if e.EndedClaim != nil {
		g := *e.EndedClaim
		g.Token = ""
		e.EndedClaim = &g
	}
	return e
}
