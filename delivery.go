package ledger

import (
	"bytes"
	"time"
)

// This file is the delivery state machine: pure functions from a record and
// a request to the new record and an Outcome. No I/O, no clock, no
// randomness (tokens come in as arguments). Stores choose which records a
// call touches and in what order; these functions decide what happens to
// them. When a call does not apply, the record comes back unchanged.

// NewDelivery returns the record Enqueue stores for req, with policy
// defaults resolved. req must have passed ValidateEnqueue.
func NewDelivery(req EnqueueRequest, defaults Policy, now time.Time) Delivery {
	now = Normalize(now)
	avail := now
	if !req.AvailableAt.IsZero() {
		avail = ClampPast(req.AvailableAt)
	}
	return Delivery{
		ID:          req.ID,
		Target:      req.Target,
		Ceremony:    req.Ceremony,
		Payload:     clonePayload(req.Payload),
		Metadata:    req.Metadata.Clone(),
		Policy:      req.Policy.Resolve(defaults),
		State:       DeliveryStateOffered,
		AvailableAt: avail,
		CreatedAt:   now,
		UpdatedAt:   now,
		Version:     1,
	}
}

// EnqueueAgain returns the outcome of enqueueing req when d already holds
// its ID: OutcomeRepeated for the same content (target, ceremony, payload,
// resolved policy), whatever state d is in, and OutcomeConflict otherwise.
// Metadata is not content and is not compared.
// The target is the same when it is the one d was enqueued for or the one
// a Follow supersession moved it to: the request did not change, the
// destination did.
func (d Delivery) EnqueueAgain(req EnqueueRequest, defaults Policy) Outcome {
	sameTarget := req.Target == d.Target || (d.EnqueuedTarget != "" && req.Target == d.EnqueuedTarget)
	if sameTarget && d.Ceremony == req.Ceremony &&
		bytes.Equal(d.Payload, req.Payload) && d.Policy == req.Policy.Resolve(defaults) {
		return OutcomeRepeated
	}
	return OutcomeConflict
}

// Offerable reports whether Lease may hand d out at now.
func (d Delivery) Offerable(now time.Time) bool {
	return (d.State == DeliveryStateOffered || d.State == DeliveryStateLeased) &&
		!d.AvailableAt.After(Normalize(now)) && d.Attempts < d.Policy.MaxAttempts
}

// OfferedBefore orders offerable deliveries the way Lease hands them out:
// oldest AvailableAt first, then by ID.
func (d Delivery) OfferedBefore(other Delivery) bool {
	if !d.AvailableAt.Equal(other.AvailableAt) {
		return d.AvailableAt.Before(other.AvailableAt)
	}
	return d.ID < other.ID
}

// Grant leases d to owner until now+duration under token, counting an
// attempt. d must be Offerable at now. Taking over a lease that ran out
// records a FailureLeaseExpired for its holder.
func (d Delivery) Grant(owner Owner, token Token, now time.Time, duration time.Duration) (Delivery, Lease) {
	now = Normalize(now)
	if d.State == DeliveryStateLeased && d.Lease != nil {
		d.LastFailure = &Failure{Kind: FailureLeaseExpired, Message: "lease expired", Owner: d.Lease.Owner, At: d.Lease.ExpiresAt}
	}
	d.LeaseSeq++
	lease := Lease{
		DeliveryID: d.ID,
		Owner:      owner,
		Token:      token,
		Seq:        d.LeaseSeq,
		GrantedAt:  now,
		ExpiresAt:  now.Add(duration.Truncate(time.Microsecond)),
	}
	d.State = DeliveryStateLeased
	d.Attempts++
	d.Lease = &lease
	d.EndedLease = nil
	d.AvailableAt = lease.ExpiresAt
	d.touch(now)
	return d, lease
}

// HeldByOtherIncarnation reports whether d is Leased to owner's agent under
// another incarnation, which the incarnation rule takes back.
func (d Delivery) HeldByOtherIncarnation(owner Owner) bool {
	return d.State == DeliveryStateLeased && d.Lease != nil &&
		d.Lease.Owner.Agent == owner.Agent && d.Lease.Owner.Incarnation != owner.Incarnation
}

