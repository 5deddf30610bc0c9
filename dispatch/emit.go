package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/leaseledger/ledger"
)

// process emits one claimed entry and completes it.
func (d *Dispatcher) process(flight context.Context, ce ledger.ClaimedEntry, c *cycle) {
	emitCtx, cancel := context.WithCancelCause(flight)
	defer cancel(nil)
	stopTimeout := d.cfg.afterFunc(d.cfg.emitTimeout, func() { cancel(ErrEmitTimeout) })
	r := d.startRenewal(flight, ce, cancel, c)
	start := d.cfg.clock()
	res, emitErr := d.emit(emitCtx, ce.Entry)
	dur := d.cfg.clock().Sub(start)
	// Stop renewing before completing, so no renewal can race the
	// completion and report a claim that was lost only because it ended.
	r.end()
	stopTimeout()

	sctx, cancelStore := d.storeContext(flight)
	defer cancelStore()
	d.complete(sctx, ce, res, emitErr, dur, c)
}

type emitted struct {
	res ledger.EmissionResult
	err error
}

// emit calls the emitter, recovering a panic as a *PanicError. It stops
// waiting when ctx is cancelled: an emitter that ignores cancellation is
// abandoned (its goroutine runs on and its result is dropped), so that one
// hung provider call cannot hold the cycle, or a shutdown, for ever.
func (d *Dispatcher) emit(ctx context.Context, entry ledger.OutboxEntry) (ledger.EmissionResult, error) {
	done := make(chan emitted, 1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				done <- emitted{err: &PanicError{Value: v}}
			}
		}()
		res, err := d.emitter.Emit(ctx, entry.Clone())
		done <- emitted{res: res, err: err}
	}()
	var out emitted
	select {
	case out = <-done:
	case <-ctx.Done():
		// Prefer an answer that is already there.
		select {
		case out = <-done:
		default:
			out = emitted{err: context.Cause(ctx)}
		}
	}
	if out.err != nil && ctx.Err() != nil &&
		(errors.Is(out.err, context.Canceled) || errors.Is(out.err, context.DeadlineExceeded)) {
		// The emitter gave up because we cancelled it; record why.
		out.err = fmt.Errorf("%w (emitter returned: %w)", context.Cause(ctx), out.err)
	}
	return out.res, out.err
}

// complete maps the emission's answer to a completion under the claim.
func (d *Dispatcher) complete(ctx context.Context, ce ledger.ClaimedEntry, res ledger.EmissionResult, emitErr error, dur time.Duration, c *cycle) {
	var deferral *DeferError
	var out ledger.OutboxResult
	var err error
	var kind EventKind
	switch {
	case emitErr == nil:
		kind = EventDelivered
		out, err = d.store.MarkClaimDelivered(ctx, ce.Claim, sanitizeResult(res))
	case errors.Is(emitErr, ErrPermanent):
		kind = EventDeadLettered
		out, err = d.store.MarkClaimDeadLettered(ctx, ce.Claim, emissionError(emitErr), ReasonPermanent)
	case errors.As(emitErr, &deferral):
		kind = EventDeferred
		e := ce.Entry
		e.Status = ledger.OutboxStatusDeferred
		e.NextAttemptAt = deferral.Until
		if e.NextAttemptAt.IsZero() {
			e.NextAttemptAt = d.cfg.clock()
		}
		out, err = d.store.SaveClaim(ctx, ce.Claim, e)
		// A deferral is the provider's decision, not a failure.
		emitErr = nil
	case ce.Entry.Attempts >= d.cfg.policy.MaxAttempts:
		kind = EventDeadLettered
		out, err = d.store.MarkClaimDeadLettered(ctx, ce.Claim, emissionError(emitErr), ReasonMaxAttempts)
	default:
		kind = EventRetried
		// The backoff's jitter is a hash of the entry ID and attempt, so it
		// spreads retries of different entries without a random source.
		next := d.cfg.clock().Add(d.cfg.policy.Backoff(ledger.DeliveryID(ce.Claim.EntryID), ce.Entry.Attempts))
		out, err = d.store.MarkClaimFailed(ctx, ce.Claim, emissionError(emitErr), &next)
	}
	c.completed(ctx, ce, kind, out, err, dur, emitErr)
}

