package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
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
//     original (RedriveID, RedriveKey): the original's followed by
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
//     OpRedrive creation ("redriven from ID", see DeliveryCreation).
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
	// NewID names the new delivery; empty means RedriveID(ID).
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
	// means RedriveKey of the original's key.
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

// redriveSuffix marks a derived ID or key.
const redriveSuffix = "/redrive"

// RedriveID returns the ID a redrive of delivery id gives the new delivery
// when the caller names none: id followed by "/redrive". An id too long to
// take the suffix is cut, at a character boundary, to make room for
// "/redrive-" and 16 hex digits of its SHA-256, so the result is a valid
// ID and still differs for different originals.
func RedriveID(id DeliveryID) DeliveryID { return DeliveryID(redriveName(string(id))) }

// RedriveKey returns the idempotency key a redrive of an entry with key
// gives the new entry when the caller names none, as RedriveID does.
func RedriveKey(key string) string { return redriveName(key) }

func redriveName(s string) string {
	if len(s)+len(redriveSuffix) <= MaxNameBytes {
		return s + redriveSuffix
	}
	sum := sha256.Sum256([]byte(s))
	tag := redriveSuffix + "-" + hex.EncodeToString(sum[:8])
	cut := MaxNameBytes - len(tag)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + tag
}

// Redrivable reports whether d ended in a state a redrive accepts (Failed
// or Expired) and was not redriven yet.
func (d Delivery) Redrivable() bool {
	return d.RedrivenTo == "" && redrivableState(d.State)
}

func redrivableState(s DeliveryState) bool {
	return s == DeliveryStateFailed || s == DeliveryStateExpired
}

// RedriveAs returns the ID a redrive of d asking for newID names: the
// delivery d was already redriven as, else newID, else RedriveID(d.ID).
// The store looks that ID up before calling Redrive.
func (d Delivery) RedriveAs(newID DeliveryID) DeliveryID {
	switch {
	case d.RedrivenTo != "":
		return d.RedrivenTo
	case newID != "":
		return newID
	}
	return RedriveID(d.ID)
}

// Redrive redrives d as newID (empty: RedriveID(d.ID)) at now. taken
// reports whether a record holds d.RedriveAs(newID). It returns the
// original as it now stands, the new record (zero unless the outcome is
// OutcomeApplied) and the outcome, in the order Redriver gives. For
// OutcomeRepeated the store answers the record d.RedrivenTo names.
func (d Delivery) Redrive(newID DeliveryID, taken bool, now time.Time) (original, redriven Delivery, o Outcome) {
	now = Normalize(now)
	switch {
	case d.RedrivenTo != "" && (newID == "" || newID == d.RedrivenTo):
		return d, Delivery{}, OutcomeRepeated
	case d.RedrivenTo != "":
		return d, Delivery{}, OutcomeConflict
	case !redrivableState(d.State):
		return d, Delivery{}, OutcomeWrongState
	case taken:
		return d, Delivery{}, OutcomeConflict
	}
	id := d.RedriveAs(newID)
	redriven = Delivery{
		ID:           id,
		Target:       d.Target,
		Ceremony:     d.Ceremony,
		Payload:      clonePayload(d.Payload),
		Metadata:     d.Metadata.Clone(),
		Policy:       d.Policy,
		State:        DeliveryStateOffered,
		AvailableAt:  now,
		CreatedAt:    now,
		UpdatedAt:    now,
		Version:      1,
		RedrivenFrom: d.ID,
	}
	d.RedrivenTo = id
	d.touch(now)
	return d, redriven, OutcomeApplied
}

// Redrivable reports whether e ended in a status a redrive accepts
// (Failed or DeadLettered) and was not redriven yet.
func (e OutboxEntry) Redrivable() bool {
	return e.RedrivenTo == "" && redrivableStatus(e.Status)
}

func redrivableStatus(s OutboxStatus) bool {
	return s == OutboxStatusFailed || s == OutboxStatusDeadLettered
}

// RedriveKeyFor returns the idempotency key of the entry a redrive of e
// asking for key (empty: RedriveKey) makes. Once e was redriven the key is
// that entry's, which the store reads; RedriveAs gives its ID.
func (e OutboxEntry) RedriveKeyFor(key string) string {
	if key != "" {
		return key
	}
	return RedriveKey(e.Envelope.IdempotencyKey)
}

// RedriveAs returns the ID of the entry a redrive of e asking for key
// names: the entry e was already redriven as, else the one key (or
// RedriveKey) fixes.
func (e OutboxEntry) RedriveAs(key string) OutboxEntryID {
	if e.RedrivenTo != "" {
		return e.RedrivenTo
	}
	return OutboxEntryIDFor(e.RedriveKeyFor(key))
}

