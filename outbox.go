package ledger

import (
	"github.com/google/uuid"
)

// The outbox entry state machine is package storekit's
// (storekit.OutboxEntry), as the delivery one is.

// outboxNamespace is the UUID namespace of outbox entry IDs. Changing it
// would give existing idempotency keys new IDs: never change it.
var outboxNamespace = uuid.MustParse("6f1b8c1e-2d43-4d3a-9a57-5f0d2c7e9b10")

// OutboxEntryIDFor returns the entry ID that an envelope with this
// idempotency key gets: a name-based (version 5) UUID, so every store, and
// every retry of an enqueue, derives the same ID from the same key.
func OutboxEntryIDFor(idempotencyKey string) OutboxEntryID {
	return OutboxEntryID(uuid.NewSHA1(outboxNamespace, []byte(idempotencyKey)).String())
}

// Clone returns a deep copy of e, sharing no memory with it.
func (e OutboxEntry) Clone() OutboxEntry {
	e.Envelope.Payload = clonePayload(e.Envelope.Payload)
	e.Envelope.Metadata = e.Envelope.Metadata.Clone()
	e.LastError = clonePtr(e.LastError)
	e.Result = clonePtr(e.Result)
	e.Claim = clonePtr(e.Claim)
	e.EndedClaim = clonePtr(e.EndedClaim)
	return e
}
