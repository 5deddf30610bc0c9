package storekit

import (
	"bytes"
	"fmt"
	"time"

	"github.com/leaseledger/ledger"
)

// This file is the outbox entry state machine, pure like the delivery one
// in delivery.go.

// NewOutboxEntry returns the Pending entry Enqueue stores for env. env must
// have passed ValidateEnvelope.
func NewOutboxEntry(env ledger.Envelope, now time.Time) ledger.OutboxEntry {
	now = ledger.Normalize(now)
	env.Payload = clonePayload(env.Payload)
	env.Metadata = env.Metadata.Clone()
	return ledger.OutboxEntry{
		ID:        ledger.OutboxEntryIDFor(env.IdempotencyKey),
		Envelope:  env,
		Status:    ledger.OutboxStatusPending,
		CreatedAt: now,
		UpdatedAt: now,
		Version:   1,
	}
}

// EnqueueAgain returns the outcome of enqueueing env when e already holds
// its ID: ledger.OutcomeRepeated for the same provider, kind and payload,
// ledger.OutcomeConflict otherwise. Metadata is not content and is not compared.
func (e OutboxEntry) EnqueueAgain(env ledger.Envelope) ledger.Outcome {
	if e.Envelope.Provider == env.Provider && e.Envelope.Kind == env.Kind &&
		e.Envelope.IdempotencyKey == env.IdempotencyKey && bytes.Equal(e.Envelope.Payload, env.Payload) {
		return ledger.OutcomeRepeated
	}
	return ledger.OutcomeConflict
}

// unclaimedAt reports whether no claim is in force on e at now.
func (e OutboxEntry) unclaimedAt(now time.Time) bool {
	return e.Claim == nil || e.Claim.ExpiredAt(ledger.Normalize(now))
}

// PendingClaimable reports whether ClaimPending may claim e at now.
func (e OutboxEntry) PendingClaimable(now time.Time) bool {
	return e.Status == ledger.OutboxStatusPending && e.unclaimedAt(now)
}

// RetryClaimable reports whether ClaimRetryReady may claim e at now.
func (e OutboxEntry) RetryClaimable(now time.Time) bool {
	return e.RetryReady(now) && e.unclaimedAt(now)
}

// RetryReady reports whether FindRetryReady returns e at now.
func (e OutboxEntry) RetryReady(now time.Time) bool {
	return e.Status.Scheduled() && !e.NextAttemptAt.After(ledger.Normalize(now))
}

// PendingBefore orders pending entries by the fields a record holds:
// CreatedAt, then ID. The stores order FindPending and ClaimPending more
// finely: they break ties on CreatedAt by enqueue order, a sequence number
// of their own (every entry of one EnqueueBatch shares one CreatedAt, and
// IDs are hashes of the idempotency keys, so ID order is not arrival
// order), and fall back on the ID only as the last resort. PendingBefore
// thus agrees with the stores' order between entries whose CreatedAt
// differs.
func PendingBefore(e, other ledger.OutboxEntry) bool {
	if !e.CreatedAt.Equal(other.CreatedAt) {
		return e.CreatedAt.Before(other.CreatedAt)
	}
	return e.ID < other.ID
}

// RetryBefore orders retry-ready entries: NextAttemptAt, then ID. Like
// PendingBefore and OfferedBefore, it is a comparator as it is.
func RetryBefore(e, other ledger.OutboxEntry) bool {
	if !e.NextAttemptAt.Equal(other.NextAttemptAt) {
		return e.NextAttemptAt.Before(other.NextAttemptAt)
	}
	return e.ID < other.ID
}

