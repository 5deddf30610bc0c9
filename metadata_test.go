package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValidateMetadata(t *testing.T) {
	full := Metadata{}
	for i := range MaxMetadataEntries {
		full[fmt.Sprintf("k%02d", i)] = "v"
	}
	for name, md := range map[string]Metadata{
		"nil":          nil,
		"empty":        {},
		"trace":        {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tenant": "acme"},
		"empty value":  {"flag": ""},
		"line breaks":  {"note": "one\ntwo"},
		"full":         full,
		"largest":      {"k": strings.Repeat("v", MaxMetadataBytes-1)},
		"longest name": {strings.Repeat("k", MaxNameBytes): "v"},
	} {
		assert.NoError(t, ValidateMetadata("metadata", md), name)
	}

	tooMany := Metadata{"extra": "v"}
	for k, v := range full {
		tooMany[k] = v
	}
	for name, c := range map[string]struct {
		md    Metadata
		field string
	}{
		"too many keys":   {tooMany, "metadata"},
		"too large":       {Metadata{"k": strings.Repeat("v", MaxMetadataBytes)}, "metadata"},
		"too large total": {Metadata{"a": strings.Repeat("v", MaxMetadataBytes/2), "b": strings.Repeat("v", MaxMetadataBytes/2)}, "metadata"},
		"empty key":       {Metadata{"": "v"}, "metadata key"},
		"long key":        {Metadata{strings.Repeat("k", MaxNameBytes+1): "v"}, "metadata key"},
		"control key":     {Metadata{"a\nb": "v"}, "metadata key"},
		"invalid key":     {Metadata{"a\xffb": "v"}, "metadata key"},
		"nul value":       {Metadata{"k": "a\x00b"}, "metadata value"},
		"invalid value":   {Metadata{"k": "a\xffb"}, "metadata value"},
	} {
		err := ValidateMetadata("metadata", c.md)
		require.ErrorIs(t, err, ErrInvalid, name)
		var ie *InvalidError
		require.True(t, errors.As(err, &ie), name)
		assert.Equal(t, c.field, ie.Field, name)
	}
}

func TestValidateMetadataNamesTheFirstBadKey(t *testing.T) {
	md := Metadata{"c": "\x00", "a": "\x00", "b": "\x00", "d\n": "v"}
	want := ValidateMetadata("metadata", md)
	require.ErrorIs(t, want, ErrInvalid)
	assert.Contains(t, want.Error(), `"a"`)
	for range 20 { // map order varies from run to run; the answer must not
		assert.Equal(t, want.Error(), ValidateMetadata("metadata", md).Error())
	}
}

func TestEnqueueAndEnvelopeValidateMetadata(t *testing.T) {
	bad := Metadata{"k": "\x00"}
	err := ValidateEnqueue(EnqueueRequest{ID: "d", Target: "h", Metadata: bad}, t0, DefaultMaxPayload)
	require.ErrorIs(t, err, ErrInvalid)
	var ie *InvalidError
	require.True(t, errors.As(err, &ie))
	assert.Equal(t, "metadata value", ie.Field)
	assert.ErrorIs(t, ValidateEnqueueBatch([]EnqueueRequest{{ID: "d", Target: "h"}, {ID: "e", Target: "h", Metadata: bad}}, t0, DefaultMaxPayload), ErrInvalid)
	assert.ErrorIs(t, ValidateEnvelope(Envelope{Provider: "p", Kind: "k", IdempotencyKey: "i", Metadata: bad}, DefaultMaxPayload), ErrInvalid)
	assert.NoError(t, ValidateEnvelope(Envelope{Provider: "p", Kind: "k", IdempotencyKey: "i", Metadata: Metadata{"k": "v"}}, DefaultMaxPayload))
}

func TestMetadataIsNotEnqueueContent(t *testing.T) {
	req := EnqueueRequest{ID: "d1", Target: "h", Metadata: Metadata{"traceparent": "first"}}
	d := NewDelivery(req, DefaultPolicy(), t0)
	again := req
	again.Metadata = Metadata{"traceparent": "retry"}
	assert.Equal(t, OutcomeRepeated, d.EnqueueAgain(again, DefaultPolicy()))
	again.Metadata = nil
	assert.Equal(t, OutcomeRepeated, d.EnqueueAgain(again, DefaultPolicy()))
	again.Payload = []byte("other")
	assert.Equal(t, OutcomeConflict, d.EnqueueAgain(again, DefaultPolicy()), "content still decides")

	env := Envelope{Provider: "p", Kind: "k", IdempotencyKey: "i", Metadata: Metadata{"traceparent": "first"}}
	e := NewOutboxEntry(env, t0)
	env.Metadata = Metadata{"traceparent": "retry"}
	assert.Equal(t, OutcomeRepeated, e.EnqueueAgain(env))
}

func TestMetadataIsCopiedInAndOut(t *testing.T) {
	md := Metadata{"tenant": "acme"}
	d := NewDelivery(EnqueueRequest{ID: "d1", Target: "h", Metadata: md}, DefaultPolicy(), t0)
	md["tenant"] = "changed by the caller"
	assert.Equal(t, Metadata{"tenant": "acme"}, d.Metadata, "the record does not share the request's map")
	c := d.Clone()
	c.Metadata["tenant"] = "changed"
	assert.Equal(t, "acme", d.Metadata["tenant"], "a clone does not share the record's map")

	e := NewOutboxEntry(Envelope{Provider: "p", Kind: "k", IdempotencyKey: "i", Metadata: md}, t0)
	md["tenant"] = "again"
	assert.Equal(t, "changed by the caller", e.Envelope.Metadata["tenant"])
	ec := e.Clone()
	ec.Envelope.Metadata["tenant"] = "x"
	assert.Equal(t, "changed by the caller", e.Envelope.Metadata["tenant"])

	for _, empty := range []Metadata{nil, {}} {
		assert.Nil(t, NewDelivery(EnqueueRequest{ID: "d", Target: "h", Metadata: empty}, DefaultPolicy(), t0).Metadata, "nil and empty are the same: nil")
		assert.Nil(t, NewOutboxEntry(Envelope{Provider: "p", Kind: "k", IdempotencyKey: "i", Metadata: empty}, t0).Envelope.Metadata)
	}
}

func TestMetadataSurvivesTransitions(t *testing.T) {
	md := Metadata{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	d := NewDelivery(EnqueueRequest{ID: "d1", Target: "h", Metadata: md}, DefaultPolicy(), t0)
	d, l := d.Grant(ownerA, "tok", t0, time.Minute)
	d, o := d.Acknowledge(l, "seen", t0)
	require.Equal(t, OutcomeApplied, o)
	assert.Equal(t, md, d.Metadata)

	raw, err := json.Marshal(d)
	require.NoError(t, err)
	assert.Contains(t, string(raw), `"metadata":{"traceparent":`)
	var back Delivery
	require.NoError(t, json.Unmarshal(raw, &back))
	assert.Equal(t, d.Redacted(), back)
	raw, err = json.Marshal(NewDelivery(EnqueueRequest{ID: "d2", Target: "h"}, DefaultPolicy(), t0))
	require.NoError(t, err)
	assert.NotContains(t, string(raw), "metadata", "no metadata, no key")
}
