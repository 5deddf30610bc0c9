package storekit

import (
	"time"

	"github.com/leaseledger/ledger"
)

// DeliveryTransition describes the change from before to after made by op
// on behalf of actor (see ledger.Transition.Actor; Owner.String for an owner).
// before is nil when op created the record. Seq is left zero for the store
// to number. Both stores build their history through this function so the
// same calls give the same histories.
func DeliveryTransition(op ledger.Operation, before *ledger.Delivery, after *ledger.Delivery, actor string) ledger.Transition {
	t := ledger.Transition{Op: op, To: string(after.State), Outcome: ledger.OutcomeApplied, Actor: actor, At: after.UpdatedAt}
	if before == nil {
		return t
	}
	t.From = string(before.State)
	switch {
	case op == ledger.OpRedrive && after.RedrivenTo != "":
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
func recordsFailure(op ledger.Operation, before *ledger.Delivery) bool {
	switch op {
	case ledger.OpMarkFailed, ledger.OpReclaim:
		return true
	case ledger.OpLease, ledger.OpExpire:
		// Taking over, or sweeping, a lease that ran out.
		return before.State == ledger.DeliveryStateLeased
	}
	return false
}

// EntryTransition is DeliveryTransition for outbox entries. The reason is
// the dead-letter reason when the entry was just dead-lettered, else the
// emission error the change recorded.
func EntryTransition(op ledger.Operation, before *ledger.OutboxEntry, after *ledger.OutboxEntry, actor string) ledger.Transition {
	t := ledger.Transition{Op: op, To: string(after.Status), Outcome: ledger.OutcomeApplied, Actor: actor, At: after.UpdatedAt}
	if before == nil {
		return t
	}
	t.From = string(before.Status)
	switch {
	case op == ledger.OpRedrive && after.RedrivenTo != "":
		t.Reason = redrivenAs + string(after.RedrivenTo)
	case after.Status == ledger.OutboxStatusDeadLettered && before.Status != ledger.OutboxStatusDeadLettered:
		t.Reason = after.DeadLetterReason
		if t.Reason == "" && after.LastError != nil {
			t.Reason = joinReason(after.LastError.Code, after.LastError.Message)
		}
	case after.LastError != nil && (op == ledger.OpMarkFailed || before.LastError == nil || *after.LastError != *before.LastError):
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
// created it: Seq 1, into Offered at CreatedAt, by ledger.OpEnqueue, or by
// ledger.OpRedrive with the reason "redriven from ID" for a delivery a redrive
// made. Every record starts at Version 1 in its first state, so the record
// itself implies the entry; stores may build it from the record instead of
// storing it.
func DeliveryCreation(d *ledger.Delivery) ledger.Transition {
	return creation(string(ledger.DeliveryStateOffered), d.CreatedAt, string(d.RedrivenFrom))
}

// EntryCreation is DeliveryCreation for outbox entries, created Pending.
func EntryCreation(e *ledger.OutboxEntry) ledger.Transition {
	return creation(string(ledger.OutboxStatusPending), e.CreatedAt, string(e.RedrivenFrom))
}

func creation(first string, created time.Time, from string) ledger.Transition {
	t := ledger.Transition{Seq: 1, Op: ledger.OpEnqueue, To: first, Outcome: ledger.OutcomeApplied, At: ledger.Normalize(created)}
	if from != "" {
		t.Op, t.Reason = ledger.OpRedrive, redrivenFrom+from
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
