package dispatch

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Check them with errors.Is.
var (
	// ErrPermanent matches every error wrapped by Permanent.
	ErrPermanent = errors.New("dispatch: permanent failure")
	// ErrDeferred matches every error returned by Defer.
	ErrDeferred = errors.New("dispatch: emission deferred")
	// ErrPanic matches a *PanicError: an emitter or a handler panicked.
	ErrPanic = errors.New("dispatch: panic")
	// ErrEmitTimeout is the cause (context.Cause) of an emission context
	// cancelled because the per-emission timeout ran out. It also matches
	// context.DeadlineExceeded, so emitters that check for a deadline see one.
	ErrEmitTimeout = fmt.Errorf("dispatch: emission timed out: %w", context.DeadlineExceeded)
	// ErrShutdown is the cause of an emission context cancelled because
	// the shutdown deadline passed after Run's context was cancelled.
	ErrShutdown = errors.New("dispatch: shutdown deadline passed")
	// ErrClaimLost is the cause of an emission context cancelled because
	// renewing its claim showed that the claim is no longer this
	// dispatcher's: another worker may be emitting the same entry.
	ErrClaimLost = errors.New("dispatch: claim lost")
	// ErrHandleTimeout is the cause of a Worker's handler context
	// cancelled because the per-delivery timeout (WithHandleTimeout) ran
	// out. It also matches context.DeadlineExceeded.
	ErrHandleTimeout = fmt.Errorf("dispatch: handler timed out: %w", context.DeadlineExceeded)
	// ErrLeaseLost is the cause of a Worker's handler context cancelled
	// because renewing its lease showed that the lease is no longer this
	// worker's: another worker may be handling the same delivery.
	ErrLeaseLost = errors.New("dispatch: lease lost")
	// ErrNotReady matches every error of the loops' Ready methods; the
	// cause is wrapped beside it.
	ErrNotReady = errors.New("dispatch: not ready")
)

// PermanentError marks an emitter error as permanent: the entry is
// dead-lettered at once instead of retried. Create one with Permanent.
type PermanentError struct {
	Err error
}

// Permanent wraps err so that the dispatcher dead-letters the entry instead
// of retrying it. Permanent(nil) is nil, so that `return res,
// dispatch.Permanent(err)` stays a success when err is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// Error returns the wrapped error's message, unchanged: what makes the
// failure permanent is recorded apart (ledger.EmissionError.Code
// CodePermanent, ledger.FailureReason.Permanent), so the message says
// only what went wrong.
func (e *PermanentError) Error() string {
	if e.Err == nil {
		return ErrPermanent.Error()
	}
	return e.Err.Error()
}

// Unwrap returns the wrapped error.
func (e *PermanentError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrPermanent) true.
func (e *PermanentError) Is(target error) bool { return target == ErrPermanent }

// DeferError asks the dispatcher to try the entry again at Until without
// counting it as a failure: the entry is saved as Deferred. Create one
// with Defer.
type DeferError struct {
	Until time.Time
}

// Defer returns an error that tells the dispatcher to save the entry as
// Deferred until the given time (for example a provider's Retry-After). A
// zero or past time means "due now". The claim that counted the attempt
// stays counted: a deferral is an attempt, so an entry deferred
// MaxAttempts times is dead-lettered by its next failure.
func Defer(until time.Time) error { return &DeferError{Until: until} }

// Error says until when the emission was deferred.
func (e *DeferError) Error() string {
	return "dispatch: emission deferred until " + e.Until.UTC().Format(time.RFC3339Nano)
}

// Is makes errors.Is(err, ErrDeferred) true.
func (e *DeferError) Is(target error) bool { return target == ErrDeferred }

// PanicError is the failure recorded when an emitter or a handler panics.
// The panic is recovered and treated as an ordinary (retryable) failure.
// Its text names neither, since it is stored for both.
type PanicError struct {
	// Value is what the emitter or handler passed to panic.
	Value any
}

// Error includes the panic value.
func (e *PanicError) Error() string { return fmt.Sprintf("dispatch: panic: %v", e.Value) }

// Is makes errors.Is(err, ErrPanic) true.
func (e *PanicError) Is(target error) bool { return target == ErrPanic }

// CodedError carries the code an emitter wants recorded in
// ledger.EmissionError.Code, typically the provider's own ("422",
// "mailbox_full"). Create one with Coded; it may wrap, or be wrapped by,
// Permanent.
type CodedError struct {
	Code string
	Err  error
}

// Coded wraps err so that the dispatcher records code as the failure's
// EmissionError.Code instead of CodeError or CodePermanent. The code is
// cut to a valid ledger name (control characters replaced, at most
// ledger.MaxNameBytes); an empty code changes nothing. The codes of
// failures the dispatcher causes itself (CodePanic, CodeTimeout,
// CodeShutdown, CodeClaimLost) win over it, since they say what really
// ended the emission. Coded(code, nil) is nil.
func Coded(code string, err error) error {
	if err == nil {
		return nil
	}
	return &CodedError{Code: code, Err: err}
}

// Error returns the wrapped error's message; the code is recorded apart.
func (e *CodedError) Error() string {
	if e.Err == nil {
		return "dispatch: emission failed with code " + e.Code
	}
	return e.Err.Error()
}

// Unwrap returns the wrapped error.
func (e *CodedError) Unwrap() error { return e.Err }

// Codes the dispatcher records in ledger.EmissionError.Code, saying where
// a failure came from, unless the emitter gave its own (Coded).
const (
	CodeError     = "error"      // the emitter returned an error
	CodePermanent = "permanent"  // the emitter returned a Permanent error
	CodePanic     = "panic"      // the emitter panicked
	CodeTimeout   = "timeout"    // the per-emission timeout ran out
	CodeShutdown  = "shutdown"   // the shutdown deadline passed
	CodeClaimLost = "claim_lost" // renewing the claim showed it lost
)

// Dead-letter reasons the dispatcher records.
const (
	ReasonPermanent   = "permanent error"
	ReasonMaxAttempts = "max attempts reached"
)
