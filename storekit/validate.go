package storekit

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/leaseledger/ledger"
)

// Every exported entry point of every store calls the Validate function
// named after it first, before it touches storage: a rejected call
// returns an *ledger.InvalidError (errors.Is(err, ledger.ErrInvalid))
// naming the field, and writes nothing. The limits are the root
// package's (ledger.MaxNameBytes, ledger.MaxLimit, ...).

// ValidateName checks an identifier-like value: 1 to ledger.MaxNameBytes bytes of
// valid UTF-8 without any character ledger.Invisible reports (control, format
// and other invisible characters), so that two names that look alike are
// the same name.
func ValidateName(field, s string) error {
	// Names are ASCII nearly always, and checking a rune against the
	// Unicode tables Invisible consults cost a drained outbox entry
	// about a twentieth of its client CPU: a name of visible ASCII is
	// valid by the full rule below without consulting them.
	if s != "" && len(s) <= ledger.MaxNameBytes && visibleASCII(s) {
		return nil
	}
	return validateName(field, s)
}

// visibleASCII reports whether every byte of s is a visible ASCII
// character or the space: none of them is a control character or one
// Invisible reports.
func visibleASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// validateName is the full rule of ValidateName.
func validateName(field, s string) error {
	switch {
	case s == "":
		return invalid(field, "must not be empty")
	case len(s) > ledger.MaxNameBytes:
		return invalid(field, "must be at most %d bytes, got %d", ledger.MaxNameBytes, len(s))
	case !utf8.ValidString(s):
		return invalid(field, "must be valid UTF-8")
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return invalid(field, "must not contain control characters")
	}
	if i := strings.IndexFunc(s, ledger.Invisible); i >= 0 {
		r, _ := utf8.DecodeRuneInString(s[i:])
		return invalid(field, "must not contain format or invisible characters, got %U at byte %d", r, i)
	}
	return nil
}

// validateOptionalName is ValidateName for a value that may be empty.
func validateOptionalName(field, s string) error {
	if s == "" {
		return nil
	}
	return ValidateName(field, s)
}

// ValidateText checks free text: valid UTF-8, no NUL, at most ledger.MaxTextBytes.
func ValidateText(field, s string) error {
	switch {
	case len(s) > ledger.MaxTextBytes:
		return invalid(field, "must be at most %d bytes, got %d", ledger.MaxTextBytes, len(s))
	case !utf8.ValidString(s):
		return invalid(field, "must be valid UTF-8")
	case strings.IndexByte(s, 0) >= 0:
		return invalid(field, "must not contain NUL bytes")
	}
	return nil
}

// ValidateTime checks a required time: not zero, within [MinTime(), MaxTime()].
func ValidateTime(field string, t time.Time) error {
	switch {
	case t.IsZero():
		return invalid(field, "must not be zero")
	case t.Before(MinTime()) || t.After(MaxTime()):
		return invalid(field, "must be between %s and %s", MinTime().Format(time.RFC3339), MaxTime().Format(time.RFC3339))
	}
	return nil
}

// ValidateDuration checks a lease or claim duration: at least a
// microsecond, at most ledger.MaxLeaseDuration.
func ValidateDuration(field string, d time.Duration) error {
	if d < time.Microsecond {
		return invalid(field, "must be positive (at least 1µs)")
	}
	if d > ledger.MaxLeaseDuration {
		return invalid(field, "must be at most %s", ledger.MaxLeaseDuration)
	}
	return nil
}

// ValidateLimit checks a limit or page size: 1 to ledger.MaxLimit.
func ValidateLimit(field string, n int) error {
	if n < 1 || n > ledger.MaxLimit {
		return invalid(field, "must be between 1 and %d, got %d", ledger.MaxLimit, n)
	}
	return nil
}

// ValidatePayload checks a payload against a store's limit.
func ValidatePayload(field string, p []byte, maxBytes int) error {
	if len(p) > maxBytes {
		return invalid(field, "must be at most %d bytes, got %d", maxBytes, len(p))
	}
	return nil
}

// ValidateContext rejects a nil context, which would otherwise panic deep
// inside a store.
func ValidateContext(ctx context.Context) error {
	if ctx == nil {
		return invalid("context", "must not be nil")
	}
	return nil
}

// ValidateOwner checks both halves of an owner; an empty owner can never
// match or bypass an owner check.
func ValidateOwner(o ledger.Owner) error {
	if err := ValidateName("owner agent", o.Agent); err != nil {
		return err
	}
	return ValidateName("owner incarnation", o.Incarnation)
}

