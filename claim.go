package ledger

import (
	"context"
	"time"
)

// OutboxStore is the base outbox contract: entries waiting to be emitted to
// an external provider, managed by the host. Its completions are not
// outcome-aware: they answer the entry and an error. Hosts that run several
// workers should use ClaimStore, whose claim methods say whether this call
// applied the transition.
//
// The methods without a now stamp UpdatedAt from the store's clock option;
// decisions never depend on it.
//
// Entries come back without claim tokens (OutboxEntry.Redacted): from
// FindByID, FindPending and FindRetryReady, and inside every result. Only
// the Claim in ClaimedEntry.Claim, returned to the claiming worker,
// carries its token.
type OutboxStore interface {
	// Enqueue adds an entry for env. The entry ID is derived from
	// env.IdempotencyKey (see OutboxEntryIDFor), so the same key always
	// names the same entry: the same envelope again answers
	// OutcomeRepeated, a different one under the same key
	// OutcomeConflict, and neither writes anything. Metadata is not
	// content: a repeat keeps the entry's own.
	Enqueue(ctx context.Context, env Envelope) (OutboxResult, error)

	// Save writes the mutable fields of entry (Status, Attempts,
	// NextAttemptAt, LastError, Result, DeadLetterReason) when
	// entry.Version equals the stored Version, and returns the stored
	// entry. A stale Version (any int64 the entry is not at), or an entry
	// that already ended, answers ErrConflict; an unknown ID ErrNotFound;
	// Attempts outside 0 to MaxCount ErrInvalid, before anything is
	// written.
	Save(ctx context.Context, entry OutboxEntry) (OutboxEntry, error)

	// FindByID returns one entry in any status, or ErrNotFound.
	FindByID(ctx context.Context, id OutboxEntryID) (OutboxEntry, error)

	// FindPending returns up to limit Pending entries, claimed or not,
	// oldest first: CreatedAt, then enqueue order. Entries created at the
	// same instant (one EnqueueBatch, in the order of its envelopes, or
	// enqueues within a microsecond) come in the order they were enqueued.
	FindPending(ctx context.Context, limit int) ([]OutboxEntry, error)

	// FindRetryReady returns up to limit RetryScheduled or Deferred entries
	// whose NextAttemptAt is at or before now, earliest first (then ID).
	FindRetryReady(ctx context.Context, now time.Time, limit int) ([]OutboxEntry, error)

	// MarkDelivered ends the entry as Delivered with result, ignoring any
	// claim. An entry already Delivered is returned unchanged; one that
	// ended otherwise answers ErrConflict; an unknown ID ErrNotFound.
	MarkDelivered(ctx context.Context, id OutboxEntryID, result EmissionResult) (OutboxEntry, error)

	// MarkFailed records a failed emission: RetryScheduled at nextRetry,
	// or Failed for good when nextRetry is nil. A nextRetry in the past
	// means due now; a zero one is ErrInvalid. Errors as MarkDelivered.
	MarkFailed(ctx context.Context, id OutboxEntryID, emissionErr EmissionError, nextRetry *time.Time) (OutboxEntry, error)

	// MarkDeadLettered ends the entry as DeadLettered with reason.
	// Errors as MarkDelivered.
	MarkDeadLettered(ctx context.Context, id OutboxEntryID, emissionErr EmissionError, reason string) (OutboxEntry, error)
}

// ClaimStore is the opt-in, outcome-aware outbox contract for scaled
// workers: a worker claims entries with a token before emitting them, then
// completes them under that token.
//
// Claims reduce duplicate selection among cooperating workers; they do not
// make provider delivery exactly-once. A worker that stalls past its claim
// can still be emitting when another worker claims the entry again, so
// providers should deduplicate on (Claim.EntryID, Claim.Seq) or on the
// envelope's idempotency key.
//
// Completions need only the current claim token, not an unexpired claim:
// they carry no now, and stores never read the clock for a decision. An
// expired claim that nobody took over can still complete its entry.
// Outcomes, first match wins: NotFound, Ended (also for a stale token on a
// terminal entry), LeaseLost, Repeated, then Applied.
type ClaimStore interface {
	OutboxStore

	// ClaimPending claims up to req.Limit Pending entries that are
	// unclaimed or whose claim expired at req.Now, oldest first: CreatedAt,
	// then enqueue order (as FindPending), each under a new token until
	// req.Now+req.LeaseDuration. Each claim counts an attempt.
	ClaimPending(ctx context.Context, req ClaimRequest) ([]ClaimedEntry, error)

	// ClaimRetryReady claims like ClaimPending, from RetryScheduled and
	// Deferred entries whose NextAttemptAt has come, earliest first.
	ClaimRetryReady(ctx context.Context, req ClaimRequest) ([]ClaimedEntry, error)

	// MarkClaimDelivered ends the claimed entry as Delivered.
	MarkClaimDelivered(ctx context.Context, claim Claim, result EmissionResult) (OutboxResult, error)

	// MarkClaimFailed records a failed emission under the claim:
	// RetryScheduled at nextRetry, or Failed when nextRetry is nil.
	MarkClaimFailed(ctx context.Context, claim Claim, emissionErr EmissionError, nextRetry *time.Time) (OutboxResult, error)

	// MarkClaimDeadLettered ends the claimed entry as DeadLettered.
	MarkClaimDeadLettered(ctx context.Context, claim Claim, emissionErr EmissionError, reason string) (OutboxResult, error)

	// ReleaseClaim gives the claim back without changing the entry's
	// status and without counting the attempt. reason is free text for
	// logs; it is not stored.
	ReleaseClaim(ctx context.Context, claim Claim, reason string) (OutboxResult, error)

	// SaveClaim writes a provider-directed transition (for example
	// Deferred with a NextAttemptAt) from entry's mutable fields, except
	// Attempts, and ends the claim. entry.Version is not checked: the
	// claim token is the guard.
	SaveClaim(ctx context.Context, claim Claim, entry OutboxEntry) (OutboxResult, error)
}

