package storekit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/leaseledger/ledger"
)

// The fuzz targets below feed arbitrary input to the validators and to the
// pure helpers a store calls on validated input. Each one checks that
// nothing panics and, for the validators, re-derives the documented rules in
// the fuzz body without calling the code under test, in both directions: an
// accepted input obeys every rule, and an input that obeys every rule is
// accepted. Seed corpora live in testdata/fuzz/<FuzzName>/ and run as plain
// tests with go test; run a target with
//
//	go test -run '^$' -fuzz '^FuzzDecodeCursor$' -fuzztime 60s .

// fuzzControl reports whether r is a control character (Unicode category
// Cc: C0, DEL and C1), written out by hand rather than with package unicode
// so that the check is independent of the validator's.
func fuzzControl(r rune) bool { return r < 0x20 || (r >= 0x7f && r < 0xa0) }

// fuzzInvisibleRanges lists, by hand from the Unicode 15 character
// database, the characters names refuse beside the control ones: format
// characters (Cf), spaces other than U+0020 (Zs), the line and paragraph
// separators (Zl, Zp), variation selectors, the other default-ignorable
// code points, and the blank braille pattern.
var fuzzInvisibleRanges = [][2]rune{
	// Cf
	{0x00AD, 0x00AD}, {0x0600, 0x0605}, {0x061C, 0x061C}, {0x06DD, 0x06DD}, {0x070F, 0x070F},
	{0x0890, 0x0891}, {0x08E2, 0x08E2}, {0x180E, 0x180E}, {0x200B, 0x200F}, {0x202A, 0x202E},
	{0x2060, 0x2064}, {0x2066, 0x206F}, {0xFEFF, 0xFEFF}, {0xFFF9, 0xFFFB}, {0x110BD, 0x110BD},
	{0x110CD, 0x110CD}, {0x13430, 0x1343F}, {0x1BCA0, 0x1BCA3}, {0x1D173, 0x1D17A},
	{0xE0001, 0xE0001}, {0xE0020, 0xE007F},
	// Zs but U+0020, Zl, Zp
	{0x00A0, 0x00A0}, {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F},
	{0x205F, 0x205F}, {0x3000, 0x3000},
	// Variation selectors
	{0x180B, 0x180D}, {0x180F, 0x180F}, {0xFE00, 0xFE0F}, {0xE0100, 0xE01EF},
	// Other default-ignorable code points: the combining grapheme joiner,
	// Hangul fillers, Khmer inherent vowels, reserved ranges.
	{0x034F, 0x034F}, {0x115F, 0x1160}, {0x17B4, 0x17B5}, {0x2065, 0x2065}, {0x3164, 0x3164},
	{0xFFA0, 0xFFA0}, {0xFFF0, 0xFFF8}, {0xE0000, 0xE0000}, {0xE0002, 0xE001F},
	{0xE0080, 0xE00FF}, {0xE01F0, 0xE0FFF},
	// BRAILLE PATTERN BLANK
	{0x2800, 0x2800},
}

// fuzzInvisible reports whether names refuse r: a control character or
// one of fuzzInvisibleRanges.
func fuzzInvisible(r rune) bool {
	if fuzzControl(r) {
		return true
	}
	for _, rg := range fuzzInvisibleRanges {
		if r >= rg[0] && r <= rg[1] {
			return true
		}
	}
	return false
}

// fuzzNameOK re-derives the name rule: 1 to 255 bytes of valid UTF-8 with no
// control, format or other invisible characters.
func fuzzNameOK(s string) bool {
	if len(s) < 1 || len(s) > 255 || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if fuzzInvisible(r) {
			return false
		}
	}
	return true
}

// fuzzTextOK re-derives the free-text rule: at most 4 KiB of valid UTF-8
// with no NUL byte.
func fuzzTextOK(s string) bool {
	if len(s) > 4096 || !utf8.ValidString(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return false
		}
	}
	return true
}

// fuzzTimeOK re-derives the required-time rule: not zero, and Unix
// nanoseconds fit an int64 after truncation to the microsecond.
func fuzzTimeOK(t time.Time) bool {
	if t.IsZero() || t.Unix() < 0 {
		return false
	}
	// The largest accepted time is the last whole microsecond that still
	// has int64 Unix nanoseconds: 2262-04-11T23:47:16.854775Z.
	limit := time.Unix(9223372036, 854775000)
	return !t.After(limit)
}

