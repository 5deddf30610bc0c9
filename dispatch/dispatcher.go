package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// Emitter emits one outbox entry to its provider. It returns the
// provider's result on success. An error is retried with backoff unless it
// is wrapped by Permanent (the entry is dead-lettered) or made by Defer
// (the entry is saved as Deferred). Emit must honour ctx: it is cancelled
// when the per-emission timeout runs out, when the shutdown deadline
// passes, or when the claim is found lost (context.Cause says which).
//
// Emit may be called again for an entry it already emitted (delivery is
// at least once): providers should deduplicate on the entry ID and its
// claim sequence, or on the envelope's idempotency key.
type Emitter interface {
	Emit(ctx context.Context, entry ledger.OutboxEntry) (ledger.EmissionResult, error)
}

// EmitterFunc adapts a function to Emitter.
type EmitterFunc func(ctx context.Context, entry ledger.OutboxEntry) (ledger.EmissionResult, error)

// Emit calls f(ctx, entry).
func (f EmitterFunc) Emit(ctx context.Context, entry ledger.OutboxEntry) (ledger.EmissionResult, error) {
	return f(ctx, entry)
}

// Stats counts what one poll cycle did. Every claimed entry is counted once
// in Delivered, Retried, DeadLettered, Deferred, Released, Lost or
// StoreErrors.
type Stats struct {
	Claimed      int
	Delivered    int
	Retried      int
	DeadLettered int
	Deferred     int
	Released     int
	// Lost counts completions that did not apply: the claim was no longer
	// this dispatcher's. They are never counted as delivered.
	Lost int
	// Renewed counts claim renewals that applied.
	Renewed int
	// StoreErrors counts failed store calls (claims, completions,
	// renewals, releases).
	StoreErrors int
}

// Dispatcher drives a ledger.ClaimStore: it claims due entries, emits
// them with bounded concurrency and completes each under its claim. It is
// safe for concurrent use; run one Run loop per dispatcher.
type Dispatcher struct {
	store   ledger.ClaimStore
	emitter Emitter
	cfg     config
	sweeper *Sweeper // run beside Run's loop (WithSweeper); nil without
	health  health   // what Run knows of the store, for Ready
}

// NewDispatcher returns a Dispatcher over store that emits with emitter.
// It fails with an error matching ledger.ErrInvalid when store or emitter
// is nil or an option is malformed, notably when the emit timeout is not
// shorter than the claim lease, or when WithSweeper is given without
// WithRetention (the outbox has nothing else to sweep).
func NewDispatcher(store ledger.ClaimStore, emitter Emitter, opts ...DispatcherOption) (*Dispatcher, error) {
	if store == nil {
		return nil, invalid("store", "must not be nil")
	}
	if emitter == nil {
		return nil, invalid("emitter", "must not be nil")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o.applyDispatcher(&cfg)
		}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	d := &Dispatcher{store: store, emitter: emitter, cfg: cfg}
	if cfg.sweep {
		// The outbox alone has nothing to expire: without retention
		// NewSweeper says the sweeper has nothing to do.
		sw, err := newSweeper(nil, store, cfg.common, cfg.worker, cfg.sweeper)
		if err != nil {
			return nil, err
		}
		d.sweeper = sw
	}
	return d, nil
}

// Worker returns the worker name the dispatcher claims under.
func (d *Dispatcher) Worker() string { return d.cfg.worker }

