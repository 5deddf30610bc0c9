package ledger

import (
	"context"
	"time"
)

// Ledger is the delivery ledger: durable work offered to host destinations,
// handed out under exclusive expiring leases, and kept after it ends so an
// operator can read what happened to it.
//
// Every method takes ctx first and, where time matters, the caller's now:
// stores never read the wall clock for a decision. Business answers (a stale
// lease, a wrong state, a rejected fence) come back as an Outcome in the
// result; an error means the call was malformed (ErrInvalid) or the store
// failed. A call that does not apply writes nothing.
//
// Records come back without lease tokens (Delivery.Redacted): from Get and
// List, and inside every result. Only the Lease in LeasedDelivery.Lease,
// returned to the grantee by Lease, carries its token; a lease cannot be
// rebuilt from a record someone read.
//
// Implementations must be safe for concurrent use and must pass
// ledgertest.TestLedger.
type Ledger interface {
	// Enqueue offers a delivery. A new ID answers OutcomeApplied and the
	// record is durable when Enqueue returns. An existing ID with the same
	// content (target, ceremony, payload, resolved policy) answers
	// OutcomeRepeated, even if the record has moved on or ended; with
	// different content it answers OutcomeConflict. Neither writes anything.
	// Metadata is not content: a repeat keeps the record's own.
	// After a Follow supersession the request's target may be the one the
	// delivery was enqueued for (Delivery.EnqueuedTarget) or the one it
	// has now: a producer that retries its original request, or one that
	// already sends to the replacement, is answered Repeated.
	Enqueue(ctx context.Context, req EnqueueRequest, now time.Time) (DeliveryResult, error)

	// Lease hands out, exclusively and until now+duration, up to limit
	// offerable deliveries matching filter, oldest AvailableAt first (ties
	// by ID). Each grant counts an attempt and bumps the lease sequence.
	// A delivery is offerable when it is Offered and its AvailableAt has
	// come, or Leased with an expired lease, and its attempts are not used
	// up. Two concurrent calls never both hold the same delivery.
	//
	// Incarnation rule: before choosing, deliveries Leased to owner.Agent
	// under any other incarnation, whatever the filter, are taken back at once (the caller is
	// taken as the newer incarnation): they return to Offered, or to Failed
	// when their attempts are used up, with the attempt counted and a
	// Failure of kind FailureReclaimed recorded. They are listed in
	// LeaseResult.Reclaimed and may be granted again by this same call.
	Lease(ctx context.Context, filter LeaseFilter, owner Owner, now time.Time, duration time.Duration, limit int) (LeaseResult, error)

	// Acknowledge records that the holder received the delivery and sets
	// the acknowledgement deadline to now+Policy.AckWindow. It needs the
	// current lease and now before the lease's expiry. Outcomes: Applied,
	// NotFound, Ended, LeaseLost, Repeated (already acknowledged under this
	// lease), LeaseExpired.
	Acknowledge(ctx context.Context, lease Lease, observation string, now time.Time) (DeliveryResult, error)

	// MarkProcessed closes an acknowledged delivery as Processed. Only the
	// owner that acknowledged it may do so. When fence is not nil it must be
	// at least the highest fence already accepted for the delivery's target
	// (an equal fence is accepted); the check comes before anything is
	// written. Outcomes, first match wins: Repeated (already processed by
	// this owner with this action), Ended, WrongState (not acknowledged),
	// WrongOwner, FenceRejected, then Applied; NotFound for an unknown ID.
	//
	// The acknowledgement deadline is enforced by Expire: until a sweep ends
	// a lapsed acknowledgement, a late MarkProcessed is still accepted.
	MarkProcessed(ctx context.Context, id DeliveryID, owner Owner, fence *Fence, action ActionRef, now time.Time) (DeliveryResult, error)

	// RecordActivation writes down what a push or wake-up did. It needs no
	// lease and changes no state: reaching a host is transport, never
	// processing, so the delivery stays offerable. Outcomes: Applied,
	// NotFound, Ended (terminal records are not written).
	RecordActivation(ctx context.Context, id DeliveryID, activation Activation, now time.Time) (DeliveryResult, error)

	// MarkFailed gives up the current attempt: the delivery returns to
	// Offered at now+Policy.Backoff(attempts), or ends as Failed when its
	// attempts are used up or the reason is permanent. It needs only the
	// current lease token, not an unexpired lease. Outcomes: Applied,
	// NotFound, Ended, LeaseLost, Repeated, WrongState (acknowledged work
	// is never offered again).
	MarkFailed(ctx context.Context, lease Lease, reason FailureReason, now time.Time) (DeliveryResult, error)

	// Release gives the lease back without counting the attempt; the
	// delivery is offerable again at once. Outcomes as MarkFailed.
	Release(ctx context.Context, lease Lease, now time.Time) (DeliveryResult, error)

	// Expire sweeps what has run out at now: Leased deliveries whose lease
	// expired return to Offered (or end as Failed when their attempts are
	// used up); Acknowledged deliveries past their deadline end as Expired
	// with CauseAcknowledgementLapsed. It returns the IDs it changed, in
	// ID order. A store that commits a large sweep in batches may return an
	// error together with the IDs its committed batches changed.
	Expire(ctx context.Context, now time.Time) (SweepResult, error)

	// Abandon gives up one open delivery, ending it as Expired with cause
	// (for example a bounded queue dropping its oldest offer). Any open
	// state may be abandoned; the holder of its lease then gets
	// OutcomeEnded. Outcomes: Applied, NotFound, Ended.
	Abandon(ctx context.Context, id DeliveryID, cause Cause, now time.Time) (DeliveryResult, error)

	// ExpireCeremony ends every open delivery of the ceremony as Expired
	// with cause. Terminal records are untouched. Holders of the ended
	// leases get OutcomeEnded afterwards.
	ExpireCeremony(ctx context.Context, ceremony CeremonyID, cause Cause, now time.Time) (SweepResult, error)

	// Supersede handles a destination that was replaced. With Follow, the
	// previous target's Offered and Leased deliveries move to the
	// replacement (leases revoked, attempt not counted). With LeaveBehind
	// they end as Expired with CauseSuperseded. Acknowledged deliveries stay
	// with the previous target and close normally.
	Supersede(ctx context.Context, previous, replacement Target, mode FollowMode, now time.Time) (SupersedeResult, error)

	// Get returns one delivery in any state, without lease tokens, or
	// ErrNotFound.
	Get(ctx context.Context, id DeliveryID) (Delivery, error)

	// List returns one page of deliveries matching q, without lease
	// tokens, in ID order (byte order), with an opaque cursor for the next
	// page. Records inserted
	// while paging appear on a later page when their ID sorts after the
	// cursor; no record appears twice.
	List(ctx context.Context, q ListQuery) (Page, error)
}

