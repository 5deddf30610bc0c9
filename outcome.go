package ledger

import (
	"errors"
	"fmt"
)

// Outcome is the business answer of a transition: whether this call applied
// it and, if not, why. Outcomes are results, never errors: an error means
// the call was malformed (ErrInvalid) or the store failed.
//
// When several outcomes apply to one call, the first in this order wins:
// NotFound, Ended, LeaseLost, Repeated, LeaseExpired; WrongState, where a
// call can answer it, comes just before LeaseExpired. MarkProcessed uses
// its own order: Repeated, Ended, WrongState, WrongOwner, FenceRejected. A
// call that does not apply writes nothing.
type Outcome string

// The outcome vocabulary shared by every operation.
const (
	// OutcomeApplied: this call applied the durable transition.
	OutcomeApplied Outcome = "applied"
	// OutcomeRepeated: the same call already applied; nothing was written.
	OutcomeRepeated Outcome = "repeated"
	// OutcomeNotFound: no record has the ID.
	OutcomeNotFound Outcome = "not_found"
	// OutcomeLeaseLost: the lease or claim token is not the record's current one.
	OutcomeLeaseLost Outcome = "lease_lost"
	// OutcomeLeaseExpired: the token matches but the lease ran out.
	OutcomeLeaseExpired Outcome = "lease_expired"
	// OutcomeWrongState: the record is open but not in a state the call accepts.
	OutcomeWrongState Outcome = "wrong_state"
	// OutcomeWrongOwner: the caller is not the owner the call requires.
	OutcomeWrongOwner Outcome = "wrong_owner"
	// OutcomeFenceRejected: the fence is lower than the highest accepted for the target.
	OutcomeFenceRejected Outcome = "fence_rejected"
	// OutcomeConflict: a record with the ID exists with different content.
	OutcomeConflict Outcome = "conflict"
	// OutcomeEnded: the record is terminal; nothing more can happen to it.
	OutcomeEnded Outcome = "ended"
)

// Valid reports whether o is one of the outcomes above.
func (o Outcome) Valid() bool {
	switch o {
	case OutcomeApplied, OutcomeRepeated, OutcomeNotFound, OutcomeLeaseLost,
		OutcomeLeaseExpired, OutcomeWrongState, OutcomeWrongOwner,
		OutcomeFenceRejected, OutcomeConflict, OutcomeEnded:
		return true
	}
	return false
}

// DeliveryResult is the answer of a transition on one delivery: Enqueue,
// Acknowledge, MarkProcessed, RecordActivation, MarkFailed, Release and
// Abandon. Delivery is the record as it now stands, also when the call did
// not apply; it is the zero Delivery when Outcome is OutcomeNotFound.
type DeliveryResult struct {
	Outcome  Outcome
	Delivery Delivery
	// Abandoned lists the deliveries an Enqueue (or EnqueueBatch) ended
	// to keep its target's queue within the store's bound (see
	// QueueBounds), oldest first; each ended as Expired with cause
	// CauseQueueBounded in the same transaction. The delivery just
	// enqueued may be one of them. Empty for every other call, and when
	// no bound applies. EnqueueBatch lists a target's abandoned deliveries
	// on the result of the batch's last applied request for that target.
	Abandoned []DeliveryID
}

// Applied reports whether this call applied the durable transition.
func (r DeliveryResult) Applied() bool { return r.Outcome == OutcomeApplied }

// OutboxResult is the answer of a transition on one outbox entry: Enqueue
// and every claim completion. Entry is the entry as it now stands, also when
// the call did not apply; it is the zero OutboxEntry when Outcome is
// OutcomeNotFound.
type OutboxResult struct {
	Outcome Outcome
	Entry   OutboxEntry
}

// Applied reports whether this call applied the durable transition.
func (r OutboxResult) Applied() bool { return r.Outcome == OutcomeApplied }

// LeasedDelivery is one delivery handed out by Ledger.Lease with its lease.
type LeasedDelivery struct {
	Lease    Lease
	Delivery Delivery
}

// LeaseResult is the answer of Ledger.Lease.
type LeaseResult struct {
	// Leased holds the deliveries granted to the caller, oldest available first.
	Leased []LeasedDelivery
	// Reclaimed lists deliveries taken back from the agent's other
	// incarnations by this call (see Ledger.Lease), in ID order. Some of them may also
	// appear in Leased, granted again to the caller.
	Reclaimed []DeliveryID
}

// Applied reports whether the call granted or reclaimed anything.
func (r LeaseResult) Applied() bool { return len(r.Leased) > 0 || len(r.Reclaimed) > 0 }

// SweepResult is the answer of Expire and ExpireCeremony: the deliveries the
// call changed, in ID order.
type SweepResult struct {
	Changed []DeliveryID
}

// Applied reports whether the sweep changed anything.
func (r SweepResult) Applied() bool { return len(r.Changed) > 0 }

// SupersedeResult is the answer of Ledger.Supersede; both lists are in ID
// order.
type SupersedeResult struct {
	// Moved lists the deliveries that now belong to the replacement (Follow).
	Moved []DeliveryID
	// Ended lists the deliveries that ended as Expired/Superseded (LeaveBehind).
	Ended []DeliveryID
}

// Applied reports whether the call changed anything.
func (r SupersedeResult) Applied() bool { return len(r.Moved) > 0 || len(r.Ended) > 0 }

// ClaimedEntry is one outbox entry handed out by a claim with its claim.
type ClaimedEntry struct {
	Claim Claim
	Entry OutboxEntry
}

// Sentinel errors. Check them with errors.Is.
var (
	// ErrInvalid: the call was malformed; nothing was written. The error is
	// an *InvalidError naming the field.
	ErrInvalid = errors.New("ledger: invalid argument")
	// ErrNotFound: no record has the ID (Get, FindByID and the base outbox
	// methods; transitions answer OutcomeNotFound instead).
	ErrNotFound = errors.New("ledger: not found")
	// ErrConflict: an optimistic write lost (OutboxStore.Save with a stale
	// Version) or a base outbox completion hit an entry that already ended
	// differently.
	ErrConflict = errors.New("ledger: conflict")
	// ErrUnusable: the store cannot serve any call until someone changes
	// its set-up, for example a PostgreSQL schema that was never migrated
	// (pgstore.ErrNotMigrated matches it too). Retrying cannot help, so
	// the loops of package dispatch stop and return it instead of trying
	// again.
	ErrUnusable = errors.New("ledger: store unusable")
)

// InvalidError says which field of a call was malformed and why. It matches
// ErrInvalid with errors.Is.
type InvalidError struct {
	Field  string
	Reason string
}

// Error reads like "ledger: invalid lease duration: must be positive".
func (e *InvalidError) Error() string {
	return fmt.Sprintf("ledger: invalid %s: %s", e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
