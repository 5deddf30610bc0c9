package storekit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/leaseledger/ledger"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValidateNameAndText(t *testing.T) {
	for _, bad := range []string{"", strings.Repeat("x", ledger.MaxNameBytes+1), "a\xffb", "a\x00b", "a\nb", "a\u0085b"} {
		err := ValidateName("id", bad)
		require.Error(t, err, "%q", bad)
		assert.True(t, errors.Is(err, ledger.ErrInvalid))
		var ie *ledger.InvalidError
		require.True(t, errors.As(err, &ie))
		assert.Equal(t, "id", ie.Field)
	}
	assert.NoError(t, ValidateName("id", strings.Repeat("é", ledger.MaxNameBytes/2)))
	assert.NoError(t, ValidateText("detail", "line one\nline two"))
	for _, bad := range []string{strings.Repeat("x", ledger.MaxTextBytes+1), "a\xffb", "a\x00b"} {
		assert.ErrorIs(t, ValidateText("detail", bad), ledger.ErrInvalid)
	}
}

func TestValidateTimesDurationsLimits(t *testing.T) {
	assert.ErrorIs(t, ValidateTime("now", time.Time{}), ledger.ErrInvalid)
	assert.ErrorIs(t, ValidateTime("now", time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)), ledger.ErrInvalid)
	assert.ErrorIs(t, ValidateTime("now", time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC)), ledger.ErrInvalid)
	assert.NoError(t, ValidateTime("now", t0))
	for _, d := range []time.Duration{0, -time.Second, time.Nanosecond, ledger.MaxLeaseDuration + 1} {
		assert.ErrorIs(t, ValidateDuration("lease duration", d), ledger.ErrInvalid, d)
	}
	for _, n := range []int{0, -1, ledger.MaxLimit + 1, 1_000_001} {
		assert.ErrorIs(t, ValidateLimit("limit", n), ledger.ErrInvalid, n)
	}
	assert.ErrorIs(t, ValidateContext(nil), ledger.ErrInvalid) //nolint:staticcheck // a nil context is the input under test
	assert.NoError(t, ValidateContext(context.Background()))
}

func TestValidateOperations(t *testing.T) {
	lease := ledger.Lease{DeliveryID: "d1", Token: "tok", Seq: 1}
	cases := map[string]error{
		"enqueue empty id":       ValidateEnqueue(ledger.EnqueueRequest{Target: "h"}, t0, ledger.DefaultMaxPayload),
		"enqueue big payload":    ValidateEnqueue(ledger.EnqueueRequest{ID: "d", Target: "h", Payload: make([]byte, 11)}, t0, 10),
		"enqueue bad policy":     ValidateEnqueue(ledger.EnqueueRequest{ID: "d", Target: "h", Policy: ledger.Policy{MaxAttempts: -1}}, t0, 10),
		"enqueue zero now":       ValidateEnqueue(ledger.EnqueueRequest{ID: "d", Target: "h"}, time.Time{}, 10),
		"lease empty owner":      ValidateLease(ledger.LeaseFilter{}, ledger.Owner{}, t0, time.Minute, 1),
		"lease bad target":       ValidateLease(ledger.LeaseFilter{Targets: []ledger.Target{""}}, ownerA, t0, time.Minute, 1),
		"ack empty token":        ValidateAcknowledge(ledger.Lease{DeliveryID: "d1", Seq: 1}, "", t0),
		"processed neg fence":    ValidateMarkProcessed("d1", ownerA, ledger.FenceOf(-1), "a", t0),
		"processed empty action": ValidateMarkProcessed("d1", ownerA, nil, "", t0),
		"activation result":      ValidateRecordActivation("d1", ledger.Activation{Result: "nope"}, t0),
		"failed nul message":     ValidateMarkFailed(lease, ledger.FailureReason{Message: "\x00"}, t0),
		"abandon empty cause":    ValidateAbandon("d1", ledger.Cause{}, t0),
		"ceremony empty":         ValidateExpireCeremony("", ledger.Cause{Kind: ledger.CauseCeremonyEnded}, t0),
		"supersede same":         ValidateSupersede("h", "h", ledger.Follow, t0),
		"supersede mode":         ValidateSupersede("h", "h2", "sideways", t0),
		"envelope no key":        ValidateEnvelope(ledger.Envelope{Provider: "p", Kind: "k"}, 10),
		"claim zero now":         ValidateClaimRequest(ledger.ClaimRequest{Worker: "w", LeaseDuration: time.Minute, Limit: 1}),
		"save deferred no time":  ValidateSave(ledger.OutboxEntry{ID: "e", Status: ledger.OutboxStatusDeferred, Version: 1}),
		"save unknown status":    ValidateSave(ledger.OutboxEntry{ID: "e", Status: "lost", Version: 1}),
		"zero next retry":        ValidateNextRetry(&time.Time{}),
	}
	for name, err := range cases {
		assert.ErrorIs(t, err, ledger.ErrInvalid, name)
	}
	_, err := ValidateList(ledger.ListQuery{Limit: 10, States: []ledger.DeliveryState{"gone"}})
	assert.ErrorIs(t, err, ledger.ErrInvalid)
}

