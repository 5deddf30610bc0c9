package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// Handler handles one leased delivery for a Worker. It returns what to do
// with the delivery (see Decision) or an error. An error gives the
// attempt up with MarkFailed: the delivery is offered again after the
// policy's backoff, or ends as Failed when its attempts are used up or the
// error is wrapped by Permanent. A panic is recovered and recorded as an
// ordinary failure. Defer has no meaning for a delivery and counts as an
// ordinary failure.
//
// Handle must honour ctx: it is cancelled when the per-delivery timeout
// runs out, when the shutdown deadline passes, or when renewing the lease
// shows it lost (context.Cause: ErrHandleTimeout, ErrShutdown,
// ErrLeaseLost). Handle may be called more than once for one delivery
// (see the Worker's documentation), so what it does must be idempotent,
// for example keyed on the delivery ID.
type Handler interface {
	Handle(ctx context.Context, d ledger.Delivery) (Decision, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, d ledger.Delivery) (Decision, error)

// Handle calls f(ctx, d).
func (f HandlerFunc) Handle(ctx context.Context, d ledger.Delivery) (Decision, error) {
	return f(ctx, d)
}

// Decision is what a handler that returned no error decided. The zero
// Decision processes the delivery with DefaultAction and no fence.
type Decision struct {
	// Release gives the lease back without counting the attempt (the
	// delivery is offerable again at once, to this Worker or another)
	// instead of processing it. Action and Fence are then ignored.
	Release bool
	// Action names what the handler did; MarkProcessed records it.
	// Empty means DefaultAction. It is cut to a valid ledger name.
	Action ledger.ActionRef
	// Fence, when not nil, is passed to MarkProcessed; otherwise the
	// fence comes from the Worker's FenceSource, if it has one.
	Fence *ledger.Fence
}

// Processed returns the Decision that marks the delivery processed with
// action.
func Processed(action ledger.ActionRef) Decision { return Decision{Action: action} }

// Released returns the Decision that gives the lease back uncounted.
func Released() Decision { return Decision{Release: true} }

// WorkerStats counts what one poll cycle of a Worker did. Every leased
// delivery is counted once in Processed, Retried, Failed, Released, Lost,
// FenceRejected or StoreErrors.
type WorkerStats struct {
	Leased int
	// Reclaimed counts deliveries taken back from older incarnations of
	// the agent; they may also be counted in Leased.
	Reclaimed int
	Processed int
	// Retried counts failures after which the delivery is offered again.
	Retried int
	// Failed counts failures that ended the delivery as Failed.
	Failed   int
	Released int
	// Lost counts completions that did not apply (for example an
	// acknowledgement after the lease expired). They are never counted as
	// processed.
	Lost int
	// FenceRejected counts deliveries whose MarkProcessed was rejected for
	// a stale fence. They are never counted as processed.
	FenceRejected int
	// Renewed counts lease renewals that applied.
	Renewed int
	// StoreErrors counts failed ledger calls (leases, completions,
	// renewals, releases).
	StoreErrors int
}

// Worker is a host agent's loop over a ledger.Ledger: it leases
// deliveries for its targets under one owner incarnation, hands each to a
// Handler, and records the handler's answer.
//
// # Order of calls
//
// For each delivery the Worker calls Lease, then Handle, then, depending
// on the answer:
//
//   - a Decision to process: the fence (Decision.Fence or the
//     FenceSource), then Acknowledge, then MarkProcessed (in one call,
//     AcknowledgeProcessed, when the ledger is a ledger.AckProcessor);
//   - a Decision to release: Release (the attempt is not counted);
//   - an error (or a panic, or a FenceSource error): MarkFailed, permanent
//     when the error is wrapped by Permanent.
//
// The handler runs before the acknowledgement on purpose: the ledger never
// offers acknowledged work again and refuses MarkFailed and Release on it,
// so acknowledging first would leave a failed handler no way to give the
// delivery back; it would sit until its acknowledgement deadline ended it
// as Expired. Acknowledging after the handler keeps every failure
// retryable. The price is that the handler's work may be repeated: when
// the handler succeeds but the acknowledgement does not apply (the lease
// expired or was taken over) or the process dies before it, the delivery
// is offered again and handled again. Delivery is at least once; handlers
// must be idempotent.
//
// A completion whose outcome is not Applied is logged and reported
// (EventLost, or EventFenceRejected for a stale fence), never counted as
// processed. A store error on MarkProcessed after a successful
// Acknowledge is tried again a few times (an answer of Repeated then
// means an earlier try applied); if every try fails the delivery stays
// acknowledged until Expire ends it at its acknowledgement deadline: it is
// not handled again.
//
// # Stale fences
//
// When MarkProcessed answers FenceRejected (the decision's fence is lower
// than the highest accepted for the target: a newer writer has acted), the
// handler's work must not count, and the delivery cannot be processed by
// anyone: it is acknowledged, so it is never offered again. The Worker
// therefore ends it at once, when the ledger is a ledger.FenceRejecter
// (memstore and pgstore are): EndFenceRejected, a call of its own since
// the refused MarkProcessed wrote nothing, ends it as Expired with cause
// ledger.CauseFenceRejected, whose detail names the refused fence and the
// highest accepted, recorded in its history as an abandon by the Worker's
// owner. The event is EventFenceRejected either way (WorkerStats counts
// it in FenceRejected, never as processed); only on a ledger without
// FenceRejecter, or when that call fails, does the delivery wait for its
// acknowledgement deadline, ending with cause acknowledgement_lapsed.
// Redrive it (ledgerctl redrive) to have it handled again under a fresh
// fence.
//
// # Incarnations
//
// Each NewWorker is a new incarnation of its agent (a fresh random
// incarnation name). A restarted host therefore leases as a new
// incarnation, and the ledger takes back the deliveries still leased to
// the agent's old incarnation at the new Worker's first lease call (they
// are counted in WorkerStats.Reclaimed and may be leased again at once),
// instead of waiting for their leases to run out. For the same reason, two
// live Workers must not share an agent name: each would take the other's
// leases. Scale one Worker with WithConcurrency, or give each its own
// agent.
//
// # Sweeping
//
// Some of a Worker's deliveries end only when someone calls the ledger's
// Expire: one acknowledged whose MarkProcessed failed with a store error
// every try ends as Expired at its acknowledgement deadline, and one
// whose holder died with its last attempt leased ends as Failed once the
// lease runs out. So Run runs a Sweeper beside its poll
// loop (see Sweeper and WithSweeper): at most one Worker or Sweeper over a
// ledger that keeps leads (memstore and pgstore do) expires at a time,
// every DefaultSweepInterval, and the others take over when it stops or
// dies. Give WithSweeper options to add retention or change the interval,
// and WithoutSweeper only when another process sweeps the same ledger.
// RunOnce never sweeps.
//
// # Heartbeats, timeouts and shutdown
//
// Each Handle call runs under a timeout (WithHandleTimeout). When the
// ledger is a ledger.Renewer the Worker renews the lease every third of
// the lease duration while the handler runs, and cancels the handler
// (context.Cause: ErrLeaseLost) as soon as a renewal does not apply. When
// Run's (or RunOnce's) context is cancelled the Worker stops leasing,
// releases the leases whose handler has not started, and lets the handlers
// in flight finish for up to the shutdown timeout before cancelling them
// (ErrShutdown); their answers are still recorded, with a context detached
// from the cancelled one.
//
// A Worker is safe for concurrent use; run one Run loop per Worker.
type Worker struct {
	ledger  ledger.Ledger
	renewer ledger.Renewer // nil when the ledger cannot renew
	handler Handler
	owner   ledger.Owner
	filter  ledger.LeaseFilter
	cfg     workerConfig
	sweeper *Sweeper // run beside Run's loop; nil with WithoutSweeper
	health  health   // what Run knows of the store, for Ready
}

// NewWorker returns a Worker that leases deliveries of targets (all
// targets when empty) from l for agent, under a new incarnation, and
// handles them with h. It fails with an error matching ledger.ErrInvalid
// when l or h is nil, agent or a target is not a valid ledger name, or an
// option is malformed.
func NewWorker(l ledger.Ledger, agent string, targets []ledger.Target, h Handler, opts ...WorkerOption) (*Worker, error) {
	if l == nil {
		return nil, invalid("ledger", "must not be nil")
	}
	if h == nil {
		return nil, invalid("handler", "must not be nil")
	}
	cfg := defaultWorkerConfig()
	for _, o := range opts {
		if o != nil {
			o.applyWorker(&cfg)
		}
	}
	renewer, _ := l.(ledger.Renewer)
	if err := cfg.validate(renewer != nil); err != nil {
		return nil, err
	}
	w := &Worker{
		ledger:  l,
		renewer: renewer,
		handler: h,
		owner:   ledger.Owner{Agent: agent, Incarnation: string(storekit.NewToken())},
		filter:  ledger.LeaseFilter{Targets: slices.Clone(targets), Ceremony: cfg.ceremony},
		cfg:     cfg,
	}
	// The time is a placeholder: only the other arguments are checked here.
	if err := storekit.ValidateLease(w.filter, w.owner, storekit.MinTime(), cfg.leaseDuration, cfg.batchSize); err != nil {
		return nil, err
	}
	if cfg.sweep {
		sw, err := newSweeper(l, nil, cfg.common, w.owner.String(), cfg.sweeper)
		if err != nil {
			return nil, err
		}
		w.sweeper = sw
	}
	return w, nil
}

// Owner returns the agent and the incarnation the Worker leases under.
func (w *Worker) Owner() ledger.Owner { return w.owner }

// RunOnce runs one poll cycle: it leases up to the batch size of
// deliveries, handles them with bounded concurrency, records each answer,
// and returns when every handler it started has been recorded (or
// abandoned after its context was cancelled, for handlers that ignore it).
// On cancellation it behaves as Run does. The error joins the lease error,
// any store errors of completions, and ctx.Err() when ctx was cancelled;
// the stats count what happened either way.
func (w *Worker) RunOnce(ctx context.Context) (WorkerStats, error) {
	if err := storekit.ValidateContext(ctx); err != nil {
		return WorkerStats{}, err
	}
	if err := ctx.Err(); err != nil {
		return WorkerStats{}, err
	}
	c := &workerCycle{w: w, storeCtx: newStoreContexts(ctx, w.cfg.leaseDuration)}
	defer c.storeCtx.close()
	res, err := w.ledger.Lease(ctx, w.filter, w.owner, w.cfg.clock(), w.cfg.leaseDuration, w.cfg.batchSize)
	if err != nil && ctx.Err() == nil {
		// Observed here, logged by Run (once per doubling of the failures
		// in a row, not once per poll). A Lease cut short by shutdown is
		// no store failure: the error below says ctx ended.
		c.record(Event{Kind: EventStoreError, Err: err, Owner: w.owner})
	}
	for _, id := range res.Reclaimed {
		c.record(Event{Kind: EventReclaimed, EntryID: string(id), DeliveryID: id, Owner: w.owner})
		w.cfg.logger.LogAttrs(ctx, slog.LevelInfo, "dispatch: reclaimed a delivery from an older incarnation",
			slog.String("owner", w.owner.String()), slog.String("delivery_id", string(id)))
	}
	for i := range res.Leased {
		c.record(w.deliveryEvent(EventLeased, &res.Leased[i]))
	}
	if len(res.Leased) < w.cfg.batchSize {
		// The queue is drained: the completions may wait for company.
		c.storeCtx.linger(w.cfg.linger)
	}
	w.handleAll(ctx, res.Leased, c)
	c.mu.Lock()
	defer c.mu.Unlock()
	// A failed Lease is among c.errs: joining it again would show every
	// error twice in the one line Run logs.
	return c.stats, errors.Join(errors.Join(c.errs...), ctx.Err())
}

// handleAll handles leased with at most the configured concurrency and
// waits for every handler it started.
func (w *Worker) handleAll(ctx context.Context, leased []ledger.LeasedDelivery, c *workerCycle) {
	if len(leased) == 0 {
		return
	}
	flight, stop := w.cfg.flight(ctx)
	defer stop()
	if w.renewer != nil {
		c.renewals = newRenewals(flight, w.cfg.afterFunc, w.cfg.leaseDuration/3)
		defer c.renewals.close()
	}
	fanOut(ctx, flight, "handler", leased, w.cfg.concurrency,
		func(ld *ledger.LeasedDelivery, values context.Context) task[handled] {
			return w.handling(ld, values, c)
		},
		func(rest []ledger.LeasedDelivery) { w.releaseAll(rest, c) })
}

// releaseAll gives back leases whose handler never started.
func (w *Worker) releaseAll(leased []ledger.LeasedDelivery, c *workerCycle) {
	sc := c.storeCtx.get()
	defer c.storeCtx.put(sc)
	sctx := sc.ctx
	for i := range leased {
		ld := &leased[i]
		res, err := w.ledger.Release(sctx, ld.Lease, w.cfg.clock())
		c.completed(sctx, ld, EventReleased, res, err, 0, nil)
	}
}

// workerCycle collects the stats and errors of one RunOnce.
type workerCycle struct {
	w *Worker
	// store hands out the contexts of completions and releases, which
	// carry the values of RunOnce's ctx but not its cancellation.
	storeCtx *storeContexts
	// renewals keeps the leases of the handlers in flight (nil when the
	// ledger cannot renew).
	renewals *renewals
	mu       sync.Mutex
	stats    WorkerStats
	errs     []error
}

// record counts ev and passes it to the observer.
func (c *workerCycle) record(ev Event) {
	c.mu.Lock()
	s := &c.stats
	switch ev.Kind {
	case EventLeased:
		s.Leased++
	case EventReclaimed:
		s.Reclaimed++
	case EventProcessed:
		s.Processed++
	case EventRetried:
		s.Retried++
	case EventFailed:
		s.Failed++
	case EventReleased:
		s.Released++
	case EventLost:
		// A lost renewal (EventRenewLost) is followed by a completion
		// that is counted on its own, so only the completion counts here.
		s.Lost++
	case EventFenceRejected:
		s.FenceRejected++
	case EventRenewed:
		s.Renewed++
	case EventStoreError:
		s.StoreErrors++
		c.errs = append(c.errs, ev.Err)
	}
	c.mu.Unlock()
	c.w.cfg.observer.Observe(ev)
}

// completed records the answer of a completion of ld that was meant to
// produce kind: a store error, an outcome that did not apply, or kind.
func (c *workerCycle) completed(ctx context.Context, ld *ledger.LeasedDelivery, kind EventKind, res ledger.DeliveryResult, err error, dur time.Duration, handleErr error) {
	log := c.w.cfg.logger
	// Built only on the paths that log: most completions log nothing.
	attrs := func(more ...slog.Attr) []slog.Attr {
		return append([]slog.Attr{
			slog.String("owner", c.w.owner.String()),
			slog.String("delivery_id", string(ld.Delivery.ID)),
			slog.Int64("lease_seq", ld.Lease.Seq),
			slog.Int("attempt", ld.Delivery.Attempts),
		}, more...)
	}
	ev := c.w.deliveryEvent(kind, ld)
	ev.Duration, ev.Err, ev.Outcome, ev.Final = dur, handleErr, string(res.Outcome), true
	switch {
	case err != nil:
		ev.Kind, ev.Err, ev.Outcome = EventStoreError, err, ""
		log.LogAttrs(ctx, slog.LevelError, "dispatch: ledger call failed; the delivery is offered again once its lease or acknowledgement runs out",
			attrs(slog.String("intended", string(kind)), slog.Any("error", err))...)
	case res.Outcome == ledger.OutcomeFenceRejected && res.Delivery.State == ledger.DeliveryStateExpired:
		ev.Kind = EventFenceRejected
		log.LogAttrs(ctx, slog.LevelWarn, "dispatch: fence rejected; the delivery ended as expired with cause "+string(ledger.CauseFenceRejected),
			attrs(slog.String("intended", string(kind)), slog.String("detail", causeDetail(res.Delivery.Cause)))...)
	case res.Outcome == ledger.OutcomeFenceRejected:
		ev.Kind = EventFenceRejected
		log.LogAttrs(ctx, slog.LevelWarn, "dispatch: fence rejected; the delivery stays acknowledged until its deadline",
			attrs(slog.String("intended", string(kind)))...)
	case !res.Applied() && !processedEarlier(kind, res):
		ev.Kind = EventLost
		log.LogAttrs(ctx, slog.LevelWarn, "dispatch: completion did not apply; the lease is no longer ours",
			attrs(slog.String("intended", string(kind)), slog.String("outcome", string(res.Outcome)))...)
	default:
		if kind == EventRetried && res.Delivery.State == ledger.DeliveryStateFailed {
			ev.Kind = EventFailed // the attempts were used up
		}
		if kind != EventReleased {
			ev.Latency = res.Delivery.UpdatedAt.Sub(res.Delivery.CreatedAt)
		}
		if handleErr != nil {
			log.LogAttrs(ctx, slog.LevelWarn, "dispatch: handler failed",
				attrs(slog.String("result", string(ev.Kind)), slog.Any("error", handleErr))...)
		}
	}
	c.record(ev)
}

// deliveryEvent returns an event of kind about ld, labelled with the
// Worker's owner and the delivery's target, ceremony, lease and metadata.
func (w *Worker) deliveryEvent(kind EventKind, ld *ledger.LeasedDelivery) Event {
	return Event{
		Kind: kind, EntryID: string(ld.Delivery.ID), Attempt: ld.Delivery.Attempts,
		DeliveryID: ld.Delivery.ID, Target: ld.Delivery.Target, Ceremony: ld.Delivery.Ceremony, Owner: w.owner,
		Seq: ld.Lease.Seq, Metadata: ld.Delivery.Metadata,
	}
}

// causeDetail is c's detail, "" for none.
func causeDetail(c *ledger.Cause) string {
	if c == nil {
		return ""
	}
	return c.Detail
}

// processedEarlier reports whether res answers a MarkProcessed that an
// earlier try of the same call already applied (see markProcessed): a
// success, not a lost lease.
func processedEarlier(kind EventKind, res ledger.DeliveryResult) bool {
	return kind == EventProcessed && res.Outcome == ledger.OutcomeRepeated &&
		res.Delivery.State == ledger.DeliveryStateProcessed
}

// handling is the task of handling one leased delivery: the handler's
// call on a copy of the delivery (and, for a decision to process, the
// fence), under the job's context, which the handle timeout (and a lost
// heartbeat) cancels, and its completion. A panic in either is a
// *PanicError.
type handling struct {
	job
	hb          heartbeat // renews the lease while the handler runs, when c.renewals is not nil
	w           *Worker
	c           *workerCycle
	ld          *ledger.LeasedDelivery
	start       time.Time
	stopTimeout func() bool
}

// handling prepares the handling of ld (see fanOut).
func (w *Worker) handling(ld *ledger.LeasedDelivery, values context.Context, c *workerCycle) task[handled] {
	h := &handling{w: w, c: c, ld: ld}
	h.init(values)
	h.stopTimeout = w.cfg.afterFunc(w.cfg.handleTimeout, h.timedOut)
	if c.renewals != nil {
		h.hb = heartbeat{c: c, ld: ld, job: &h.job}
		c.renewals.join(&h.hb.renewal, &h.hb)
	}
	h.start = w.cfg.clock()
	return h
}

func (h *handling) timedOut() { h.cancel(ErrHandleTimeout) }

func (h *handling) call() (handled, error) {
	dec, err := h.w.handler.Handle(h.ctx, h.ld.Delivery.Clone())
	out := handled{dec: dec}
	if err == nil && !dec.Release {
		out.fence, err = h.w.fence(h.ctx, h.ld.Delivery.Target, dec)
	}
	return out, err
}

func (h *handling) done(out handled, err error) {
	out.err = err
	dur := h.w.cfg.clock().Sub(h.start)
	h.end(h.c.renewals, &h.hb.renewal, h.stopTimeout, h.c.storeCtx, func(ctx context.Context) {
		h.w.complete(ctx, h.ld, out, dur, h.c)
	})
}

// handled is the answer of the user code for one delivery.
type handled struct {
	dec   Decision
	fence *ledger.Fence
	err   error
}

// fence returns the fence for MarkProcessed: the decision's, else the
// FenceSource's. A negative fence is an error here, before the delivery is
// acknowledged, since MarkProcessed would reject it only afterwards.
func (w *Worker) fence(ctx context.Context, target ledger.Target, dec Decision) (*ledger.Fence, error) {
	f := dec.Fence
	if f == nil && w.cfg.fenceSource != nil {
		var err error
		if f, err = w.cfg.fenceSource(ctx, target); err != nil {
			return nil, fmt.Errorf("dispatch: fence source: %w", err)
		}
	}
	if f == nil {
		return nil, nil
	}
	if *f < 0 {
		return nil, invalid("fence", "must not be negative")
	}
	v := *f
	return &v, nil
}

// complete maps the user code's answer to ledger calls under the lease.
func (w *Worker) complete(ctx context.Context, ld *ledger.LeasedDelivery, out handled, dur time.Duration, c *workerCycle) {
	switch {
	case out.err != nil:
		reason := ledger.FailureReason{
			Message:   sanitizeText(out.err.Error(), ledger.MaxTextBytes),
			Permanent: errors.Is(out.err, ErrPermanent),
		}
		res, err := w.ledger.MarkFailed(ctx, ld.Lease, reason, w.cfg.clock())
		// completed turns Retried into Failed when the delivery ended.
		c.completed(ctx, ld, EventRetried, res, err, dur, out.err)
	case out.dec.Release:
		res, err := w.ledger.Release(ctx, ld.Lease, w.cfg.clock())
		c.completed(ctx, ld, EventReleased, res, err, dur, nil)
	default:
		action := ledger.ActionRef(sanitizeName(string(out.dec.Action)))
		if action == "" {
			action = DefaultAction
		}
		if ap, ok := w.ledger.(ledger.AckProcessor); ok {
			// Both calls in one, one write on a store that can.
			ack, res, err := ap.AcknowledgeProcessed(ctx, ld.Lease, w.cfg.observation, out.fence, action, w.cfg.clock())
			switch {
			case ack.Applied() && err != nil:
				// Acknowledged, not marked processed: try that again.
				res, err = w.markProcessed(ctx, ld, out.fence, action)
			case !ack.Applied():
				res = ack
			}
			res = w.endFenceRejected(ctx, ld, out.fence, res, err)
			c.completed(ctx, ld, EventProcessed, res, err, dur, nil)
			return
		}
		res, err := w.ledger.Acknowledge(ctx, ld.Lease, w.cfg.observation, w.cfg.clock())
		if err != nil || !res.Applied() {
			c.completed(ctx, ld, EventProcessed, res, err, dur, nil)
			return
		}
		res, err = w.markProcessed(ctx, ld, out.fence, action)
		res = w.endFenceRejected(ctx, ld, out.fence, res, err)
		c.completed(ctx, ld, EventProcessed, res, err, dur, nil)
	}
}

// endFenceRejected ends a delivery whose MarkProcessed (answer res, err)
// was refused for fence, when the ledger is a ledger.FenceRejecter (see
// Worker: Stale fences), and returns res with the delivery as it now
// stands. The outcome stays FenceRejected, so the event and the stats
// count the refusal; the delivery is Expired when the end applied. When
// it did not (or the ledger cannot, or the call failed, which is logged),
// the delivery stays acknowledged until its deadline.
func (w *Worker) endFenceRejected(ctx context.Context, ld *ledger.LeasedDelivery, fence *ledger.Fence, res ledger.DeliveryResult, err error) ledger.DeliveryResult {
	fr, ok := w.ledger.(ledger.FenceRejecter)
	if err != nil || res.Outcome != ledger.OutcomeFenceRejected || fence == nil || !ok {
		return res
	}
	end, err := fr.EndFenceRejected(ctx, ld.Delivery.ID, w.owner, *fence, w.cfg.clock())
	switch {
	case err != nil:
		w.cfg.logger.LogAttrs(ctx, slog.LevelError, "dispatch: ending a fence-rejected delivery failed; it stays acknowledged until its deadline",
			slog.String("owner", w.owner.String()), slog.String("delivery_id", string(ld.Delivery.ID)), slog.Any("error", err))
	case end.Applied():
		res.Delivery = end.Delivery
	}
	return res
}

// markProcessedTries bounds the tries of MarkProcessed after a successful
// Acknowledge.
const markProcessedTries = 3

// markProcessed calls MarkProcessed, trying again after a store error: the
// delivery is acknowledged by now, so it can no longer be failed or
// released, and an error left standing would end it as Expired at its
// acknowledgement deadline although the handler's work was done. A try
// whose write landed but whose answer was lost makes the next one answer
// Repeated, which completed counts as processed. Errors of tries that are
// followed by another are logged, not recorded: the delivery is counted
// once, by the last try.
func (w *Worker) markProcessed(ctx context.Context, ld *ledger.LeasedDelivery, fence *ledger.Fence, action ledger.ActionRef) (ledger.DeliveryResult, error) {
	for try := 1; ; try++ {
		res, err := w.ledger.MarkProcessed(ctx, ld.Delivery.ID, w.owner, fence, action, w.cfg.clock())
		if err == nil || try == markProcessedTries || ctx.Err() != nil || errors.Is(err, ledger.ErrInvalid) {
			return res, err
		}
		w.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "dispatch: marking processed failed; trying again",
			slog.String("owner", w.owner.String()), slog.String("delivery_id", string(ld.Delivery.ID)),
			slog.Int("try", try), slog.Any("error", err))
	}
}

