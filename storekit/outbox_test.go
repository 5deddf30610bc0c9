package storekit

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newEntry() ledger.OutboxEntry {
	return NewOutboxEntry(ledger.Envelope{Provider: "mail", Kind: "welcome", Payload: []byte("p"), IdempotencyKey: "k1"}, t0)
}

func TestOutboxEntryIDIsDerivedFromTheKey(t *testing.T) {
	e := newEntry()
	assert.Equal(t, ledger.OutboxEntryIDFor("k1"), e.ID)
	assert.NotEqual(t, ledger.OutboxEntryIDFor("k2"), e.ID)
	assert.Equal(t, ledger.OutcomeRepeated, OutboxEntry(e).EnqueueAgain(ledger.Envelope{Provider: "mail", Kind: "welcome", Payload: []byte("p"), IdempotencyKey: "k1"}))
	assert.Equal(t, ledger.OutcomeConflict, OutboxEntry(e).EnqueueAgain(ledger.Envelope{Provider: "sms", Kind: "welcome", Payload: []byte("p"), IdempotencyKey: "k1"}))
}

func TestClaimCompletions(t *testing.T) {
	e := newEntry()
	require.True(t, OutboxEntry(e).PendingClaimable(t0))
	e, claim := OutboxEntry(e).Grant("w1", "tok", t0, time.Minute)
	assert.Equal(t, 1, e.Attempts)
	assert.Equal(t, int64(1), claim.Seq)
	assert.False(t, OutboxEntry(e).PendingClaimable(t0.Add(time.Minute-time.Microsecond)))
	assert.True(t, OutboxEntry(e).PendingClaimable(t0.Add(time.Minute)), "an expired claim can be claimed again")

	stale := claim
	stale.Token = "other"
	_, o := OutboxEntry(e).MarkClaimDelivered(stale, ledger.EmissionResult{}, t0)
	assert.Equal(t, ledger.OutcomeLeaseLost, o)

	next := t0.Add(time.Hour)
	retry, o := OutboxEntry(e).MarkClaimFailed(claim, ledger.EmissionError{Message: "503"}, &next, t0.Add(time.Second))
	require.Equal(t, ledger.OutcomeApplied, o)
	assert.Equal(t, ledger.OutboxStatusRetryScheduled, retry.Status)
	assert.Equal(t, next, retry.NextAttemptAt)
	assert.Nil(t, retry.Claim)
	_, o = OutboxEntry(retry).MarkClaimFailed(claim, ledger.EmissionError{Message: "503"}, &next, t0.Add(time.Second))
	assert.Equal(t, ledger.OutcomeRepeated, o)
	_, o = OutboxEntry(retry).ReleaseClaim(claim, t0.Add(time.Second))
	assert.Equal(t, ledger.OutcomeLeaseLost, o, "a different action under an ended claim")

	delivered, o := OutboxEntry(e).MarkClaimDelivered(claim, ledger.EmissionResult{ProviderRef: "r1"}, t0.Add(time.Second))
	require.Equal(t, ledger.OutcomeApplied, o)
	assert.True(t, delivered.Status.Terminal())
	assert.False(t, delivered.EndedAt.IsZero())
	_, o = OutboxEntry(delivered).MarkClaimDelivered(stale, ledger.EmissionResult{}, t0.Add(time.Second))
	assert.Equal(t, ledger.OutcomeEnded, o, "a stale token on a terminal entry answers Ended")

	released, o := OutboxEntry(e).ReleaseClaim(claim, t0.Add(time.Second))
	require.Equal(t, ledger.OutcomeApplied, o)
	assert.Equal(t, 0, released.Attempts)
	assert.Equal(t, ledger.OutboxStatusPending, released.Status)
	assert.True(t, OutboxEntry(released).PendingClaimable(t0.Add(time.Second)))
}

func TestSaveClaimDefers(t *testing.T) {
	e, claim := OutboxEntry(newEntry()).Grant("w1", "tok", t0, time.Minute)
	in := e
	in.Status = ledger.OutboxStatusDeferred
	in.NextAttemptAt = t0.Add(time.Hour)
	d, o := OutboxEntry(e).SaveClaim(claim, in, t0.Add(time.Second))
	require.Equal(t, ledger.OutcomeApplied, o)
	assert.Equal(t, ledger.OutboxStatusDeferred, d.Status)
	assert.False(t, OutboxEntry(d).RetryClaimable(t0.Add(time.Hour-time.Microsecond)))
	assert.True(t, OutboxEntry(d).RetryClaimable(t0.Add(time.Hour)))
}