// Reclaim takes d back from an older incarnation of owner's agent: Offered
// at once with the attempt counted, or Failed when its attempts are used
// up. d must satisfy HeldByOtherIncarnation(owner).
func (d Delivery) Reclaim(owner Owner, now time.Time) Delivery {
	now = Normalize(now)
	d.LastFailure = &Failure{
		Kind:    FailureReclaimed,
		Message: "agent leased as incarnation " + owner.Incarnation,
		Owner:   d.Lease.Owner,
		At:      now,
	}
	return d.giveBack(OpReclaim, now, now)
}

// giveBack ends the current lease with the attempt counted: Offered at
// availableAt, or Failed when attempts are used up.
func (d Delivery) giveBack(op Operation, availableAt, now time.Time) Delivery {
	if d.Attempts >= d.Policy.MaxAttempts {
		d.Lease = nil
		d.EndedLease = nil
		d.end(DeliveryStateFailed, now)
		return d
	}
	d.endLease(op, now)
	d.State = DeliveryStateOffered
	d.AvailableAt = availableAt
	d.touch(now)
	return d
}

// holdOutcome checks a lease-bearing call against d: OutcomeEnded for a
// terminal record, OutcomeLeaseLost when lease is not the grant in force
// (or, when op is not empty, OutcomeRepeated when lease is the grant that op
// already ended). It returns "" when lease is the grant in force.
func (d Delivery) holdOutcome(lease Lease, op Operation) Outcome {
	if d.State.Terminal() {
		return OutcomeEnded
	}
	if d.Lease != nil && d.Lease.sameGrant(lease) {
		return ""
	}
	if op != "" && lease.DeliveryID == d.ID && d.EndedLease.matches(lease.Token, lease.Seq, op) {
		return OutcomeRepeated
	}
	return OutcomeLeaseLost
}

// Acknowledge records that the holder of lease received d.
func (d Delivery) Acknowledge(lease Lease, observation string, now time.Time) (Delivery, Outcome) {
	now = Normalize(now)
	if o := d.holdOutcome(lease, ""); o != "" {
		return d, o
	}
	if d.State == DeliveryStateAcknowledged {
		return d, OutcomeRepeated
	}
	if d.Lease.ExpiredAt(now) {
		return d, OutcomeLeaseExpired
	}
	d.State = DeliveryStateAcknowledged
	d.Ack = &Acknowledgement{
		Owner:       d.Lease.Owner,
		Observation: observation,
		At:          now,
		Deadline:    now.Add(d.Policy.AckWindow),
	}
	d.touch(now)
	return d, OutcomeApplied
}

// MarkProcessed closes d for owner. highest is the highest fence already
// accepted for d's target (nil: none). On OutcomeApplied the store raises
// the target's high-water mark with RaiseFence.
func (d Delivery) MarkProcessed(owner Owner, fence, highest *Fence, action ActionRef, now time.Time) (Delivery, Outcome) {
	now = Normalize(now)
	switch {
	case d.State == DeliveryStateProcessed && d.Processing != nil && d.Processing.Action == action &&
		d.Ack != nil && d.Ack.Owner == owner:
		return d, OutcomeRepeated
	case d.State.Terminal():
		return d, OutcomeEnded
	case d.State != DeliveryStateAcknowledged:
		return d, OutcomeWrongState
	case d.Ack.Owner != owner:
		return d, OutcomeWrongOwner
	case fence != nil && highest != nil && *fence < *highest:
		return d, OutcomeFenceRejected
	}
	p := &Processing{Action: action, At: now}
	if fence != nil {
		f := *fence
		p.Fence = &f
	}
	d.Processing = p
	d.Lease = nil
	d.end(DeliveryStateProcessed, now)
	return d, OutcomeApplied
}