// ValidateLeaseArg checks a lease passed back to a lease-bearing call.
func ValidateLeaseArg(l ledger.Lease) error {
	if err := ValidateName("lease delivery id", string(l.DeliveryID)); err != nil {
		return err
	}
	if err := ValidateName("lease token", string(l.Token)); err != nil {
		return err
	}
	// Seq is not checked: a seq no grant has (zero, negative, or one the
	// record never reached) is a lease that does not match, and the call
	// answers LeaseLost (or Ended), as for any other stale lease.
	//
	// The owner is not read (the token decides), but text crossing the API
	// is checked wherever it appears.
	return first(validateOptionalName("lease owner agent", l.Owner.Agent), validateOptionalName("lease owner incarnation", l.Owner.Incarnation))
}

// ValidateClaimArg checks a claim passed back to a claim completion.
func ValidateClaimArg(c ledger.Claim) error {
	if err := ValidateName("claim entry id", string(c.EntryID)); err != nil {
		return err
	}
	if err := ValidateName("claim token", string(c.Token)); err != nil {
		return err
	}
	// Seq is not checked, as in ValidateLeaseArg: a seq no claim has is a
	// claim that does not match (LeaseLost or Ended).
	return validateOptionalName("claim worker", c.Worker)
}

// ValidateCause checks an expiry cause.
func ValidateCause(c ledger.Cause) error {
	if err := ValidateName("cause kind", string(c.Kind)); err != nil {
		return err
	}
	return ValidateText("cause detail", c.Detail)
}

// ValidateEnqueue checks a ledger.EnqueueRequest against a store's payload limit.
func ValidateEnqueue(req ledger.EnqueueRequest, now time.Time, maxPayload int) error {
	return first(
		ValidateName("id", string(req.ID)),
		ValidateName("target", string(req.Target)),
		validateOptionalName("ceremony", string(req.Ceremony)),
		ValidatePayload("payload", req.Payload, maxPayload),
		ValidateMetadata("metadata", req.Metadata),
		req.Policy.Validate("policy"),
		optionalPastOK("available at", req.AvailableAt),
		ValidateTime("now", now),
	)
}

// ValidateEnqueueBatch checks a batch: 1 to ledger.MaxLimit requests, each valid.
func ValidateEnqueueBatch(reqs []ledger.EnqueueRequest, now time.Time, maxPayload int) error {
	if err := ValidateLimit("batch length", len(reqs)); err != nil {
		return err
	}
	for _, r := range reqs {
		if err := ValidateEnqueue(r, now, maxPayload); err != nil {
			return err
		}
	}
	return nil
}

// ValidateLease checks the arguments of ledger.Ledger.Lease.
func ValidateLease(filter ledger.LeaseFilter, owner ledger.Owner, now time.Time, duration time.Duration, limit int) error {
	return first(
		validateTargets("filter targets", filter.Targets),
		validateOptionalName("filter ceremony", string(filter.Ceremony)),
		ValidateOwner(owner),
		ValidateTime("now", now),
		ValidateDuration("lease duration", duration),
		ValidateLimit("limit", limit),
	)
}

// ValidateAcknowledge checks the arguments of ledger.Ledger.Acknowledge.
func ValidateAcknowledge(lease ledger.Lease, observation string, now time.Time) error {
	return first(ValidateLeaseArg(lease), ValidateText("observation", observation), ValidateTime("now", now))
}

// ValidateMarkProcessed checks the arguments of ledger.Ledger.MarkProcessed.
func ValidateMarkProcessed(id ledger.DeliveryID, owner ledger.Owner, fence *ledger.Fence, action ledger.ActionRef, now time.Time) error {
	var fenceErr error
	if fence != nil && *fence < 0 {
		fenceErr = invalid("fence", "must not be negative")
	}
	return first(
		ValidateName("id", string(id)),
		ValidateOwner(owner),
		fenceErr,
		ValidateName("action", string(action)),
		ValidateTime("now", now),
	)
}

// ValidateAcknowledgeProcessed checks the arguments of
// ledger.AckProcessor.AcknowledgeProcessed: those of Acknowledge, then the fence
// and the action of MarkProcessed.
func ValidateAcknowledgeProcessed(lease ledger.Lease, observation string, fence *ledger.Fence, action ledger.ActionRef, now time.Time) error {
	var fenceErr error
	if fence != nil && *fence < 0 {
		fenceErr = invalid("fence", "must not be negative")
	}
	return first(ValidateAcknowledge(lease, observation, now), fenceErr, ValidateName("action", string(action)))
}

