package ledger

import (
	"context"
	"time"
)

// This file is redrive: sending again what ended badly, as a new open
// record linked to the original, which keeps its end. River and pg-boss
// retry a job in place, reusing its ID; here an end is never erased, so a
// redrive makes a new record instead, and each record names the other
// (RedrivenFrom, RedrivenTo, and an OpRedrive entry in both histories).
//
// The decisions a user of a job queue would ask about:
//
//   - What can be redriven: a Failed or Expired delivery (any cause:
//     lapsed, superseded, ceremony ended, bounded out), a Failed or
//     DeadLettered outbox entry. Work that ended well (Processed,
//     Delivered) and open work answer OutcomeWrongState and write nothing.
//   - The new record's ID: the caller's (RedriveRequest.NewID,
//     RedriveEntryRequest.IdempotencyKey), or one derived from the
//     original (storekit.RedriveID, storekit.RedriveKey): the original's followed by
//     "/redrive", so that an operator reading either sees the link, and a
//     redrive of a redrive reads ".../redrive/redrive". An outbox entry's
//     ID comes from its idempotency key, so the new entry has a new key:
//     a provider that deduplicates on the key must see the redrive as a
//     new emission, or it would drop what the operator asked to send.
//   - What the new record keeps: for a delivery, its target as it now
//     stands (after a Follow supersession, the replacement), ceremony,
//     payload, metadata and resolved policy, so that the retries it gets
//     are the ones it was enqueued with, whatever the store's defaults are
//     now; for an entry, its provider, kind, payload and metadata (a trace
//     context in it links the redrive to the producer's span, as the
//     original was). It starts afresh:
//     Offered (Pending) at now, no attempts, no lease or claim, no
//     failure, Version 1.
//   - Idempotence: a record is redriven at most once. Redriving it again
//     answers OutcomeRepeated with the record the first redrive made (as
//     it now stands; the zero record if that one was purged since), and
//     writes nothing; asking for a different new ID then answers
//     OutcomeConflict. A new ID already taken by another record is
//     OutcomeConflict too, and nothing is written.
//   - The original stays terminal with its cause, failure and EndedAt;
//     the redrive sets RedrivenTo, bumps its Version and stamps UpdatedAt,
//     and its history gains an OpRedrive entry ("redriven as ID") from its
//     state to the same state. The new record's history starts with an
//     OpRedrive creation ("redriven from ID", see storekit.DeliveryCreation).
//   - A redriven delivery joins its target's queue like an enqueued one,
//     so a queue bound (QueueBounds) applies to it: the redrive may
//     abandon the target's oldest offered delivery (RedriveResult.Abandoned).

// Redriver is implemented by ledgers that can send a failed or expired
// delivery again. Detect it with a type assertion.
//
// Redrive redrives one delivery (see the rules above). Outcomes, first
// match wins: NotFound; Repeated (already redriven as the ID asked for,
// or as any ID when NewID is empty) or Conflict (already redriven as
// another ID); WrongState (open, or Processed); Conflict (the new ID is
// taken); Applied. Errors: ErrInvalid, ctx.Err(), store errors.
//
// RedriveMatching redrives, in one transaction, up to q.Limit deliveries
// matching q that were never redriven and ended before q.Cutoff(now),
// oldest EndedAt first (then ID),
// each as Redrive with a derived ID would, and answers one result per
// delivery examined: Applied, or Conflict when its derived ID is taken.
// Follow RedriveBatch.Next to the end to redrive everything that matches.
type Redriver interface {
	Redrive(ctx context.Context, req RedriveRequest, now time.Time) (RedriveResult, error)
	RedriveMatching(ctx context.Context, q RedriveQuery, now time.Time) (RedriveBatch, error)
}

// OutboxRedriver is Redriver for outbox entries, which a failed or
// dead-lettered emission leaves behind. Like the outbox's Enqueue it
// stamps its times from the store's clock.
type OutboxRedriver interface {
	RedriveEntry(ctx context.Context, req RedriveEntryRequest) (RedriveEntryResult, error)
	RedriveEntriesMatching(ctx context.Context, q RedriveEntryQuery) (RedriveEntryBatch, error)
}

// RedriveRequest asks for one delivery to be redriven.
type RedriveRequest struct {
	ID DeliveryID
	// NewID names the new delivery; empty means storekit.RedriveID(ID).
	NewID DeliveryID
}

// RedriveResult is the answer of Redrive.
type RedriveResult struct {
	Outcome Outcome
	// Original is the delivery redriven as it now stands (also when the
	// call did not apply); the zero Delivery for OutcomeNotFound.
	Original Delivery
	// Redriven is the delivery the redrive made, as it now stands, for
	// OutcomeApplied and OutcomeRepeated; the zero Delivery otherwise.
	Redriven Delivery
	// Abandoned lists what the target's queue bound ended to make room
	// for Redriven (see DeliveryResult.Abandoned).
	Abandoned []DeliveryID
}

// Applied reports whether this call redrove the delivery.
func (r RedriveResult) Applied() bool { return r.Outcome == OutcomeApplied }

