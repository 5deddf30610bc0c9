package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/leaseledger/ledger"
)

// emission is the task of emitting one claimed entry: the emitter's
// call on a copy of the entry, under the job's context, which the emit
// timeout (and a lost renewal) cancels, and its completion. One value
// holds all an emission keeps, so that it costs one allocation.
type emission struct {
	job
	keep        claimRenewal // renews the claim while the emitter runs, when c.renewals is not nil
	d           *Dispatcher
	c           *cycle
	ce          *ledger.ClaimedEntry
	start       time.Time
	stopTimeout func() bool
}

// emission prepares the emission of ce (see fanOut).
func (d *Dispatcher) emission(ce *ledger.ClaimedEntry, values context.Context, c *cycle) task[ledger.EmissionResult] {
	e := &emission{d: d, c: c, ce: ce}
	e.init(values)
	e.stopTimeout = d.cfg.afterFunc(d.cfg.emitTimeout, e.timedOut)
	if c.renewals != nil {
		e.keep = claimRenewal{c: c, ce: ce, claim: ce.Claim, job: &e.job}
		c.renewals.join(&e.keep.renewal, &e.keep)
	}
	e.start = d.cfg.clock()
	return e
}

func (e *emission) timedOut() { e.cancel(ErrEmitTimeout) }

func (e *emission) call() (ledger.EmissionResult, error) {
	return e.d.emitter.Emit(e.ctx, e.ce.Entry.Clone())
}

func (e *emission) done(res ledger.EmissionResult, emitErr error) {
	dur := e.d.cfg.clock().Sub(e.start)
	e.end(e.c.renewals, &e.keep.renewal, e.stopTimeout, e.c.storeCtx, func(ctx context.Context) {
		e.d.complete(ctx, e.ce, res, emitErr, dur, e.c)
	})
}

// complete maps the emission's answer to a completion under the claim
// and applies it: with the cycle's other completions when the cycle
// completes in batches (WithBatchCompletion on a ledger.ClaimCompleter),
// on its own otherwise.
func (d *Dispatcher) complete(ctx context.Context, ce *ledger.ClaimedEntry, res ledger.EmissionResult, emitErr error, dur time.Duration, c *cycle) {
	done, cc := d.completion(ce, res, emitErr, dur)
	if c.batch != nil {
		c.batch.add(ctx, done, cc)
		return
	}
	out, err := applyCompletion(ctx, d.store, cc)
	c.completed(ctx, ce, done.kind, out, err, dur, done.emitErr)
}

// doneEmission is what the event of an emission's completion reports;
// the completion itself is a ledger.ClaimCompletion beside it.
type doneEmission struct {
	ce      *ledger.ClaimedEntry
	kind    EventKind
	dur     time.Duration
	emitErr error
}

// completion decides what completes ce after its emission answered res
// and emitErr.
func (d *Dispatcher) completion(ce *ledger.ClaimedEntry, res ledger.EmissionResult, emitErr error, dur time.Duration) (doneEmission, ledger.ClaimCompletion) {
	done := doneEmission{ce: ce, dur: dur, emitErr: emitErr}
	cc := ledger.ClaimCompletion{Claim: ce.Claim}
	if emitErr == nil {
		done.kind, cc.Op, cc.Result = EventDelivered, ledger.OpMarkDelivered, sanitizeResult(res)
		return done, cc
	}
	// Declared after the success path returned: errors.As takes its
	// address, which puts it on the heap wherever it is declared.
	var deferral *DeferError
	switch {
	case errors.Is(emitErr, ErrPermanent):
		done.kind, cc.Op = EventDeadLettered, ledger.OpMarkDeadLettered
		cc.Error, cc.Reason = emissionError(emitErr), ReasonPermanent
	case errors.As(emitErr, &deferral):
		done.kind, cc.Op = EventDeferred, ledger.OpSaveClaim
		e := ce.Entry
		e.Status = ledger.OutboxStatusDeferred
		e.NextAttemptAt = deferral.Until
		if e.NextAttemptAt.IsZero() {
			e.NextAttemptAt = d.cfg.clock()
		}
		cc.Entry = e
		// A deferral is the provider's decision, not a failure.
		done.emitErr = nil
	case ce.Entry.Attempts >= d.cfg.policy.MaxAttempts:
		done.kind, cc.Op = EventDeadLettered, ledger.OpMarkDeadLettered
		cc.Error, cc.Reason = emissionError(emitErr), ReasonMaxAttempts
	default:
		done.kind, cc.Op = EventRetried, ledger.OpMarkFailed
		// The backoff's jitter is a hash of the entry ID and attempt, so it
		// spreads retries of different entries without a random source.
		next := d.cfg.clock().Add(d.cfg.policy.Backoff(ledger.DeliveryID(ce.Claim.EntryID), ce.Entry.Attempts))
		cc.Error, cc.NextRetry = emissionError(emitErr), &next
	}
	return done, cc
}

