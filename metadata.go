package ledger

import (
	"maps"
)

// Metadata is a small map of strings that travels with an enqueued item
// beside its payload: a trace context (traceparent), a tenant, a
// correlation ID. EnqueueRequest.Metadata and Envelope.Metadata carry it
// in; both stores keep it with the record and return it on every read of
// the record (Delivery.Metadata, OutboxEntry.Envelope.Metadata), in every
// state. No transition changes it.
//
// Metadata is not enqueue content: an enqueue repeated with the same
// content but other metadata (a retry usually carries a new trace
// context) answers OutcomeRepeated, and the record keeps the metadata of
// the enqueue that created it.
//
// A nil and an empty map are the same: both stores return an empty map as
// nil. Keys are names (as IDs are: 1 to MaxNameBytes bytes of valid UTF-8
// with no control characters), values are free text (valid UTF-8, no NUL),
// at most MaxMetadataEntries keys, and at most MaxMetadataBytes of keys
// and values together.
type Metadata map[string]string

// Clone returns a copy of md that shares no memory with it; nil when md
// is empty, so that nil and empty read back the same.
func (md Metadata) Clone() Metadata {
	if len(md) == 0 {
		return nil
	}
	return maps.Clone(md)
}
