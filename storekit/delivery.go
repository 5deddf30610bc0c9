package storekit

import (
	"bytes"
	"time"

	"github.com/leaseledger/ledger"
)

// This file is the delivery state machine: pure functions from a record and
// a request to the new record and an Outcome. No I/O, no clock, no
// randomness (tokens come in as arguments). Stores choose which records a
// call touches and in what order; these functions decide what happens to
// them. When a call does not apply, the record comes back unchanged.

// NewDelivery returns the record Enqueue stores for req, with policy
// defaults resolved. req must have passed ValidateEnqueue.
func NewDelivery(req ledger.EnqueueRequest, defaults ledger.Policy, now time.Time) ledger.Delivery {
	now = ledger.Normalize(now)
	avail := now
	if !req.AvailableAt.IsZero() {
		avail = ClampPast(req.AvailableAt)
	}
	return ledger.Delivery{
		ID:          req.ID,
		Target:      req.Target,
		Ceremony:    req.Ceremony,
		Payload:     clonePayload(req.Payload),
		Metadata:    req.Metadata.Clone(),
		Policy:      req.Policy.Resolve(defaults),
		State:       ledger.DeliveryStateOffered,
		AvailableAt: avail,
		CreatedAt:   now,
		UpdatedAt:   now,
		Version:     1,
	}
}

// EnqueueAgain returns the outcome of enqueueing req when d already holds
// its ID: ledger.OutcomeRepeated for the same content (target, ceremony, payload,
// resolved policy), whatever state d is in, and ledger.OutcomeConflict otherwise.
// Metadata is not content and is not compared.
// The target is the same when it is the one d was enqueued for or the one
// a ledger.Follow supersession moved it to: the request did not change, the
// destination did.
func (d Delivery) EnqueueAgain(req ledger.EnqueueRequest, defaults ledger.Policy) ledger.Outcome {
	sameTarget := req.Target == d.Target || (d.EnqueuedTarget != "" && req.Target == d.EnqueuedTarget)
	if sameTarget && d.Ceremony == req.Ceremony &&
		bytes.Equal(d.Payload, req.Payload) && d.Policy == req.Policy.Resolve(defaults) {
		return ledger.OutcomeRepeated
	}
	return ledger.OutcomeConflict
}

// Offerable reports whether Lease may hand d out at now.
func (d Delivery) Offerable(now time.Time) bool {
	return (d.State == ledger.DeliveryStateOffered || d.State == ledger.DeliveryStateLeased) &&
		!d.AvailableAt.After(ledger.Normalize(now)) && d.Attempts < d.Policy.MaxAttempts
}

// OfferedBefore orders offerable deliveries the way Lease hands them out:
// oldest AvailableAt first, then by ID. It is a function, not a method of
// Delivery, so that it serves as a comparator as it is.
func OfferedBefore(d, other ledger.Delivery) bool {
	if !d.AvailableAt.Equal(other.AvailableAt) {
		return d.AvailableAt.Before(other.AvailableAt)
	}
	return d.ID < other.ID
}

// Grant leases d to owner until now+duration under token, counting an
// attempt. d must be Offerable at now. Taking over a lease that ran out
// records a ledger.FailureLeaseExpired for its holder.
func (d Delivery) Grant(owner ledger.Owner, token ledger.Token, now time.Time, duration time.Duration) (ledger.Delivery, ledger.Lease) {
	now = ledger.Normalize(now)
	if d.State == ledger.DeliveryStateLeased && d.Lease != nil {
		d.LastFailure = &ledger.Failure{Kind: ledger.FailureLeaseExpired, Message: "lease expired", Owner: d.Lease.Owner, At: d.Lease.ExpiresAt}
	}
	d.LeaseSeq++
	lease := ledger.Lease{
		DeliveryID: d.ID,
		Owner:      owner,
		Token:      token,
		Seq:        d.LeaseSeq,
		GrantedAt:  now,
		ExpiresAt:  now.Add(duration.Truncate(time.Microsecond)),
	}
	d.State = ledger.DeliveryStateLeased
	d.Attempts++
	d.Lease = &lease
	d.EndedLease = nil
	d.AvailableAt = lease.ExpiresAt
	d.touch(now)
	return ledger.Delivery(d), lease
}

// HeldByOtherIncarnation reports whether d is Leased to owner's agent under
// another incarnation, which the incarnation rule takes back.
func (d Delivery) HeldByOtherIncarnation(owner ledger.Owner) bool {
	return d.State == ledger.DeliveryStateLeased && d.Lease != nil &&
		d.Lease.Owner.Agent == owner.Agent && d.Lease.Owner.Incarnation != owner.Incarnation
}