// ValidateRecordActivation checks the arguments of ledger.Ledger.RecordActivation.
func ValidateRecordActivation(id ledger.DeliveryID, a ledger.Activation, now time.Time) error {
	var resultErr error
	if !a.Result.Valid() {
		resultErr = invalid("activation result", "unknown value %q", a.Result)
	}
	return first(ValidateName("id", string(id)), resultErr, ValidateText("activation detail", a.Detail), ValidateTime("now", now))
}

// ValidateMarkFailed checks the arguments of ledger.Ledger.MarkFailed.
func ValidateMarkFailed(lease ledger.Lease, reason ledger.FailureReason, now time.Time) error {
	return first(ValidateLeaseArg(lease), ValidateText("failure message", reason.Message), ValidateTime("now", now))
}

// ValidateRelease checks the arguments of ledger.Ledger.Release.
func ValidateRelease(lease ledger.Lease, now time.Time) error {
	return first(ValidateLeaseArg(lease), ValidateTime("now", now))
}

// ValidateAbandon checks the arguments of ledger.Ledger.Abandon.
func ValidateAbandon(id ledger.DeliveryID, cause ledger.Cause, now time.Time) error {
	return first(ValidateName("id", string(id)), ValidateCause(cause), ValidateTime("now", now))
}

// ValidateExpireCeremony checks the arguments of ledger.Ledger.ExpireCeremony.
func ValidateExpireCeremony(ceremony ledger.CeremonyID, cause ledger.Cause, now time.Time) error {
	return first(ValidateName("ceremony", string(ceremony)), ValidateCause(cause), ValidateTime("now", now))
}

// ValidateSupersede checks the arguments of ledger.Ledger.Supersede.
func ValidateSupersede(previous, replacement ledger.Target, mode ledger.FollowMode, now time.Time) error {
	var err error
	switch {
	case !mode.Valid():
		err = invalid("follow mode", "unknown value %q", mode)
	case previous == replacement:
		err = invalid("replacement", "must differ from the previous target")
	}
	return first(
		ValidateName("previous", string(previous)),
		ValidateName("replacement", string(replacement)),
		err,
		ValidateTime("now", now),
	)
}

// ValidateList checks a ledger.ListQuery and returns the ID its cursor points
// after ("" for the first page).
func ValidateList(q ledger.ListQuery) (after ledger.DeliveryID, err error) {
	for _, s := range q.States {
		if !s.Valid() {
			return "", invalid("states", "unknown state %q", s)
		}
	}
	if err := first(
		validateTargets("targets", q.Targets),
		validateOptionalName("ceremony", string(q.Ceremony)),
		ValidateLimit("limit", q.Limit),
	); err != nil {
		return "", err
	}
	return DecodeCursor(q.Cursor)
}

// ValidateEnvelope checks an outbox envelope against a store's payload limit.
func ValidateEnvelope(env ledger.Envelope, maxPayload int) error {
	return first(
		ValidateName("provider", env.Provider),
		ValidateName("kind", env.Kind),
		ValidatePayload("payload", env.Payload, maxPayload),
		ValidateName("idempotency key", env.IdempotencyKey),
		ValidateMetadata("metadata", env.Metadata),
	)
}

// ValidateEnvelopeBatch checks a batch of envelopes: 1 to ledger.MaxLimit, each valid.
func ValidateEnvelopeBatch(envs []ledger.Envelope, maxPayload int) error {
	if err := ValidateLimit("batch length", len(envs)); err != nil {
		return err
	}
	for _, e := range envs {
		if err := ValidateEnvelope(e, maxPayload); err != nil {
			return err
		}
	}
	return nil
}

// ValidateEmissionError checks an emission error.
func ValidateEmissionError(e ledger.EmissionError) error {
	return first(validateOptionalName("error code", e.Code), ValidateText("error message", e.Message))
}

// ValidateEmissionResult checks an emission result.
func ValidateEmissionResult(r ledger.EmissionResult) error {
	return first(validateOptionalName("result provider ref", r.ProviderRef), ValidateText("result detail", r.Detail))
}

// ValidateNextRetry checks MarkFailed's nextRetry: nil (no retry) or a
// non-zero time. Any past time is allowed and means due now; one before
// MinTime() is read as MinTime() (see ClampPast).
func ValidateNextRetry(next *time.Time) error {
	if next == nil {
		return nil
	}
	return validatePastOK("next retry", *next)
}

