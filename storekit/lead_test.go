package storekit

import (
	"testing"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLeadTransitions(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	const ttl = 30 * time.Second
	fresh := ledger.Lead{Name: "sweep"}
	require.False(t, fresh.HeldAt(t0), "a lead never taken is not held")

	a, out := Lead(fresh).Take("a", "tok-a", t0.Add(time.Nanosecond), ttl+time.Nanosecond)
	require.Equal(t, ledger.OutcomeApplied, out)
	assert.Equal(t, ledger.Lead{Name: "sweep", Holder: "a", Token: "tok-a", Seq: 1, TakenAt: t0, ExpiresAt: t0.Add(ttl)}, a,
		"times are normalised and the ttl truncated to the microsecond")
	require.True(t, a.HeldAt(t0.Add(ttl-time.Microsecond)))
	require.False(t, a.HeldAt(t0.Add(ttl)), "held on [TakenAt, ExpiresAt)")

	t.Run("HeldLeadIsWrongOwner", func(t *testing.T) {
		got, out := Lead(a).Take("b", "tok-b", t0.Add(ttl-time.Microsecond), ttl)
		assert.Equal(t, ledger.OutcomeWrongOwner, out)
		assert.Equal(t, a, got, "unchanged")
		_, out = Lead(a).Take("a", "tok-a2", t0.Add(time.Second), ttl)
		assert.Equal(t, ledger.OutcomeWrongOwner, out, "the holder itself renews, it does not take again")
	})
	t.Run("LapsedLeadIsANewTerm", func(t *testing.T) {
		b, out := Lead(a).Take("b", "tok-b", t0.Add(ttl), ttl)
		require.Equal(t, ledger.OutcomeApplied, out)
		assert.Equal(t, int64(2), b.Seq)
		assert.Equal(t, "b", b.Holder)
		_, out = Lead(b).Renew(a, t0.Add(ttl), ttl)
		assert.Equal(t, ledger.OutcomeLeaseLost, out, "the old term cannot renew the new one")
	})
	t.Run("Renew", func(t *testing.T) {
		got, out := Lead(a).Renew(a, t0.Add(10*time.Second), ttl)
		require.Equal(t, ledger.OutcomeApplied, out)
		assert.Equal(t, t0.Add(40*time.Second), got.ExpiresAt)
		assert.Equal(t, a.Seq, got.Seq, "a renewal is not a new term")
		_, out = Lead(a).Renew(a, t0.Add(ttl), ttl)
		assert.Equal(t, ledger.OutcomeLeaseExpired, out)
		wrong := a
		wrong.Token = "guess"
		_, out = Lead(a).Renew(wrong, t0, ttl)
		assert.Equal(t, ledger.OutcomeLeaseLost, out)
		_, out = Lead(fresh).Renew(ledger.Lead{Name: "sweep"}, t0, ttl)
		assert.Equal(t, ledger.OutcomeLeaseLost, out, "no term was ever taken")
	})
	t.Run("Release", func(t *testing.T) {
		got, out := Lead(a).Release(a, t0.Add(time.Second))
		require.Equal(t, ledger.OutcomeApplied, out)
		assert.False(t, got.HeldAt(t0.Add(time.Second)))
		assert.Equal(t, "a", got.Holder, "the last holder stays readable")
		_, out = Lead(got).Release(a, t0.Add(2*time.Second))
		assert.Equal(t, ledger.OutcomeLeaseExpired, out, "already given up")
		_, out = Lead(got).Take("b", "tok-b", t0.Add(time.Second), ttl)
		assert.Equal(t, ledger.OutcomeApplied, out, "taken at once after release")
	})
	assert.Empty(t, a.Public().Token)
}

func TestValidateLeadCalls(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	lead := ledger.Lead{Name: "sweep", Token: "tok", Seq: 1}
	for name, err := range map[string]error{
		"empty name":     ValidateTakeLead("", "a", t0, time.Second),
		"empty holder":   ValidateTakeLead("n", "", t0, time.Second),
		"zero now":       ValidateTakeLead("n", "a", time.Time{}, time.Second),
		"zero ttl":       ValidateTakeLead("n", "a", t0, 0),
		"no token":       ValidateRenewLead(ledger.Lead{Name: "sweep"}, t0, time.Second),
		"renew zero ttl": ValidateRenewLead(lead, t0, 0),
		"release no now": ValidateReleaseLead(lead, time.Time{}),
		"get no name":    ValidateGetLead(""),
		"control holder": ValidateRenewLead(ledger.Lead{Name: "n", Token: "t", Holder: "a\x00"}, t0, time.Second),
	} {
		assert.ErrorIs(t, err, ledger.ErrInvalid, name)
	}
	require.NoError(t, ValidateTakeLead("n", "a", t0, time.Second))
	require.NoError(t, ValidateRenewLead(lead, t0, time.Second))
	require.NoError(t, ValidateReleaseLead(lead, t0))
}
