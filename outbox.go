package ledger

import (
	"bytes"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// This file is the outbox entry state machine, pure like the delivery one
// in delivery.go.

// outboxNamespace is the UUID namespace of outbox entry IDs. Changing it
// would give existing idempotency keys new IDs: never change it.
var outboxNamespace = uuid.MustParse("6f1b8c1e-2d43-4d3a-9a57-5f0d2c7e9b10")

// OutboxEntryIDFor returns the entry ID that an envelope with this
// idempotency key gets: a name-based (version 5) UUID, so every store, and
// every retry of an enqueue, derives the same ID from the same key.
func OutboxEntryIDFor(idempotencyKey string) OutboxEntryID {
	return OutboxEntryID(uuid.NewSHA1(outboxNamespace, []byte(idempotencyKey)).String())
}

// NewOutboxEntry returns the Pending entry Enqueue stores for env. env must
// have passed ValidateEnvelope.
func NewOutboxEntry(env Envelope, now time.Time) OutboxEntry {
	now = Normalize(now)
	env.Payload = clonePayload(env.Payload)
	env.Metadata = env.Metadata.Clone()
	return OutboxEntry{
		ID:        OutboxEntryIDFor(env.IdempotencyKey),
		Envelope:  env,
		Status:    OutboxStatusPending,
		CreatedAt: now,
		UpdatedAt: now,
		Version:   1,
	}
}

// EnqueueAgain returns the outcome of enqueueing env when e already holds
// its ID: OutcomeRepeated for the same provider, kind and payload,
// OutcomeConflict otherwise. Metadata is not content and is not compared.
func (e OutboxEntry) EnqueueAgain(env Envelope) Outcome {
	if e.Envelope.Provider == env.Provider && e.Envelope.Kind == env.Kind &&
		e.Envelope.IdempotencyKey == env.IdempotencyKey && bytes.Equal(e.Envelope.Payload, env.Payload) {
		return OutcomeRepeated
	}
	return OutcomeConflict
}

// unclaimedAt reports whether no claim is in force on e at now.
func (e OutboxEntry) unclaimedAt(now time.Time) bool {
	return e.Claim == nil || e.Claim.ExpiredAt(Normalize(now))
}

// PendingClaimable reports whether ClaimPending may claim e at now.
func (e OutboxEntry) PendingClaimable(now time.Time) bool {
	return e.Status == OutboxStatusPending && e.unclaimedAt(now)
}

// RetryClaimable reports whether ClaimRetryReady may claim e at now.
func (e OutboxEntry) RetryClaimable(now time.Time) bool {
	return e.RetryReady(now) && e.unclaimedAt(now)
}

// RetryReady reports whether FindRetryReady returns e at now.
func (e OutboxEntry) RetryReady(now time.Time) bool {
	return e.Status.Scheduled() && !e.NextAttemptAt.After(Normalize(now))
}

// PendingBefore orders pending entries by the fields a record holds:
// CreatedAt, then ID. The stores order FindPending and ClaimPending more
// finely: they break ties on CreatedAt by enqueue order, a sequence number
// of their own (every entry of one EnqueueBatch shares one CreatedAt, and
// IDs are hashes of the idempotency keys, so ID order is not arrival
// order), and fall back on the ID only as the last resort. PendingBefore
// thus agrees with the stores' order between entries whose CreatedAt
// differs.
func (e OutboxEntry) PendingBefore(other OutboxEntry) bool {
	if !e.CreatedAt.Equal(other.CreatedAt) {
		return e.CreatedAt.Before(other.CreatedAt)
	}
	return e.ID < other.ID
}

// RetryBefore orders retry-ready entries: NextAttemptAt, then ID.
func (e OutboxEntry) RetryBefore(other OutboxEntry) bool {
	if !e.NextAttemptAt.Equal(other.NextAttemptAt) {
		return e.NextAttemptAt.Before(other.NextAttemptAt)
	}
	return e.ID < other.ID
}

// Grant claims e for worker until now+duration under token, counting an
// attempt (an entry already at MaxCount attempts stays there). e must be
// PendingClaimable or RetryClaimable at now.
func (e OutboxEntry) Grant(worker string, token Token, now time.Time, duration time.Duration) (OutboxEntry, Claim) {
	now = Normalize(now)
	e.ClaimSeq++
	c := Claim{
		EntryID:   e.ID,
		Worker:    worker,
		Token:     token,
		Seq:       e.ClaimSeq,
		ClaimedAt: now,
		ExpiresAt: now.Add(duration.Truncate(time.Microsecond)),
	}
	e.Claim = &c
	e.EndedClaim = nil
	e.Attempts = addCount(e.Attempts)
	e.touch(now)
	return e, c
}

// Save applies the base contract's optimistic write of in's mutable fields.
// in must have passed ValidateSave.
func (e OutboxEntry) Save(in OutboxEntry, now time.Time) (OutboxEntry, error) {
	if in.Version != e.Version {
		return e, fmt.Errorf("%w: outbox entry %s is at version %d, not %d", ErrConflict, e.ID, e.Version, in.Version)
	}
	if e.Status.Terminal() {
		return e, fmt.Errorf("%w: outbox entry %s already ended as %s", ErrConflict, e.ID, e.Status)
	}
	e.Attempts = in.Attempts
	return e.apply(in, OpSave, now), nil
}

// apply writes in's Status, NextAttemptAt, LastError, Result and
// DeadLetterReason, ending the claim in force (under op) when there is one.
func (e OutboxEntry) apply(in OutboxEntry, op Operation, now time.Time) OutboxEntry {
	now = Normalize(now)
	e.Status = in.Status
	e.NextAttemptAt = time.Time{}
	if in.Status.Scheduled() {
		e.NextAttemptAt = ClampPast(in.NextAttemptAt)
	}
	e.LastError = clonePtr(in.LastError)
	e.Result = clonePtr(in.Result)
	e.DeadLetterReason = in.DeadLetterReason
	if e.Status.Terminal() {
		e.Claim = nil
		e.EndedClaim = nil
		e.EndedAt = now
	} else if e.Claim != nil {
		e.EndedClaim = &EndedGrant{Token: e.Claim.Token, Seq: e.Claim.Seq, Op: op, At: now}
		e.Claim = nil
	}
	e.touch(now)
	return e
}

// completion is the target of a completion: what the entry becomes.
func (e OutboxEntry) delivered(result EmissionResult) OutboxEntry {
	e.Status = OutboxStatusDelivered
	e.Result = &result
	return e
}

func (e OutboxEntry) failed(emissionErr EmissionError, nextRetry *time.Time) OutboxEntry {
	e.Status = OutboxStatusFailed
	if nextRetry != nil {
		e.Status = OutboxStatusRetryScheduled
		e.NextAttemptAt = *nextRetry
	}
	e.LastError = &emissionErr
	return e
}

func (e OutboxEntry) deadLettered(emissionErr EmissionError, reason string) OutboxEntry {
	e.Status = OutboxStatusDeadLettered
	e.LastError = &emissionErr
	e.DeadLetterReason = reason
	return e
}

// complete applies a base completion (no claim check). An entry already in
// the target terminal status comes back unchanged; one that ended otherwise
// is ErrConflict. Without a claim in force the completion counts an
// attempt (up to MaxCount); with one, the claim already counted it.
func (e OutboxEntry) complete(target OutboxEntry, op Operation, now time.Time) (OutboxEntry, error) {
	if e.Status.Terminal() {
		if e.Status == target.Status && !target.Status.Scheduled() {
			return e, nil
		}
		return e, fmt.Errorf("%w: outbox entry %s already ended as %s", ErrConflict, e.ID, e.Status)
	}
	if e.Claim == nil {
		e.Attempts = addCount(e.Attempts)
	}
	e = e.apply(target, op, now)
	// A base completion is not a call made under the claim, so the holder's
	// own later completion must not pass for a repeat of it.
	e.EndedClaim = nil
	return e, nil
}

// MarkDelivered is the base contract's MarkDelivered.
func (e OutboxEntry) MarkDelivered(result EmissionResult, now time.Time) (OutboxEntry, error) {
	return e.complete(e.delivered(result), OpMarkDelivered, now)
}

// MarkFailed is the base contract's MarkFailed.
func (e OutboxEntry) MarkFailed(emissionErr EmissionError, nextRetry *time.Time, now time.Time) (OutboxEntry, error) {
	return e.complete(e.failed(emissionErr, nextRetry), OpMarkFailed, now)
}

// MarkDeadLettered is the base contract's MarkDeadLettered.
func (e OutboxEntry) MarkDeadLettered(emissionErr EmissionError, reason string, now time.Time) (OutboxEntry, error) {
	return e.complete(e.deadLettered(emissionErr, reason), OpMarkDeadLettered, now)
}

// claimOutcome checks a claim completion against e: OutcomeEnded for a
// terminal entry, "" when claim is in force, OutcomeRepeated when claim is
// the one op already ended, OutcomeLeaseLost otherwise.
func (e OutboxEntry) claimOutcome(claim Claim, op Operation) Outcome {
	if e.Status.Terminal() {
		return OutcomeEnded
	}
	if e.Claim != nil && e.Claim.sameGrant(claim) {
		return ""
	}
	if claim.EntryID == e.ID && e.EndedClaim.matches(claim.Token, claim.Seq, op) {
		return OutcomeRepeated
	}
	return OutcomeLeaseLost
}

func (e OutboxEntry) completeClaim(claim Claim, target OutboxEntry, op Operation, now time.Time) (OutboxEntry, Outcome) {
	if o := e.claimOutcome(claim, op); o != "" {
		return e, o
	}
	return e.apply(target, op, now), OutcomeApplied
}

// MarkClaimDelivered is ClaimStore.MarkClaimDelivered.
func (e OutboxEntry) MarkClaimDelivered(claim Claim, result EmissionResult, now time.Time) (OutboxEntry, Outcome) {
	return e.completeClaim(claim, e.delivered(result), OpMarkDelivered, now)
}

// MarkClaimFailed is ClaimStore.MarkClaimFailed.
func (e OutboxEntry) MarkClaimFailed(claim Claim, emissionErr EmissionError, nextRetry *time.Time, now time.Time) (OutboxEntry, Outcome) {
	return e.completeClaim(claim, e.failed(emissionErr, nextRetry), OpMarkFailed, now)
}

// MarkClaimDeadLettered is ClaimStore.MarkClaimDeadLettered.
func (e OutboxEntry) MarkClaimDeadLettered(claim Claim, emissionErr EmissionError, reason string, now time.Time) (OutboxEntry, Outcome) {
	return e.completeClaim(claim, e.deadLettered(emissionErr, reason), OpMarkDeadLettered, now)
}

// SaveClaim is ClaimStore.SaveClaim. claim and in must have passed
// ValidateSaveClaim.
func (e OutboxEntry) SaveClaim(claim Claim, in OutboxEntry, now time.Time) (OutboxEntry, Outcome) {
	return e.completeClaim(claim, in, OpSaveClaim, now)
}

// ReleaseClaim is ClaimStore.ReleaseClaim: the claim ends, the status
// stays, and the attempt is given back.
func (e OutboxEntry) ReleaseClaim(claim Claim, now time.Time) (OutboxEntry, Outcome) {
	if o := e.claimOutcome(claim, OpReleaseClaim); o != "" {
		return e, o
	}
	e.Attempts--
	return e.apply(e, OpReleaseClaim, now), OutcomeApplied
}

// RenewClaim moves the expiry of the claim in force to now+duration (see
// ClaimRenewer).
func (e OutboxEntry) RenewClaim(claim Claim, now time.Time, duration time.Duration) (OutboxEntry, Outcome) {
	now = Normalize(now)
	if o := e.claimOutcome(claim, ""); o != "" {
		return e, o
	}
	if e.Claim.ExpiredAt(now) {
		return e, OutcomeLeaseExpired
	}
	c := *e.Claim
	c.ExpiresAt = now.Add(duration.Truncate(time.Microsecond))
	e.Claim = &c
	e.touch(now)
	return e, OutcomeApplied
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

func (e *OutboxEntry) touch(now time.Time) {
	e.UpdatedAt = now
	e.Version++
}