// validatePastOK checks a time at which something becomes due: not zero,
// not after MaxTime(); any past time means "due now".
func validatePastOK(field string, t time.Time) error {
	if t.IsZero() {
		return invalid(field, "must not be zero")
	}
	if t.After(MaxTime()) {
		return invalid(field, "must not be after %s", MaxTime().Format(time.RFC3339))
	}
	return nil
}

// ValidateSave checks the entry given to Save. Its Version is not
// checked: a version the entry never had (zero, say, from an entry built
// by hand) is a stale one, which Save answers with ledger.ErrConflict.
func ValidateSave(e ledger.OutboxEntry) error {
	return validateEntryFields(e)
}

// ValidateSaveClaim checks the arguments of SaveClaim. The entry's Version
// is not checked (the claim token is SaveClaim's guard), but its ID must be
// the claimed entry's.
func ValidateSaveClaim(claim ledger.Claim, e ledger.OutboxEntry) error {
	var idErr error
	if e.ID != claim.EntryID {
		idErr = invalid("entry id", "must be the claimed entry's ID")
	}
	return first(ValidateClaimArg(claim), validateEntryFields(e), idErr)
}

// validateEntryFields checks the mutable fields Save and SaveClaim write.
func validateEntryFields(e ledger.OutboxEntry) error {
	var statusErr, nextErr error
	if !e.Status.Valid() {
		statusErr = invalid("status", "unknown value %q", e.Status)
	} else if e.Status.Scheduled() {
		nextErr = validatePastOK("next attempt at", e.NextAttemptAt)
	}
	var attemptsErr error
	if e.Attempts < 0 || e.Attempts > ledger.MaxCount {
		attemptsErr = invalid("attempts", "must be between 0 and %d, got %d", ledger.MaxCount, e.Attempts)
	}
	var errErr, resErr error
	if e.LastError != nil {
		errErr = ValidateEmissionError(*e.LastError)
	}
	if e.Result != nil {
		resErr = ValidateEmissionResult(*e.Result)
	}
	return first(
		ValidateName("id", string(e.ID)),
		statusErr, nextErr, attemptsErr, errErr, resErr,
		ValidateText("dead letter reason", e.DeadLetterReason),
	)
}

// ValidateClaimRequest checks a ledger.ClaimRequest.
func ValidateClaimRequest(req ledger.ClaimRequest) error {
	return first(
		ValidateName("worker", req.Worker),
		ValidateTime("now", req.Now),
		ValidateDuration("lease duration", req.LeaseDuration),
		ValidateLimit("limit", req.Limit),
	)
}

func validateTargets(field string, ts []ledger.Target) error {
	if len(ts) > ledger.MaxLimit {
		return invalid(field, "must list at most %d targets", ledger.MaxLimit)
	}
	for _, t := range ts {
		if err := ValidateName(field, string(t)); err != nil {
			return err
		}
	}
	return nil
}

func optionalPastOK(field string, t time.Time) error {
	if t.IsZero() {
		return nil
	}
	return validatePastOK(field, t)
}

// first returns the first non-nil error, so every store names the same
// field first for the same bad call.
func first(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

const cursorPrefix = "c1:"

// EncodeCursor returns the opaque List cursor that resumes after id.
func EncodeCursor(after ledger.DeliveryID) string { return encodeCursor(cursorPrefix, string(after)) }

// DecodeCursor returns the ID a List cursor resumes after; "" for an empty
// cursor. A cursor not made by EncodeCursor is ledger.ErrInvalid.
func DecodeCursor(cursor string) (ledger.DeliveryID, error) {
	id, err := decodeCursor(cursorPrefix, cursor)
	return ledger.DeliveryID(id), err
}

// encodeCursor returns the cursor that resumes after id in the listing
// whose cursors start with prefix.
func encodeCursor(prefix, after string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(prefix + after))
}