// BatchEnqueuer is implemented by ledgers that can enqueue many deliveries
// in one durable write. Detect it with a type assertion.
//
// EnqueueBatch is atomic for errors: one invalid request fails the whole
// call with ErrInvalid and nothing is written. Otherwise it answers one
// result per request, in order, each as Enqueue would; a later request with
// an ID seen earlier in the batch is judged against the earlier one.
type BatchEnqueuer interface {
	EnqueueBatch(ctx context.Context, reqs []EnqueueRequest, now time.Time) ([]DeliveryResult, error)
}

// AckProcessor is implemented by ledgers that can acknowledge a leased
// delivery and mark it processed in one call, for a holder that did its
// work before acknowledging (as the dispatch package's Worker does).
// Detect it with a type assertion; the Worker uses it when its ledger has
// it.
//
// AcknowledgeProcessed does what Acknowledge(lease, observation, now) and
// then, when that applied, MarkProcessed(id, owner, fence, action, now)
// would do, for the delivery of lease and the owner that acknowledged it,
// and answers both: ack is Acknowledge's answer, and processed is
// MarkProcessed's, or the zero DeliveryResult when the acknowledgement did
// not apply (nothing more was tried). The records, outcomes and history
// are those of the two calls made one after the other at now. A store may
// apply both in one transaction; one that applies them in two answers
// each as the separate call would have, and an error after an applied
// acknowledgement comes with that acknowledgement's answer.
type AckProcessor interface {
	AcknowledgeProcessed(ctx context.Context, lease Lease, observation string, fence *Fence, action ActionRef, now time.Time) (ack, processed DeliveryResult, err error)
}

