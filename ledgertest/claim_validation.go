package ledgertest

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// claimFixture is the store every validation case runs against: an entry
// claimed at claimT0 (with its claim), an unclaimed pending entry and a
// due, unclaimed retry entry, so that any call that wrongly goes ahead has
// something to change.
type claimFixture struct {
	s       ledger.ClaimStore
	claimed ledger.OutboxEntry
	claim   ledger.Claim
	free    ledger.OutboxEntry
	retry   ledger.OutboxEntry
}

func newClaimFixture(t *testing.T, s ledger.ClaimStore) claimFixture {
	t.Helper()
	ce := claimNew(t, s, "claimed", claimT0)
	return claimFixture{
		s:       s,
		claimed: ce.Entry,
		claim:   ce.Claim,
		free:    claimEnqueue(t, s, "free"),
		retry:   claimScheduled(t, s, "retry", claimT0),
	}
}

// claimBadCase is one malformed call.
type claimBadCase struct {
	name string
	call func(ctx context.Context, f claimFixture) error
}

// claimMethod is one exported method: a well-formed call, used with a nil
// and a cancelled context, and its malformed calls.
type claimMethod struct {
	name  string
	valid func(ctx context.Context, f claimFixture) error
	bad   []claimBadCase
}

type claimBadValue struct{ name, value string }

var (
	// claimBadNames are malformed identifiers.
	claimBadNames = []claimBadValue{
		{"Empty", ""},
		{"Oversize", strings.Repeat("n", ledger.MaxNameBytes+1)},
		{"InvalidUTF8", "bad\xffname"},
		{"NUL", "bad\x00name"},
		{"ControlChar", "bad\tname"},
		// Names that look like another name: format and invisible
		// characters are refused, so that look-alikes are one name.
		{"RightToLeftOverride", "x1\u202e"},
		{"ZeroWidthSpace", "x1\u200b"},
		{"NoBreakSpace", "x\u00a01"},
		{"HangulFiller", "x1\u3164"},
	}
	// claimBadOptionalNames are malformed identifiers that may be empty.
	claimBadOptionalNames = claimBadNames[1:]
	// claimBadTexts are malformed free text.
	claimBadTexts = []claimBadValue{
		{"Oversize", strings.Repeat("t", ledger.MaxTextBytes+1)},
		{"InvalidUTF8", "bad\xfftext"},
		{"NUL", "bad\x00text"},
	}
	// claimBadTimes are values no call accepts as its now.
	claimBadTimes = []claimBadTime{
		{"Zero", time.Time{}},
		{"BeforeMinTime", time.Date(1960, time.January, 1, 0, 0, 0, 0, time.UTC)},
		{"AfterMaxTime", storekit.MaxTime().Add(time.Microsecond)},
	}
	// claimBadDueTimes are values no call accepts as a time something
	// becomes due (nextRetry, NextAttemptAt). Any past time is accepted
	// there: it means due now.
	claimBadDueTimes = []claimBadTime{
		{"Zero", time.Time{}},
		{"AfterMaxTime", storekit.MaxTime().Add(time.Microsecond)},
	}
)

// claimBadTime is one malformed time, named.
type claimBadTime struct {
	name  string
	value time.Time
}

// claimBadEach returns one case per bad value, named prefix+value name.
func claimBadEach(prefix string, values []claimBadValue, call func(ctx context.Context, f claimFixture, v string) error) []claimBadCase {
	out := make([]claimBadCase, 0, len(values))
	for _, v := range values {
		out = append(out, claimBadCase{prefix + v.name, func(ctx context.Context, f claimFixture) error { return call(ctx, f, v.value) }})
	}
	return out
}

// claimBadLimits returns the limit cases for a call taking a limit.
func claimBadLimits(call func(ctx context.Context, f claimFixture, limit int) error) []claimBadCase {
	var out []claimBadCase
	for _, l := range []struct {
		name  string
		value int
	}{{"LimitZero", 0}, {"LimitNegative", -1}, {"LimitOverMax", ledger.MaxLimit + 1}} {
		out = append(out, claimBadCase{l.name, func(ctx context.Context, f claimFixture) error { return call(ctx, f, l.value) }})
	}
	return out
}

