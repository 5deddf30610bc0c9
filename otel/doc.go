// Package ledgerotel connects leaseledger to OpenTelemetry: metrics and
// traces from the events of package dispatch, gauges from a store's
// Stats, and trace context carried from the producer's span to the
// emission or the handling through an item's ledger.Metadata.
//
// It lives in a module of its own (github.com/leaseledger/ledger/otel) so
// that the library itself never depends on OpenTelemetry.
//
// # Turning it on
//
// One Instrumentation serves any number of Dispatchers and Workers. Give
// it to them as their Observer, wrap the emitter (or handler) so that
// what it calls runs inside the emission's span, and inject the
// producer's trace context into the metadata at enqueue:
//
//	inst, err := ledgerotel.New() // the global providers; see WithMeterProvider
//	d, err := dispatch.NewDispatcher(outbox, inst.Emitter(emitter), dispatch.WithObserver(inst))
//	env.Metadata = ledgerotel.Inject(ctx, env.Metadata)
//
// ObserveStats and ObserveOutboxStats add the gauges of queue depth and
// lag by target or provider, and of records by state or status, read at
// collection time with one stats call per store.
//
// # Metrics
//
// Every instrument has the scope ScopeName. IDs (entry, delivery, agent
// incarnation) never become attributes of a metric; providers, kinds and
// targets do, and should be few.
//
//	name                                     instrument       unit        attributes
//	leaseledger.outbox.events                counter          {event}     event, outcome, provider, entry kind
//	leaseledger.outbox.completion.latency    histogram        s           event, outcome, provider, entry kind
//	leaseledger.delivery.events              counter          {event}     event, outcome, target
//	leaseledger.delivery.completion.latency  histogram        s           event, outcome, target
//	messaging.process.duration               histogram        s           operation, event, outcome, error type, provider or target, entry kind
//	messaging.client.consumed.messages       counter          {message}   operation, provider or target, entry kind
//	leaseledger.sweep.events                 counter          {event}     event, job, outcome, error type
//	leaseledger.sweep.records                counter          {record}    job
//	leaseledger.delivery.depth               gauge            {delivery}  target
//	leaseledger.delivery.lag                 gauge            s           target
//	leaseledger.delivery.records             updowncounter    {delivery}  state
//	leaseledger.outbox.depth                 gauge            {entry}     provider
//	leaseledger.outbox.lag                   gauge            s           provider
//	leaseledger.outbox.entries               updowncounter    {entry}     status
//
// The attributes: event is dispatch.Event.Kind (leaseledger.event),
// outcome the store's outcome when there is one (leaseledger.outcome),
// provider and target messaging.destination.name, entry kind
// leaseledger.entry.kind, state leaseledger.delivery.state, status
// leaseledger.outbox.status, operation messaging.operation.name (claim
// or lease when a loop gets an item, emit or handle when it processes
// it), error type error.type (a class: store_error, timeout, panic,
// lease_lost, permanent, deferred, _OTHER), job leaseledger.sweep.job;
// every point of the event instruments also has messaging.system
// "leaseledger". Where OpenTelemetry's messaging semantic conventions
// name an instrument (messaging.process.duration,
// messaging.client.consumed.messages), it follows them. The durations
// are recorded on the event that settles an emission or a handling
// (dispatch.Event.Final), the latency from enqueue to completion on the
// completions that applied (dispatch.Event.Latency). A Sweeper's events
// count in leaseledger.sweep.events, never among the loops' events. The
// scope's version is Version.
//
// # Traces
//
// Each emission and each handled delivery gets a span of kind consumer,
// named "emit <provider>" or "handle", child of the producer's span when
// the item's metadata carries its context (see Inject), with the
// messaging attributes (system, operation, destination, message ID), the
// attempt, and, when it ends, the event that settled the item and the
// store's outcome. The span is started by the wrapper (Emitter, Handler)
// and ended by the event that settles the item, so it covers the
// completion too; without the wrapper the Observer makes the same span
// afterwards from the event's duration.
package ledgerotel
