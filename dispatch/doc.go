// Package dispatch runs the loops that drive a ledger: the Dispatcher
// drives an outbox claim store (claim due entries, emit each to its
// provider, record what happened under the claim), and the Worker drives
// a host agent's deliveries (lease them, hand each to a Handler, record the
// answer under the lease). These loops are where hand-written outboxes and
// agents lose or duplicate work; this package is one careful copy of each.
// Both share their poll wait, shutdown, timers and observing. The Sweeper
// runs the maintenance a ledger needs besides: Expire and retention.
//
// # The model
//
// A Dispatcher works over any ledger.ClaimStore. Each poll cycle
// (RunOnce) claims up to a batch of due entries (retry-ready ones first,
// then pending ones; in one call when the store is a ledger.DueClaimer, as
// both stores are), emits them through the Emitter with bounded
// concurrency, and completes each under its claim token:
//
//   - success: MarkClaimDelivered;
//   - an error: MarkClaimFailed with the next attempt at now plus the
//     policy's backoff (ledger.Policy.Backoff, whose jitter is a hash of
//     the entry and attempt), or MarkClaimDeadLettered once the entry has
//     had MaxAttempts claims;
//   - an error wrapped by Permanent: MarkClaimDeadLettered at once;
//   - an error made by Defer: SaveClaim as Deferred until the given time;
//   - a panic in the emitter: recovered, recorded as an ordinary failure.
//
// Run repeats RunOnce until its context is cancelled, waiting the poll
// interval (with jitter) between cycles that did not fill a batch. With
// WithWake the wait also ends when a wake-up arrives (pgstore's
// Store.Listen signals one when work is enqueued), so new work is picked
// up in milliseconds rather than up to an interval later; the interval
// stays the fallback, since a wake-up can be lost.
//
// A cycle that claimed less than a full batch found the queue drained,
// and its loop goes idle after it. Its completions linger (up to
// DefaultCompletionLinger, WithCompletionLinger): a store that commits
// calls together holds them until another loop's completions come to
// share the commit. At a steady rate that halves the transactions spent
// recording completions, for a few milliseconds of latency; a full cycle
// never waits.
//
// # At-least-once delivery
//
// An entry is emitted at least once; it may be emitted more than once.
// The provider can accept an emission and the completion that records it
// can still fail (the process dies, the database is unreachable), in
// which case the claim expires and the entry is emitted again. Claims
// prevent cooperating dispatchers from selecting the same entry at the
// same time; they cannot make the provider's side exactly-once. Providers
// should deduplicate on the envelope's idempotency key, or on the claim's
// (EntryID, Seq).
//
// A completion that does not apply (its outcome is not Applied, usually
// lease_lost: the claim expired and another worker took the entry) is
// logged and reported as EventLost, never counted as a success: whatever
// this dispatcher's emitter did, the record belongs to someone else now.
//
// # Why the emit timeout must be shorter than the claim lease
//
// A claim expires at a fixed time. An emission still running after that
// can be claimed and emitted again by another dispatcher, and both would
// reach the provider. Each emission therefore runs under a timeout
// (WithEmitTimeout, 30 s by default) that must be shorter than the claim
// (WithLeaseDuration, 60 s by default); NewDispatcher rejects any other
// setting. The gap also leaves time to record the outcome before the
// claim runs out. When the store is a ledger.ClaimRenewer the dispatcher
// renews each claim every third of the lease while its emission runs, and
// cancels the emission (context.Cause: ErrClaimLost) as soon as a renewal
// shows the claim lost. One timer per poll cycle paces the renewals of all
// its emissions in flight, so an emission that starts while others run is
// first renewed at the cycle's next tick: sooner than a third of the lease
// after its own start, never later. Emitters must honour their context; one that does
// not is abandoned when its context ends and its result is dropped.
//
// The caller's clock is trusted (WithClock): a dispatcher whose clock runs
// slow may keep emitting on an expired claim until someone else takes it.
// The claim token is the hard guard on what gets recorded.
//
// # Shutdown
//
// When Run's (or RunOnce's) context is cancelled the dispatcher stops
// claiming, releases the claims whose emission it has not started
// (ReleaseClaim: the entry is claimable again at once and the attempt is
// not counted), and lets the emissions in flight finish for up to the
// shutdown timeout (WithShutdownTimeout) before cancelling them
// (context.Cause: ErrShutdown). Their outcomes are still recorded, with a
// context detached from the cancelled one. A completion or release is
// bounded by the lease duration, after which its claim is worthless
// anyway; the completions of a cycle that start within a tenth of the
// lease of each other share one such context, so a call may get as
// little as nine tenths of the lease.
//
// # How many dispatchers per database
//
// Any number of dispatchers may share one store: claims keep them off each
// other's entries. One per process is usually right, sized with
// WithConcurrency for the provider's latency and WithBatchSize for the
// database; add processes for availability rather than throughput. Every
// cycle costs a claim query even when idle (two on a store that is no
// ledger.DueClaimer), but the idle loops of one process that poll the
// same store value (and, for Workers, the same targets) share what they
// see: a loop whose timer fires skips its poll when another loop has
// just found the queue drained, so a process polls an idle queue about
// once per interval, however many loops it runs, and work still waits at
// most one interval. A loop given WithClock keeps to itself, since what
// is due depends on its clock. Wake-ups (WithWake) are never skipped;
// give all the loops of a process one wake channel, so that a value
// wakes one idle loop, not all of them (pgstore's Listen can also space
// its values: pgstore.WithWakeInterval). Give each dispatcher its own worker
// name (the default is random) so that logs and claims say who held what.
//
// # The Worker
//
// A Worker works over any ledger.Ledger for one host agent. Each poll
// cycle (RunOnce) leases up to a batch of deliveries for the agent's
// targets and calls the Handler for each, with bounded concurrency. The
// order of ledger calls for one delivery is
//
//   - Lease, then Handle;
//   - on a Decision to process: Acknowledge, then MarkProcessed (with the
//     Decision's fence or the FenceSource's), in one call when the ledger
//     is a ledger.AckProcessor, as both stores are;
//   - on a Decision to release: Release (the attempt is not counted);
//   - on an error, a panic or a FenceSource error: MarkFailed (permanent
//     when the error is wrapped by Permanent).
//
// The handler runs before the acknowledgement on purpose: acknowledged
// work can no longer be failed or released (the ledger refuses MarkFailed
// and Release on it and never offers it again), so acknowledging first
// would leave a failed handler no way to give the delivery back; it would
// sit until its acknowledgement deadline ended it as Expired. A store
// error on MarkProcessed after a successful Acknowledge is tried again a
// few times; an answer of Repeated then means an earlier try applied.
//
// Delivery is at least once, so handlers must be idempotent (for example
// keyed on the delivery ID): a handler that succeeded can be called again
// for the same delivery when its acknowledgement does not apply (the lease
// expired or was taken over) or the process dies before it.
//
// Every NewWorker is a new incarnation of its agent. The ledger takes back
// the deliveries still leased to the agent's older incarnations at the new
// Worker's first lease call, so a restarted host picks its work up at
// once instead of waiting for the old leases to run out. For the same
// reason two live Workers must not share an agent name: each would take
// the other's leases. Scale one Worker with WithConcurrency, or give each
// its own agent.
//
// When the ledger is a ledger.Renewer the Worker heartbeats: it renews
// each lease every third of the lease duration while its handler runs
// (paced, as the Dispatcher's renewals are, by one timer per poll cycle),
// and cancels the handler (context.Cause: ErrLeaseLost) as soon as a
// renewal does not apply. Without a Renewer the handle timeout (WithHandleTimeout)
// must be shorter than the lease. Shutdown works as the Dispatcher's
// does: when Run's (or RunOnce's) context is cancelled the Worker stops
// leasing, releases the leases whose handler has not started, lets the
// handlers in flight finish for up to the shutdown timeout before
// cancelling them (ErrShutdown), and records their answers with a context
// detached from the cancelled one.
//
// # The Sweeper
//
// Some records end only by a sweep: an acknowledgement past its deadline
// (Expired), an expired lease whose attempts are used up (Failed). A
// Sweeper (NewSweeper, or WithSweeper inside a Worker or a Dispatcher)
// runs Expire at an interval with jitter and, with WithRetention, deletes
// what ended long ago, in bounded batches. Any number of processes may
// run one: over a store that is a ledger.Elector each job is done by the
// one sweeper that holds its lead, a named lease kept as row state (no
// session or advisory lock, so it works behind PgBouncer in transaction
// pooling mode), renewed at every sweep, given up when the sweeper stops
// and taken over by another within three intervals when its holder dies.
// A Worker runs one by default (WithoutSweeper turns it off).
//
// # When the store is broken
//
// Run tells a store that fails for a while from one that cannot work at
// all. A cycle whose store calls fail is observed (EventStoreError) and
// retried after a backoff that doubles from the poll interval up to
// MaxErrorBackoff, with jitter, logged once and then once per doubling of
// the failures in a row. An error matching ledger.ErrUnusable (for
// example pgstore.ErrNotMigrated: a schema that was never migrated) stops
// Run, which returns it. Ready, on every loop, is what a host's readiness
// check calls: nil when the store answers, whether or not there is work;
// an error matching ErrNotReady otherwise.
//
// # Options
//
// Each loop takes only the options that mean something to it, and the
// compiler checks it: the Sweeper's options and the Worker's own do not
// compile with NewDispatcher, the Dispatcher's own (WithWorker,
// WithEmitTimeout, WithPolicy, WithBatchCompletion) do not compile with
// NewWorker, and the poll loops' do not compile with NewSweeper. A
// LoopOption is a setting both poll loops have; a []LoopOption serves
// both.
//
// # Observing
//
// Every outcome is reported to the Observer (a no-op by default) as an
// Event with a kind, the entry (or delivery) ID, the attempt and the
// emission's (or handler's) duration, and summed in the Stats (or
// WorkerStats) that RunOnce returns. Events also carry what a metrics
// system labels by (provider and kind, or target), the record's
// metadata, the time from enqueue to completion, and whether they
// settle a claim or lease (Event.Final); the module
// github.com/leaseledger/ledger/otel turns them into OpenTelemetry
// metrics and spans. Failures and lost claims or leases are logged
// through log/slog (WithLogger).
//
// # Testing with a dispatcher or a worker
//
// Nothing in the package reads the wall clock or starts a real timer when
// given WithClock and WithAfterFunc: tests drive RunOnce directly, move
// the clock forward to make retries due or claims and leases expire, and
// fire the fake timers (emit or handle timeout, renewal, shutdown
// deadline, poll interval, sweep interval, error backoff) when they
// choose. The one exception is the bounded wait for a stopping Sweeper to
// give its leads up.
package dispatch