// RunOnce runs one poll cycle: it claims up to the batch size of due
// entries (retry-ready ones first, since they are older work, then
// pending ones), emits them with bounded concurrency, completes each, and
// returns when every emission it started has been completed (or abandoned
// after its context was cancelled, for emitters that ignore it).
//
// When ctx is cancelled during the cycle, RunOnce starts no further
// emission, releases the claims it had not started (they are claimable
// again at once), and gives the emissions in flight the shutdown timeout
// before cancelling them. The error joins the claim error, any store errors
// of completions, and ctx.Err() when ctx was cancelled; the Stats count
// what happened either way.
func (d *Dispatcher) RunOnce(ctx context.Context) (Stats, error) {
	if err := storekit.ValidateContext(ctx); err != nil {
		return Stats{}, err
	}
	if err := ctx.Err(); err != nil {
		return Stats{}, err
	}
	c := &cycle{d: d, storeCtx: newStoreContexts(ctx, d.cfg.leaseDuration)}
	defer c.storeCtx.close()
	claimed := d.claim(ctx, c)
	if len(claimed) < d.cfg.batchSize {
		// The queue is drained: the completions may wait for company.
		c.storeCtx.linger(d.cfg.linger)
	}
	if cc, ok := d.store.(ledger.ClaimCompleter); ok && d.cfg.batchCompletion {
		c.batch = newCompletionBatch(cc, c, len(claimed))
	}
	d.emitAll(ctx, claimed, c)
	c.mu.Lock()
	defer c.mu.Unlock()
	// A failed claim is among c.errs: joining it again would show every
	// error twice in the one line Run logs.
	return c.stats, errors.Join(errors.Join(c.errs...), ctx.Err())
}

// claim claims retry-ready entries, then pending ones, up to the batch
// size: in one call when the store is a ledger.DueClaimer. A failure is
// recorded in c (an EventStoreError), unless ctx ended: a claim cut
// short by shutdown is no store failure, and RunOnce reports ctx.Err().
func (d *Dispatcher) claim(ctx context.Context, c *cycle) []ledger.ClaimedEntry {
	req := ledger.ClaimRequest{
		Worker:        d.cfg.worker,
		Now:           d.cfg.clock(),
		LeaseDuration: d.cfg.leaseDuration,
		Limit:         d.cfg.batchSize,
	}
	var claimed []ledger.ClaimedEntry
	var err error
	if due, ok := d.store.(ledger.DueClaimer); ok {
		// Both kinds in one call: a cycle costs one claim, not two.
		claimed, err = due.ClaimDue(ctx, req)
	} else {
		claimed, err = d.store.ClaimRetryReady(ctx, req)
		if err == nil && len(claimed) < req.Limit {
			req.Limit -= len(claimed)
			var more []ledger.ClaimedEntry
			more, err = d.store.ClaimPending(ctx, req)
			claimed = append(claimed, more...)
		}
	}
	if err != nil && ctx.Err() == nil {
		// Observed here, logged by Run (once per doubling of the failures
		// in a row, not once per poll).
		c.record(ctx, Event{Kind: EventStoreError, Err: err, Worker: d.cfg.worker})
	}
	for i := range claimed {
		c.record(ctx, d.entryEvent(EventClaimed, &claimed[i]))
	}
	return claimed
}

// emitAll emits claimed with at most the configured concurrency and waits
// for every emission it started.
func (d *Dispatcher) emitAll(ctx context.Context, claimed []ledger.ClaimedEntry, c *cycle) {
	if len(claimed) == 0 {
		return
	}
	flight, stop := d.cfg.flight(ctx)
	defer stop()
	if _, ok := d.store.(ledger.ClaimRenewer); ok {
		c.renewals = newRenewals(flight, d.cfg.afterFunc, d.cfg.leaseDuration/3)
		defer c.renewals.close()
	}
	fanOut(ctx, flight, "emitter", claimed, d.cfg.concurrency,
		func(ce *ledger.ClaimedEntry, values context.Context) task[ledger.EmissionResult] {
			return d.emission(ce, values, c)
		},
		func(rest []ledger.ClaimedEntry) { d.releaseAll(rest, c) })
}

// releaseAll gives back claims that were never emitted.
func (d *Dispatcher) releaseAll(claimed []ledger.ClaimedEntry, c *cycle) {
	sc := c.storeCtx.get()
	defer c.storeCtx.put(sc)
	sctx := sc.ctx
	for i := range claimed {
		ce := &claimed[i]
		res, err := d.store.ReleaseClaim(sctx, ce.Claim, "dispatcher shutting down before emitting")
		c.completed(sctx, ce, EventReleased, res, err, 0, nil)
	}
}