// Grant claims e for worker until now+duration under token, counting an
// attempt (an entry already at ledger.MaxCount attempts stays there). e must be
// PendingClaimable or RetryClaimable at now.
func (e OutboxEntry) Grant(worker string, token ledger.Token, now time.Time, duration time.Duration) (ledger.OutboxEntry, ledger.Claim) {
	now = ledger.Normalize(now)
	e.ClaimSeq++
	c := ledger.Claim{
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
	return ledger.OutboxEntry(e), c
}

// Save applies the base contract's optimistic write of in's mutable fields.
// in must have passed ValidateSave.
func (e OutboxEntry) Save(in ledger.OutboxEntry, now time.Time) (ledger.OutboxEntry, error) {
	if in.Version != e.Version {
		return ledger.OutboxEntry(e), fmt.Errorf("%w: outbox entry %s is at version %d, not %d", ledger.ErrConflict, e.ID, e.Version, in.Version)
	}
	if e.Status.Terminal() {
		return ledger.OutboxEntry(e), fmt.Errorf("%w: outbox entry %s already ended as %s", ledger.ErrConflict, e.ID, e.Status)
	}
	e.Attempts = in.Attempts
	return e.apply(in, ledger.OpSave, now), nil
}

// apply writes in's Status, NextAttemptAt, LastError, Result and
// DeadLetterReason, ending the claim in force (under op) when there is one.
func (e OutboxEntry) apply(in ledger.OutboxEntry, op ledger.Operation, now time.Time) ledger.OutboxEntry {
	now = ledger.Normalize(now)
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
		e.EndedClaim = &ledger.EndedGrant{Token: e.Claim.Token, Seq: e.Claim.Seq, Op: op, At: now}
		e.Claim = nil
	}
	e.touch(now)
	return ledger.OutboxEntry(e)
}

// completion is the target of a completion: what the entry becomes.
func (e OutboxEntry) delivered(result ledger.EmissionResult) ledger.OutboxEntry {
	e.Status = ledger.OutboxStatusDelivered
	e.Result = &result
	return ledger.OutboxEntry(e)
}

func (e OutboxEntry) failed(emissionErr ledger.EmissionError, nextRetry *time.Time) ledger.OutboxEntry {
	e.Status = ledger.OutboxStatusFailed
	if nextRetry != nil {
		e.Status = ledger.OutboxStatusRetryScheduled
		e.NextAttemptAt = *nextRetry
	}
	e.LastError = &emissionErr
	return ledger.OutboxEntry(e)
}

func (e OutboxEntry) deadLettered(emissionErr ledger.EmissionError, reason string) ledger.OutboxEntry {
	e.Status = ledger.OutboxStatusDeadLettered
	e.LastError = &emissionErr
	e.DeadLetterReason = reason
	return ledger.OutboxEntry(e)
}

// complete applies a base completion (no claim check). An entry already in
// the target terminal status comes back unchanged; one that ended otherwise
// is ledger.ErrConflict. Without a claim in force the completion counts an
// attempt (up to ledger.MaxCount); with one, the claim already counted it.
func (e OutboxEntry) complete(target ledger.OutboxEntry, op ledger.Operation, now time.Time) (ledger.OutboxEntry, error) {
	if e.Status.Terminal() {
		if e.Status == target.Status && !target.Status.Scheduled() {
			return ledger.OutboxEntry(e), nil
		}
		return ledger.OutboxEntry(e), fmt.Errorf("%w: outbox entry %s already ended as %s", ledger.ErrConflict, e.ID, e.Status)
	}
	if e.Claim == nil {
		e.Attempts = addCount(e.Attempts)
	}
	e = OutboxEntry(e.apply(target, op, now))
	// A base completion is not a call made under the claim, so the holder's
	// own later completion must not pass for a repeat of it.
	e.EndedClaim = nil
	return ledger.OutboxEntry(e), nil
}

// MarkDelivered is the base contract's MarkDelivered.
func (e OutboxEntry) MarkDelivered(result ledger.EmissionResult, now time.Time) (ledger.OutboxEntry, error) {
	return e.complete(e.delivered(result), ledger.OpMarkDelivered, now)
}

// MarkFailed is the base contract's MarkFailed.
func (e OutboxEntry) MarkFailed(emissionErr ledger.EmissionError, nextRetry *time.Time, now time.Time) (ledger.OutboxEntry, error) {
	return e.complete(e.failed(emissionErr, nextRetry), ledger.OpMarkFailed, now)
}

// MarkDeadLettered is the base contract's MarkDeadLettered.
func (e OutboxEntry) MarkDeadLettered(emissionErr ledger.EmissionError, reason string, now time.Time) (ledger.OutboxEntry, error) {
	return e.complete(e.deadLettered(emissionErr, reason), ledger.OpMarkDeadLettered, now)
}

