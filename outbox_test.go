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
	all, lease := fixtures(t)
	for state, d := range all {
		raw, err := json.Marshal(d)
		require.NoError(t, err)
		assert.NotContains(t, string(raw), string(lease.Token), "%s delivery: JSON never carries a token", state)
		var back Delivery
		require.NoError(t, json.Unmarshal(raw, &back))
		assert.Equal(t, d.Redacted(), back, "%s delivery", state)
	}
	e, claim := newEntry().Grant("w1", "tok-secret", t0, time.Minute)
	raw, err := json.Marshal(e)
	require.NoError(t, err)
	assert.Contains(t, string(raw), `"idempotency_key":"k1"`, "stable snake_case keys")
	var back OutboxEntry
	require.NoError(t, json.Unmarshal(raw, &back))
	assert.Equal(t, e.Redacted(), back)
	for _, v := range []any{e, claim, &e.Claim} {
		raw, err := json.Marshal(v)
		require.NoError(t, err)
		assert.NotContains(t, string(raw), "tok-secret", "JSON never carries a token: %s", raw)
	}
	ended, _ := e.ReleaseClaim(claim, t0)
	raw, err = json.Marshal(ended)
	require.NoError(t, err)
	assert.NotContains(t, string(raw), "tok-secret", "nor the token of an ended claim")
}

func TestRedactedKeepsEverythingButTheTokens(t *testing.T) {
	e, claim := newEntry().Grant("w1", "tok", t0, time.Minute)
	r := e.Redacted()
	require.NotNil(t, r.Claim)
	assert.Empty(t, r.Claim.Token)
	assert.Equal(t, ledgerClaimWithout(claim), *r.Claim, "holder, sequence and times stay")
	assert.Equal(t, Token("tok"), e.Claim.Token, "the record redacted is untouched")
	assert.Equal(t, Token("tok"), claim.Token, "and so is the grantee's claim")
	_, o := e.MarkClaimDelivered(Claim{EntryID: r.ID, Worker: r.Claim.Worker, Token: r.Claim.Token, Seq: r.Claim.Seq}, EmissionResult{}, t0)
	assert.Equal(t, OutcomeLeaseLost, o, "a claim built from a redacted record does not act")

	released, _ := e.ReleaseClaim(claim, t0)
	require.NotNil(t, released.EndedClaim)
	assert.Empty(t, released.Redacted().EndedClaim.Token)
	assert.Equal(t, Token("tok"), released.EndedClaim.Token)

	all, lease := fixtures(t)
	for state, d := range all {
		r := d.Redacted()
		if d.Lease != nil {
			assert.Empty(t, r.Lease.Token, state)
			assert.Equal(t, d.Lease.Seq, r.Lease.Seq, state)
			assert.Equal(t, d.Lease.Owner, r.Lease.Owner, state)
			assert.Equal(t, d.Lease.ExpiresAt, r.Lease.ExpiresAt, state)
			assert.Equal(t, lease.Token, d.Lease.Token, "%s: the record redacted is untouched", state)
			forged := Lease{DeliveryID: d.ID, Owner: r.Lease.Owner, Token: r.Lease.Token, Seq: r.Lease.Seq}
			_, o := d.Acknowledge(forged, "", t0)
			assert.NotEqual(t, OutcomeApplied, o, "%s: a lease built from a redacted record does not act", state)
		}
		if d.EndedLease != nil {
			assert.Empty(t, r.EndedLease.Token, state)
			assert.Equal(t, d.EndedLease.Op, r.EndedLease.Op, state)
		}
	}
}

func ledgerClaimWithout(c Claim) Claim { c.Token = ""; return c }

// TestCountsSaturateAtMaxCount: no transition takes a count past what both
// stores hold; the call still applies.
func TestCountsSaturateAtMaxCount(t *testing.T) {
	e := newEntry()
	e.Attempts = MaxCount
	granted, claim := e.Grant("w1", "tok", t0, time.Minute)
	assert.Equal(t, MaxCount, granted.Attempts, "a claim at the bound")
	assert.Equal(t, e.Version+1, granted.Version)
	released, o := granted.ReleaseClaim(claim, t0)
	require.Equal(t, OutcomeApplied, o)
	assert.Equal(t, MaxCount-1, released.Attempts)

	e.Attempts = MaxCount - 1
	granted, _ = e.Grant("w1", "tok", t0, time.Minute)
	assert.Equal(t, MaxCount, granted.Attempts, "a claim one below the bound reaches it")

	e.Attempts = MaxCount
	done, err := e.MarkDelivered(EmissionResult{}, t0)
	require.NoError(t, err)
	assert.Equal(t, MaxCount, done.Attempts, "a base completion at the bound")

	all, _ := fixtures(t)
	d := all[DeliveryStateOffered]
	d.Activations = MaxCount
	a, o := d.RecordActivation(Activation{Result: ActivationDelivered}, t0)
	require.Equal(t, OutcomeApplied, o)
	assert.Equal(t, MaxCount, a.Activations)
	assert.Equal(t, d.Version+1, a.Version, "the call still applies")
}

func TestSaveBoundsAttempts(t *testing.T) {
	e := newEntry()
	e.Attempts = MaxCount
	assert.NoError(t, ValidateSave(e))
	for _, n := range []int{-1, MaxCount + 1} {
		e.Attempts = n
		err := ValidateSave(e)
		require.ErrorIs(t, err, ErrInvalid, n)
		var ie *InvalidError
		require.ErrorAs(t, err, &ie)
		assert.Equal(t, "attempts", ie.Field)
	}
}
