package storekit

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/leaseledger/ledger"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRedriveIDIsDerivedAndAlwaysValid(t *testing.T) {
	assert.Equal(t, ledger.DeliveryID("order-42/redrive"), RedriveID("order-42"))
	assert.Equal(t, ledger.DeliveryID("order-42/redrive/redrive"), RedriveID(RedriveID("order-42")))
	assert.Equal(t, "user-7/welcome/redrive", RedriveKey("user-7/welcome"))
	fits := strings.Repeat("a", ledger.MaxNameBytes-len(redriveSuffix))
	assert.Equal(t, ledger.DeliveryID(fits+"/redrive"), RedriveID(ledger.DeliveryID(fits)))
	seen := map[ledger.DeliveryID]bool{}
	for _, id := range []string{
		fits + "b",
		strings.Repeat("a", ledger.MaxNameBytes),
		strings.Repeat("a", ledger.MaxNameBytes-1) + "b",
		"a" + strings.Repeat("é", ledger.MaxNameBytes/2),
		strings.Repeat("日本", ledger.MaxNameBytes/6),
	} {
		got := RedriveID(ledger.DeliveryID(id))
		require.NoError(t, ValidateName("id", string(got)), "%q", got)
		require.True(t, utf8.ValidString(string(got)))
		require.LessOrEqual(t, len(got), ledger.MaxNameBytes)
		require.True(t, strings.Contains(string(got), "/redrive-"), "%q", got)
		require.False(t, seen[got], "two originals derive %q", got)
		seen[got] = true
		require.Equal(t, got, RedriveID(ledger.DeliveryID(id)), "derivation is deterministic")
	}
}

func TestDeliveryRedriveOutcomes(t *testing.T) {
	ds, _ := fixtures(t)
	now := t0.Add(time.Hour)
	for _, st := range []ledger.DeliveryState{ledger.DeliveryStateOffered, ledger.DeliveryStateLeased, ledger.DeliveryStateAcknowledged, ledger.DeliveryStateProcessed} {
		orig, fresh, o := Delivery(ds[st]).Redrive("", false, now)
		assert.Equal(t, ledger.OutcomeWrongState, o, st)
		assert.Equal(t, ds[st], orig, st)
		assert.Equal(t, ledger.Delivery{}, fresh, st)
	}
	failed := ds[ledger.DeliveryStateFailed]
	_, _, o := Delivery(failed).Redrive("", true, now)
	assert.Equal(t, ledger.OutcomeConflict, o, "a taken ID")

	orig, fresh, o := Delivery(failed).Redrive("", false, now)
	require.Equal(t, ledger.OutcomeApplied, o)
	assert.Equal(t, RedriveID(failed.ID), orig.RedrivenTo)
	assert.Equal(t, failed.Version+1, orig.Version)
	assert.Equal(t, now, orig.UpdatedAt)
	assert.Equal(t, failed.EndedAt, orig.EndedAt)
	assert.Equal(t, ledger.DeliveryStateFailed, orig.State)
	assert.Equal(t, failed.ID, fresh.RedrivenFrom)
	assert.True(t, Delivery(fresh).Offerable(now))
	assert.Equal(t, failed.Policy, fresh.Policy)
	fresh.Payload[0] = 'y'
	assert.Equal(t, []byte("x"), failed.Payload, "the new record shares no payload with the original")

	for _, newID := range []ledger.DeliveryID{"", orig.RedrivenTo} {
		again, none, o := Delivery(orig).Redrive(newID, true, now.Add(time.Hour))
		assert.Equal(t, ledger.OutcomeRepeated, o)
		assert.Equal(t, orig, again)
		assert.Equal(t, ledger.Delivery{}, none)
	}
	_, _, o = Delivery(orig).Redrive("other", false, now)
	assert.Equal(t, ledger.OutcomeConflict, o, "already redriven as another ID")
	assert.Equal(t, orig.RedrivenTo, Delivery(orig).RedriveAs("other"))

	tr := DeliveryTransition(ledger.OpRedrive, &failed, &orig, "")
	assert.Equal(t, "redriven as "+string(orig.RedrivenTo), tr.Reason)
	assert.Equal(t, tr.From, tr.To)
	c := DeliveryCreation(&fresh)
	assert.Equal(t, ledger.Transition{Seq: 1, Op: ledger.OpRedrive, To: "offered", Outcome: ledger.OutcomeApplied, Reason: "redriven from d1", At: now}, c)
	assert.Equal(t, ledger.OpEnqueue, DeliveryCreation(&failed).Op)
}

func TestEntryRedriveOutcomes(t *testing.T) {
	e := NewOutboxEntry(ledger.Envelope{Provider: "mail", Kind: "k", Payload: []byte("p"), IdempotencyKey: "key"}, t0)
	_, _, o := OutboxEntry(e).Redrive("", false, t0)
	assert.Equal(t, ledger.OutcomeWrongState, o)
	dead, err := OutboxEntry(e).MarkDeadLettered(ledger.EmissionError{Code: "550"}, "gone", t0)
	require.NoError(t, err)
	orig, fresh, o := OutboxEntry(dead).Redrive("", false, t0.Add(time.Minute))
	require.Equal(t, ledger.OutcomeApplied, o)
	assert.Equal(t, ledger.OutboxEntryIDFor("key/redrive"), fresh.ID)
	assert.Equal(t, "key/redrive", fresh.Envelope.IdempotencyKey)
	assert.Equal(t, fresh.ID, orig.RedrivenTo)
	assert.Equal(t, dead.ID, fresh.RedrivenFrom)
	assert.Equal(t, ledger.OutboxStatusPending, fresh.Status)
	_, _, o = OutboxEntry(orig).Redrive("key/redrive", true, t0)
	assert.Equal(t, ledger.OutcomeRepeated, o)
	_, _, o = OutboxEntry(orig).Redrive("else", false, t0)
	assert.Equal(t, ledger.OutcomeConflict, o)
	assert.Equal(t, "redriven from "+string(dead.ID), EntryCreation(&fresh).Reason)
}