// Reclaim takes d back from an older incarnation of owner's agent: Offered
// at once with the attempt counted, or Failed when its attempts are used
// up. d must satisfy HeldByOtherIncarnation(owner).
func (d Delivery) Reclaim(owner ledger.Owner, now time.Time) ledger.Delivery {
	now = ledger.Normalize(now)
	d.LastFailure = &ledger.Failure{
		Kind:    ledger.FailureReclaimed,
		Message: "agent leased as incarnation " + owner.Incarnation,
		Owner:   d.Lease.Owner,
		At:      now,
	}
	return d.giveBack(ledger.OpReclaim, now, now)
}

// giveBack ends the current lease with the attempt counted: Offered at
// availableAt, or Failed when attempts are used up.
func (d Delivery) giveBack(op ledger.Operation, availableAt, now time.Time) ledger.Delivery {
	if d.Attempts >= d.Policy.MaxAttempts {
		d.Lease = nil
		d.EndedLease = nil
		d.end(ledger.DeliveryStateFailed, now)
		return ledger.Delivery(d)
	}
	d.endLease(op, now)
	d.State = ledger.DeliveryStateOffered
	d.AvailableAt = availableAt
	d.touch(now)
	return ledger.Delivery(d)
}

// holdOutcome checks a lease-bearing call against d: ledger.OutcomeEnded for a
// terminal record, ledger.OutcomeLeaseLost when lease is not the grant in force
// (or, when op is not empty, ledger.OutcomeRepeated when lease is the grant that op
// already ended). It returns "" when lease is the grant in force.
func (d Delivery) holdOutcome(lease ledger.Lease, op ledger.Operation) ledger.Outcome {
	if d.State.Terminal() {
		return ledger.OutcomeEnded
	}
	if d.Lease != nil && sameLease(*d.Lease, lease) {
		return ""
	}
	if op != "" && lease.DeliveryID == d.ID && endedBy(d.EndedLease, lease.Token, lease.Seq, op) {
		return ledger.OutcomeRepeated
	}
	return ledger.OutcomeLeaseLost
}

// Acknowledge records that the holder of lease received d.
func (d Delivery) Acknowledge(lease ledger.Lease, observation string, now time.Time) (ledger.Delivery, ledger.Outcome) {
	now = ledger.Normalize(now)
	if o := d.holdOutcome(lease, ""); o != "" {
		return ledger.Delivery(d), o
	}
	if d.State == ledger.DeliveryStateAcknowledged {
		return ledger.Delivery(d), ledger.OutcomeRepeated
	}
	if d.Lease.ExpiredAt(now) {
		return ledger.Delivery(d), ledger.OutcomeLeaseExpired
	}
	d.State = ledger.DeliveryStateAcknowledged
	d.Ack = &ledger.Acknowledgement{
		Owner:       d.Lease.Owner,
		Observation: observation,
		At:          now,
		Deadline:    now.Add(d.Policy.AckWindow),
	}
	d.touch(now)
	return ledger.Delivery(d), ledger.OutcomeApplied
}

// MarkProcessed closes d for owner. highest is the highest fence already
// accepted for d's target (nil: none). On ledger.OutcomeApplied the store raises
// the target's high-water mark with RaiseFence.
func (d Delivery) MarkProcessed(owner ledger.Owner, fence, highest *ledger.Fence, action ledger.ActionRef, now time.Time) (ledger.Delivery, ledger.Outcome) {
	now = ledger.Normalize(now)
	switch {
	case d.State == ledger.DeliveryStateProcessed && d.Processing != nil && d.Processing.Action == action &&
		d.Ack != nil && d.Ack.Owner == owner:
		return ledger.Delivery(d), ledger.OutcomeRepeated
	case d.State.Terminal():
		return ledger.Delivery(d), ledger.OutcomeEnded
	case d.State != ledger.DeliveryStateAcknowledged:
		return ledger.Delivery(d), ledger.OutcomeWrongState
	case d.Ack.Owner != owner:
		return ledger.Delivery(d), ledger.OutcomeWrongOwner
	case fence != nil && highest != nil && *fence < *highest:
		return ledger.Delivery(d), ledger.OutcomeFenceRejected
	}
	p := &ledger.Processing{Action: action, At: now}
	if fence != nil {
		f := *fence
		p.Fence = &f
	}
	d.Processing = p
	d.Lease = nil
	d.end(ledger.DeliveryStateProcessed, now)
	return ledger.Delivery(d), ledger.OutcomeApplied
}

