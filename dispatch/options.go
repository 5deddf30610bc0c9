package dispatch

import (
	"log/slog"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// Defaults of a Dispatcher.
const (
	DefaultEmitTimeout     = 30 * time.Second
	DefaultLeaseDuration   = 60 * time.Second
	DefaultBatchSize       = 100
	DefaultConcurrency     = 10
	DefaultPollInterval    = time.Second
	DefaultShutdownTimeout = 10 * time.Second
	// DefaultCompletionLinger is how long the completions of a cycle that
	// found the queue drained may wait for company (WithCompletionLinger).
	DefaultCompletionLinger = 3 * time.Millisecond
)

// AfterFunc schedules f to run once after d and returns a function that
// cancels it (reporting whether it did, like (*time.Timer).Stop). The
// dispatcher uses it for every timer it needs: the per-emission timeout,
// claim renewal, the shutdown deadline and Run's poll interval.
// time.AfterFunc is the default; tests pass a fake that fires on demand.
type AfterFunc func(d time.Duration, f func()) (stop func() bool)

// Options. Each loop takes only the options that mean something to it,
// and the compiler checks it:
//
//   - Option: the options every loop takes, the Sweeper included
//     (WithClock, WithAfterFunc, WithLogger, WithObserver);
//   - LoopOption: an Option, or a setting both poll loops have
//     (WithLeaseDuration, WithBatchSize, WithConcurrency, WithPollInterval,
//     WithoutPollJitter, WithWake, WithShutdownTimeout,
//     WithCompletionLinger, WithSweeper);
//   - DispatcherOption: a LoopOption, or the Dispatcher's own (WithWorker,
//     WithEmitTimeout, WithPolicy, WithBatchCompletion);
//   - WorkerOption: a LoopOption, or the Worker's own (WithHandleTimeout,
//     WithFenceSource, WithCeremony, WithObservation, WithoutSweeper);
//   - SweeperOption: an Option, or the Sweeper's own (WithSweepInterval,
//     WithRetention, WithPurgeBatchSize, WithHolder, WithoutLeadership).
//
// A list of options for both poll loops is a []LoopOption; each of its
// elements may be passed to NewDispatcher and to NewWorker.

// DispatcherOption configures a Dispatcher.
type DispatcherOption interface {
	applyDispatcher(*config)
}

// LoopOption configures either poll loop, a Dispatcher or a Worker, the
// same way.
type LoopOption interface {
	DispatcherOption
	WorkerOption
}

// Option configures any loop of the package: a Dispatcher, a Worker or a
// Sweeper.
type Option interface {
	LoopOption
	SweeperOption
}

// loopOption is a LoopOption: a setting of the config both poll loops
// share.
type loopOption func(*config)

func (o loopOption) applyDispatcher(c *config)   { o(c) }
func (o loopOption) applyWorker(c *workerConfig) { o(&c.config) }

// dispatcherOption is a setting only a Dispatcher has.
type dispatcherOption func(*config)

func (o dispatcherOption) applyDispatcher(c *config) { o(c) }

// commonOption is an Option: a setting every loop has.
type commonOption func(*common)

func (o commonOption) applyDispatcher(c *config)     { o(&c.common) }
func (o commonOption) applyWorker(c *workerConfig)   { o(&c.config.common) }
func (o commonOption) applySweeper(c *sweeperConfig) { o(&c.common) }

// common is what every loop, the Sweeper included, is configured with.
type common struct {
	clock     func() time.Time
	ownClock  bool // WithClock was given: the loop does not share its view of the queue (share.go)
	afterFunc AfterFunc
	logger    *slog.Logger
	observer  Observer
}

func defaultCommon() common {
	return common{
		clock: time.Now,
		afterFunc: func(d time.Duration, f func()) func() bool {
			return time.AfterFunc(d, f).Stop
		},
		logger:   slog.Default(),
		observer: nopObserver{},
	}
}

// validate reports the first malformed shared setting.
func (c *common) validate() error {
	switch {
	case c.clock == nil:
		return invalid("clock", "must not be nil")
	case c.afterFunc == nil:
		return invalid("after func", "must not be nil")
	case c.logger == nil:
		return invalid("logger", "must not be nil")
	case c.observer == nil:
		return invalid("observer", "must not be nil")
	}
	return nil
}

type config struct {
	common
	worker          string
	emitTimeout     time.Duration
	leaseDuration   time.Duration
	batchSize       int
	concurrency     int
	pollInterval    time.Duration
	pollJitter      bool
	wake            <-chan struct{}
	shutdownTimeout time.Duration
	linger          time.Duration
	policy          ledger.Policy
	// batchCompletion completes a cycle's emissions through
	// ledger.ClaimCompleter (WithBatchCompletion).
	batchCompletion bool
	// sweep starts a Sweeper inside Run with the options sweeper
	// (WithSweeper, WithoutSweeper).
	sweep   bool
	sweeper []SweeperOption
}

func defaultConfig() config {
	return config{
		common:          defaultCommon(),
		worker:          "dispatch-" + string(storekit.NewToken()),
		emitTimeout:     DefaultEmitTimeout,
		leaseDuration:   DefaultLeaseDuration,
		batchSize:       DefaultBatchSize,
		concurrency:     DefaultConcurrency,
		pollInterval:    DefaultPollInterval,
		pollJitter:      true,
		shutdownTimeout: DefaultShutdownTimeout,
		linger:          DefaultCompletionLinger,
		policy:          ledger.DefaultPolicy(),
	}
}

// WithWorker names the dispatcher in its claims (ledger.Claim.Worker). The
// default is "dispatch-" and a random token, new for every dispatcher.
func WithWorker(name string) DispatcherOption {
	return dispatcherOption(func(c *config) { c.worker = name })
}

// WithEmitTimeout bounds one emission (DefaultEmitTimeout). It must be
// shorter than the claim lease, or NewDispatcher fails.
func WithEmitTimeout(d time.Duration) DispatcherOption {
	return dispatcherOption(func(c *config) { c.emitTimeout = d })
}

// WithBatchCompletion makes a Dispatcher complete a cycle's emissions in
// batches when its store is a ledger.ClaimCompleter: as emissions finish,
// their completions are gathered and written with one CompleteClaims call
// per batch instead of one call each, each decided as its own call would
// be. It costs the client less CPU per entry: no emission waits for its
// own completion's commit. It is off by default because a store that
// commits each batch on its own drains slower with several dispatchers
// than single calls a store group-commits (with pgstore before its
// batches joined its group commit, the default drained eight dispatchers
// about 1.5 times as fast). pgstore queues a batch with its group commit,
// so that the batches of several dispatchers share commits as single
// calls do: there the option took an eighth off the client's CPU in an
// eight-dispatcher drain, at the same rate. Turn it on with pgstore, for
// one dispatcher per process, or where CPU counts more than throughput.
func WithBatchCompletion() DispatcherOption {
	return dispatcherOption(func(c *config) { c.batchCompletion = true })
}

// WithLeaseDuration sets how long a claim lasts (DefaultLeaseDuration).
func WithLeaseDuration(d time.Duration) LoopOption {
	return loopOption(func(c *config) { c.leaseDuration = d })
}

// WithBatchSize sets how many entries one poll cycle claims at most, 1 to
// ledger.MaxLimit (DefaultBatchSize).
func WithBatchSize(n int) LoopOption { return loopOption(func(c *config) { c.batchSize = n }) }

// WithConcurrency sets how many emissions run at once (DefaultConcurrency).
func WithConcurrency(n int) LoopOption {
	return loopOption(func(c *config) { c.concurrency = n })
}

// WithPollInterval sets how long Run waits between poll cycles that found
// nothing to do (DefaultPollInterval). A random jitter of up to a tenth of
// the interval is added unless WithoutPollJitter is given, so that
// dispatchers started together do not poll in step.
func WithPollInterval(d time.Duration) LoopOption {
	return loopOption(func(c *config) { c.pollInterval = d })
}

// WithoutPollJitter makes Run wait exactly the poll interval.
func WithoutPollJitter() LoopOption {
	return loopOption(func(c *config) { c.pollJitter = false })
}

// WithWake makes Run poll as soon as a value arrives on wake instead of
// waiting out the rest of the poll interval, for example the channel of
// pgstore's Store.Listen, which signals when work is enqueued. Wake-ups
// are hints: Run still polls every interval whatever wake does, so a lost
// or late signal delays work by at most the interval, and a closed wake
// channel leaves Run polling on the interval alone. A signal that arrives
// while a cycle runs is kept by a buffered channel and makes the next wait
// end at once, so give wake a buffer of one and send without blocking.
func WithWake(wake <-chan struct{}) LoopOption {
	return loopOption(func(c *config) { c.wake = wake })
}

// WithShutdownTimeout sets how long in-flight emissions may run on after
// Run's (or RunOnce's) context is cancelled before their contexts are
// cancelled too (DefaultShutdownTimeout). Zero cancels them at once.
func WithShutdownTimeout(d time.Duration) LoopOption {
	return loopOption(func(c *config) { c.shutdownTimeout = d })
}

// WithCompletionLinger lets the completions of a cycle that claimed (or
// leased) less than a full batch wait up to d in the store for another
// caller's calls to share their commit (ledger.WithLinger):
// DefaultCompletionLinger unless set, 0 to turn it off, at most a second.
// Such a cycle found the queue drained and its loop goes idle after it,
// so the wait costs its items latency, not the loop throughput; a cycle
// that claimed a full batch never lingers. The wait ends when another
// loop's completions arrive (and the store's short window after them),
// so at a steady rate the cycles of a process's loops share commits,
// where each cycle otherwise pays one. In the side-by-side comparison at
// 1,000 jobs/s (eight loops, work arriving in bursts 10ms apart), 3ms
// halved the completion transactions (0.21 to 0.10 per job) and added
// about 2ms to the median time from enqueue to a recorded completion;
// 10ms cut them to 0.07 per job and added about 8ms. Stores that commit
// every call on its own ignore it; with pgstore it needs group commit
// (the default).
func WithCompletionLinger(d time.Duration) LoopOption {
	return loopOption(func(c *config) { c.linger = d })
}

// WithPolicy sets the retry policy: MaxAttempts (claims, deferrals
// included, before a failure dead-letters the entry), BackoffBase and
// BackoffMax (see ledger.Policy.Backoff). Zero fields keep
// ledger.DefaultPolicy()'s values; AckWindow is not used.
func WithPolicy(p ledger.Policy) DispatcherOption {
	return dispatcherOption(func(c *config) { c.policy = p })
}

// WithClock sets the clock for claims, leases, renewals, retry times and
// sweeps (time.Now by default). Give the store the same clock.
func WithClock(now func() time.Time) Option {
	return commonOption(func(c *common) { c.clock, c.ownClock = now, true })
}

// WithAfterFunc replaces time.AfterFunc for every timer of the loop (see
// AfterFunc).
func WithAfterFunc(f AfterFunc) Option { return commonOption(func(c *common) { c.afterFunc = f }) }

// WithLogger sets the logger (slog.Default() by default).
func WithLogger(l *slog.Logger) Option { return commonOption(func(c *common) { c.logger = l }) }

// WithObserver sets the Observer (a no-op by default).
func WithObserver(o Observer) Option { return commonOption(func(c *common) { c.observer = o }) }

// WithSweeper runs a Sweeper inside Run, configured by opts, beside the
// poll loop: it starts with Run and stops (giving up its leads) when Run
// returns. It takes the loop's clock, timers, logger and observer unless
// opts say otherwise, and is named after the loop (the Worker's owner, the
// Dispatcher's worker name) unless WithHolder says otherwise. A Worker
// runs one by default, to expire what its ledger leaves lapsed (see
// Worker); give WithSweeper to configure it, for example with retention.
// A Dispatcher runs one only when given WithSweeper, and its outbox has
// nothing to expire, so it needs WithRetention (NewDispatcher fails
// otherwise). RunOnce never sweeps.
func WithSweeper(opts ...SweeperOption) LoopOption {
	return loopOption(func(c *config) {
		c.sweep = true
		c.sweeper = append([]SweeperOption(nil), opts...)
	})
}

// validate reports the first malformed setting as a *ledger.InvalidError.
func (c *config) validate() error {
	if err := storekit.ValidateName("worker", c.worker); err != nil {
		return err
	}
	if err := c.validateLoop(); err != nil {
		return err
	}
	switch {
	case c.emitTimeout <= 0:
		return invalid("emit timeout", "must be positive")
	case c.emitTimeout >= c.leaseDuration:
		// An emission still running when its claim expires can be claimed
		// and emitted again by another worker: a duplicate by design.
		return invalid("emit timeout", "must be shorter than the lease duration")
	}
	if err := c.policy.Validate("policy"); err != nil {
		return err
	}
	c.policy = c.policy.Resolve(ledger.DefaultPolicy())
	return nil
}