// emissionError turns an emitter error into what the store records. The
// code says where the failure came from; the message is made acceptable
// to the store (valid UTF-8, no NUL, at most ledger.MaxTextBytes), since a
// rejected completion would leave the claim stranded until it expires.
func emissionError(err error) ledger.EmissionError {
	code := CodeError
	switch {
	case errors.Is(err, ErrPanic):
		code = CodePanic
	case errors.Is(err, ErrEmitTimeout):
		code = CodeTimeout
	case errors.Is(err, ErrShutdown):
		code = CodeShutdown
	case errors.Is(err, ErrClaimLost):
		code = CodeClaimLost
	case errors.Is(err, ErrPermanent):
		code = CodePermanent
	}
	return ledger.EmissionError{Code: code, Message: sanitizeText(err.Error(), ledger.MaxTextBytes)}
}

func sanitizeResult(r ledger.EmissionResult) ledger.EmissionResult {
	return ledger.EmissionResult{
		ProviderRef: sanitizeName(r.ProviderRef),
		Detail:      sanitizeText(r.Detail, ledger.MaxTextBytes),
	}
}

// sanitizeText makes s valid free text, cut to at most limit bytes on a
// rune boundary.
func sanitizeText(s string, limit int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "")
	return truncate(s, limit)
}

// sanitizeName makes s a valid optional name: valid UTF-8, control
// characters replaced, at most ledger.MaxNameBytes.
func sanitizeName(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, s)
	return truncate(s, ledger.MaxNameBytes)
}

func truncate(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// renewal keeps one claim alive while its emission runs, when the store
// is a ledger.ClaimRenewer.
type renewal struct {
	mu    sync.Mutex
	done  bool
	stop  func() bool
	claim ledger.Claim
}

// startRenewal schedules a renewal every third of the lease: early enough
// that two renewals can fail (a slow store, a lost connection) before the
// claim runs out. A renewal that does not apply means another worker may
// own the entry, so the emission is cancelled with ErrClaimLost.
func (d *Dispatcher) startRenewal(ctx context.Context, ce ledger.ClaimedEntry, cancel context.CancelCauseFunc, c *cycle) *renewal {
	r := &renewal{claim: ce.Claim}
	renewer, ok := d.store.(ledger.ClaimRenewer)
	if !ok {
		r.done = true
		return r
	}
	interval := d.cfg.leaseDuration / 3
	var tick func()
	tick = func() {
		r.mu.Lock()
		if r.done {
			r.mu.Unlock()
			return
		}
		claim := r.claim
		r.mu.Unlock()

		sctx, cancelStore := context.WithTimeout(context.WithoutCancel(ctx), interval)
		res, err := renewer.RenewClaim(sctx, claim, d.cfg.clock(), d.cfg.leaseDuration)
		cancelStore()

		r.mu.Lock()
		defer r.mu.Unlock()
		if r.done {
			return
		}
		ev := Event{Kind: EventRenewed, EntryID: string(claim.EntryID), Attempt: ce.Entry.Attempts, Outcome: string(res.Outcome)}
		switch {
		case err != nil:
			// The claim may still be ours: try again at the next tick.
			ev.Kind, ev.Err = EventStoreError, err
			d.cfg.logger.LogAttrs(ctx, slog.LevelError, "dispatch: claim renewal failed",
				slog.String("entry_id", string(claim.EntryID)), slog.Any("error", err))
		case !res.Applied():
			ev.Kind = EventRenewLost
			d.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "dispatch: claim renewal did not apply; cancelling the emission",
				slog.String("entry_id", string(claim.EntryID)), slog.String("outcome", string(res.Outcome)))
			r.done = true
			cancel(ErrClaimLost)
			c.record(ctx, ev)
			return
		default:
			if res.Entry.Claim != nil {
				r.claim = *res.Entry.Claim
			}
		}
		c.record(ctx, ev)
		r.stop = d.cfg.afterFunc(interval, tick)
	}
	r.mu.Lock()
	r.stop = d.cfg.afterFunc(interval, tick)
	r.mu.Unlock()
	return r
}

// end stops renewing; a renewal already in flight is ignored when it returns.
func (r *renewal) end() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done = true
	if r.stop != nil {
		r.stop()
	}
}