// OutboxBatchEnqueuer is implemented by outbox stores that can enqueue many
// entries in one durable write. Detect it with a type assertion. Like
// BatchEnqueuer it is atomic for errors and answers one result per envelope.
type OutboxBatchEnqueuer interface {
	EnqueueBatch(ctx context.Context, envs []Envelope) ([]OutboxResult, error)
}

// DueClaimer is implemented by claim stores that can claim, in one call,
// what ClaimRetryReady and then ClaimPending would hand out. Detect it
// with a type assertion; the dispatch package's Dispatcher uses it, when
// its store has it, to take a cycle's work in one call instead of two.
//
// ClaimDue claims up to req.Limit entries: first the retry-ready ones,
// earliest due first (then ID), then pending ones, oldest first, as
// ClaimRetryReady followed by ClaimPending with the rest of the limit
// would, but in one atomic step. The claims carry req's worker and
// lease, like those of the two calls.
type DueClaimer interface {
	ClaimDue(ctx context.Context, req ClaimRequest) ([]ClaimedEntry, error)
}

// ClaimCompleter is implemented by claim stores that can apply many claim
// completions in one call, so that they share the cost of a commit
// without a caller per completion. Detect it with a type assertion; the
// dispatch package's Dispatcher uses it, when its store has it and it is
// given dispatch.WithBatchCompletion, to complete what a poll cycle
// emitted.
//
// CompleteClaims applies each completion of cs as the ClaimStore call its
// Op names would (see ClaimCompletion) and answers each, in order, with
// that call's result. A malformed completion fails the whole call with
// ErrInvalid before anything is written. A store error means that some
// completions may not have been decided: each of those has the zero
// OutboxResult (no Outcome) in the answer, and its claim stays until it
// is completed again or expires, as after a failed single call; the
// others are decided, their results as the calls would answer them.
type ClaimCompleter interface {
	CompleteClaims(ctx context.Context, cs []ClaimCompletion) ([]OutboxResult, error)
}

// ClaimCompletion is one completion for ClaimCompleter: the claim it is
// made under and what it does, as the ClaimStore call named by Op does
// with the fields that call takes:
//
//   - OpMarkDelivered: MarkClaimDelivered(Claim, Result)
//   - OpMarkFailed: MarkClaimFailed(Claim, Error, NextRetry)
//   - OpMarkDeadLettered: MarkClaimDeadLettered(Claim, Error, Reason)
//   - OpSaveClaim: SaveClaim(Claim, Entry)
//   - OpReleaseClaim: ReleaseClaim(Claim, Reason)
//
// The fields an Op does not take are ignored.
type ClaimCompletion struct {
	Claim     Claim
	Op        Operation
	Result    EmissionResult
	Error     EmissionError
	NextRetry *time.Time
	Reason    string
	Entry     OutboxEntry
}

// ClaimRenewer is implemented by claim stores that can extend a claim while
// its worker is still emitting (a heartbeat). Detect it with a type
// assertion.
//
// RenewClaim moves the expiry of the claim in force to now+duration,
// keeping its token and sequence number; the returned Entry.Claim carries
// the new expiry (and no token: the worker keeps its own claim). It needs the current claim and now before its expiry.
// Outcomes: Applied, NotFound, Ended, LeaseLost, LeaseExpired.
type ClaimRenewer interface {
	RenewClaim(ctx context.Context, claim Claim, now time.Time, duration time.Duration) (OutboxResult, error)
}

// OutboxEntryID identifies an outbox entry.
type OutboxEntryID string

// Envelope is what is emitted to a provider.
type Envelope struct {
	Provider string `json:"provider"`
	Kind     string `json:"kind"`
	// Payload is opaque bytes; nil and empty are the same content.
	Payload []byte `json:"payload,omitzero"`
	// IdempotencyKey names the emission; it also fixes the entry ID.
	IdempotencyKey string `json:"idempotency_key"`
	// Metadata travels with the entry beside its payload (see Metadata):
	// stored and returned, never part of the envelope's content for
	// Repeated versus Conflict, and never changed by Save or SaveClaim.
	Metadata Metadata `json:"metadata,omitempty"`
}