func TestBaseCompletions(t *testing.T) {
	e := newEntry()
	d, err := OutboxEntry(e).MarkDelivered(ledger.EmissionResult{}, t0)
	require.NoError(t, err)
	assert.Equal(t, 1, d.Attempts, "an unclaimed completion counts its attempt")
	again, err := OutboxEntry(d).MarkDelivered(ledger.EmissionResult{}, t0)
	require.NoError(t, err)
	assert.Equal(t, d, again, "delivered twice is a no-op")
	_, err = OutboxEntry(d).MarkFailed(ledger.EmissionError{}, nil, t0)
	assert.True(t, errors.Is(err, ledger.ErrConflict))

	claimed, _ := OutboxEntry(e).Grant("w", "tok", t0, time.Minute)
	f, err := OutboxEntry(claimed).MarkFailed(ledger.EmissionError{Message: "x"}, nil, t0)
	require.NoError(t, err)
	assert.Equal(t, 1, f.Attempts, "a claimed completion does not count twice")
	assert.Equal(t, ledger.OutboxStatusFailed, f.Status)
}

func TestSaveIsOptimistic(t *testing.T) {
	e := newEntry()
	in := e
	in.Status = ledger.OutboxStatusDeferred
	in.NextAttemptAt = t0.Add(time.Hour)
	saved, err := OutboxEntry(e).Save(in, t0)
	require.NoError(t, err)
	assert.Equal(t, e.Version+1, saved.Version)
	_, err = OutboxEntry(saved).Save(in, t0)
	assert.True(t, errors.Is(err, ledger.ErrConflict), "stale version")
	done, err := OutboxEntry(saved).MarkDelivered(ledger.EmissionResult{}, t0)
	require.NoError(t, err)
	in = done
	in.Status = ledger.OutboxStatusPending
	_, err = OutboxEntry(done).Save(in, t0)
	assert.True(t, errors.Is(err, ledger.ErrConflict), "ended entries stay as they ended")
}

func TestRenewClaim(t *testing.T) {
	e, claim := OutboxEntry(newEntry()).Grant("w1", "tok", t0, time.Minute)
	r, o := OutboxEntry(e).RenewClaim(claim, t0.Add(30*time.Second), time.Minute)
	require.Equal(t, ledger.OutcomeApplied, o)
	assert.Equal(t, t0.Add(90*time.Second), r.Claim.ExpiresAt)
	assert.Equal(t, 1, r.Attempts)
	assert.False(t, OutboxEntry(r).PendingClaimable(t0.Add(time.Minute)), "renewed past its first expiry")
	_, o = OutboxEntry(e).RenewClaim(claim, t0.Add(time.Minute), time.Minute)
	assert.Equal(t, ledger.OutcomeLeaseExpired, o)
	done, _ := OutboxEntry(e).MarkClaimDelivered(claim, ledger.EmissionResult{}, t0)
	_, o = OutboxEntry(done).RenewClaim(claim, t0, time.Minute)
	assert.Equal(t, ledger.OutcomeEnded, o)
}

func TestRecordsRoundTripThroughJSON(t *testing.T) {
	all, lease := fixtures(t)
	for state, d := range all {
		raw, err := json.Marshal(d)
		require.NoError(t, err)
		assert.NotContains(t, string(raw), string(lease.Token), "%s delivery: JSON never carries a token", state)
		var back ledger.Delivery
		require.NoError(t, json.Unmarshal(raw, &back))
		assert.Equal(t, d.Redacted(), back, "%s delivery", state)
	}
	e, claim := OutboxEntry(newEntry()).Grant("w1", "tok-secret", t0, time.Minute)
	raw, err := json.Marshal(e)
	require.NoError(t, err)
	assert.Contains(t, string(raw), `"idempotency_key":"k1"`, "stable snake_case keys")
	var back ledger.OutboxEntry
	require.NoError(t, json.Unmarshal(raw, &back))
	assert.Equal(t, e.Redacted(), back)
	for _, v := range []any{e, claim, &e.Claim} {
		raw, err := json.Marshal(v)
		require.NoError(t, err)
		assert.NotContains(t, string(raw), "tok-secret", "JSON never carries a token: %s", raw)
	}
	ended, _ := OutboxEntry(e).ReleaseClaim(claim, t0)
	raw, err = json.Marshal(ended)
	require.NoError(t, err)
	assert.NotContains(t, string(raw), "tok-secret", "nor the token of an ended claim")
}

