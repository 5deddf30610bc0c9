package ledgertest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// testOutboxEnqueue checks OutboxStore.Enqueue: a new key is applied under
// the ID derived from it; the same envelope again is Repeated and a
// different one Conflict, neither writing anything; payloads are bytes.
func testOutboxEnqueue(t *testing.T, newStore NewClaimStoreFunc) {
	claimRun(t, "NewKeyIsApplied", newStore, func(t *testing.T, s ledger.ClaimStore) {
		env := claimEnvelope("order-1")
		res, err := s.Enqueue(t.Context(), env)
		require.NoError(t, err)
		require.Equal(t, ledger.OutcomeApplied, res.Outcome)
		require.True(t, res.Applied())
		e := res.Entry
		require.Equal(t, ledger.OutboxEntryIDFor("order-1"), e.ID, "the ID is derived from the idempotency key")
		require.Equal(t, env, e.Envelope)
		require.Equal(t, ledger.OutboxStatusPending, e.Status)
		require.Zero(t, e.Attempts)
		require.Zero(t, e.ClaimSeq)
		require.Nil(t, e.Claim)
		require.Nil(t, e.EndedClaim)
		require.Nil(t, e.LastError)
		require.Nil(t, e.Result)
		require.Empty(t, e.DeadLetterReason)
		require.True(t, e.NextAttemptAt.IsZero())
		require.True(t, e.EndedAt.IsZero())
		require.Equal(t, int64(1), e.Version)
		require.False(t, e.CreatedAt.IsZero())
		require.Equal(t, time.UTC, e.CreatedAt.Location(), "times are UTC")
		require.Zero(t, e.CreatedAt.Nanosecond()%int(time.Microsecond), "times have microsecond precision")
		require.True(t, e.CreatedAt.Equal(e.UpdatedAt), "a new entry was created and updated at once")
		claimRequireStored(t, s, e)
	})

	claimRun(t, "SameEnvelopeIsRepeated", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := claimEnqueue(t, s, "order-1")
		res, err := s.Enqueue(t.Context(), claimEnvelope("order-1"))
		claimRequireUnapplied(t, s, e, res, err, ledger.OutcomeRepeated)
	})

	for _, tc := range []struct {
		name   string
		change func(*ledger.Envelope)
	}{
		{"DifferentProviderIsConflict", func(env *ledger.Envelope) { env.Provider = "provider-b" }},
		{"DifferentKindIsConflict", func(env *ledger.Envelope) { env.Kind = "kind-b" }},
		{"DifferentPayloadIsConflict", func(env *ledger.Envelope) { env.Payload = []byte("other payload") }},
		{"MissingPayloadIsConflict", func(env *ledger.Envelope) { env.Payload = nil }},
	} {
		claimRun(t, tc.name, newStore, func(t *testing.T, s ledger.ClaimStore) {
			e := claimEnqueue(t, s, "order-1")
			env := claimEnvelope("order-1")
			tc.change(&env)
			res, err := s.Enqueue(t.Context(), env)
			claimRequireUnapplied(t, s, e, res, err, ledger.OutcomeConflict)
		})
	}

	claimRun(t, "RepeatAfterEndIsRepeated", newStore, func(t *testing.T, s ledger.ClaimStore) {
		e := claimEnqueue(t, s, "order-1")
		ended, err := s.MarkDelivered(t.Context(), e.ID, ledger.EmissionResult{ProviderRef: "ref-1"})
		require.NoError(t, err)
		res, err := s.Enqueue(t.Context(), claimEnvelope("order-1"))
		claimRequireUnapplied(t, s, ended, res, err, ledger.OutcomeRepeated)
		require.Equal(t, ledger.OutboxStatusDelivered, res.Entry.Status, "a repeat never revives an ended entry")
	})

	claimRun(t, "NilAndEmptyPayloadAreTheSame", newStore, func(t *testing.T, s ledger.ClaimStore) {
		for i, first := range [][]byte{nil, {}} {
			env := claimEnvelope(fmt.Sprintf("empty-%d", i))
			env.Payload = first
			res, err := s.Enqueue(t.Context(), env)
			require.NoError(t, err)
			require.Equal(t, ledger.OutcomeApplied, res.Outcome)
			require.Nil(t, res.Entry.Envelope.Payload, "an empty payload reads back as nil")
			stored := claimFind(t, s, res.Entry.ID)
			require.Nil(t, stored.Envelope.Payload, "an empty payload reads back as nil")
			for _, again := range [][]byte{nil, {}} {
				env.Payload = again
				rep, err := s.Enqueue(t.Context(), env)
				claimRequireUnapplied(t, s, stored, rep, err, ledger.OutcomeRepeated)
			}
		}
	})

	claimRun(t, "PayloadBytesRoundTrip", newStore, func(t *testing.T, s ledger.ClaimStore) {
		payload := make([]byte, 0, 2*256)
		for i := range 256 {
			payload = append(payload, byte(i), 0)
		}
		env := claimEnvelope("bytes")
		env.Payload = payload
		res, err := s.Enqueue(t.Context(), env)
		require.NoError(t, err)
		require.Equal(t, ledger.OutcomeApplied, res.Outcome)
		require.Equal(t, payload, res.Entry.Envelope.Payload)
		require.Equal(t, payload, claimFind(t, s, res.Entry.ID).Envelope.Payload, "every byte, NUL included, round-trips")
	})

	claimRun(t, "PayloadIsCopied", newStore, func(t *testing.T, s ledger.ClaimStore) {
		env := claimEnvelope("copied")
		want := append([]byte(nil), env.Payload...)
		res, err := s.Enqueue(t.Context(), env)
		require.NoError(t, err)
		env.Payload[0] ^= 0xff
		res.Entry.Envelope.Payload[1] ^= 0xff
		read := claimFind(t, s, res.Entry.ID)
		require.Equal(t, want, read.Envelope.Payload, "the store keeps its own copy")
		read.Envelope.Payload[2] ^= 0xff
		require.Equal(t, want, claimFind(t, s, res.Entry.ID).Envelope.Payload, "readers get their own copy")
	})

	claimRun(t, "LargestPayloadIsAccepted", newStore, func(t *testing.T, s ledger.ClaimStore) {
		env := claimEnvelope("large")
		env.Payload = make([]byte, ledger.DefaultMaxPayload)
		env.Payload[len(env.Payload)-1] = 1
		res, err := s.Enqueue(t.Context(), env)
		require.NoError(t, err)
		require.Equal(t, ledger.OutcomeApplied, res.Outcome)
		require.Equal(t, env.Payload, claimFind(t, s, res.Entry.ID).Envelope.Payload)
	})

	claimRun(t, "KeysNameDistinctEntries", newStore, func(t *testing.T, s ledger.ClaimStore) {
		a := claimEnqueue(t, s, "order-1")
		b := claimEnqueue(t, s, "order-2")
		require.NotEqual(t, a.ID, b.ID)
		claimRequireStored(t, s, a)
		claimRequireStored(t, s, b)
	})
}
