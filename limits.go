package ledger

import (
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Input limits, every one the API has in one place. Every exported entry
// point of every store checks its arguments against them with the
// Validate functions of package storekit before touching storage; a
// rejected call returns an *InvalidError (errors.Is(err, ErrInvalid))
// naming the field, and writes nothing.
const (
	// MaxNameBytes bounds IDs, targets, ceremonies, agents, incarnations,
	// cause kinds, action refs, workers, providers and kinds.
	MaxNameBytes = 255
	// MaxTextBytes bounds free text: reasons, details, observations.
	MaxTextBytes = 4 << 10
	// DefaultMaxPayload is the default payload limit; stores make it
	// configurable, up to MaxPayloadLimit.
	DefaultMaxPayload = 1 << 20
	// MaxPayloadLimit bounds the payload limit a store may be configured
	// with, the same for every store: PostgreSQL's bytea holds at most
	// 1 GiB, and a payload that large belongs in object storage anyway.
	MaxPayloadLimit = 256 << 20
	// MaxLimit bounds every limit, page size and batch length.
	MaxLimit = 1000
	// MaxCount bounds every count a record keeps (OutboxEntry.Attempts,
	// Delivery.Attempts, Delivery.Activations): the largest value both
	// stores hold (PostgreSQL's integer). A count a caller sets (Save's
	// Attempts) above it is ErrInvalid, and no transition takes a count
	// past it: a claim or base completion of an entry already at
	// MaxCount attempts, or an activation of a delivery at MaxCount
	// activations, applies as usual and leaves the count at MaxCount.
	// (A delivery's attempts never come near it: they stop at its
	// policy's MaxAttempts, at most MaxAttemptsLimit.)
	//
	// Versions and lease and claim sequence numbers are int64 in both
	// stores and grow by one per transition; no caller sets them, and at
	// a billion transitions a second they would need centuries to reach
	// their bound.
	MaxCount = 1<<31 - 1

	// MaxLeaseDuration bounds a lease or claim duration. Long-running work
	// should renew its lease rather than take a week-long one.
	MaxLeaseDuration = 7 * 24 * time.Hour
	// MaxPolicyDuration bounds the backoff and acknowledgement window of a
	// retry policy.
	MaxPolicyDuration = 365 * 24 * time.Hour
	// MaxAttemptsLimit bounds Policy.MaxAttempts.
	MaxAttemptsLimit = 1000

	// MaxMetadataEntries bounds the keys of one item's metadata.
	MaxMetadataEntries = 16
	// MaxMetadataBytes bounds the bytes of one item's metadata, keys and
	// values added up: room for a W3C trace context and a few labels.
	MaxMetadataBytes = 4 << 10

	// MaxEndedLimit bounds EndedQuery.Limit. A chart of the last hour needs
	// more records than a page of a list, and the ended records it reads are
	// small (no payload).
	MaxEndedLimit = 10_000
	// MaxQueueBound bounds a queue bound (QueueBounds).
	MaxQueueBound = 1_000_000
)

// Invisible reports whether r is a character that names refuse because
// it shows as nothing, or as something it is not: control characters;
// format characters (Unicode category Cf: zero-width spaces and joiners,
// bidirectional marks and overrides such as U+202E, the byte order mark,
// the soft hyphen, tag characters); line and paragraph separators; spaces
// other than U+0020, which pass for it; variation selectors, fillers and
// the other default-ignorable code points; and the blank braille pattern.
// Letters, marks, digits, punctuation, symbols and the ASCII space are
// visible. Tools that print records (ledgerctl) escape what it reports.
func Invisible(r rune) bool {
	switch {
	case r == ' ':
		return false
	case unicode.IsControl(r),
		unicode.In(r, unicode.Cf, unicode.Zs, unicode.Zl, unicode.Zp,
			unicode.Variation_Selector, unicode.Other_Default_Ignorable_Code_Point):
		return true
	}
	return r == '\u2800' // BRAILLE PATTERN BLANK
}

// visibleASCII reports whether every byte of s is a visible ASCII
// character or the space, which the rule of names always accepts.
func visibleASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// validateName is the rule of names (see storekit.ValidateName, which
// says it for every store): this package needs it for WithActor and
// QueueBounds.Validate, and the store writer's kit, which imports this
// package, cannot lend it back. storekit's tests hold the two to one
// answer.
func validateName(field, s string) error {
	if s != "" && len(s) <= MaxNameBytes && visibleASCII(s) {
		return nil // as storekit.ValidateName: visible ASCII passes the rule
	}
	switch {
	case s == "":
		return invalid(field, "must not be empty")
	case len(s) > MaxNameBytes:
		return invalid(field, "must be at most %d bytes, got %d", MaxNameBytes, len(s))
	case !utf8.ValidString(s):
		return invalid(field, "must be valid UTF-8")
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return invalid(field, "must not contain control characters")
	}
	if i := strings.IndexFunc(s, Invisible); i >= 0 {
		r, _ := utf8.DecodeRuneInString(s[i:])
		return invalid(field, "must not contain format or invisible characters, got %U at byte %d", r, i)
	}
	return nil
}
