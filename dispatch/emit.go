package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"time"

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

	sctx, cancelStore := d.cfg.storeContext(flight)
	defer cancelStore()
	d.complete(sctx, ce, res, emitErr, dur, c)
}

// emit calls the emitter on a copy of entry (see callUser).
func (d *Dispatcher) emit(ctx context.Context, entry ledger.OutboxEntry) (ledger.EmissionResult, error) {
	return callUser(ctx, "emitter", func() (ledger.EmissionResult, error) {
		return d.emitter.Emit(ctx, entry.Clone())
	})
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

// startRenewal renews the claim every third of the lease while its
// emission runs, when the store is a ledger.ClaimRenewer. A renewal that
// does not apply means another worker may own the entry, so the emission
// is cancelled with ErrClaimLost.
func (d *Dispatcher) startRenewal(ctx context.Context, ce ledger.ClaimedEntry, cancel context.CancelCauseFunc, c *cycle) *renewLoop {
	renewer, ok := d.store.(ledger.ClaimRenewer)
	if !ok {
		return noRenewal()
	}
	// claim is read by a renewal and replaced by the previous one's settle;
	// renewals run one after another, ordered by the loop's lock.
	claim := ce.Claim
	return startRenewLoop(ctx, d.cfg.afterFunc, d.cfg.leaseDuration/3, func(sctx context.Context) func() bool {
		res, err := renewer.RenewClaim(sctx, claim, d.cfg.clock(), d.cfg.leaseDuration)
		return func() bool {
			ev := d.entryEvent(EventRenewed, &ce)
			ev.Outcome = string(res.Outcome)
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
				cancel(ErrClaimLost)
				c.record(ctx, ev)
				return false
			default:
				// The entry shows the new expiry; the token stays the one
				// this dispatcher was granted (entries carry none).
				if res.Entry.Claim != nil {
					claim.ExpiresAt = res.Entry.Claim.ExpiresAt
				}
			}
			c.record(ctx, ev)
			return true
		}
	})
}
