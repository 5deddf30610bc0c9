package storekit

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValidateMetadata(t *testing.T) {
	full := ledger.Metadata{}
	for i := range ledger.MaxMetadataEntries {
		full[fmt.Sprintf("k%02d", i)] = "v"
	}
	for name, md := range map[string]ledger.Metadata{
		"nil":          nil,
		"empty":        {},
		"trace":        {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tenant": "acme"},
		"empty value":  {"flag": ""},
		"line breaks":  {"note": "one\ntwo"},
		"full":         full,
		"largest":      {"k": strings.Repeat("v", ledger.MaxMetadataBytes-1)},
		"longest name": {strings.Repeat("k", ledger.MaxNameBytes): "v"},
	} {
		assert.NoError(t, ValidateMetadata("metadata", md), name)
	}

	tooMany := ledger.Metadata{"extra": "v"}
	for k, v := range full {
		tooMany[k] = v
	}
	for name, c := range map[string]struct {
		md    ledger.Metadata
		field string
	}{
		"too many keys":   {tooMany, "metadata"},
		"too large":       {ledger.Metadata{"k": strings.Repeat("v", ledger.MaxMetadataBytes)}, "metadata"},
		"too large total": {ledger.Metadata{"a": strings.Repeat("v", ledger.MaxMetadataBytes/2), "b": strings.Repeat("v", ledger.MaxMetadataBytes/2)}, "metadata"},
		"empty key":       {ledger.Metadata{"": "v"}, "metadata key"},
		"long key":        {ledger.Metadata{strings.Repeat("k", ledger.MaxNameBytes+1): "v"}, "metadata key"},
		"control key":     {ledger.Metadata{"a\nb": "v"}, "metadata key"},
		"invalid key":     {ledger.Metadata{"a\xffb": "v"}, "metadata key"},
		"nul value":       {ledger.Metadata{"k": "a\x00b"}, "metadata value"},
		"invalid value":   {ledger.Metadata{"k": "a\xffb"}, "metadata value"},
	} {
		err := ValidateMetadata("metadata", c.md)
		require.ErrorIs(t, err, ledger.ErrInvalid, name)
		var ie *ledger.InvalidError
		require.True(t, errors.As(err, &ie), name)
		assert.Equal(t, c.field, ie.Field, name)
	}
}

func TestValidateMetadataNamesTheFirstBadKey(t *testing.T) {
	md := ledger.Metadata{"c": "\x00", "a": "\x00", "b": "\x00", "d\n": "v"}
	want := ValidateMetadata("metadata", md)
	require.ErrorIs(t, want, ledger.ErrInvalid)
	assert.Contains(t, want.Error(), `"a"`)
	for range 20 { // map order varies from run to run; the answer must not
		assert.Equal(t, want.Error(), ValidateMetadata("metadata", md).Error())
	}
}

func TestEnqueueAndEnvelopeValidateMetadata(t *testing.T) {
	bad := ledger.Metadata{"k": "\x00"}
	err := ValidateEnqueue(ledger.EnqueueRequest{ID: "d", Target: "h", Metadata: bad}, t0, ledger.DefaultMaxPayload)
	require.ErrorIs(t, err, ledger.ErrInvalid)
	var ie *ledger.InvalidError
	require.True(t, errors.As(err, &ie))
	assert.Equal(t, "metadata value", ie.Field)
	assert.ErrorIs(t, ValidateEnqueueBatch([]ledger.EnqueueRequest{{ID: "d", Target: "h"}, {ID: "e", Target: "h", Metadata: bad}}, t0, ledger.DefaultMaxPayload), ledger.ErrInvalid)
	assert.ErrorIs(t, ValidateEnvelope(ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: "i", Metadata: bad}, ledger.DefaultMaxPayload), ledger.ErrInvalid)
	assert.NoError(t, ValidateEnvelope(ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: "i", Metadata: ledger.Metadata{"k": "v"}}, ledger.DefaultMaxPayload))
}

func TestMetadataIsNotEnqueueContent(t *testing.T) {
	req := ledger.EnqueueRequest{ID: "d1", Target: "h", Metadata: ledger.Metadata{"traceparent": "first"}}
	d := NewDelivery(req, ledger.DefaultPolicy(), t0)
	again := req
	again.Metadata = ledger.Metadata{"traceparent": "retry"}
	assert.Equal(t, ledger.OutcomeRepeated, Delivery(d).EnqueueAgain(again, ledger.DefaultPolicy()))
	again.Metadata = nil
	assert.Equal(t, ledger.OutcomeRepeated, Delivery(d).EnqueueAgain(again, ledger.DefaultPolicy()))
	again.Payload = []byte("other")
	assert.Equal(t, ledger.OutcomeConflict, Delivery(d).EnqueueAgain(again, ledger.DefaultPolicy()), "content still decides")

	env := ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: "i", Metadata: ledger.Metadata{"traceparent": "first"}}
	e := NewOutboxEntry(env, t0)
	env.Metadata = ledger.Metadata{"traceparent": "retry"}
	assert.Equal(t, ledger.OutcomeRepeated, OutboxEntry(e).EnqueueAgain(env))
}

func TestMetadataIsCopiedInAndOut(t *testing.T) {
	md := ledger.Metadata{"tenant": "acme"}
	d := NewDelivery(ledger.EnqueueRequest{ID: "d1", Target: "h", Metadata: md}, ledger.DefaultPolicy(), t0)
	md["tenant"] = "changed by the caller"
	assert.Equal(t, ledger.Metadata{"tenant": "acme"}, d.Metadata, "the record does not share the request's map")
	c := d.Clone()
	c.Metadata["tenant"] = "changed"
	assert.Equal(t, "acme", d.Metadata["tenant"], "a clone does not share the record's map")

	e := NewOutboxEntry(ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: "i", Metadata: md}, t0)
	md["tenant"] = "again"
	assert.Equal(t, "changed by the caller", e.Envelope.Metadata["tenant"])
	ec := e.Clone()
	ec.Envelope.Metadata["tenant"] = "x"
	assert.Equal(t, "changed by the caller", e.Envelope.Metadata["tenant"])

	for _, empty := range []ledger.Metadata{nil, {}} {
		assert.Nil(t, NewDelivery(ledger.EnqueueRequest{ID: "d", Target: "h", Metadata: empty}, ledger.DefaultPolicy(), t0).Metadata, "nil and empty are the same: nil")
		assert.Nil(t, NewOutboxEntry(ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: "i", Metadata: empty}, t0).Envelope.Metadata)
	}
}

func TestMetadataSurvivesTransitions(t *testing.T) {
	md := ledger.Metadata{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	d := NewDelivery(ledger.EnqueueRequest{ID: "d1", Target: "h", Metadata: md}, ledger.DefaultPolicy(), t0)
	d, l := Delivery(d).Grant(ownerA, "tok", t0, time.Minute)
	d, o := Delivery(d).Acknowledge(l, "seen", t0)
	require.Equal(t, ledger.OutcomeApplied, o)
	assert.Equal(t, md, d.Metadata)

	raw, err := json.Marshal(d)
	require.NoError(t, err)
	assert.Contains(t, string(raw), `"metadata":{"traceparent":`)
	var back ledger.Delivery
	require.NoError(t, json.Unmarshal(raw, &back))
	assert.Equal(t, d.Redacted(), back)
	raw, err = json.Marshal(NewDelivery(ledger.EnqueueRequest{ID: "d2", Target: "h"}, ledger.DefaultPolicy(), t0))
	require.NoError(t, err)
	assert.NotContains(t, string(raw), "metadata", "no metadata, no key")
}
