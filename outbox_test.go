package ledger

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newEntry() OutboxEntry {
	return NewOutboxEntry(Envelope{Provider: "mail", Kind: "welcome", Payload: []byte("p"), IdempotencyKey: "k1"}, t0)
}

func TestOutboxEntryIDIsDerivedFromTheKey(t *testing.T) {
	e := newEntry()
	assert.Equal(t, OutboxEntryIDFor("k1"), e.ID)
	assert.NotEqual(t, OutboxEntryIDFor("k2"), e.ID)
	assert.Equal(t, OutcomeRepeated, e.EnqueueAgain(Envelope{Provider: "mail", Kind: "welcome", Payload: []byte("p"), IdempotencyKey: "k1"}))
	assert.Equal(t, OutcomeConflict, e.EnqueueAgain(Envelope{Provider: "sms", Kind: "welcome", Payload: []byte("p"), IdempotencyKey: "k1"}))
}

func TestClaimCompletions(t *testing.T) {
	e := newEntry()
	require.True(t, e.PendingClaimable(t0))
	e, claim := e.Grant("w1", "tok", t0, time.Minute)
	assert.Equal(t, 1, e.Attempts)
	assert.Equal(t, int64(1), claim.Seq)
	assert.False(t, e.PendingClaimable(t0.Add(time.Minute-time.Microsecond)))
	assert.True(t, e.PendingClaimable(t0.Add(time.Minute)), "an expired claim can be claimed again")

	stale := claim
	stale.Token = "other"
	_, o := e.MarkClaimDelivered(stale, EmissionResult{}, t0)
	assert.Equal(t, OutcomeLeaseLost, o)

	next := t0.Add(time.Hour)
	retry, o := e.MarkClaimFailed(claim, EmissionError{Message: "503"}, &next, t0.Add(time.Second))
	require.Equal(t, OutcomeApplied, o)
	assert.Equal(t, OutboxStatusRetryScheduled, retry.Status)
	assert.Equal(t, next, retry.NextAttemptAt)
	assert.Nil(t, retry.Claim)
	_, o = retry.MarkClaimFailed(claim, EmissionError{Message: "503"}, &next, t0.Add(time.Second))
	assert.Equal(t, OutcomeRepeated, o)
	_, o = retry.ReleaseClaim(claim, t0.Add(time.Second))
	assert.Equal(t, OutcomeLeaseLost, o, "a different action under an ended claim")

	delivered, o := e.MarkClaimDelivered(claim, EmissionResult{ProviderRef: "r1"}, t0.Add(time.Second))
	require.Equal(t, OutcomeApplied, o)
	assert.True(t, delivered.Status.Terminal())
	assert.False(t, delivered.EndedAt.IsZero())
	_, o = delivered.MarkClaimDelivered(stale, EmissionResult{}, t0.Add(time.Second))
	assert.Equal(t, OutcomeEnded, o, "a stale token on a terminal entry answers Ended")

	released, o := e.ReleaseClaim(claim, t0.Add(time.Second))
	require.Equal(t, OutcomeApplied, o)
	assert.Equal(t, 0, released.Attempts)
	assert.Equal(t, OutboxStatusPending, released.Status)
	assert.True(t, released.PendingClaimable(t0.Add(time.Second)))
}

func TestSaveClaimDefers(t *testing.T) {
	e, claim := newEntry().Grant("w1", "tok", t0, time.Minute)
	in := e
	in.Status = OutboxStatusDeferred
	in.NextAttemptAt = t0.Add(time.Hour)
	d, o := e.SaveClaim(claim, in, t0.Add(time.Second))
	require.Equal(t, OutcomeApplied, o)
	assert.Equal(t, OutboxStatusDeferred, d.Status)
	assert.False(t, d.RetryClaimable(t0.Add(time.Hour-time.Microsecond)))
	assert.True(t, d.RetryClaimable(t0.Add(time.Hour)))
}

func TestBaseCompletions(t *testing.T) {
	e := newEntry()
	d, err := e.MarkDelivered(EmissionResult{}, t0)
	require.NoError(t, err)
	assert.Equal(t, 1, d.Attempts, "an unclaimed completion counts its attempt")
	again, err := d.MarkDelivered(EmissionResult{}, t0)
	require.NoError(t, err)
	assert.Equal(t, d, again, "delivered twice is a no-op")
	_, err = d.MarkFailed(EmissionError{}, nil, t0)
	assert.True(t, errors.Is(err, ErrConflict))

	claimed, _ := e.Grant("w", "tok", t0, time.Minute)
	f, err := claimed.MarkFailed(EmissionError{Message: "x"}, nil, t0)
	require.NoError(t, err)
	assert.Equal(t, 1, f.Attempts, "a claimed completion does not count twice")
	assert.Equal(t, OutboxStatusFailed, f.Status)
}

func TestSaveIsOptimistic(t *testing.T) {
	e := newEntry()
	in := e
	in.Status = OutboxStatusDeferred
	in.NextAttemptAt = t0.Add(time.Hour)
	saved, err := e.Save(in, t0)
	require.NoError(t, err)
	assert.Equal(t, e.Version+1, saved.Version)
	_, err = saved.Save(in, t0)
	assert.True(t, errors.Is(err, ErrConflict), "stale version")
	done, err := saved.MarkDelivered(EmissionResult{}, t0)
	require.NoError(t, err)
	in = done
	in.Status = OutboxStatusPending
	_, err = done.Save(in, t0)
	assert.True(t, errors.Is(err, ErrConflict), "ended entries stay as they ended")
}

func TestRenewClaim(t *testing.T) {
	e, claim := newEntry().Grant("w1", "tok", t0, time.Minute)
	r, o := e.RenewClaim(claim, t0.Add(30*time.Second), time.Minute)
	require.Equal(t, OutcomeApplied, o)
	assert.Equal(t, t0.Add(90*time.Second), r.Claim.ExpiresAt)
	assert.Equal(t, 1, r.Attempts)
	assert.False(t, r.PendingClaimable(t0.Add(time.Minute)), "renewed past its first expiry")
	_, o = e.RenewClaim(claim, t0.Add(time.Minute), time.Minute)
	assert.Equal(t, OutcomeLeaseExpired, o)
	done, _ := e.MarkClaimDelivered(claim, EmissionResult{}, t0)
	_, o = done.RenewClaim(claim, t0, time.Minute)
	assert.Equal(t, OutcomeEnded, o)
}

func TestRecordsRoundTripThroughJSON(t *testing.T) {
	all, _ := fixtures(t)
	for state, d := range all {
		raw, err := json.Marshal(d)
		require.NoError(t, err)
		var back Delivery
		require.NoError(t, json.Unmarshal(raw, &back))
		assert.Equal(t, d, back, "%s delivery", state)
	}
	e, _ := newEntry().Grant("w1", "tok", t0, time.Minute)
	raw, err := json.Marshal(e)
	require.NoError(t, err)
	assert.Contains(t, string(raw), `"idempotency_key":"k1"`, "stable snake_case keys")
	var back OutboxEntry
	require.NoError(t, json.Unmarshal(raw, &back))
	assert.Equal(t, e, back)
}