// fuzzDueOK re-derives the rule for a time at which something becomes due
// (AvailableAt, NextAttemptAt, nextRetry): not zero and not after the
// largest accepted time; any past time means "due now".
func fuzzDueOK(t time.Time) bool {
	return !t.IsZero() && !t.After(time.Unix(9223372036, 854775000))
}

// fuzzTime builds an optional time from fuzz input: zero when zero is set.
func fuzzTime(zero bool, sec, nsec int64) time.Time {
	if zero {
		return time.Time{}
	}
	return time.Unix(sec, nsec)
}

// fuzzPolicyOK re-derives the policy rule: attempts 0 to 1000, durations 0
// to 365 days.
func fuzzPolicyOK(p ledger.Policy) bool {
	const maxDur = 365 * 24 * time.Hour
	ok := func(d time.Duration) bool { return d >= 0 && d <= maxDur }
	return p.MaxAttempts >= 0 && p.MaxAttempts <= 1000 && ok(p.BackoffBase) && ok(p.BackoffMax) && ok(p.AckWindow)
}

// fuzzSubMicro reports whether p has a positive duration below a
// microsecond, the precision both stores keep. The rules do not say
// whether such a duration is invalid or rounded, so the validator may
// answer either way; FuzzPolicyBackoff checks that an accepted one does
// not silently become zero.
func fuzzSubMicro(p ledger.Policy) bool {
	sub := func(d time.Duration) bool { return d > 0 && d < time.Microsecond }
	return sub(p.BackoffBase) || sub(p.BackoffMax) || sub(p.AckWindow)
}

// fuzzRejected checks that err is a well-formed rejection: it matches
// ErrInvalid and names a field.
func fuzzRejected(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("rejection %v does not match ErrInvalid", err)
	}
	var ie *ledger.InvalidError
	if !errors.As(err, &ie) || ie.Field == "" {
		t.Fatalf("rejection %v is not an *InvalidError naming a field", err)
	}
}

func FuzzDecodeCursor(f *testing.F) {
	f.Add("")
	f.Add(EncodeCursor("d-1"))
	f.Fuzz(func(t *testing.T, cursor string) {
		id, err := DecodeCursor(cursor)
		if err != nil {
			fuzzRejected(t, err)
			return
		}
		if cursor == "" {
			if id != "" {
				t.Fatalf("empty cursor decoded to %q", id)
			}
			return
		}
		if !fuzzNameOK(string(id)) || ValidateName("id", string(id)) != nil {
			t.Fatalf("cursor %q decoded to an ID that is not a valid name: %q", cursor, id)
		}
		if again := EncodeCursor(id); again != cursor {
			t.Fatalf("cursor %q decoded to %q, which encodes to a different cursor %q", cursor, id, again)
		}
	})
}

// FuzzCursorRoundTrip checks the other direction: every valid ID encodes
// to a cursor that decodes to it.
func FuzzCursorRoundTrip(f *testing.F) {
	f.Add("d-1")
	f.Fuzz(func(t *testing.T, id string) {
		if !fuzzNameOK(id) {
			return
		}
		got, err := DecodeCursor(EncodeCursor(ledger.DeliveryID(id)))
		if err != nil || got != ledger.DeliveryID(id) {
			t.Fatalf("ID %q did not round-trip through a cursor: got %q, %v", id, got, err)
		}
	})
}

func FuzzValidateName(f *testing.F) {
	f.Add("d-1")
	for _, s := range []string{"", strings.Repeat("x", ledger.MaxNameBytes+1), "a\xffb", "a\nb", "a\u202eb", "a\u200bb", "a\u00a0b", "\u2800", "host 1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := ValidateName("id", s)
		if ok := fuzzNameOK(s); ok != (err == nil) {
			t.Fatalf("ValidateName(%q) = %v, but the rules say valid=%v", s, err, ok)
		}
		if err != nil {
			fuzzRejected(t, err)
		}
		// The root package keeps its own copy of the rule for WithActor
		// and QueueBounds.Validate (it cannot import this package): both
		// must give one answer, with one reason.
		_, rootErr := ledger.WithActor(context.Background(), s)
		var kitInvalid, rootInvalid *ledger.InvalidError
		if (err == nil) != (rootErr == nil) ||
			(err != nil && (!errors.As(err, &kitInvalid) || !errors.As(rootErr, &rootInvalid) || kitInvalid.Reason != rootInvalid.Reason)) {
			t.Fatalf("name %q: storekit.ValidateName says %v, ledger.WithActor says %v", s, err, rootErr)
		}
	})
}

