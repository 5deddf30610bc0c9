package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValidateNameAndText(t *testing.T) {
	for _, bad := range []string{"", strings.Repeat("x", MaxNameBytes+1), "a\xffb", "a\x00b", "a\nb", "a\u0085b"} {
		err := ValidateName("id", bad)
		require.Error(t, err, "%q", bad)
		assert.True(t, errors.Is(err, ErrInvalid))
		var ie *InvalidError
		require.True(t, errors.As(err, &ie))
		assert.Equal(t, "id", ie.Field)
	}
	assert.NoError(t, ValidateName("id", strings.Repeat("é", MaxNameBytes/2)))
	assert.NoError(t, ValidateText("detail", "line one\nline two"))
	for _, bad := range []string{strings.Repeat("x", MaxTextBytes+1), "a\xffb", "a\x00b"} {
		assert.ErrorIs(t, ValidateText("detail", bad), ErrInvalid)
	}
}

func TestValidateTimesDurationsLimits(t *testing.T) {
	assert.ErrorIs(t, ValidateTime("now", time.Time{}), ErrInvalid)
	assert.ErrorIs(t, ValidateTime("now", time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)), ErrInvalid)
	assert.ErrorIs(t, ValidateTime("now", time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC)), ErrInvalid)
	assert.NoError(t, ValidateTime("now", t0))
	for _, d := range []time.Duration{0, -time.Second, time.Nanosecond, MaxLeaseDuration + 1} {
		assert.ErrorIs(t, ValidateDuration("lease duration", d), ErrInvalid, d)
	}
	for _, n := range []int{0, -1, MaxLimit + 1, 1_000_001} {
		assert.ErrorIs(t, ValidateLimit("limit", n), ErrInvalid, n)
	}
	assert.ErrorIs(t, ValidateContext(nil), ErrInvalid) //nolint:staticcheck // a nil context is the input under test
	assert.NoError(t, ValidateContext(context.Background()))
}

func TestValidateOperations(t *testing.T) {
	lease := Lease{DeliveryID: "d1", Token: "tok", Seq: 1}
	cases := map[string]error{
		"enqueue empty id":       ValidateEnqueue(EnqueueRequest{Target: "h"}, t0, DefaultMaxPayload),
		"enqueue big payload":    ValidateEnqueue(EnqueueRequest{ID: "d", Target: "h", Payload: make([]byte, 11)}, t0, 10),
		"enqueue bad policy":     ValidateEnqueue(EnqueueRequest{ID: "d", Target: "h", Policy: Policy{MaxAttempts: -1}}, t0, 10),
		"enqueue zero now":       ValidateEnqueue(EnqueueRequest{ID: "d", Target: "h"}, time.Time{}, 10),
		"lease empty owner":      ValidateLease(LeaseFilter{}, Owner{}, t0, time.Minute, 1),
		"lease bad target":       ValidateLease(LeaseFilter{Targets: []Target{""}}, ownerA, t0, time.Minute, 1),
		"ack empty token":        ValidateAcknowledge(Lease{DeliveryID: "d1", Seq: 1}, "", t0),
		"processed neg fence":    ValidateMarkProcessed("d1", ownerA, FenceOf(-1), "a", t0),
		"processed empty action": ValidateMarkProcessed("d1", ownerA, nil, "", t0),
		"activation result":      ValidateRecordActivation("d1", Activation{Result: "nope"}, t0),
		"failed nul message":     ValidateMarkFailed(lease, FailureReason{Message: "\x00"}, t0),
		"abandon empty cause":    ValidateAbandon("d1", Cause{}, t0),
		"ceremony empty":         ValidateExpireCeremony("", Cause{Kind: CauseCeremonyEnded}, t0),
		"supersede same":         ValidateSupersede("h", "h", Follow, t0),
		"supersede mode":         ValidateSupersede("h", "h2", "sideways", t0),
		"envelope no key":        ValidateEnvelope(Envelope{Provider: "p", Kind: "k"}, 10),
		"claim zero now":         ValidateClaimRequest(ClaimRequest{Worker: "w", LeaseDuration: time.Minute, Limit: 1}),
		"save deferred no time":  ValidateSave(OutboxEntry{ID: "e", Status: OutboxStatusDeferred, Version: 1}),
		"save unknown status":    ValidateSave(OutboxEntry{ID: "e", Status: "lost", Version: 1}),
		"zero next retry":        ValidateNextRetry(&time.Time{}),
	}
	for name, err := range cases {
		assert.ErrorIs(t, err, ErrInvalid, name)
	}
	_, err := ValidateList(ListQuery{Limit: 10, States: []DeliveryState{"gone"}})
	assert.ErrorIs(t, err, ErrInvalid)
}

func TestCursorRoundTripAndMalformed(t *testing.T) {
	id, err := DecodeCursor(EncodeCursor("d-42"))
	require.NoError(t, err)
	assert.Equal(t, DeliveryID("d-42"), id)
	for _, bad := range []string{"%%%", "bm9wZQ", EncodeCursor("")[:2], strings.Repeat("A", 2000)} {
		_, err := DecodeCursor(bad)
		assert.ErrorIs(t, err, ErrInvalid, bad)
	}
}

func TestInvalidErrorMessageNamesTheField(t *testing.T) {
	err := ValidateDuration("lease duration", 0)
	var ie *InvalidError
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
		if Invisible(r) != fuzzInvisible(r) {
			diff = append(diff, fmt.Sprintf("%U (Invisible %v)", r, Invisible(r)))
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
		require.ErrorIs(t, err, ErrInvalid, name)
		var ie *InvalidError
		require.ErrorAs(t, err, &ie)
		assert.Equal(t, "target", ie.Field, name)
	}
	for _, ok := range []string{"x1", "a b", "order-42", "Zürich", "東京", "e\u0301", "emoji-\u2603"} {
		assert.NoError(t, ValidateName("target", ok), "%q", ok)
	}
}
