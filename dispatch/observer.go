package dispatch

import (
	"time"

	"github.com/leaseledger/ledger"
)

// EventKind names what happened to one claimed entry, or to a poll cycle.
type EventKind string

// Event kinds. Every claimed entry produces exactly one of Delivered,
// Retried, DeadLettered, Deferred, Released, Lost or StoreError, except an
// entry whose emitter ignored cancellation, which still produces one when
// the dispatcher stops waiting for it.
const (
	// EventClaimed: the entry was claimed; Duration is zero.
	EventClaimed EventKind = "claimed"
	// EventDelivered: the emission succeeded and the entry is Delivered.
	EventDelivered EventKind = "delivered"
	// EventRetried: the emission failed and the entry is RetryScheduled.
	EventRetried EventKind = "retried"
	// EventDeadLettered: the emission failed permanently or for the last
	// allowed time, and the entry is DeadLettered.
	EventDeadLettered EventKind = "dead_lettered"
	// EventDeferred: the emitter asked for a deferral; the entry is Deferred.
	EventDeferred EventKind = "deferred"
	// EventReleased: the claim was given back before emitting (shutdown).
	EventReleased EventKind = "released"
	// EventLost: a completion did not apply (Outcome says why, usually
	// lease_lost: the claim expired and another worker took the entry).
	// Whatever the emitter did, this dispatcher did not record it.
	EventLost EventKind = "lost"
	// EventRenewed: the claim was extended while the emitter was running.
	EventRenewed EventKind = "renewed"
	// EventRenewLost: renewing the claim did not apply; the emission was
	// cancelled with ErrClaimLost.
	EventRenewLost EventKind = "renew_lost"
	// EventStoreError: a store call failed (Err); for a completion the
	// entry stays claimed until its claim expires and is then retried.
	EventStoreError EventKind = "store_error"
)

// Event kinds of a Worker, beside Released, Retried, Lost, Renewed,
// RenewLost and StoreError, which mean for a leased delivery what they
// mean for a claimed entry. Every leased delivery produces exactly one of
// Processed, Retried, Failed, Released, Lost, FenceRejected or
// StoreError. A Worker's events carry the delivery ID in EntryID, as they
// always have, and under its own name in DeliveryID.
const (
	// EventLeased: the delivery was leased; Duration is zero.
	EventLeased EventKind = "leased"
	// EventReclaimed: the Worker's lease call took the delivery back from
	// an older incarnation of its agent (ledger.Ledger.Lease's incarnation
	// rule). It may also be leased again by the same call.
	EventReclaimed EventKind = "reclaimed"
	// EventProcessed: the handler succeeded and the delivery was
	// acknowledged and marked processed.
	EventProcessed EventKind = "processed"
	// EventFailed: the handler failed permanently, or for the delivery's
	// last allowed attempt, and the delivery is Failed.
	EventFailed EventKind = "failed"
	// EventFenceRejected: MarkProcessed rejected the fence as lower than
	// one already accepted for the target. The delivery stays acknowledged
	// until its acknowledgement deadline ends it as Expired.
	EventFenceRejected EventKind = "fence_rejected"
)

// Event kinds of a Sweeper (NewSweeper, or the one inside a Worker or a
// Dispatcher). They carry the SweepJob in Job and no EntryID.
const (
	// EventSwept: the sweeper did one job of a sweep; Count is how many
	// records it changed (expire) or deleted (purges), Duration how long
	// it took. A sweep that finds nothing to do reports a Count of zero.
	EventSwept EventKind = "swept"
	// EventSweepFailed: a job of a sweep, or the lead call before it,
	// failed (Err); the next sweep tries again.
	EventSweepFailed EventKind = "sweep_failed"
	// EventLeadTaken: the sweeper took the lead of a job: of the sweepers
	// over one store, it now does that job.
	EventLeadTaken EventKind = "lead_taken"
	// EventLeadLost: the sweeper's lead of a job was taken over by
	// another (Outcome: lease_lost) or ran out before it renewed it
	// (lease_expired), or the sweeper gave it up as it stopped (applied).
	EventLeadLost EventKind = "lead_lost"
)

// Event is one observation. EntryID is empty for cycle-level events (a
// failed claim call) and for a Sweeper's. Outcome is the store's outcome
// (a ledger.Outcome as text) when there is one. Err is the emitter's
// error for Retried and DeadLettered, the store's for StoreError and
// SweepFailed. Duration is how long the emission (or the sweep job)
// took, for events that follow one. Job and Count are set on a Sweeper's
// events only.
//
// The fields after Count label the event for metrics and traces. The
// bounded ones (Provider, EntryKind, Target, Kind, Outcome) suit metric
// labels; IDs, IdempotencyKey, Seq, Owner, Ceremony and Metadata do not: give them to
// traces and logs. Building an event allocates nothing: the strings and
// the metadata map are shared with the loop's copy of the record.
type Event struct {
	Kind EventKind
	// EntryID is the outbox entry's ID for a Dispatcher's events; for a
	// Worker's events it is the delivery ID (see DeliveryID, the clearer
	// name).
	EntryID  string
	Attempt  int
	Outcome  string
	Err      error
	Duration time.Duration
	Job      SweepJob
	Count    int

	// Worker is the Dispatcher's worker name (WithWorker), on every
	// event of a Dispatcher; empty on a Worker's events.
	Worker string
	// Provider and EntryKind are the provider and kind of the entry's
	// envelope, on a Dispatcher's events about an entry.
	Provider  string
	EntryKind string
	// IdempotencyKey is the entry's idempotency key, on a Dispatcher's
	// events about an entry: the name the business knows it by, which
	// ledgerctl show and the console find it by. Unbounded, like the IDs.
	IdempotencyKey string

	// DeliveryID, Target and Ceremony describe the delivery of a
	// Worker's event (Target and Ceremony are empty on EventReclaimed,
	// whose Lease call reports the ID alone).
	DeliveryID ledger.DeliveryID
	Target     ledger.Target
	Ceremony   ledger.CeremonyID
	// Owner is the agent and incarnation a Worker leases under, on
	// every event of a Worker, and only there.
	Owner ledger.Owner

	// Seq is the sequence number of the claim or lease the event is
	// about: with the entry or delivery ID it names one grant.
	Seq int64
	// Metadata is the entry's (or delivery's) ledger.Metadata, for
	// example the producer's trace context. It is the loop's own map, not
	// a copy: observers must not change it, and must copy what they keep
	// after Observe returns.
	Metadata ledger.Metadata
	// Latency is the time from the record's enqueue to its completion,
	// on the events of completions that applied (Delivered, Retried,
	// DeadLettered and Deferred for a Dispatcher; Processed, Retried and
	// Failed for a Worker): the completed record's UpdatedAt less its
	// CreatedAt, both stamped by the store. Zero on other events.
	Latency time.Duration
	// Final is true on the one event that settles a claimed entry or a
	// leased delivery (Delivered, Retried, DeadLettered, Deferred,
	// Released, Lost, Processed, Failed, FenceRejected, or the
	// StoreError of its completion), and false on every other event,
	// notably the StoreError of a renewal, after which the work goes on.
	Final bool
}

// Observer receives an Event for everything the dispatcher does to an
// entry, for metrics. It needs nothing beyond the standard library, so an
// adapter to any metrics system is a few lines. Observe is called from
// many goroutines at once and must not block.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// nopObserver is the default Observer.
type nopObserver struct{}

func (nopObserver) Observe(Event) {}