// Redrive is Delivery.Redrive for outbox entries: the new entry is
// Pending at now under the key key (empty: RedriveKey of e's key).
func (e OutboxEntry) Redrive(key string, taken bool, now time.Time) (original, redriven OutboxEntry, o Outcome) {
	now = Normalize(now)
	switch {
	case e.RedrivenTo != "" && (key == "" || OutboxEntryIDFor(key) == e.RedrivenTo):
		return e, OutboxEntry{}, OutcomeRepeated
	case e.RedrivenTo != "":
		return e, OutboxEntry{}, OutcomeConflict
	case !redrivableStatus(e.Status):
		return e, OutboxEntry{}, OutcomeWrongState
	case taken:
		return e, OutboxEntry{}, OutcomeConflict
	}
	env := e.Envelope
	env.Metadata = e.Envelope.Metadata.Clone()
	env.IdempotencyKey = e.RedriveKeyFor(key)
	redriven = NewOutboxEntry(env, now)
	redriven.RedrivenFrom = e.ID
	e.RedrivenTo = redriven.ID
	e.touch(now)
	return e, redriven, OutcomeApplied
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

// RedrivePosition is where RedriveMatching (or RedriveEntriesMatching)
// resumes: after the record that ended at EndedAt with ID ID, in
// (EndedAt, ID) order. The zero position is the start.
type RedrivePosition struct {
	EndedAt time.Time
	ID      string
}

// After reports whether a record that ended at endedAt with ID id comes
// after p in redrive order.
func (p RedrivePosition) After(endedAt time.Time, id string) bool {
	if p.EndedAt.IsZero() {
		return true
	}
	if c := endedAt.Compare(p.EndedAt); c != 0 {
		return c > 0
	}
	return id > p.ID
}

// redriveCursorPrefix keeps redrive cursors apart from List's.
const redriveCursorPrefix = "r1:"

// EncodeRedriveCursor returns the opaque cursor that resumes after p.
func EncodeRedriveCursor(p RedrivePosition) string {
	return base64.RawURLEncoding.EncodeToString([]byte(redriveCursorPrefix +
		strconv.FormatInt(p.EndedAt.UnixMicro(), 10) + ":" + p.ID))
}

// DecodeRedriveCursor returns the position a redrive cursor resumes
// after; the zero position for an empty cursor. A cursor not made by
// EncodeRedriveCursor is ErrInvalid.
func DecodeRedriveCursor(cursor string) (RedrivePosition, error) {
	if cursor == "" {
		return RedrivePosition{}, nil
	}
	bad := invalid("cursor", "malformed")
	if len(cursor) > 2*MaxNameBytes+64 {
		return RedrivePosition{}, bad
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(cursor)
	if err != nil || !strings.HasPrefix(string(raw), redriveCursorPrefix) {
		return RedrivePosition{}, bad
	}
	micros, id, ok := strings.Cut(strings.TrimPrefix(string(raw), redriveCursorPrefix), ":")
	if !ok {
		return RedrivePosition{}, bad
	}
	us, err := strconv.ParseInt(micros, 10, 64)
	if err != nil {
		return RedrivePosition{}, bad
	}
	p := RedrivePosition{EndedAt: time.UnixMicro(us).UTC(), ID: id}
	if ValidateName("cursor", id) != nil || ValidateTime("cursor", p.EndedAt) != nil || EncodeRedriveCursor(p) != cursor {
		return RedrivePosition{}, bad
	}
	return p, nil
}

// ValidateRedrive checks the arguments of Redrive.
func ValidateRedrive(req RedriveRequest, now time.Time) error {
	return first(
		ValidateName("id", string(req.ID)),
		validateOptionalName("new id", string(req.NewID)),
		ValidateTime("now", now),
	)
}

// ValidateRedriveEntry checks the argument of RedriveEntry.
func ValidateRedriveEntry(req RedriveEntryRequest) error {
	return first(
		ValidateName("id", string(req.ID)),
		validateOptionalName("idempotency key", req.IdempotencyKey),
	)
}

// ValidateRedriveQuery checks a RedriveQuery and returns the position its
// cursor resumes after.
func ValidateRedriveQuery(q RedriveQuery, now time.Time) (RedrivePosition, error) {
	for _, s := range q.States {
		if !redrivableState(s) {
			return RedrivePosition{}, invalid("states", "%q cannot be redriven: want %s or %s", s, DeliveryStateFailed, DeliveryStateExpired)
		}
	}
	if err := first(
		validateTargets("targets", q.Targets),
		optionalTime("ended before", q.EndedBefore),
		ValidateLimit("limit", q.Limit),
		ValidateTime("now", now),
	); err != nil {
		return RedrivePosition{}, err
	}
	return DecodeRedriveCursor(q.Cursor)
}

// ValidateRedriveEntryQuery checks a RedriveEntryQuery and returns the
// position its cursor resumes after.
func ValidateRedriveEntryQuery(q RedriveEntryQuery) (RedrivePosition, error) {
	for _, s := range q.Statuses {
		if !redrivableStatus(s) {
			return RedrivePosition{}, invalid("statuses", "%q cannot be redriven: want %s or %s", s, OutboxStatusFailed, OutboxStatusDeadLettered)
		}
	}
	if len(q.Providers) > MaxLimit {
		return RedrivePosition{}, invalid("providers", "must list at most %d providers", MaxLimit)
	}
	for _, p := range q.Providers {
		if err := ValidateName("providers", p); err != nil {
			return RedrivePosition{}, err
		}
	}
	if err := first(validateOptionalName("idempotency key", q.IdempotencyKey),
		optionalTime("ended before", q.EndedBefore), ValidateLimit("limit", q.Limit)); err != nil {
		return RedrivePosition{}, err
	}
	return DecodeRedriveCursor(q.Cursor)
}

// optionalTime is ValidateTime for a time that may be zero.
func optionalTime(field string, t time.Time) error {
	if t.IsZero() {
		return nil
	}
	return ValidateTime(field, t)
}