// claimBadEnvelopes returns the cases for a call taking one envelope.
func claimBadEnvelopes(call func(ctx context.Context, f claimFixture, env ledger.Envelope) error) []claimBadCase {
	with := func(change func(*ledger.Envelope, string)) func(ctx context.Context, f claimFixture, v string) error {
		return func(ctx context.Context, f claimFixture, v string) error {
			env := claimEnvelope("fresh")
			change(&env, v)
			return call(ctx, f, env)
		}
	}
	out := claimBadEach("Provider", claimBadNames, with(func(e *ledger.Envelope, v string) { e.Provider = v }))
	out = append(out, claimBadEach("Kind", claimBadNames, with(func(e *ledger.Envelope, v string) { e.Kind = v }))...)
	out = append(out, claimBadEach("IdempotencyKey", claimBadNames, with(func(e *ledger.Envelope, v string) { e.IdempotencyKey = v }))...)
	out = append(out, claimBadCase{"PayloadOversize", func(ctx context.Context, f claimFixture) error {
		env := claimEnvelope("fresh")
		env.Payload = make([]byte, ledger.DefaultMaxPayload+1)
		return call(ctx, f, env)
	}})
	bad := badMetadata()
	for _, name := range slices.Sorted(maps.Keys(bad)) {
		out = append(out, claimBadCase{"Metadata/" + name, func(ctx context.Context, f claimFixture) error {
			env := claimEnvelope("fresh")
			env.Metadata = bad[name]
			return call(ctx, f, env)
		}})
	}
	return out
}

// claimBadEmissionErrors returns the cases for a call taking an EmissionError.
func claimBadEmissionErrors(call func(ctx context.Context, f claimFixture, e ledger.EmissionError) error) []claimBadCase {
	out := claimBadEach("ErrorCode", claimBadOptionalNames, func(ctx context.Context, f claimFixture, v string) error {
		return call(ctx, f, ledger.EmissionError{Code: v})
	})
	return append(out, claimBadEach("ErrorMessage", claimBadTexts, func(ctx context.Context, f claimFixture, v string) error {
		return call(ctx, f, ledger.EmissionError{Message: v})
	})...)
}

// claimBadEmissionResults returns the cases for a call taking an EmissionResult.
func claimBadEmissionResults(call func(ctx context.Context, f claimFixture, r ledger.EmissionResult) error) []claimBadCase {
	out := claimBadEach("ResultProviderRef", claimBadOptionalNames, func(ctx context.Context, f claimFixture, v string) error {
		return call(ctx, f, ledger.EmissionResult{ProviderRef: v})
	})
	return append(out, claimBadEach("ResultDetail", claimBadTexts, func(ctx context.Context, f claimFixture, v string) error {
		return call(ctx, f, ledger.EmissionResult{Detail: v})
	})...)
}

// claimBadEntries returns the cases for Save and SaveClaim: the fixture's
// claimed entry, well-formed but for one field.
func claimBadEntries(call func(ctx context.Context, f claimFixture, e ledger.OutboxEntry) error) []claimBadCase {
	with := func(change func(*ledger.OutboxEntry, string)) func(ctx context.Context, f claimFixture, v string) error {
		return func(ctx context.Context, f claimFixture, v string) error {
			e := f.claimed.Clone()
			e.Status = ledger.OutboxStatusDeferred
			e.NextAttemptAt = claimAt(time.Hour)
			change(&e, v)
			return call(ctx, f, e)
		}
	}
	out := claimBadEach("ID", claimBadNames, with(func(e *ledger.OutboxEntry, v string) { e.ID = ledger.OutboxEntryID(v) }))
	out = append(out, claimBadEach("Status", []claimBadValue{{"Unknown", "bogus"}, {"Empty", ""}},
		with(func(e *ledger.OutboxEntry, v string) { e.Status = ledger.OutboxStatus(v) }))...)
	for _, st := range []ledger.OutboxStatus{ledger.OutboxStatusRetryScheduled, ledger.OutboxStatusDeferred} {
		for _, bt := range claimBadDueTimes {
			call := with(func(e *ledger.OutboxEntry, _ string) {
				e.Status = st
				e.NextAttemptAt = bt.value
			})
			out = append(out, claimBadCase{"NextAttemptAt" + bt.name + "For" + string(st), func(ctx context.Context, f claimFixture) error {
				return call(ctx, f, "")
			}})
		}
	}
	out = append(out, claimBadEach("Attempts", []claimBadValue{{"Negative", ""}},
		with(func(e *ledger.OutboxEntry, _ string) { e.Attempts = -1 }))...)
	out = append(out, claimBadEach("Attempts", []claimBadValue{{"PastMaxCount", ""}},
		with(func(e *ledger.OutboxEntry, _ string) { e.Attempts = ledger.MaxCount + 1 }))...)
	out = append(out, claimBadEmissionErrors(func(ctx context.Context, f claimFixture, ee ledger.EmissionError) error {
		return with(func(e *ledger.OutboxEntry, _ string) { e.LastError = &ee })(ctx, f, "")
	})...)
	out = append(out, claimBadEmissionResults(func(ctx context.Context, f claimFixture, r ledger.EmissionResult) error {
		return with(func(e *ledger.OutboxEntry, _ string) { e.Result = &r })(ctx, f, "")
	})...)
	return append(out, claimBadEach("DeadLetterReason", claimBadTexts, with(func(e *ledger.OutboxEntry, v string) { e.DeadLetterReason = v }))...)
}