func TestRedactedKeepsEverythingButTheTokens(t *testing.T) {
	e, claim := OutboxEntry(newEntry()).Grant("w1", "tok", t0, time.Minute)
	r := e.Redacted()
	require.NotNil(t, r.Claim)
	assert.Empty(t, r.Claim.Token)
	assert.Equal(t, ledgerClaimWithout(claim), *r.Claim, "holder, sequence and times stay")
	assert.Equal(t, ledger.Token("tok"), e.Claim.Token, "the record redacted is untouched")
	assert.Equal(t, ledger.Token("tok"), claim.Token, "and so is the grantee's claim")
	_, o := OutboxEntry(e).MarkClaimDelivered(ledger.Claim{EntryID: r.ID, Worker: r.Claim.Worker, Token: r.Claim.Token, Seq: r.Claim.Seq}, ledger.EmissionResult{}, t0)
	assert.Equal(t, ledger.OutcomeLeaseLost, o, "a claim built from a redacted record does not act")

	released, _ := OutboxEntry(e).ReleaseClaim(claim, t0)
	require.NotNil(t, released.EndedClaim)
	assert.Empty(t, released.Redacted().EndedClaim.Token)
	assert.Equal(t, ledger.Token("tok"), released.EndedClaim.Token)

	all, lease := fixtures(t)
	for state, d := range all {
		r := d.Redacted()
		if d.Lease != nil {
			assert.Empty(t, r.Lease.Token, state)
			assert.Equal(t, d.Lease.Seq, r.Lease.Seq, state)
			assert.Equal(t, d.Lease.Owner, r.Lease.Owner, state)
			assert.Equal(t, d.Lease.ExpiresAt, r.Lease.ExpiresAt, state)
			assert.Equal(t, lease.Token, d.Lease.Token, "%s: the record redacted is untouched", state)
			forged := ledger.Lease{DeliveryID: d.ID, Owner: r.Lease.Owner, Token: r.Lease.Token, Seq: r.Lease.Seq}
			_, o := Delivery(d).Acknowledge(forged, "", t0)
			assert.NotEqual(t, ledger.OutcomeApplied, o, "%s: a lease built from a redacted record does not act", state)
		}
		if d.EndedLease != nil {
			assert.Empty(t, r.EndedLease.Token, state)
			assert.Equal(t, d.EndedLease.Op, r.EndedLease.Op, state)
		}
	}
}

func ledgerClaimWithout(c ledger.Claim) ledger.Claim { c.Token = ""; return c }

// TestCountsSaturateAtMaxCount: no transition takes a count past what both
// stores hold; the call still applies.
func TestCountsSaturateAtMaxCount(t *testing.T) {
	e := newEntry()
	e.Attempts = ledger.MaxCount
	granted, claim := OutboxEntry(e).Grant("w1", "tok", t0, time.Minute)
	assert.Equal(t, ledger.MaxCount, granted.Attempts, "a claim at the bound")
	assert.Equal(t, e.Version+1, granted.Version)
	released, o := OutboxEntry(granted).ReleaseClaim(claim, t0)
	require.Equal(t, ledger.OutcomeApplied, o)
	assert.Equal(t, ledger.MaxCount-1, released.Attempts)

	e.Attempts = ledger.MaxCount - 1
	granted, _ = OutboxEntry(e).Grant("w1", "tok", t0, time.Minute)
	assert.Equal(t, ledger.MaxCount, granted.Attempts, "a claim one below the bound reaches it")

	e.Attempts = ledger.MaxCount
	done, err := OutboxEntry(e).MarkDelivered(ledger.EmissionResult{}, t0)
	require.NoError(t, err)
	assert.Equal(t, ledger.MaxCount, done.Attempts, "a base completion at the bound")

	all, _ := fixtures(t)
	d := all[ledger.DeliveryStateOffered]
	d.Activations = ledger.MaxCount
	a, o := Delivery(d).RecordActivation(ledger.Activation{Result: ledger.ActivationDelivered}, t0)
	require.Equal(t, ledger.OutcomeApplied, o)
	assert.Equal(t, ledger.MaxCount, a.Activations)
	assert.Equal(t, d.Version+1, a.Version, "the call still applies")
}

func TestSaveBoundsAttempts(t *testing.T) {
	e := newEntry()
	e.Attempts = ledger.MaxCount
	assert.NoError(t, ValidateSave(e))
	for _, n := range []int{-1, ledger.MaxCount + 1} {
		e.Attempts = n
		err := ValidateSave(e)
		require.ErrorIs(t, err, ledger.ErrInvalid, n)
		var ie *ledger.InvalidError
		require.ErrorAs(t, err, &ie)
		assert.Equal(t, "attempts", ie.Field)
	}
}