// Renewer is implemented by ledgers that can extend a lease while its
// holder is still working (a heartbeat). Detect it with a type assertion.
//
// RenewLease moves the expiry of the lease in force to now+duration,
// keeping its token and sequence number; the returned Delivery.Lease
// carries the new expiry (and, like every record handed out, no token:
// the caller keeps using its own lease, with the new ExpiresAt). Like Acknowledge it needs the current lease and
// now before its expiry: a lease that ran out is not revived, since someone
// else may already be entitled to the work. Only Leased deliveries renew;
// an acknowledged one is governed by its acknowledgement deadline.
// Outcomes: Applied, NotFound, Ended, LeaseLost, WrongState, LeaseExpired.
type Renewer interface {
	RenewLease(ctx context.Context, lease Lease, now time.Time, duration time.Duration) (DeliveryResult, error)
}

// DeliveryID is the caller-chosen idempotency key of a delivery.
type DeliveryID string

// Target names a host destination.
type Target string

// CeremonyID names the grouping whose end can expire its open work. It may
// be empty.
type CeremonyID string

// ActionRef names what the integrator did when it processed a delivery.
type ActionRef string

// Fence is an integrator's monotonic fencing token. Per target, a fence
// lower than the highest already accepted is rejected.
type Fence int64

// FenceOf returns a pointer to a fence, for MarkProcessed.
func FenceOf(v int64) *Fence { f := Fence(v); return &f }

// DeliveryState is the state of a delivery.
type DeliveryState string

// Delivery states. Offered, Leased and Acknowledged are open; Processed,
// Failed and Expired are terminal.
const (
	DeliveryStateOffered      DeliveryState = "offered"
	DeliveryStateLeased       DeliveryState = "leased"
	DeliveryStateAcknowledged DeliveryState = "acknowledged"
	DeliveryStateProcessed    DeliveryState = "processed"
	DeliveryStateFailed       DeliveryState = "failed"
	DeliveryStateExpired      DeliveryState = "expired"
)

// DeliveryStates returns every delivery state, open ones first, in a new
// slice the caller may keep.
func DeliveryStates() []DeliveryState {
	return []DeliveryState{
		DeliveryStateOffered, DeliveryStateLeased, DeliveryStateAcknowledged,
		DeliveryStateProcessed, DeliveryStateFailed, DeliveryStateExpired,
	}
}

// Valid reports whether s is a known state.
func (s DeliveryState) Valid() bool {
	switch s {
	case DeliveryStateOffered, DeliveryStateLeased, DeliveryStateAcknowledged,
		DeliveryStateProcessed, DeliveryStateFailed, DeliveryStateExpired:
		return true
	}
	return false
}

// Terminal reports whether s is an end state.
func (s DeliveryState) Terminal() bool {
	return s == DeliveryStateProcessed || s == DeliveryStateFailed || s == DeliveryStateExpired
}

// FollowMode says what Supersede does with the previous target's open work.
type FollowMode string

// Follow modes.
const (
	// Follow moves open, unacknowledged work to the replacement.
	Follow FollowMode = "follow"
	// LeaveBehind ends it as Expired with CauseSuperseded.
	LeaveBehind FollowMode = "leave_behind"
)

// Valid reports whether m is a known mode.
func (m FollowMode) Valid() bool { return m == Follow || m == LeaveBehind }

