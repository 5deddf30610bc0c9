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

// DeliveryTransition describes the change from before to after made by op
// on behalf of actor (see Transition.Actor; Owner.String for an owner).
// before is nil when op created the record. Seq is left zero for the store
// to number. Both stores build their history through this function so the
// same calls give the same histories.
func DeliveryTransition(op Operation, before *Delivery, after *Delivery, actor string) Transition {
	t := Transition{Op: op, To: string(after.State), Outcome: OutcomeApplied, Actor: actor, At: after.UpdatedAt}
	if before == nil {
		return t
	}
	t.From = string(before.State)
	switch {
	case op == OpRedrive && after.RedrivenTo != "":
		t.Reason = redrivenAs + string(after.RedrivenTo)
	case after.Cause != nil && before.Cause == nil:
		t.Reason = joinReason(string(after.Cause.Kind), after.Cause.Detail)
	case after.LastFailure != nil && (recordsFailure(op, before) || before.LastFailure == nil || *after.LastFailure != *before.LastFailure):
		t.Reason = joinReason(string(after.LastFailure.Kind), after.LastFailure.Message)
	}
	return t
}

// recordsFailure reports whether op, applied to before, records a new
// failure. Comparing the failures alone is not enough: the same message
// from the same owner within one microsecond gives a failure equal to the
// last one, and its transition must still say why it happened.
func recordsFailure(op Operation, before *Delivery) bool {
	switch op {
	case OpMarkFailed, OpReclaim:
		return true
	case OpLease, OpExpire:
		// Taking over, or sweeping, a lease that ran out.
		return before.State == DeliveryStateLeased
	}
	return false
}

// EntryTransition is DeliveryTransition for outbox entries. The reason is
// the dead-letter reason when the entry was just dead-lettered, else the
// emission error the change recorded.
func EntryTransition(op Operation, before *OutboxEntry, after *OutboxEntry, actor string) Transition {
	t := Transition{Op: op, To: string(after.Status), Outcome: OutcomeApplied, Actor: actor, At: after.UpdatedAt}
	if before == nil {
		return t
	}
	t.From = string(before.Status)
	switch {
	case op == OpRedrive && after.RedrivenTo != "":
		t.Reason = redrivenAs + string(after.RedrivenTo)
	case after.Status == OutboxStatusDeadLettered && before.Status != OutboxStatusDeadLettered:
		t.Reason = after.DeadLetterReason
		if t.Reason == "" && after.LastError != nil {
			t.Reason = joinReason(after.LastError.Code, after.LastError.Message)
		}
	case after.LastError != nil && (op == OpMarkFailed || before.LastError == nil || *after.LastError != *before.LastError):
		// A failed emission always says why, even when the provider
		// answered as it did the last time.
		t.Reason = joinReason(after.LastError.Code, after.LastError.Message)
	}
	return t
}

// The reasons of the history entries a redrive writes: on the record
// redriven, and as the creation of the record it made.
const (
	redrivenAs   = "redriven as "
	redrivenFrom = "redriven from "
)

// DeliveryCreation returns the first history entry of d, the one that
// created it: Seq 1, into Offered at CreatedAt, by OpEnqueue, or by
// OpRedrive with the reason "redriven from ID" for a delivery a redrive
// made. Every record starts at Version 1 in its first state, so the record
// itself implies the entry; stores may build it from the record instead of
// storing it.
func DeliveryCreation(d *Delivery) Transition {
	return creation(string(DeliveryStateOffered), d.CreatedAt, string(d.RedrivenFrom))
}

// EntryCreation is DeliveryCreation for outbox entries, created Pending.
func EntryCreation(e *OutboxEntry) Transition {
	return creation(string(OutboxStatusPending), e.CreatedAt, string(e.RedrivenFrom))
}

func creation(first string, created time.Time, from string) Transition {
	t := Transition{Seq: 1, Op: OpEnqueue, To: first, Outcome: OutcomeApplied, At: Normalize(created)}
	if from != "" {
		t.Op, t.Reason = OpRedrive, redrivenFrom+from
	}
	return t
}

// joinReason joins a kind or code and a free-text detail, leaving out
// whichever is empty.
func joinReason(kind, detail string) string {
	switch {
	case kind == "":
		return detail
	case detail == "":
		return kind
	}
	return kind + ": " + detail
}