func FuzzValidateText(f *testing.F) {
	f.Add("line\nline")
	f.Fuzz(func(t *testing.T, s string) {
		err := ValidateText("observation", s)
		if ok := fuzzTextOK(s); ok != (err == nil) {
			t.Fatalf("ValidateText(%q) = %v, but the rules say valid=%v", s, err, ok)
		}
		if err != nil {
			fuzzRejected(t, err)
		}
	})
}

func FuzzValidateEnqueue(f *testing.F) {
	f.Add("d-1", "target", "", []byte("x"), 0, int64(0), int64(0), int64(0), true, int64(0), int64(0), int64(1_700_000_000), int64(0), 1024)
	f.Fuzz(func(t *testing.T, id, target, ceremony string, payload []byte, maxAttempts int,
		base, maxBackoff, ackWindow int64, availZero bool, availSec, availNsec, nowSec, nowNsec int64, maxPayload int,
	) {
		req := ledger.EnqueueRequest{
			ID: ledger.DeliveryID(id), Target: ledger.Target(target), Ceremony: ledger.CeremonyID(ceremony), Payload: payload,
			Policy: ledger.Policy{
				MaxAttempts: maxAttempts, BackoffBase: time.Duration(base),
				BackoffMax: time.Duration(maxBackoff), AckWindow: time.Duration(ackWindow),
			},
			AvailableAt: fuzzTime(availZero, availSec, availNsec),
		}
		now := time.Unix(nowSec, nowNsec)
		err := ValidateEnqueue(req, now, maxPayload)
		ok := fuzzNameOK(id) && fuzzNameOK(target) && (ceremony == "" || fuzzNameOK(ceremony)) &&
			len(payload) <= maxPayload && fuzzPolicyOK(req.Policy) &&
			(req.AvailableAt.IsZero() || fuzzDueOK(req.AvailableAt)) && fuzzTimeOK(now)
		if ok != (err == nil) && !(ok && fuzzSubMicro(req.Policy)) {
			t.Fatalf("ValidateEnqueue(%+v, %v, %d) = %v, but the rules say valid=%v", req, now, maxPayload, err, ok)
		}
		if err != nil {
			fuzzRejected(t, err)
			return
		}
		// What a store does next with an accepted request must not panic
		// and must give a record within the limits.
		d := NewDelivery(req, ledger.DefaultPolicy(), now)
		if d.Policy.MaxAttempts < 1 || d.Policy.BackoffMax < d.Policy.BackoffBase || !fuzzPolicyOK(d.Policy) {
			t.Fatalf("accepted request resolved to an unusable policy %+v", d.Policy)
		}
		if !fuzzTimeOK(d.AvailableAt) || d.AvailableAt.Location() != time.UTC {
			t.Fatalf("accepted request got AvailableAt %v", d.AvailableAt)
		}
		if Delivery(d).EnqueueAgain(req, ledger.DefaultPolicy()) != ledger.OutcomeRepeated {
			t.Fatalf("the same request again is not a repeat of its own record")
		}
	})
}

func FuzzValidateEnvelope(f *testing.F) {
	f.Add("provider", "kind", []byte("x"), "key-1", 1024)
	f.Fuzz(func(t *testing.T, provider, kind string, payload []byte, key string, maxPayload int) {
		env := ledger.Envelope{Provider: provider, Kind: kind, Payload: payload, IdempotencyKey: key}
		err := ValidateEnvelope(env, maxPayload)
		ok := fuzzNameOK(provider) && fuzzNameOK(kind) && len(payload) <= maxPayload && fuzzNameOK(key)
		if ok != (err == nil) {
			t.Fatalf("ValidateEnvelope(%+v, %d) = %v, but the rules say valid=%v", env, maxPayload, err, ok)
		}
		if err != nil {
			fuzzRejected(t, err)
			return
		}
		e := NewOutboxEntry(env, time.Unix(1_700_000_000, 0))
		if e.ID != ledger.OutboxEntryIDFor(key) || !fuzzNameOK(string(e.ID)) {
			t.Fatalf("accepted envelope got entry ID %q", e.ID)
		}
		if OutboxEntry(e).EnqueueAgain(env) != ledger.OutcomeRepeated {
			t.Fatalf("the same envelope again is not a repeat of its own entry")
		}
	})
}