// CauseKind names why a delivery ended as Expired. Callers may use their
// own kinds (a name: see storekit.ValidateName) beside these.
type CauseKind string

// Cause kinds the ledger itself uses, and common ones for callers.
const (
	CauseAcknowledgementLapsed CauseKind = "acknowledgement_lapsed"
	CauseSuperseded            CauseKind = "superseded"
	CauseCeremonyEnded         CauseKind = "ceremony_ended"
	CauseBindingRevoked        CauseKind = "binding_revoked"
	CauseQueueBounded          CauseKind = "queue_bounded"
	// CauseFenceRejected ends a delivery whose owner's MarkProcessed was
	// refused for a fence lower than the highest accepted for its target
	// (see FenceRejecter and fence.go). Its detail names both fences.
	CauseFenceRejected CauseKind = "fence_rejected"
)

// Cause says why a delivery ended as Expired.
type Cause struct {
	Kind   CauseKind `json:"kind"`
	Detail string    `json:"detail"`
}

// FailureKind says where a recorded failure came from.
type FailureKind string

// Failure kinds.
const (
	// FailureReported: the holder called MarkFailed.
	FailureReported FailureKind = "reported"
	// FailureLeaseExpired: the lease ran out before the holder finished.
	FailureLeaseExpired FailureKind = "lease_expired"
	// FailureReclaimed: the agent leased under a new incarnation, so the
	// lease of its old incarnation was taken back.
	FailureReclaimed FailureKind = "reclaimed"
)

// FailureReason is what MarkFailed is told about a failed attempt.
type FailureReason struct {
	// Message is free text (valid UTF-8, no NUL, at most 4 KiB).
	Message string `json:"message"`
	// Permanent ends the delivery as Failed at once, whatever attempts remain.
	Permanent bool `json:"permanent"`
}

// Failure is the last failure recorded on a delivery.
type Failure struct {
	Kind      FailureKind `json:"kind"`
	Message   string      `json:"message"`
	Permanent bool        `json:"permanent"`
	// Owner held the lease that failed.
	Owner Owner     `json:"owner"`
	At    time.Time `json:"at,omitzero"`
}

// ActivationResult says what a push or wake-up achieved.
type ActivationResult string

// Activation results.
const (
	ActivationDelivered   ActivationResult = "delivered"
	ActivationUnreachable ActivationResult = "unreachable"
	ActivationFailed      ActivationResult = "failed"
)

// Valid reports whether r is a known result.
func (r ActivationResult) Valid() bool {
	return r == ActivationDelivered || r == ActivationUnreachable || r == ActivationFailed
}

// Activation is what an activation adapter did with a delivery.
type Activation struct {
	Result ActivationResult `json:"result"`
	Detail string           `json:"detail"`
}

// Acknowledgement is what the holder said when it acknowledged a delivery.
type Acknowledgement struct {
	Owner       Owner     `json:"owner"`
	Observation string    `json:"observation"`
	At          time.Time `json:"at,omitzero"`
	// Deadline is when Expire ends the delivery unless it is processed.
	Deadline time.Time `json:"deadline,omitzero"`
}

// Processing is how a delivery was closed by MarkProcessed.
type Processing struct {
	Action ActionRef `json:"action"`
	Fence  *Fence    `json:"fence,omitzero"`
	At     time.Time `json:"at,omitzero"`
}

// EnqueueRequest offers one delivery.
type EnqueueRequest struct {
	ID       DeliveryID
	Target   Target
	Ceremony CeremonyID
	// Payload is opaque bytes; nil and empty are the same content.
	Payload []byte
	// Metadata travels with the delivery beside its payload (see
	// Metadata): stored and returned, never part of its content.
	Metadata Metadata
	// Policy's zero fields take the store's defaults.
	Policy Policy
	// AvailableAt delays the first offer; zero means now.
	AvailableAt time.Time
}