// OutboxStatus is the status of an outbox entry.
type OutboxStatus string

// Outbox statuses. Pending, RetryScheduled and Deferred are open;
// Delivered, Failed and DeadLettered are terminal.
const (
	OutboxStatusPending        OutboxStatus = "pending"
	OutboxStatusRetryScheduled OutboxStatus = "retry_scheduled"
	OutboxStatusDeferred       OutboxStatus = "deferred"
	OutboxStatusDelivered      OutboxStatus = "delivered"
	OutboxStatusFailed         OutboxStatus = "failed"
	OutboxStatusDeadLettered   OutboxStatus = "dead_lettered"
)

// OutboxStatuses returns every status, open ones first, in a new slice the
// caller may keep.
func OutboxStatuses() []OutboxStatus {
	return []OutboxStatus{
		OutboxStatusPending, OutboxStatusRetryScheduled, OutboxStatusDeferred,
		OutboxStatusDelivered, OutboxStatusFailed, OutboxStatusDeadLettered,
	}
}

// Valid reports whether s is a known status.
func (s OutboxStatus) Valid() bool {
	switch s {
	case OutboxStatusPending, OutboxStatusRetryScheduled, OutboxStatusDeferred,
		OutboxStatusDelivered, OutboxStatusFailed, OutboxStatusDeadLettered:
		return true
	}
	return false
}

// Terminal reports whether s is an end status.
func (s OutboxStatus) Terminal() bool {
	return s == OutboxStatusDelivered || s == OutboxStatusFailed || s == OutboxStatusDeadLettered
}

// Scheduled reports whether s waits for NextAttemptAt.
func (s OutboxStatus) Scheduled() bool {
	return s == OutboxStatusRetryScheduled || s == OutboxStatusDeferred
}

// EmissionError describes a failed emission.
type EmissionError struct {
	// Code is the provider's or host's short error code; may be empty.
	Code string `json:"code"`
	// Message is free text (valid UTF-8, no NUL, at most 4 KiB).
	Message string `json:"message"`
}

// EmissionResult describes a successful emission.
type EmissionResult struct {
	// ProviderRef is the provider's reference for the emission; may be empty.
	ProviderRef string `json:"provider_ref"`
	Detail      string `json:"detail"`
}

// ClaimRequest asks for a batch of claims.
type ClaimRequest struct {
	// Worker names the claiming worker.
	Worker string
	// Now is the caller's time; claims expire at Now+LeaseDuration.
	Now           time.Time
	LeaseDuration time.Duration
	// Limit is 1 to MaxLimit.
	Limit int
}

// OutboxEntry is one emission and everything that happened to it.
// Terminal entries keep every field: Result for Delivered, LastError for
// Failed, LastError and DeadLetterReason for DeadLettered.
//
// All times are UTC with microsecond precision.
type OutboxEntry struct {
	ID       OutboxEntryID `json:"id"`
	Envelope Envelope      `json:"envelope"`
	Status   OutboxStatus  `json:"status"`
	// Attempts counts emission attempts: claims granted, less those given
	// back by ReleaseClaim, plus base completions made without a claim.
	// It stops at MaxCount: a claim or completion at the bound applies
	// and leaves it there.
	Attempts int `json:"attempts"`
	// NextAttemptAt is when a RetryScheduled or Deferred entry is due;
	// zero otherwise.
	NextAttemptAt    time.Time       `json:"next_attempt_at,omitzero"`
	LastError        *EmissionError  `json:"last_error,omitzero"`
	Result           *EmissionResult `json:"result,omitzero"`
	DeadLetterReason string          `json:"dead_letter_reason"`
	// ClaimSeq is the sequence number of the latest claim (0: never claimed).
	ClaimSeq int64 `json:"claim_seq"`
	// Claim is the claim in force; nil when unclaimed. A claim stays on an
	// open entry after it expires, until the entry is claimed again or
	// completed. In an entry handed out by a store its Token is empty.
	Claim *Claim `json:"claim,omitzero"`
	// EndedClaim is how the latest claim ended while the entry stayed open.
	EndedClaim *EndedGrant `json:"ended_claim,omitzero"`
	CreatedAt  time.Time   `json:"created_at,omitzero"`
	UpdatedAt  time.Time   `json:"updated_at,omitzero"`
	// EndedAt is set exactly when Status is terminal.
	EndedAt time.Time `json:"ended_at,omitzero"`
	// Version grows by one with every write; Save checks it.
	Version int64 `json:"version"`
	// RedrivenFrom is the entry this one was made from by a redrive (see
	// OutboxRedriver); empty for an entry that was enqueued.
	RedrivenFrom OutboxEntryID `json:"redriven_from,omitempty"`
	// RedrivenTo is the entry a redrive made from this one; empty until
	// then. An entry is redriven at most once.
	RedrivenTo OutboxEntryID `json:"redriven_to,omitempty"`
}