func TestCursorRoundTripAndMalformed(t *testing.T) {
	id, err := DecodeCursor(EncodeCursor("d-42"))
	require.NoError(t, err)
	assert.Equal(t, ledger.DeliveryID("d-42"), id)
	for _, bad := range []string{"%%%", "bm9wZQ", EncodeCursor("")[:2], strings.Repeat("A", 2000)} {
		_, err := DecodeCursor(bad)
		assert.ErrorIs(t, err, ledger.ErrInvalid, bad)
	}
}

func TestInvalidErrorMessageNamesTheField(t *testing.T) {
	err := ValidateDuration("lease duration", 0)
	var ie *ledger.InvalidError
	require.True(t, errors.As(err, &ie))
	assert.Equal(t, "lease duration", ie.Field)
	assert.NotEmpty(t, ie.Reason)
}

// TestInvisibleEveryCodePoint compares Invisible with the table written
// out by hand in fuzz_test.go over every code point, so that a change of
// either (or of Go's Unicode tables) is seen and decided on.
func TestInvisibleEveryCodePoint(t *testing.T) {
	var diff []string
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if ledger.Invisible(r) != fuzzInvisible(r) {
			diff = append(diff, fmt.Sprintf("%U (Invisible %v)", r, ledger.Invisible(r)))
		}
	}
	assert.Empty(t, diff, "Invisible and the hand-written table disagree")
}

func TestNamesRejectInvisibleCharacters(t *testing.T) {
	for name, s := range map[string]string{
		"right-to-left override": "x1\u202e", "zero-width space": "x1\u200b", "zero-width joiner": "a\u200db",
		"byte order mark": "\ufeffx", "soft hyphen": "a\u00adb", "no-break space": "a\u00a0b",
		"ideographic space": "a\u3000b", "line separator": "a\u2028b", "Hangul filler": "a\u3164b",
		"variation selector": "a\ufe0fb", "braille blank": "a\u2800b", "tag character": "a\U000E0041b",
		"combining grapheme joiner": "a\u034fb",
	} {
		err := ValidateName("target", s)
		require.ErrorIs(t, err, ledger.ErrInvalid, name)
		var ie *ledger.InvalidError
		require.ErrorAs(t, err, &ie)
		assert.Equal(t, "target", ie.Field, name)
	}
	for _, ok := range []string{"x1", "a b", "order-42", "Zürich", "東京", "e\u0301", "emoji-\u2603"} {
		assert.NoError(t, ValidateName("target", ok), "%q", ok)
	}
}

// TestValidateNameASCIIShortcut holds ValidateName's shortcut for visible
// ASCII to the full rule: every one-byte name, every byte between two
// letters, and names at the length limit get one answer from both.
func TestValidateNameASCIIShortcut(t *testing.T) {
	var names []string
	for b := range 256 {
		names = append(names, string([]byte{byte(b)}), "a"+string([]byte{byte(b)})+"b")
	}
	names = append(names, strings.Repeat("x", ledger.MaxNameBytes), strings.Repeat("x", ledger.MaxNameBytes+1),
		"host 1", " ", "tenant-a/d-1", "a\u00a0b", "\u2800")
	for _, s := range names {
		got, want := ValidateName("id", s), validateName("id", s)
		if (got == nil) != (want == nil) || (got != nil && got.Error() != want.Error()) {
			t.Fatalf("ValidateName(%q) = %v, the full rule says %v", s, got, want)
		}
	}
}

func TestValidateClaimCompletion(t *testing.T) {
	assert.ErrorIs(t, ValidateClaimCompletion(nil), ledger.ErrInvalid)
	assert.ErrorIs(t, ValidateClaimCompletion(&ledger.ClaimCompletion{Op: "bogus"}), ledger.ErrInvalid)
	// A completion with no claim is refused as the call its Op names refuses it.
	c := &ledger.ClaimCompletion{Op: ledger.OpReleaseClaim, Reason: "shutting down"}
	assert.Equal(t, ValidateReleaseClaim(c.Claim, c.Reason), ValidateClaimCompletion(c))
	assert.Error(t, ValidateClaimCompletion(c))
}