// entryEvent returns an event of kind about ce, labelled with the
// dispatcher's worker name and the entry's provider, kind, claim and
// metadata.
func (d *Dispatcher) entryEvent(kind EventKind, ce *ledger.ClaimedEntry) Event {
	return Event{
		Kind: kind, EntryID: string(ce.Claim.EntryID), Attempt: ce.Entry.Attempts,
		Worker: d.cfg.worker, Provider: ce.Entry.Envelope.Provider, EntryKind: ce.Entry.Envelope.Kind,
		IdempotencyKey: ce.Entry.Envelope.IdempotencyKey,
		Seq:            ce.Claim.Seq, Metadata: ce.Entry.Envelope.Metadata,
	}
}

// cycle collects the stats and errors of one RunOnce.
type cycle struct {
	d *Dispatcher
	// store hands out the contexts of completions and releases, which
	// carry the values of RunOnce's ctx but not its cancellation.
	storeCtx *storeContexts
	// renewals keeps the claims of the emissions in flight (nil when the
	// store cannot renew).
	renewals *renewals
	// batch applies completions together when the store can.
	batch *completionBatch
	mu    sync.Mutex
	stats Stats
	errs  []error
}

// record counts ev and passes it to the observer.
func (c *cycle) record(_ context.Context, ev Event) {
	c.mu.Lock()
	switch ev.Kind {
	case EventClaimed:
		c.stats.Claimed++
	case EventDelivered:
		c.stats.Delivered++
	case EventRetried:
		c.stats.Retried++
	case EventDeadLettered:
		c.stats.DeadLettered++
	case EventDeferred:
		c.stats.Deferred++
	case EventReleased:
		c.stats.Released++
	case EventLost, EventRenewLost:
		// A lost renewal is followed by a completion that is lost too, so
		// only the completion is counted here.
		if ev.Kind == EventLost {
			c.stats.Lost++
		}
	case EventRenewed:
		c.stats.Renewed++
	case EventStoreError:
		c.stats.StoreErrors++
		c.errs = append(c.errs, ev.Err)
	}
	c.mu.Unlock()
	c.d.cfg.observer.Observe(ev)
}

// completed records the answer of a completion (or release) of ce that
// was meant to produce kind: a store error, a lost claim, or kind itself.
func (c *cycle) completed(ctx context.Context, ce *ledger.ClaimedEntry, kind EventKind, res ledger.OutboxResult, err error, dur time.Duration, emitErr error) {
	log := c.d.cfg.logger
	// Built only on the paths that log: most completions log nothing.
	attrs := func(more ...slog.Attr) []slog.Attr {
		return append([]slog.Attr{
			slog.String("worker", c.d.cfg.worker),
			slog.String("entry_id", string(ce.Claim.EntryID)),
			slog.String("idempotency_key", ce.Entry.Envelope.IdempotencyKey),
			slog.Int64("claim_seq", ce.Claim.Seq),
			slog.Int("attempt", ce.Entry.Attempts),
		}, more...)
	}
	ev := c.d.entryEvent(kind, ce)
	ev.Duration, ev.Err, ev.Final = dur, emitErr, true
	switch {
	case err != nil:
		ev.Kind, ev.Err = EventStoreError, err
		log.LogAttrs(ctx, slog.LevelError, "dispatch: completion failed; the entry is retried once its claim expires",
			attrs(slog.String("intended", string(kind)), slog.Any("error", err))...)
	case !res.Applied():
		ev.Kind, ev.Outcome = EventLost, string(res.Outcome)
		log.LogAttrs(ctx, slog.LevelWarn, "dispatch: completion did not apply; the claim is no longer ours",
			attrs(slog.String("intended", string(kind)), slog.String("outcome", string(res.Outcome)))...)
	default:
		ev.Outcome = string(res.Outcome)
		if kind != EventReleased {
			ev.Latency = res.Entry.UpdatedAt.Sub(res.Entry.CreatedAt)
		}
		if emitErr != nil {
			log.LogAttrs(ctx, slog.LevelWarn, "dispatch: emission failed",
				attrs(slog.String("result", string(kind)), slog.Any("error", emitErr))...)
		}
	}
	c.record(ctx, ev)
}