func TestRedriveCursorRoundTrips(t *testing.T) {
	for _, p := range []RedrivePosition{
		{EndedAt: t0, ID: "d-1"},
		{EndedAt: t0.Add(123 * time.Microsecond), ID: "with:colon/and slash"},
		{EndedAt: MinTime(), ID: strings.Repeat("x", ledger.MaxNameBytes)},
	} {
		got, err := DecodeRedriveCursor(EncodeRedriveCursor(p))
		require.NoError(t, err)
		assert.Equal(t, p, got)
	}
	got, err := DecodeRedriveCursor("")
	require.NoError(t, err)
	assert.Equal(t, RedrivePosition{}, got)
	for _, bad := range []string{"x", EncodeCursor("d-1"), EncodeOutboxCursor("e"), encodeCursor(redriveCursorPrefix, "12"), encodeCursor(redriveCursorPrefix, "x:d")} {
		_, err := DecodeRedriveCursor(bad)
		assert.ErrorIs(t, err, ledger.ErrInvalid, "%q", bad)
	}
	p := RedrivePosition{EndedAt: t0, ID: "b"}
	assert.True(t, p.After(t0, "c"))
	assert.False(t, p.After(t0, "b"))
	assert.False(t, p.After(t0.Add(-time.Microsecond), "z"))
	assert.True(t, RedrivePosition{}.After(MinTime(), "a"))
}

func TestRedriveQueryCutoff(t *testing.T) {
	now := t0.Add(time.Hour)
	assert.Equal(t, now, ledger.RedriveQuery{}.Cutoff(now))
	assert.Equal(t, t0, ledger.RedriveQuery{EndedBefore: t0}.Cutoff(now))
	assert.Equal(t, now, ledger.RedriveQuery{EndedBefore: now.Add(time.Hour)}.Cutoff(now), "never at or after now")
	ds, _ := fixtures(t)
	failed := ds[ledger.DeliveryStateFailed]
	assert.True(t, ledger.RedriveQuery{}.Matches(failed, now))
	assert.False(t, ledger.RedriveQuery{}.Matches(failed, failed.EndedAt), "what ends at the call's now is left for later")
	assert.False(t, ledger.RedriveQuery{Targets: []ledger.Target{"other"}}.Matches(failed, now))
	assert.False(t, ledger.RedriveQuery{States: []ledger.DeliveryState{ledger.DeliveryStateExpired}}.Matches(failed, now))
}

func TestQueueBounds(t *testing.T) {
	b := ledger.QueueBounds{Default: 3}.With("big", 10).With("free", 0)
	assert.Equal(t, 3, b.For("any"))
	assert.Equal(t, 10, b.For("big"))
	assert.Equal(t, 0, b.For("free"))
	assert.True(t, b.Any())
	assert.False(t, ledger.QueueBounds{}.Any())
	assert.False(t, ledger.QueueBounds{Targets: map[ledger.Target]int{"x": 0}}.Any())
	assert.True(t, ledger.QueueBounds{Targets: map[ledger.Target]int{"x": 1}}.Any())
	base := ledger.QueueBounds{Targets: map[ledger.Target]int{"a": 1}}
	_ = base.With("b", 2)
	assert.Len(t, base.Targets, 1, "With shares no map")
	require.NoError(t, b.Validate())
	for _, bad := range []ledger.QueueBounds{{Default: -1}, {Default: ledger.MaxQueueBound + 1}, {Targets: map[ledger.Target]int{"": 1}}, {Targets: map[ledger.Target]int{"x": -1}}} {
		assert.ErrorIs(t, bad.Validate(), ledger.ErrInvalid, "%+v", bad)
	}

	assert.Equal(t, 0, QueueOverflow(5, 0), "unbounded")
	assert.Equal(t, 0, QueueOverflow(3, 3))
	assert.Equal(t, 1, QueueOverflow(4, 3))
	assert.Equal(t, ledger.MaxLimit, QueueOverflow(ledger.MaxQueueBound+ledger.MaxLimit*5, 1), "at most MaxLimit per call")

	ds, _ := fixtures(t)
	for st, d := range ds {
		got, o := Delivery(d).BoundQueue(2, t0.Add(time.Hour))
		if st != ledger.DeliveryStateOffered {
			assert.Equal(t, ledger.OutcomeWrongState, o, st)
			assert.Equal(t, d, got, st)
			continue
		}
		require.Equal(t, ledger.OutcomeApplied, o)
		assert.Equal(t, ledger.DeliveryStateExpired, got.State)
		assert.Equal(t, QueueBoundedCause(2), *got.Cause)
	}
	assert.True(t, Delivery(ds[ledger.DeliveryStateLeased]).Queued())
	assert.False(t, Delivery(ds[ledger.DeliveryStateAcknowledged]).Queued())
}