// applyCompletion applies cc with the ClaimStore call its Op names.
func applyCompletion(ctx context.Context, store ledger.ClaimStore, cc ledger.ClaimCompletion) (ledger.OutboxResult, error) {
	switch cc.Op {
	case ledger.OpMarkDelivered:
		return store.MarkClaimDelivered(ctx, cc.Claim, cc.Result)
	case ledger.OpMarkDeadLettered:
		return store.MarkClaimDeadLettered(ctx, cc.Claim, cc.Error, cc.Reason)
	case ledger.OpSaveClaim:
		return store.SaveClaim(ctx, cc.Claim, cc.Entry)
	case ledger.OpReleaseClaim:
		return store.ReleaseClaim(ctx, cc.Claim, cc.Reason)
	default:
		return store.MarkClaimFailed(ctx, cc.Claim, cc.Error, cc.NextRetry)
	}
}

// completionBatch gathers a cycle's completions for a ledger.ClaimCompleter
// store, as a group commit does: the first emission to finish applies its
// own completion; those that finish meanwhile queue theirs and go on, and
// it applies them all in its next call, until none is queued. So a cycle
// costs about one store call per round of emissions, with no goroutine
// of its own and no hand-off per completion.
type completionBatch struct {
	store ledger.ClaimCompleter
	c     *cycle
	mu    sync.Mutex
	// cs holds the cycle's completions in the order they came, each
	// passed to the store as it is; dones[i] is what the event of cs[i]
	// reports. Both are sized for the cycle's claims at once, so a flush
	// neither copies nor grows them; cs[applied:] are queued.
	cs       []ledger.ClaimCompletion
	dones    []doneEmission
	applied  int
	flushing bool
}

// newCompletionBatch returns the completion batch of a cycle that claimed
// n entries.
func newCompletionBatch(store ledger.ClaimCompleter, c *cycle, n int) *completionBatch {
	return &completionBatch{store: store, c: c, cs: make([]ledger.ClaimCompletion, 0, n), dones: make([]doneEmission, 0, n)}
}

// add queues a completion and, unless another emission is applying the
// queue, applies it until it is empty.
func (b *completionBatch) add(ctx context.Context, done doneEmission, cc ledger.ClaimCompletion) {
	b.mu.Lock()
	b.cs = append(b.cs, cc)
	b.dones = append(b.dones, done)
	if b.flushing {
		b.mu.Unlock()
		return
	}
	b.flushing = true
	for b.applied < len(b.cs) {
		// Completions queued meanwhile land after to: the store reads
		// none of the elements they write.
		from, to := b.applied, len(b.cs)
		cs, dones := b.cs[from:to:to], b.dones[from:to:to]
		b.applied = to
		b.mu.Unlock()
		b.apply(ctx, cs, dones)
		b.mu.Lock()
	}
	b.flushing = false
	b.mu.Unlock()
}