// claimOutcome checks a claim completion against e: ledger.OutcomeEnded for a
// terminal entry, "" when claim is in force, ledger.OutcomeRepeated when claim is
// the one op already ended, ledger.OutcomeLeaseLost otherwise.
func (e OutboxEntry) claimOutcome(claim ledger.Claim, op ledger.Operation) ledger.Outcome {
	if e.Status.Terminal() {
		return ledger.OutcomeEnded
	}
	if e.Claim != nil && sameClaim(*e.Claim, claim) {
		return ""
	}
	if claim.EntryID == e.ID && endedBy(e.EndedClaim, claim.Token, claim.Seq, op) {
		return ledger.OutcomeRepeated
	}
	return ledger.OutcomeLeaseLost
}

func (e OutboxEntry) completeClaim(claim ledger.Claim, target ledger.OutboxEntry, op ledger.Operation, now time.Time) (ledger.OutboxEntry, ledger.Outcome) {
	if o := e.claimOutcome(claim, op); o != "" {
		return ledger.OutboxEntry(e), o
	}
	return e.apply(target, op, now), ledger.OutcomeApplied
}

// MarkClaimDelivered is ledger.ClaimStore.MarkClaimDelivered.
func (e OutboxEntry) MarkClaimDelivered(claim ledger.Claim, result ledger.EmissionResult, now time.Time) (ledger.OutboxEntry, ledger.Outcome) {
	return e.completeClaim(claim, e.delivered(result), ledger.OpMarkDelivered, now)
}

// MarkClaimFailed is ledger.ClaimStore.MarkClaimFailed.
func (e OutboxEntry) MarkClaimFailed(claim ledger.Claim, emissionErr ledger.EmissionError, nextRetry *time.Time, now time.Time) (ledger.OutboxEntry, ledger.Outcome) {
	return e.completeClaim(claim, e.failed(emissionErr, nextRetry), ledger.OpMarkFailed, now)
}

// MarkClaimDeadLettered is ledger.ClaimStore.MarkClaimDeadLettered.
func (e OutboxEntry) MarkClaimDeadLettered(claim ledger.Claim, emissionErr ledger.EmissionError, reason string, now time.Time) (ledger.OutboxEntry, ledger.Outcome) {
	return e.completeClaim(claim, e.deadLettered(emissionErr, reason), ledger.OpMarkDeadLettered, now)
}

// SaveClaim is ledger.ClaimStore.SaveClaim. claim and in must have passed
// ValidateSaveClaim.
func (e OutboxEntry) SaveClaim(claim ledger.Claim, in ledger.OutboxEntry, now time.Time) (ledger.OutboxEntry, ledger.Outcome) {
	return e.completeClaim(claim, in, ledger.OpSaveClaim, now)
}

// ReleaseClaim is ledger.ClaimStore.ReleaseClaim: the claim ends, the status
// stays, and the attempt is given back.
func (e OutboxEntry) ReleaseClaim(claim ledger.Claim, now time.Time) (ledger.OutboxEntry, ledger.Outcome) {
	if o := e.claimOutcome(claim, ledger.OpReleaseClaim); o != "" {
		return ledger.OutboxEntry(e), o
	}
	e.Attempts--
	return e.apply(ledger.OutboxEntry(e), ledger.OpReleaseClaim, now), ledger.OutcomeApplied
}

// RenewClaim moves the expiry of the claim in force to now+duration (see
// ledger.ClaimRenewer).
func (e OutboxEntry) RenewClaim(claim ledger.Claim, now time.Time, duration time.Duration) (ledger.OutboxEntry, ledger.Outcome) {
	now = ledger.Normalize(now)
	if o := e.claimOutcome(claim, ""); o != "" {
		return ledger.OutboxEntry(e), o
	}
	if e.Claim.ExpiredAt(now) {
		return ledger.OutboxEntry(e), ledger.OutcomeLeaseExpired
	}
	c := *e.Claim
	c.ExpiresAt = now.Add(duration.Truncate(time.Microsecond))
	e.Claim = &c
	e.touch(now)
	return ledger.OutboxEntry(e), ledger.OutcomeApplied
}

func (e *OutboxEntry) touch(now time.Time) {
	e.UpdatedAt = now
	e.Version++
}