func FuzzPolicyBackoff(f *testing.F) {
	f.Add(3, int64(time.Second), int64(time.Minute), int64(0), "d-1", 2)
	f.Fuzz(func(t *testing.T, maxAttempts int, base, maxBackoff, ackWindow int64, id string, attempt int) {
		p := ledger.Policy{
			MaxAttempts: maxAttempts, BackoffBase: time.Duration(base),
			BackoffMax: time.Duration(maxBackoff), AckWindow: time.Duration(ackWindow),
		}
		if p.Validate("policy") != nil {
			return
		}
		r := p.Resolve(ledger.DefaultPolicy())
		// A positive duration must not resolve to zero: a base of zero
		// with a positive cap means no backoff at all, and makes Backoff
		// loop once per attempt (found by this target; checked first so
		// that the regression input fails instead of hanging).
		if (p.BackoffBase > 0 && r.BackoffBase <= 0) || (p.BackoffMax > 0 && r.BackoffMax <= 0) || (p.AckWindow > 0 && r.AckWindow <= 0) {
			t.Fatalf("policy %+v accepted but resolved to %+v", p, r)
		}
		got := r.Backoff(ledger.DeliveryID(id), attempt)
		if got < 0 || got > r.BackoffMax {
			t.Fatalf("Backoff(%q, %d) of %+v = %v, outside [0, %v]", id, attempt, r, got, r.BackoffMax)
		}
		if got != got.Truncate(time.Microsecond) {
			t.Fatalf("Backoff(%q, %d) of %+v = %v, not whole microseconds", id, attempt, r, got)
		}
		if again := r.Backoff(ledger.DeliveryID(id), attempt); again != got {
			t.Fatalf("Backoff(%q, %d) is not deterministic: %v then %v", id, attempt, got, again)
		}
	})
}

func FuzzValidateSave(f *testing.F) {
	f.Add("e-1", "pending", false, int64(0), int64(0), 1, int64(1), false, "", "", false, "", "", "")
	// The largest attempts count both stores hold (PostgreSQL integer), and one more.
	f.Add("e-1", "pending", false, int64(0), int64(0), 1<<31-1, int64(1), false, "", "", false, "", "", "")
	f.Add("e-1", "pending", false, int64(0), int64(0), 1<<31, int64(1), false, "", "", false, "", "", "")
	f.Fuzz(func(t *testing.T, id, status string, nextZero bool, nextSec, nextNsec int64, attempts int, version int64,
		hasErr bool, errCode, errMsg string, hasResult bool, ref, detail, deadLetter string,
	) {
		in := ledger.OutboxEntry{
			ID: ledger.OutboxEntryID(id), Status: ledger.OutboxStatus(status), NextAttemptAt: fuzzTime(nextZero, nextSec, nextNsec),
			Attempts: attempts, Version: version, DeadLetterReason: deadLetter,
		}
		if hasErr {
			in.LastError = &ledger.EmissionError{Code: errCode, Message: errMsg}
		}
		if hasResult {
			in.Result = &ledger.EmissionResult{ProviderRef: ref, Detail: detail}
		}
		err := ValidateSave(in)
		scheduled := status == "retry_scheduled" || status == "deferred"
		known := scheduled || status == "pending" || status == "delivered" || status == "failed" || status == "dead_lettered"
		ok := fuzzNameOK(id) && known && (!scheduled || fuzzDueOK(in.NextAttemptAt)) && attempts >= 0 && attempts <= 1<<31-1 &&
			(!hasErr || ((errCode == "" || fuzzNameOK(errCode)) && fuzzTextOK(errMsg))) &&
			(!hasResult || ((ref == "" || fuzzNameOK(ref)) && fuzzTextOK(detail))) && fuzzTextOK(deadLetter)
		if ok != (err == nil) {
			t.Fatalf("ValidateSave(%+v) = %v, but the rules say valid=%v", in, err, ok)
		}
		if err != nil {
			fuzzRejected(t, err)
			return
		}
		// Applying the accepted write to a stored open entry of the same
		// version must not panic and must land exactly the written fields.
		now := time.Unix(1_700_000_000, 0)
		stored := NewOutboxEntry(ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: "key"}, now)
		stored.ID, stored.Version = in.ID, in.Version
		got, err := OutboxEntry(stored).Save(in, now.Add(time.Second))
		if err != nil {
			t.Fatalf("Save of an accepted entry onto an open entry of its version: %v", err)
		}
		if got.Status != in.Status || got.Attempts != in.Attempts || got.Version != in.Version+1 ||
			got.Status.Terminal() == got.EndedAt.IsZero() {
			t.Fatalf("Save wrote %+v from %+v", got, in)
		}
		// A due time is stored inside the range both stores represent.
		if scheduled && (!fuzzTimeOK(got.NextAttemptAt) || got.NextAttemptAt.Location() != time.UTC) {
			t.Fatalf("Save stored NextAttemptAt %v from %v", got.NextAttemptAt, in.NextAttemptAt)
		}
	})
}