// AcknowledgeProcessed is the step of AckProcessor on d: the
// acknowledgement under lease and, when it applied, the processing by the
// owner it recorded. highest is the highest fence already accepted for
// d's target (nil: none). It returns the record after each step, and the
// second step's outcome is "" when the first did not apply.
func (d Delivery) AcknowledgeProcessed(lease Lease, observation string, fence, highest *Fence, action ActionRef, now time.Time) (acked Delivery, ackOutcome Outcome, done Delivery, doneOutcome Outcome) {
	acked, ackOutcome = d.Acknowledge(lease, observation, now)
	if ackOutcome != OutcomeApplied {
		return acked, ackOutcome, acked, ""
	}
	done, doneOutcome = acked.MarkProcessed(acked.Ack.Owner, fence, highest, action, now)
	return acked, ackOutcome, done, doneOutcome
}

// RaiseFence returns the target's new high-water mark after a fence was
// accepted: the larger of highest and fence (either may be nil).
func RaiseFence(highest, fence *Fence) *Fence {
	if fence == nil || (highest != nil && *highest >= *fence) {
		return highest
	}
	f := *fence
	return &f
}

// RecordActivation notes what a push or wake-up did; the state is
// unchanged. Activations counts up to MaxCount and stays there.
func (d Delivery) RecordActivation(a Activation, now time.Time) (Delivery, Outcome) {
	now = Normalize(now)
	if d.State.Terminal() {
		return d, OutcomeEnded
	}
	d.Activations = addCount(d.Activations)
	d.LastActivation = &a
	d.LastActivationAt = now
	d.touch(now)
	return d, OutcomeApplied
}

// MarkFailed gives up the attempt held under lease.
func (d Delivery) MarkFailed(lease Lease, reason FailureReason, now time.Time) (Delivery, Outcome) {
	now = Normalize(now)
	if o := d.holdOutcome(lease, OpMarkFailed); o != "" {
		return d, o
	}
	if d.State != DeliveryStateLeased {
		return d, OutcomeWrongState
	}
	d.LastFailure = &Failure{
		Kind:      FailureReported,
		Message:   reason.Message,
		Permanent: reason.Permanent,
		Owner:     d.Lease.Owner,
		At:        now,
	}
	if reason.Permanent {
		d.Lease = nil
		d.EndedLease = nil
		d.end(DeliveryStateFailed, now)
		return d, OutcomeApplied
	}
	return d.giveBack(OpMarkFailed, now.Add(d.Policy.Backoff(d.ID, d.Attempts)), now), OutcomeApplied
}

// Release gives the lease back without counting the attempt.
func (d Delivery) Release(lease Lease, now time.Time) (Delivery, Outcome) {
	now = Normalize(now)
	if o := d.holdOutcome(lease, OpRelease); o != "" {
		return d, o
	}
	if d.State != DeliveryStateLeased {
		return d, OutcomeWrongState
	}
	d.Attempts--
	d.endLease(OpRelease, now)
	d.State = DeliveryStateOffered
	d.AvailableAt = now
	d.touch(now)
	return d, OutcomeApplied
}

// Renew moves the expiry of the lease in force to now+duration (see
// Renewer).
func (d Delivery) Renew(lease Lease, now time.Time, duration time.Duration) (Delivery, Outcome) {
	now = Normalize(now)
	if o := d.holdOutcome(lease, ""); o != "" {
		return d, o
	}
	if d.State != DeliveryStateLeased {
		return d, OutcomeWrongState
	}
	if d.Lease.ExpiredAt(now) {
		return d, OutcomeLeaseExpired
	}
	l := *d.Lease
	l.ExpiresAt = now.Add(duration.Truncate(time.Microsecond))
	d.Lease = &l
	d.AvailableAt = l.ExpiresAt
	d.touch(now)
	return d, OutcomeApplied
}

// Expirable reports whether Expire changes d at now.
func (d Delivery) Expirable(now time.Time) bool {
	now = Normalize(now)
	switch d.State {
	case DeliveryStateLeased:
		return d.Lease != nil && d.Lease.ExpiredAt(now)
	case DeliveryStateAcknowledged:
		return d.Ack != nil && !now.Before(d.Ack.Deadline)
	}
	return false
}