// RedriveQuery selects the deliveries RedriveMatching redrives. Empty
// filters match everything redrivable.
type RedriveQuery struct {
	// States is a subset of Failed and Expired; empty means both.
	States  []DeliveryState
	Targets []Target
	// EndedBefore, when not zero, keeps only what ended before it; a
	// call never takes what ended at or after its now (see Cutoff).
	EndedBefore time.Time
	// Limit is how many deliveries one call examines, 1 to MaxLimit.
	Limit int
	// Cursor is RedriveBatch.Next of the previous call; empty for the first.
	Cursor string
}

// RedriveBatch is the answer of RedriveMatching.
type RedriveBatch struct {
	// Results has one result per delivery examined, oldest EndedAt first.
	Results []RedriveResult
	// Next resumes after the last delivery examined; empty when the call
	// examined fewer than Limit, so that nothing matching is left. A full
	// batch sets Next even when nothing follows: the next call then
	// answers an empty batch.
	Next string
}

// Redriven counts the results that applied.
func (b RedriveBatch) Redriven() int {
	n := 0
	for _, r := range b.Results {
		if r.Applied() {
			n++
		}
	}
	return n
}

// RedriveEntryRequest asks for one outbox entry to be redriven.
type RedriveEntryRequest struct {
	ID OutboxEntryID
	// IdempotencyKey is the new entry's key, which fixes its ID; empty
	// means storekit.RedriveKey of the original's key.
	IdempotencyKey string
}

// RedriveEntryResult is the answer of RedriveEntry, as RedriveResult.
type RedriveEntryResult struct {
	Outcome  Outcome
	Original OutboxEntry
	Redriven OutboxEntry
}

// Applied reports whether this call redrove the entry.
func (r RedriveEntryResult) Applied() bool { return r.Outcome == OutcomeApplied }

// RedriveEntryQuery selects the entries RedriveEntriesMatching redrives.
type RedriveEntryQuery struct {
	// Statuses is a subset of Failed and DeadLettered; empty means both.
	Statuses  []OutboxStatus
	Providers []string
	// IdempotencyKey, when not empty, keeps only the entries enqueued
	// with this key (see OutboxListQuery.IdempotencyKey).
	IdempotencyKey string
	EndedBefore    time.Time
	Limit          int
	Cursor         string
}

// RedriveEntryBatch is the answer of RedriveEntriesMatching, as
// RedriveBatch.
type RedriveEntryBatch struct {
	Results []RedriveEntryResult
	Next    string
}

// Redriven counts the results that applied.
func (b RedriveEntryBatch) Redriven() int {
	n := 0
	for _, r := range b.Results {
		if r.Applied() {
			n++
		}
	}
	return n
}

// Redrivable reports whether d ended in a state a redrive accepts (Failed
// or Expired) and was not redriven yet.
func (d Delivery) Redrivable() bool {
	return d.RedrivenTo == "" && redrivableState(d.State)
}

func redrivableState(s DeliveryState) bool {
	return s == DeliveryStateFailed || s == DeliveryStateExpired
}

// Redrivable reports whether e ended in a status a redrive accepts
// (Failed or DeadLettered) and was not redriven yet.
func (e OutboxEntry) Redrivable() bool {
	return e.RedrivenTo == "" && redrivableStatus(e.Status)
}

func redrivableStatus(s OutboxStatus) bool {
	return s == OutboxStatusFailed || s == OutboxStatusDeadLettered
}

// Matches reports whether RedriveMatching at now with q's filters takes d
// (cursor aside): d is Redrivable, in one of q's states, for one of its
// targets, and ended before q.Cutoff(now).
func (q RedriveQuery) Matches(d Delivery, now time.Time) bool {
	return d.Redrivable() &&
		(len(q.States) == 0 || contains(q.States, d.State)) &&
		(len(q.Targets) == 0 || contains(q.Targets, d.Target)) &&
		d.EndedAt.Before(q.Cutoff(now))
}

// Cutoff returns the time before which a delivery must have ended for
// RedriveMatching at now to take it: EndedBefore when it is set and
// earlier, else now. What the call's own redrives end (a queue bound
// abandons as it redrives) ends at now, so a call never chases it; a
// caller that pages through several calls should set EndedBefore to the
// time it started, so that the pass does not either.
func (q RedriveQuery) Cutoff(now time.Time) time.Time {
	return cutoff(q.EndedBefore, now)
}

// Matches reports whether RedriveEntriesMatching with q's filters takes e
// (cursor aside). Redriving an entry ends nothing, so unlike
// RedriveQuery there is no cutoff at the call's time: only EndedBefore.
func (q RedriveEntryQuery) Matches(e OutboxEntry) bool {
	return e.Redrivable() &&
		(len(q.Statuses) == 0 || contains(q.Statuses, e.Status)) &&
		(len(q.Providers) == 0 || contains(q.Providers, e.Envelope.Provider)) &&
		(q.IdempotencyKey == "" || e.Envelope.IdempotencyKey == q.IdempotencyKey) &&
		(q.EndedBefore.IsZero() || e.EndedAt.Before(Normalize(q.EndedBefore)))
}

func cutoff(endedBefore, now time.Time) time.Time {
	now = Normalize(now)
	if !endedBefore.IsZero() && Normalize(endedBefore).Before(now) {
		return Normalize(endedBefore)
	}
	return now
}