// heartbeat renews the lease of one handler while it runs, when the
// ledger is a ledger.Renewer (see renewals: the cycle renews every third
// of the lease duration). A renewal that does not apply means another
// worker may hold the delivery, so the handler is cancelled with
// ErrLeaseLost.
type heartbeat struct {
	renewal
	c   *workerCycle
	ld  *ledger.LeasedDelivery
	job *job // the handling's, which a lost lease cancels
}

func (hb *heartbeat) renew(sctx context.Context) func() bool {
	w, c, ld := hb.c.w, hb.c, hb.ld
	ctx := c.renewals.ctx
	// Renewal keeps the token and sequence, so the lease as granted
	// stays the one to present.
	res, err := w.renewer.RenewLease(sctx, ld.Lease, w.cfg.clock(), w.cfg.leaseDuration)
	return func() bool {
		ev := w.deliveryEvent(EventRenewed, ld)
		ev.Outcome = string(res.Outcome)
		switch {
		case err != nil:
			// The lease may still be ours: try again at the next tick.
			ev.Kind, ev.Err = EventStoreError, err
			w.cfg.logger.LogAttrs(ctx, slog.LevelError, "dispatch: lease renewal failed",
				slog.String("delivery_id", string(ld.Delivery.ID)), slog.Any("error", err))
		case !res.Applied():
			ev.Kind = EventRenewLost
			w.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "dispatch: lease renewal did not apply; cancelling the handler",
				slog.String("delivery_id", string(ld.Delivery.ID)), slog.String("outcome", string(res.Outcome)))
			hb.job.cancel(ErrLeaseLost)
			c.record(ev)
			return false
		}
		c.record(ev)
		return true
	}
}