// Expire applies the sweep to d; the bool says whether d changed.
func (d Delivery) Expire(now time.Time) (Delivery, bool) {
	now = Normalize(now)
	if !d.Expirable(now) {
		return d, false
	}
	if d.State == DeliveryStateAcknowledged {
		d.Cause = &Cause{Kind: CauseAcknowledgementLapsed, Detail: "not processed by " + d.Ack.Deadline.Format(time.RFC3339Nano)}
		d.Lease = nil
		d.end(DeliveryStateExpired, now)
		return d, true
	}
	d.LastFailure = &Failure{Kind: FailureLeaseExpired, Message: "lease expired", Owner: d.Lease.Owner, At: d.Lease.ExpiresAt}
	return d.giveBack(OpExpire, d.Lease.ExpiresAt, now), true
}

// Abandon ends open d as Expired with cause: OutcomeEnded when d is
// already terminal. ExpireCeremony applies it to each open delivery of the
// ceremony.
func (d Delivery) Abandon(cause Cause, now time.Time) (Delivery, Outcome) {
	now = Normalize(now)
	if d.State.Terminal() {
		return d, OutcomeEnded
	}
	d.Cause = &cause
	d.Lease = nil
	d.EndedLease = nil
	d.end(DeliveryStateExpired, now)
	return d, OutcomeApplied
}

// Supersedable reports whether Supersede moves or ends d: only Offered and
// Leased deliveries; acknowledged work stays and closes normally.
func (d Delivery) Supersedable() bool {
	return d.State == DeliveryStateOffered || d.State == DeliveryStateLeased
}

// Supersede moves d to replacement (Follow) or ends it (LeaveBehind); the
// bool says whether d changed.
func (d Delivery) Supersede(replacement Target, mode FollowMode, now time.Time) (Delivery, bool) {
	now = Normalize(now)
	if !d.Supersedable() {
		return d, false
	}
	if mode == LeaveBehind {
		d.Cause = &Cause{Kind: CauseSuperseded, Detail: "replaced by " + string(replacement)}
		d.Lease = nil
		d.EndedLease = nil
		d.end(DeliveryStateExpired, now)
		return d, true
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
	if d.State == DeliveryStateLeased {
		d.Attempts--
		d.endLease(OpSupersede, now)
		d.State = DeliveryStateOffered
		d.AvailableAt = now
	}
	d.touch(now)
	return d, true
}

// Clone returns a deep copy of d, sharing no memory with it.
func (d Delivery) Clone() Delivery {
	d.Payload = clonePayload(d.Payload)
	d.Metadata = d.Metadata.Clone()
	d.Lease = clonePtr(d.Lease)
	d.EndedLease = clonePtr(d.EndedLease)
	d.Ack = clonePtr(d.Ack)
	if d.Processing != nil {
		p := *d.Processing
		p.Fence = clonePtr(p.Fence)
		d.Processing = &p
	}
	d.LastActivation = clonePtr(d.LastActivation)
	d.LastFailure = clonePtr(d.LastFailure)
	d.Cause = clonePtr(d.Cause)
	return d
}

func (d *Delivery) endLease(op Operation, now time.Time) {
	if d.Lease != nil {
		d.EndedLease = &EndedGrant{Token: d.Lease.Token, Seq: d.Lease.Seq, Op: op, At: now}
	}
	d.Lease = nil
}

func (d *Delivery) end(state DeliveryState, now time.Time) {
	d.State = state
	d.EndedAt = now
	d.touch(now)
}

func (d *Delivery) touch(now time.Time) {
	d.UpdatedAt = now
	d.Version++
}

// addCount returns n+1, or n when n is at MaxCount: no transition takes
// a count past what both stores hold.
func addCount(n int) int {
	if n >= MaxCount {
		return n
	}
	return n + 1
}

func clonePayload(p []byte) []byte {
	if len(p) == 0 {
		return nil
	}
	return bytes.Clone(p)
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