// decodeCursor returns the ID a cursor of the listing with prefix resumes
// after; "" for an empty cursor. The prefix keeps the cursors of two
// listings apart.
func decodeCursor(prefix, cursor string) (string, error) {
	if cursor == "" {
		return "", nil
	}
	if len(cursor) > 2*ledger.MaxNameBytes {
		return "", invalid("cursor", "malformed")
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(cursor)
	if err != nil || !strings.HasPrefix(string(raw), prefix) {
		return "", invalid("cursor", "malformed")
	}
	id := strings.TrimPrefix(string(raw), prefix)
	// The decoder skips line breaks even in strict mode; requiring the
	// canonical spelling keeps one cursor to one string.
	if ValidateName("cursor", id) != nil || encodeCursor(prefix, id) != cursor {
		return "", invalid("cursor", "malformed")
	}
	return id, nil
}

// ValidateGet checks the ID given to Get or FindByID.
func ValidateGet(id string) error { return ValidateName("id", id) }

// ValidateExpire checks the now given to Expire.
func ValidateExpire(now time.Time) error { return ValidateTime("now", now) }

// ValidateFindPending checks the arguments of ledger.OutboxStore.FindPending.
func ValidateFindPending(limit int) error { return ValidateLimit("limit", limit) }

// ValidateFindRetryReady checks the arguments of ledger.OutboxStore.FindRetryReady.
func ValidateFindRetryReady(now time.Time, limit int) error {
	return first(ValidateTime("now", now), ValidateLimit("limit", limit))
}

// ValidateMarkDelivered checks the arguments of ledger.OutboxStore.MarkDelivered.
func ValidateMarkDelivered(id ledger.OutboxEntryID, result ledger.EmissionResult) error {
	return first(ValidateName("id", string(id)), ValidateEmissionResult(result))
}

// ValidateMarkEntryFailed checks the arguments of ledger.OutboxStore.MarkFailed.
func ValidateMarkEntryFailed(id ledger.OutboxEntryID, emissionErr ledger.EmissionError, nextRetry *time.Time) error {
	return first(ValidateName("id", string(id)), ValidateEmissionError(emissionErr), ValidateNextRetry(nextRetry))
}

// ValidateMarkDeadLettered checks the arguments of ledger.OutboxStore.MarkDeadLettered.
func ValidateMarkDeadLettered(id ledger.OutboxEntryID, emissionErr ledger.EmissionError, reason string) error {
	return first(ValidateName("id", string(id)), ValidateEmissionError(emissionErr), ValidateText("dead letter reason", reason))
}

// ValidateClaimCompletions checks the argument of
// ledger.ClaimCompleter.CompleteClaims: 1 to ledger.MaxLimit completions, each valid as
// the call its Op names, and no Op but those five.
func ValidateClaimCompletions(cs []ledger.ClaimCompletion) error {
	if err := ValidateLimit("completions", len(cs)); err != nil {
		return err
	}
	for i := range cs {
		if err := ValidateClaimCompletion(&cs[i]); err != nil {
			return err
		}
	}
	return nil
}

// ValidateClaimCompletion checks one completion of
// ledger.ClaimCompleter.CompleteClaims, as the ClaimStore call its Op
// names checks its arguments. It takes a pointer so that a store checks
// a completion where it is, without copying it; nil is invalid.
func ValidateClaimCompletion(c *ledger.ClaimCompletion) error {
	if c == nil {
		return invalid("completion", "must not be nil")
	}
	switch c.Op {
	case ledger.OpMarkDelivered:
		return ValidateMarkClaimDelivered(c.Claim, c.Result)
	case ledger.OpMarkFailed:
		return ValidateMarkClaimFailed(c.Claim, c.Error, c.NextRetry)
	case ledger.OpMarkDeadLettered:
		return ValidateMarkClaimDeadLettered(c.Claim, c.Error, c.Reason)
	case ledger.OpSaveClaim:
		return ValidateSaveClaim(c.Claim, c.Entry)
	case ledger.OpReleaseClaim:
		return ValidateReleaseClaim(c.Claim, c.Reason)
	default:
		return invalid("completion op", "must be mark_delivered, mark_failed, mark_dead_lettered, save_claim or release_claim, got %q", c.Op)
	}
}

// ValidateMarkClaimDelivered checks the arguments of ledger.ClaimStore.MarkClaimDelivered.
func ValidateMarkClaimDelivered(claim ledger.Claim, result ledger.EmissionResult) error {
	return first(ValidateClaimArg(claim), ValidateEmissionResult(result))
}

// ValidateMarkClaimFailed checks the arguments of ledger.ClaimStore.MarkClaimFailed.
func ValidateMarkClaimFailed(claim ledger.Claim, emissionErr ledger.EmissionError, nextRetry *time.Time) error {
	return first(ValidateClaimArg(claim), ValidateEmissionError(emissionErr), ValidateNextRetry(nextRetry))
}

// ValidateMarkClaimDeadLettered checks the arguments of ledger.ClaimStore.MarkClaimDeadLettered.
func ValidateMarkClaimDeadLettered(claim ledger.Claim, emissionErr ledger.EmissionError, reason string) error {
	return first(ValidateClaimArg(claim), ValidateEmissionError(emissionErr), ValidateText("dead letter reason", reason))
}

// ValidateReleaseClaim checks the arguments of ledger.ClaimStore.ReleaseClaim.
func ValidateReleaseClaim(claim ledger.Claim, reason string) error {
	return first(ValidateClaimArg(claim), ValidateText("reason", reason))
}

// ValidateRenewLease checks the arguments of ledger.Renewer.RenewLease.
func ValidateRenewLease(lease ledger.Lease, now time.Time, duration time.Duration) error {
	return first(ValidateLeaseArg(lease), ValidateTime("now", now), ValidateDuration("lease duration", duration))
}

// ValidateRenewClaim checks the arguments of ledger.ClaimRenewer.RenewClaim.
func ValidateRenewClaim(claim ledger.Claim, now time.Time, duration time.Duration) error {
	return first(ValidateClaimArg(claim), ValidateTime("now", now), ValidateDuration("lease duration", duration))
}

// invalid returns the *ledger.InvalidError every Validate function
// answers with, so that errors.Is(err, ledger.ErrInvalid) holds.
func invalid(field, format string, args ...any) error {
	return &ledger.InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// ClampPast returns t normalised, or MinTime() when t is before it. Times at
// which something becomes due (a nextRetry, a NextAttemptAt, an
// AvailableAt) may lie anywhere in the past and mean "due now"; clamping
// keeps them inside the range both stores represent.
func ClampPast(t time.Time) time.Time {
	if t.Before(MinTime()) {
		return MinTime()
	}
	return ledger.Normalize(t)
}

// ValidateEndFenceRejected checks the arguments of EndFenceRejected.
func ValidateEndFenceRejected(id ledger.DeliveryID, owner ledger.Owner, fence ledger.Fence, now time.Time) error {
	return ValidateMarkProcessed(id, owner, &fence, "fence_rejected", now)
}

// ValidateMetadata checks an item's metadata: at most ledger.MaxMetadataEntries
// keys, each a valid name, each value valid free text, and at most
// ledger.MaxMetadataBytes in all. The error names field ("metadata") or its keys
// and values; when several keys are wrong it names the first in byte
// order, so every store reports the same one.
func ValidateMetadata(field string, md ledger.Metadata) error {
	if len(md) == 0 {
		return nil
	}
	if len(md) > ledger.MaxMetadataEntries {
		return invalid(field, "must have at most %d keys, got %d", ledger.MaxMetadataEntries, len(md))
	}
	size := 0
	bad := false
	for k, v := range md {
		size += len(k) + len(v)
		if metadataEntryError(field, k, v) != nil {
			bad = true
		}
	}
	if bad {
		// Only a rejected call pays for the sort that makes the error the
		// same in every store and every run.
		for _, k := range slices.Sorted(maps.Keys(md)) {
			if err := metadataEntryError(field, k, md[k]); err != nil {
				return err
			}
		}
	}
	if size > ledger.MaxMetadataBytes {
		return invalid(field, "must be at most %d bytes of keys and values, got %d", ledger.MaxMetadataBytes, size)
	}
	return nil
}

// metadataEntryError checks one key and its value.
func metadataEntryError(field, k, v string) error {
	if err := ValidateName(field+" key", k); err != nil {
		return err
	}
	var ie *ledger.InvalidError
	if err := ValidateText(field+" value", v); errors.As(err, &ie) {
		return invalid(ie.Field, "for key %q: %s", k, ie.Reason)
	}
	return nil
}

// ValidatePurge checks the arguments of PurgeDeliveries and PurgeEntries.
func ValidatePurge(olderThan time.Time, limit int) error {
	return first(ValidateTime("older than", olderThan), ValidateLimit("limit", limit))
}

// ValidateStats checks the arguments of Stats.
func ValidateStats(f ledger.StatsFilter, now time.Time) error {
	return first(optionalName("target", string(f.Target)), optionalName("ceremony", string(f.Ceremony)), ValidateTime("now", now))
}

// ValidateOutboxStats checks the argument of ledger.OutboxStats.
func ValidateOutboxStats(now time.Time) error { return ValidateTime("now", now) }

func optionalName(field, s string) error {
	if s == "" {
		return nil
	}
	return ValidateName(field, s)
}