// AcknowledgeProcessed is the step of ledger.AckProcessor on d: the
// acknowledgement under lease and, when it applied, the processing by the
// owner it recorded. highest is the highest fence already accepted for
// d's target (nil: none). It returns the record after each step, and the
// second step's outcome is "" when the first did not apply.
func (d Delivery) AcknowledgeProcessed(lease ledger.Lease, observation string, fence, highest *ledger.Fence, action ledger.ActionRef, now time.Time) (acked ledger.Delivery, ackOutcome ledger.Outcome, done ledger.Delivery, doneOutcome ledger.Outcome) {
	acked, ackOutcome = d.Acknowledge(lease, observation, now)
	if ackOutcome != ledger.OutcomeApplied {
		return acked, ackOutcome, acked, ""
	}
	done, doneOutcome = Delivery(acked).MarkProcessed(acked.Ack.Owner, fence, highest, action, now)
	return acked, ackOutcome, done, doneOutcome
}

// RaiseFence returns the target's new high-water mark after a fence was
// accepted: the larger of highest and fence (either may be nil).
func RaiseFence(highest, fence *ledger.Fence) *ledger.Fence {
	if fence == nil || (highest != nil && *highest >= *fence) {
		return highest
	}
	f := *fence
	return &f
}

// RecordActivation notes what a push or wake-up did; the state is
// unchanged. Activations counts up to ledger.MaxCount and stays there.
func (d Delivery) RecordActivation(a ledger.Activation, now time.Time) (ledger.Delivery, ledger.Outcome) {
	now = ledger.Normalize(now)
	if d.State.Terminal() {
		return ledger.Delivery(d), ledger.OutcomeEnded
	}
	d.Activations = addCount(d.Activations)
	d.LastActivation = &a
	d.LastActivationAt = now
	d.touch(now)
	return ledger.Delivery(d), ledger.OutcomeApplied
}

// MarkFailed gives up the attempt held under lease.
func (d Delivery) MarkFailed(lease ledger.Lease, reason ledger.FailureReason, now time.Time) (ledger.Delivery, ledger.Outcome) {
	now = ledger.Normalize(now)
	if o := d.holdOutcome(lease, ledger.OpMarkFailed); o != "" {
		return ledger.Delivery(d), o
	}
	if d.State != ledger.DeliveryStateLeased {
		return ledger.Delivery(d), ledger.OutcomeWrongState
	}
	d.LastFailure = &ledger.Failure{
		Kind:      ledger.FailureReported,
		Message:   reason.Message,
		Permanent: reason.Permanent,
		Owner:     d.Lease.Owner,
		At:        now,
	}
	if reason.Permanent {
		d.Lease = nil
		d.EndedLease = nil
		d.end(ledger.DeliveryStateFailed, now)
		return ledger.Delivery(d), ledger.OutcomeApplied
	}
	return d.giveBack(ledger.OpMarkFailed, now.Add(d.Policy.Backoff(d.ID, d.Attempts)), now), ledger.OutcomeApplied
}

// Release gives the lease back without counting the attempt.
func (d Delivery) Release(lease ledger.Lease, now time.Time) (ledger.Delivery, ledger.Outcome) {
	now = ledger.Normalize(now)
	if o := d.holdOutcome(lease, ledger.OpRelease); o != "" {
		return ledger.Delivery(d), o
	}
	if d.State != ledger.DeliveryStateLeased {
		return ledger.Delivery(d), ledger.OutcomeWrongState
	}
	d.Attempts--
	d.endLease(ledger.OpRelease, now)
	d.State = ledger.DeliveryStateOffered
	d.AvailableAt = now
	d.touch(now)
	return ledger.Delivery(d), ledger.OutcomeApplied
}

// Renew moves the expiry of the lease in force to now+duration (see
// ledger.Renewer).
func (d Delivery) Renew(lease ledger.Lease, now time.Time, duration time.Duration) (ledger.Delivery, ledger.Outcome) {
	now = ledger.Normalize(now)
	if o := d.holdOutcome(lease, ""); o != "" {
		return ledger.Delivery(d), o
	}
	if d.State != ledger.DeliveryStateLeased {
		return ledger.Delivery(d), ledger.OutcomeWrongState
	}
	if d.Lease.ExpiredAt(now) {
		return ledger.Delivery(d), ledger.OutcomeLeaseExpired
	}
	l := *d.Lease
	l.ExpiresAt = now.Add(duration.Truncate(time.Microsecond))
	d.Lease = &l
	d.AvailableAt = l.ExpiresAt
	d.touch(now)
	return ledger.Delivery(d), ledger.OutcomeApplied
}