// claimBadClaims returns the cases for a call taking a claim: the
// fixture's claim in force, but for one field.
func claimBadClaims(call func(ctx context.Context, f claimFixture, c ledger.Claim) error) []claimBadCase {
	with := func(change func(*ledger.Claim, string)) func(ctx context.Context, f claimFixture, v string) error {
		return func(ctx context.Context, f claimFixture, v string) error {
			c := f.claim
			change(&c, v)
			return call(ctx, f, c)
		}
	}
	out := claimBadEach("ClaimEntryID", claimBadNames, with(func(c *ledger.Claim, v string) { c.EntryID = ledger.OutboxEntryID(v) }))
	return append(out, claimBadEach("ClaimToken", claimBadNames, with(func(c *ledger.Claim, v string) { c.Token = ledger.Token(v) }))...)
}

// claimBadRequests returns the cases for ClaimPending and ClaimRetryReady.
func claimBadRequests(call func(ctx context.Context, f claimFixture, req ledger.ClaimRequest) error) []claimBadCase {
	with := func(change func(*ledger.ClaimRequest)) func(ctx context.Context, f claimFixture) error {
		return func(ctx context.Context, f claimFixture) error {
			req := claimRequest(claimAt(time.Hour), ledger.MaxLimit)
			change(&req)
			return call(ctx, f, req)
		}
	}
	out := claimBadEach("Worker", claimBadNames, func(ctx context.Context, f claimFixture, v string) error {
		return with(func(r *ledger.ClaimRequest) { r.Worker = v })(ctx, f)
	})
	out = append(out, claimBadTimeCases("Now", func(ctx context.Context, f claimFixture, now time.Time) error {
		return with(func(r *ledger.ClaimRequest) { r.Now = now })(ctx, f)
	})...)
	for _, d := range []struct {
		name  string
		value time.Duration
	}{
		{"Zero", 0},
		{"Negative", -time.Second},
		{"BelowMicrosecond", 999 * time.Nanosecond},
		{"OverMax", ledger.MaxLeaseDuration + time.Microsecond},
	} {
		out = append(out, claimBadCase{"LeaseDuration" + d.name, with(func(r *ledger.ClaimRequest) { r.LeaseDuration = d.value })})
	}
	return append(out, claimBadLimits(func(ctx context.Context, f claimFixture, limit int) error {
		return with(func(r *ledger.ClaimRequest) { r.Limit = limit })(ctx, f)
	})...)
}

// claimBadNextRetries returns the cases for a malformed nextRetry.
func claimBadNextRetries(call func(ctx context.Context, f claimFixture, next *time.Time) error) []claimBadCase {
	return claimBadTimeCasesFrom(claimBadDueTimes, "NextRetry", func(ctx context.Context, f claimFixture, next time.Time) error {
		return call(ctx, f, &next)
	})
}

// testOutboxValidation checks that every method rejects every malformed
// call with an *InvalidError naming the field, that a nil context is
// ErrInvalid and a cancelled one context.Canceled, and that none of these
// calls writes anything.
func testOutboxValidation(t *testing.T, newStore NewClaimStoreFunc) {
	for _, m := range claimMethods() {
		claimRun(t, m.name, newStore, func(t *testing.T, s ledger.ClaimStore) {
			f := newClaimFixture(t, s)
			ids := []ledger.OutboxEntryID{f.claimed.ID, f.free.ID, f.retry.ID}
			requireInvalid := func(t *testing.T, err error) {
				t.Helper()
				require.ErrorIs(t, err, ledger.ErrInvalid)
				var ie *ledger.InvalidError
				require.ErrorAs(t, err, &ie)
				require.NotEmpty(t, ie.Field, "an invalid call names its field")
			}
			// The cases share the fixture: none may change it, and each
			// checks so against a fresh snapshot.
			for _, bc := range m.bad {
				t.Run(bc.name, func(t *testing.T) {
					before := claimSnapshot(t, s, ids...)
					requireInvalid(t, bc.call(t.Context(), f))
					require.Equal(t, before, claimSnapshot(t, s, ids...), "a rejected call writes nothing")
				})
			}
			t.Run("NilContext", func(t *testing.T) {
				before := claimSnapshot(t, s, ids...)
				var nilCtx context.Context
				requireInvalid(t, m.valid(nilCtx, f))
				require.Equal(t, before, claimSnapshot(t, s, ids...), "a rejected call writes nothing")
			})
			t.Run("CancelledContext", func(t *testing.T) {
				before := claimSnapshot(t, s, ids...)
				ctx, cancel := context.WithCancel(t.Context())
				cancel()
				require.ErrorIs(t, m.valid(ctx, f), context.Canceled)
				require.Equal(t, before, claimSnapshot(t, s, ids...), "a cancelled call writes nothing")
			})
		})
	}
}
