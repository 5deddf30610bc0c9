package storekit

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/leaseledger/ledger"
)

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
// EncodeRedriveCursor is ledger.ErrInvalid.
func DecodeRedriveCursor(cursor string) (RedrivePosition, error) {
	if cursor == "" {
		return RedrivePosition{}, nil
	}
	bad := invalid("cursor", "malformed")
	if len(cursor) > 2*ledger.MaxNameBytes+64 {
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
func ValidateRedrive(req ledger.RedriveRequest, now time.Time) error {
	return first(
		ValidateName("id", string(req.ID)),
		validateOptionalName("new id", string(req.NewID)),
		ValidateTime("now", now),
	)
}

// ValidateRedriveEntry checks the argument of RedriveEntry.
func ValidateRedriveEntry(req ledger.RedriveEntryRequest) error {
	return first(
		ValidateName("id", string(req.ID)),
		validateOptionalName("idempotency key", req.IdempotencyKey),
	)
}

// ValidateRedriveQuery checks a ledger.RedriveQuery and returns the position its
// cursor resumes after.
func ValidateRedriveQuery(q ledger.RedriveQuery, now time.Time) (RedrivePosition, error) {
	for _, s := range q.States {
		if !redrivableState(s) {
			return RedrivePosition{}, invalid("states", "%q cannot be redriven: want %s or %s", s, ledger.DeliveryStateFailed, ledger.DeliveryStateExpired)
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

// ValidateRedriveEntryQuery checks a ledger.RedriveEntryQuery and returns the
// position its cursor resumes after.
func ValidateRedriveEntryQuery(q ledger.RedriveEntryQuery) (RedrivePosition, error) {
	for _, s := range q.Statuses {
		if !redrivableStatus(s) {
			return RedrivePosition{}, invalid("statuses", "%q cannot be redriven: want %s or %s", s, ledger.OutboxStatusFailed, ledger.OutboxStatusDeadLettered)
		}
	}
	if len(q.Providers) > ledger.MaxLimit {
		return RedrivePosition{}, invalid("providers", "must list at most %d providers", ledger.MaxLimit)
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

// redrivableState is the rule of ledger.Delivery.Redrivable for a state
// alone. The root package keeps that rule for its users (the console
// offers a redrive by it); reading it from the record's own method says
// it once.
func redrivableState(s ledger.DeliveryState) bool {
	return ledger.Delivery{State: s}.Redrivable()
}

// redrivableStatus is redrivableState for outbox entries.
func redrivableStatus(s ledger.OutboxStatus) bool {
	return ledger.OutboxEntry{Status: s}.Redrivable()
}

// redriveSuffix marks a derived ID or key.
const redriveSuffix = "/redrive"

// RedriveID returns the ID a redrive of delivery id gives the new delivery
// when the caller names none: id followed by "/redrive". An id too long to
// take the suffix is cut, at a character boundary, to make room for
// "/redrive-" and 16 hex digits of its SHA-256, so the result is a valid
// ID and still differs for different originals.
func RedriveID(id ledger.DeliveryID) ledger.DeliveryID {
	return ledger.DeliveryID(redriveName(string(id)))
}

// RedriveKey returns the idempotency key a redrive of an entry with key
// gives the new entry when the caller names none, as RedriveID does.
func RedriveKey(key string) string { return redriveName(key) }

func redriveName(s string) string {
	if len(s)+len(redriveSuffix) <= ledger.MaxNameBytes {
		return s + redriveSuffix
	}
	sum := sha256.Sum256([]byte(s))
	tag := redriveSuffix + "-" + hex.EncodeToString(sum[:8])
	cut := ledger.MaxNameBytes - len(tag)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + tag
}

// RedriveAs returns the ID a redrive of d asking for newID names: the
// delivery d was already redriven as, else newID, else RedriveID(d.ID).
// The store looks that ID up before calling Redrive.
func (d Delivery) RedriveAs(newID ledger.DeliveryID) ledger.DeliveryID {
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
// ledger.OutcomeApplied) and the outcome, in the order ledger.Redriver gives. For
// ledger.OutcomeRepeated the store answers the record d.RedrivenTo names.
func (d Delivery) Redrive(newID ledger.DeliveryID, taken bool, now time.Time) (original, redriven ledger.Delivery, o ledger.Outcome) {
	now = ledger.Normalize(now)
	switch {
	case d.RedrivenTo != "" && (newID == "" || newID == d.RedrivenTo):
		return ledger.Delivery(d), ledger.Delivery{}, ledger.OutcomeRepeated
	case d.RedrivenTo != "":
		return ledger.Delivery(d), ledger.Delivery{}, ledger.OutcomeConflict
	case !redrivableState(d.State):
		return ledger.Delivery(d), ledger.Delivery{}, ledger.OutcomeWrongState
	case taken:
		return ledger.Delivery(d), ledger.Delivery{}, ledger.OutcomeConflict
	}
	id := d.RedriveAs(newID)
	redriven = ledger.Delivery{
		ID:           id,
		Target:       d.Target,
		Ceremony:     d.Ceremony,
		Payload:      clonePayload(d.Payload),
		Metadata:     d.Metadata.Clone(),
		Policy:       d.Policy,
		State:        ledger.DeliveryStateOffered,
		AvailableAt:  now,
		CreatedAt:    now,
		UpdatedAt:    now,
		Version:      1,
		RedrivenFrom: d.ID,
	}
	d.RedrivenTo = id
	d.touch(now)
	return ledger.Delivery(d), redriven, ledger.OutcomeApplied
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
func (e OutboxEntry) RedriveAs(key string) ledger.OutboxEntryID {
	if e.RedrivenTo != "" {
		return e.RedrivenTo
	}
	return ledger.OutboxEntryIDFor(e.RedriveKeyFor(key))
}

// Redrive is Delivery.Redrive for outbox entries: the new entry is
// Pending at now under the key key (empty: RedriveKey of e's key).
func (e OutboxEntry) Redrive(key string, taken bool, now time.Time) (original, redriven ledger.OutboxEntry, o ledger.Outcome) {
	now = ledger.Normalize(now)
	switch {
	case e.RedrivenTo != "" && (key == "" || ledger.OutboxEntryIDFor(key) == e.RedrivenTo):
		return ledger.OutboxEntry(e), ledger.OutboxEntry{}, ledger.OutcomeRepeated
	case e.RedrivenTo != "":
		return ledger.OutboxEntry(e), ledger.OutboxEntry{}, ledger.OutcomeConflict
	case !redrivableStatus(e.Status):
		return ledger.OutboxEntry(e), ledger.OutboxEntry{}, ledger.OutcomeWrongState
	case taken:
		return ledger.OutboxEntry(e), ledger.OutboxEntry{}, ledger.OutcomeConflict
	}
	env := e.Envelope
	env.Metadata = e.Envelope.Metadata.Clone()
	env.IdempotencyKey = e.RedriveKeyFor(key)
	redriven = NewOutboxEntry(env, now)
	redriven.RedrivenFrom = e.ID
	e.RedrivenTo = redriven.ID
	e.touch(now)
	return ledger.OutboxEntry(e), redriven, ledger.OutcomeApplied
}
