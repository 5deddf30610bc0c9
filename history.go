package ledger

import (
	"context"
	"time"
)

// Transition is one entry of a record's history: a call that changed a
// delivery or an outbox entry, written in the same transaction as the
// change itself, so the history never claims a change that did not happen
// and never misses one that did.
//
// Only calls that applied are recorded: a call that did not apply writes
// nothing, its history entry included. Outcome is therefore OutcomeApplied
// for every entry today; it is kept so that readers need not assume it.
type Transition struct {
	// Seq orders the transitions of one record: 1 for the first, one more
	// for each after it. It equals the record's Version after the change.
	// Transitions made while recording was off (or, in pgstore, before
	// migration 0005) are missing, so such a history starts later or has
	// gaps.
	Seq int64 `json:"seq"`
	// Op is the call that made the change. Taking back a lease under the
	// incarnation rule is OpReclaim; a sweep by Expire is OpExpire.
	Op Operation `json:"op"`
	// From is the state (or outbox status) before the change; empty for
	// the call that created the record.
	From string `json:"from,omitempty"`
	// To is the state (or outbox status) after the change. It equals From
	// for changes within a state, such as RecordActivation or a renewal.
	To      string  `json:"to"`
	Outcome Outcome `json:"outcome"`
	// Actor is who made the call: the owner ("agent/incarnation") of the
	// lease involved (for a reclaim, the new incarnation that took the
	// lease back; for MarkProcessed, the owner that acknowledged), or the
	// claim worker. Abandon, ExpireCeremony and the redrives record the
	// actor their context names (WithActor), a person at an operators'
	// tool; without one they, Enqueue, Expire, Supersede,
	// RecordActivation and the base outbox operations act for nobody in
	// particular, and Actor is empty.
	Actor string `json:"actor,omitempty"`
	// Reason is the cause or failure reason the change recorded, if any:
	// "kind: detail" for an expiry cause, "kind: message" for a delivery
	// failure, "code: message" for an emission error, or the dead-letter
	// reason; for ReleaseClaim, the reason its caller gave. A redrive
	// names the other record: "redriven as ID" on the record redriven,
	// "redriven from ID" as the creation of the record it made.
	Reason string `json:"reason,omitempty"`
	// At is the time of the change: the record's UpdatedAt after it.
	At time.Time `json:"at,omitzero"`
}

// Historian is implemented by ledgers that record the history of every
// delivery. Detect it with a type assertion.
//
// History returns the transitions of delivery id, oldest first. It answers
// ErrNotFound when there is no such delivery (purging a delivery purges its
// history with it), and an empty history when the store was built with
// history recording switched off.
type Historian interface {
	History(ctx context.Context, id DeliveryID) ([]Transition, error)
}

// OutboxHistorian is Historian for outbox entries.
type OutboxHistorian interface {
	EntryHistory(ctx context.Context, id OutboxEntryID) ([]Transition, error)
}