// apply completes cs in one call and records each answer.
func (b *completionBatch) apply(ctx context.Context, cs []ledger.ClaimCompletion, dones []doneEmission) {
	outs, err := b.store.CompleteClaims(ctx, cs)
	if errors.Is(err, ledger.ErrInvalid) && len(cs) > 1 {
		// One malformed completion refuses the whole call: apply each on
		// its own, so that only that one is refused.
		for i := range cs {
			b.apply(ctx, cs[i:i+1], dones[i:i+1])
		}
		return
	}
	for i, done := range dones {
		var out ledger.OutboxResult
		if i < len(outs) {
			out = outs[i]
		}
		// A completion left undecided has no outcome: it failed with the
		// call, and its claim stays until it expires.
		var doneErr error
		if out.Outcome == "" {
			doneErr = err
			if doneErr == nil {
				doneErr = fmt.Errorf("dispatch: the store left the completion of %s undecided", cs[i].Claim.EntryID)
			}
		}
		b.c.completed(ctx, done.ce, done.kind, out, doneErr, done.dur, done.emitErr)
	}
}

// emissionError turns an emitter error into what the store records. The
// code says where the failure came from: the emitter's own (Coded) unless
// the dispatcher itself ended the emission; the message is made acceptable
// to the store (valid UTF-8, no NUL, at most ledger.MaxTextBytes), since a
// rejected completion would leave the claim stranded until it expires.
func emissionError(err error) ledger.EmissionError {
	code := CodeError
	var coded *CodedError
	switch {
	case errors.Is(err, ErrPanic):
		code = CodePanic
	case errors.Is(err, ErrEmitTimeout):
		code = CodeTimeout
	case errors.Is(err, ErrShutdown):
		code = CodeShutdown
	case errors.Is(err, ErrClaimLost):
		code = CodeClaimLost
	case errors.As(err, &coded) && sanitizeName(coded.Code) != "":
		code = sanitizeName(coded.Code)
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

// claimRenewal renews the claim of one emission while it runs, when the
// store is a ledger.ClaimRenewer (see renewals: the cycle renews every
// third of the lease). A renewal that does not apply means another
// worker may own the entry, so the emission is cancelled with
// ErrClaimLost.
type claimRenewal struct {
	renewal
	c  *cycle
	ce *ledger.ClaimedEntry
	// claim is read by a renewal and replaced by the previous one's
	// settle; one item's renewals run one after another, ordered by the
	// renewals' lock.
	claim ledger.Claim
	job   *job // the emission's, which a lost claim cancels
}

func (k *claimRenewal) renew(sctx context.Context) func() bool {
	d, c, ce := k.c.d, k.c, k.ce
	ctx := c.renewals.ctx
	res, err := d.store.(ledger.ClaimRenewer).RenewClaim(sctx, k.claim, d.cfg.clock(), d.cfg.leaseDuration)
	return func() bool {
		ev := d.entryEvent(EventRenewed, ce)
		ev.Outcome = string(res.Outcome)
		switch {
		case err != nil:
			// The claim may still be ours: try again at the next tick.
			ev.Kind, ev.Err = EventStoreError, err
			d.cfg.logger.LogAttrs(ctx, slog.LevelError, "dispatch: claim renewal failed",
				slog.String("entry_id", string(k.claim.EntryID)),
				slog.String("idempotency_key", ce.Entry.Envelope.IdempotencyKey), slog.Any("error", err))
		case !res.Applied():
			ev.Kind = EventRenewLost
			d.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "dispatch: claim renewal did not apply; cancelling the emission",
				slog.String("entry_id", string(k.claim.EntryID)),
				slog.String("idempotency_key", ce.Entry.Envelope.IdempotencyKey), slog.String("outcome", string(res.Outcome)))
			k.job.cancel(ErrClaimLost)
			c.record(ctx, ev)
			return false
		default:
			// The entry shows the new expiry; the token stays the one
			// this dispatcher was granted (entries carry none).
			if res.Entry.Claim != nil {
				k.claim.ExpiresAt = res.Entry.Claim.ExpiresAt
			}
		}
		c.record(ctx, ev)
		return true
	}
}