// LeaseFilter narrows what Lease hands out. Empty fields match everything.
type LeaseFilter struct {
	Targets  []Target
	Ceremony CeremonyID
}

// ListQuery selects one page of List. Empty filters match everything.
type ListQuery struct {
	Targets  []Target
	Ceremony CeremonyID
	States   []DeliveryState
	// Limit is the page size, 1 to MaxLimit.
	Limit int
	// Cursor is Page.Next of the previous page; empty for the first.
	Cursor string
}

// Page is one page of List.
type Page struct {
	Deliveries []Delivery
	// Next is the cursor for the next page; empty when this page is the last.
	Next string
}

// Delivery is one item of work offered to a host destination, in whatever
// state it is. Terminal deliveries keep every field, so an operator can read
// why they ended: Processing for Processed, LastFailure for Failed, Cause
// for Expired.
//
// All times are UTC with microsecond precision.
type Delivery struct {
	ID     DeliveryID `json:"id"`
	Target Target     `json:"target"`
	// EnqueuedTarget is the target the delivery was enqueued for, once a
	// Follow supersession has moved it to another; empty while Target is
	// still that one. Enqueue compares a repeated request with it too, so
	// a producer retrying its original request is answered Repeated.
	EnqueuedTarget Target     `json:"enqueued_target,omitempty"`
	Ceremony       CeremonyID `json:"ceremony"`
	Payload        []byte     `json:"payload,omitzero"`
	// Metadata is the metadata of the enqueue that created the delivery
	// (see Metadata); nil when it had none. Records returned by a store
	// never share it with the store: change it freely.
	Metadata Metadata      `json:"metadata,omitempty"`
	Policy   Policy        `json:"policy"`
	State    DeliveryState `json:"state"`
	// Attempts counts lease grants, less those given back by Release or a
	// Follow supersession.
	Attempts int `json:"attempts"`
	// AvailableAt is when the delivery can next be leased: for an Offered
	// delivery its offer time, for a Leased one its lease's expiry.
	AvailableAt time.Time `json:"available_at,omitzero"`
	// LeaseSeq is the sequence number of the latest grant (0: never leased).
	LeaseSeq int64 `json:"lease_seq"`
	// Lease is the grant in force; nil unless Leased or Acknowledged. In
	// a record handed out by a store its Token is empty (see Token).
	Lease *Lease `json:"lease,omitzero"`
	// EndedLease is how the latest grant ended while the delivery stayed
	// open; nil once leased again or ended. Its Token, too, stays inside
	// the store.
	EndedLease *EndedGrant `json:"ended_lease,omitzero"`
	// Ack is set once acknowledged.
	Ack *Acknowledgement `json:"ack,omitzero"`
	// Processing is set once processed.
	Processing *Processing `json:"processing,omitzero"`
	// Activations counts RecordActivation calls, up to MaxCount;
	// LastActivation and LastActivationAt describe the latest.
	Activations      int         `json:"activations"`
	LastActivation   *Activation `json:"last_activation,omitzero"`
	LastActivationAt time.Time   `json:"last_activation_at,omitzero"`
	LastFailure      *Failure    `json:"last_failure,omitzero"`
	// Cause is why the delivery ended as Expired.
	Cause     *Cause    `json:"cause,omitzero"`
	CreatedAt time.Time `json:"created_at,omitzero"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	// EndedAt is set exactly when State is terminal.
	EndedAt time.Time `json:"ended_at,omitzero"`
	// Version grows by one with every applied transition.
	Version int64 `json:"version"`
	// RedrivenFrom is the delivery this one was made from by a redrive
	// (see Redriver); empty for a delivery that was enqueued. Retention
	// may since have purged that one.
	RedrivenFrom DeliveryID `json:"redriven_from,omitempty"`
	// RedrivenTo is the delivery a redrive made from this one; empty until
	// then. A delivery is redriven at most once: redriving it again
	// answers OutcomeRepeated with that same delivery.
	RedrivenTo DeliveryID `json:"redriven_to,omitempty"`
}
