package ledger

import (
	"errors"
	"maps"
	"slices"
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

// Limits of Metadata.
const (
	// MaxMetadataEntries bounds the keys of one item's metadata.
	MaxMetadataEntries = 16
	// MaxMetadataBytes bounds the bytes of one item's metadata, keys and
	// values added up: room for a W3C trace context and a few labels.
	MaxMetadataBytes = 4 << 10
)

// ValidateMetadata checks an item's metadata: at most MaxMetadataEntries
// keys, each a valid name, each value valid free text, and at most
// MaxMetadataBytes in all. The error names field ("metadata") or its keys
// and values; when several keys are wrong it names the first in byte
// order, so every store reports the same one.
func ValidateMetadata(field string, md Metadata) error {
	if len(md) == 0 {
		return nil
	}
	if len(md) > MaxMetadataEntries {
		return invalid(field, "must have at most %d keys, got %d", MaxMetadataEntries, len(md))
	}
	size := 0
	bad := false
	for k, v := range md {
		size += len(k) + len(v)
		if metadataEntryError(field, k, v) != nil {
			bad = true
		}
	}
	if bad {
		// Only a rejected call pays for the sort that makes the error the
		// same in every store and every run.
		for _, k := range slices.Sorted(maps.Keys(md)) {
			if err := metadataEntryError(field, k, md[k]); err != nil {
				return err
			}
		}
	}
	if size > MaxMetadataBytes {
		return invalid(field, "must be at most %d bytes of keys and values, got %d", MaxMetadataBytes, size)
	}
	return nil
}

// metadataEntryError checks one key and its value.
func metadataEntryError(field, k, v string) error {
	if err := ValidateName(field+" key", k); err != nil {
		return err
	}
	var ie *InvalidError
	if err := ValidateText(field+" value", v); errors.As(err, &ie) {
		return invalid(ie.Field, "for key %q: %s", k, ie.Reason)
	}
	return nil
}

// Clone returns a copy of md that shares no memory with it; nil when md
// is empty, so that nil and empty read back the same.
func (md Metadata) Clone() Metadata {
	if len(md) == 0 {
		return nil
	}
	return maps.Clone(md)
}