// Expirable reports whether Expire changes d at now.
func (d Delivery) Expirable(now time.Time) bool {
	now = ledger.Normalize(now)
	switch d.State {
	case ledger.DeliveryStateLeased:
		return d.Lease != nil && d.Lease.ExpiredAt(now)
	case ledger.DeliveryStateAcknowledged:
		return d.Ack != nil && !now.Before(d.Ack.Deadline)
	}
	return false
}

// Expire applies the sweep to d; the bool says whether d changed.
func (d Delivery) Expire(now time.Time) (ledger.Delivery, bool) {
	now = ledger.Normalize(now)
	if !d.Expirable(now) {
		return ledger.Delivery(d), false
	}
	if d.State == ledger.DeliveryStateAcknowledged {
		d.Cause = &ledger.Cause{Kind: ledger.CauseAcknowledgementLapsed, Detail: "not processed by " + d.Ack.Deadline.Format(time.RFC3339Nano)}
		d.Lease = nil
		d.end(ledger.DeliveryStateExpired, now)
		return ledger.Delivery(d), true
	}
	d.LastFailure = &ledger.Failure{Kind: ledger.FailureLeaseExpired, Message: "lease expired", Owner: d.Lease.Owner, At: d.Lease.ExpiresAt}
	return d.giveBack(ledger.OpExpire, d.Lease.ExpiresAt, now), true
}

// Abandon ends open d as Expired with cause: ledger.OutcomeEnded when d is
// already terminal. ExpireCeremony applies it to each open delivery of the
// ceremony.
func (d Delivery) Abandon(cause ledger.Cause, now time.Time) (ledger.Delivery, ledger.Outcome) {
	now = ledger.Normalize(now)
	if d.State.Terminal() {
		return ledger.Delivery(d), ledger.OutcomeEnded
	}
	d.Cause = &cause
	d.Lease = nil
	d.EndedLease = nil
	d.end(ledger.DeliveryStateExpired, now)
	return ledger.Delivery(d), ledger.OutcomeApplied
}

// Supersedable reports whether Supersede moves or ends d: only Offered and
// Leased deliveries; acknowledged work stays and closes normally.
func (d Delivery) Supersedable() bool {
	return d.State == ledger.DeliveryStateOffered || d.State == ledger.DeliveryStateLeased
}

// Supersede moves d to replacement (ledger.Follow) or ends it (ledger.LeaveBehind); the
// bool says whether d changed.
func (d Delivery) Supersede(replacement ledger.Target, mode ledger.FollowMode, now time.Time) (ledger.Delivery, bool) {
	now = ledger.Normalize(now)
	if !d.Supersedable() {
		return ledger.Delivery(d), false
	}
	if mode == ledger.LeaveBehind {
		d.Cause = &ledger.Cause{Kind: ledger.CauseSuperseded, Detail: "replaced by " + string(replacement)}
		d.Lease = nil
		d.EndedLease = nil
		d.end(ledger.DeliveryStateExpired, now)
		return ledger.Delivery(d), true
	}
	// The first move remembers where the delivery was enqueued; a move
	// back there forgets it again, so that EnqueuedTarget is set exactly
	// while Target differs from it.
	switch {
	case d.EnqueuedTarget == "":
		d.EnqueuedTarget = d.Target
	case d.EnqueuedTarget == replacement:
		d.EnqueuedTarget = ""
	}
	d.Target = replacement
	if d.State == ledger.DeliveryStateLeased {
		d.Attempts--
		d.endLease(ledger.OpSupersede, now)
		d.State = ledger.DeliveryStateOffered
		d.AvailableAt = now
	}
	d.touch(now)
	return ledger.Delivery(d), true
}

func (d *Delivery) endLease(op ledger.Operation, now time.Time) {
	if d.Lease != nil {
		d.EndedLease = &ledger.EndedGrant{Token: d.Lease.Token, Seq: d.Lease.Seq, Op: op, At: now}
	}
	d.Lease = nil
}

func (d *Delivery) end(state ledger.DeliveryState, now time.Time) {
	d.State = state
	d.EndedAt = now
	d.touch(now)
}

func (d *Delivery) touch(now time.Time) {
	d.UpdatedAt = now
	d.Version++
}

// addCount returns n+1, or n when n is at ledger.MaxCount: no transition takes
// a count past what both stores hold.
func addCount(n int) int {
	if n >= ledger.MaxCount {
		return n
	}
	return n + 1
}
