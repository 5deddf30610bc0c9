package dispatch

import (
	"context"
	"time"

	"github.com/leaseledger/ledger"
)

// Defaults of a Worker that differ from a Dispatcher's.
const (
	// DefaultHandleTimeout bounds one Handle call.
	DefaultHandleTimeout = 30 * time.Second
	// DefaultAction is the action recorded by MarkProcessed when a
	// Decision names none (the ledger requires one).
	DefaultAction ledger.ActionRef = "processed"
)

// FenceSource returns the integrator's current fencing token for target,
// which the Worker passes to MarkProcessed (see WithFenceSource). A nil
// fence means "no fence". An error is a failure of the delivery, like a
// handler error: it is retried unless wrapped by Permanent.
type FenceSource func(ctx context.Context, target ledger.Target) (*ledger.Fence, error)

// WorkerOption configures a Worker. Every DispatcherOption is a
// WorkerOption too, with the same meaning (WithClock, WithAfterFunc,
// WithLogger, WithObserver, WithLeaseDuration, WithBatchSize,
// WithConcurrency, WithPollInterval, WithoutPollJitter, WithWake,
// WithShutdownTimeout, WithSweeper), except three that have no meaning
// for a Worker and make NewWorker fail: WithWorker (the agent is
// NewWorker's argument), WithEmitTimeout (use WithHandleTimeout),
// WithPolicy (a delivery's retry policy is stored on it at Enqueue) and
// WithBatchCompletion. They
// cannot be refused at compile time: a DispatcherOption must stay usable
// as a WorkerOption, so that one list of options serves both loops.
type WorkerOption interface {
	applyWorker(*workerConfig)
}

// workerOptionFunc is a WorkerOption that only a Worker understands.
type workerOptionFunc func(*workerConfig)

func (f workerOptionFunc) applyWorker(c *workerConfig) { f(c) }

// WithHandleTimeout bounds one Handle call (DefaultHandleTimeout). When
// the ledger is not a ledger.Renewer it must be shorter than the lease
// duration, or NewWorker fails: a handler still running when its lease
// expires could not acknowledge, and another worker may take the delivery.
// With a Renewer the lease is renewed while the handler runs, so the
// timeout may be longer than the lease.
func WithHandleTimeout(d time.Duration) WorkerOption {
	return workerOptionFunc(func(c *workerConfig) { c.handleTimeout = d })
}

// WithFenceSource sets where the fence passed to MarkProcessed comes from
// when the handler's Decision carries none. It is called after the handler
// succeeded and before the delivery is acknowledged, so that a failure to
// get a fence can still be recorded with MarkFailed.
func WithFenceSource(f FenceSource) WorkerOption {
	return workerOptionFunc(func(c *workerConfig) { c.fenceSource = f })
}

// WithCeremony leases only deliveries of one ceremony (all by default).
func WithCeremony(ceremony ledger.CeremonyID) WorkerOption {
	return workerOptionFunc(func(c *workerConfig) { c.ceremony = ceremony })
}

// WithObservation sets the observation text recorded by Acknowledge
// (empty by default).
func WithObservation(text string) WorkerOption {
	return workerOptionFunc(func(c *workerConfig) { c.observation = text })
}

// WithoutSweeper stops the Worker from running its Sweeper inside Run: do
// so only when another process runs one over the same ledger (a
// dispatch.Sweeper, or a Worker with its default), since otherwise
// nothing ends lapsed acknowledgements or returns expired leases whose
// attempts ran out (see Worker).
func WithoutSweeper() WorkerOption {
	return workerOptionFunc(func(c *workerConfig) { c.sweep = false })
}

type workerConfig struct {
	config
	handleTimeout time.Duration
	fenceSource   FenceSource
	ceremony      ledger.CeremonyID
	observation   string
}

func defaultWorkerConfig() workerConfig {
	c := workerConfig{config: defaultConfig(), handleTimeout: DefaultHandleTimeout}
	// Zero values mark the settings a Worker does not take, so that
	// validate can tell that an option set them. The batch size defaults
	// to the concurrency: a lease starts running out when it is granted,
	// so a Worker leases no more than it can start at once.
	c.worker = ""
	c.emitTimeout = 0
	c.policy = ledger.Policy{}
	c.batchSize = 0
	// A Worker expires what its ledger leaves lapsed unless told not to.
	c.sweep = true
	return c
}

// validate reports the first malformed setting as a *ledger.InvalidError.
// renews says whether the ledger is a ledger.Renewer.
func (c *workerConfig) validate(renews bool) error {
	switch {
	case c.worker != "":
		return invalid("worker", "not used by a Worker: its agent names it")
	case c.emitTimeout != 0:
		return invalid("emit timeout", "not used by a Worker: use WithHandleTimeout")
	case c.policy != ledger.Policy{}:
		return invalid("policy", "not used by a Worker: a delivery's policy is set at Enqueue")
	case c.batchCompletion:
		return invalid("batch completion", "not used by a Worker: it completes each delivery with one call")
	}
	if c.batchSize == 0 {
		c.batchSize = c.concurrency
	}
	if err := c.validateLoop(); err != nil {
		return err
	}
	switch {
	case c.handleTimeout <= 0:
		return invalid("handle timeout", "must be positive")
	case !renews && c.handleTimeout >= c.leaseDuration:
		return invalid("handle timeout", "must be shorter than the lease duration when the ledger cannot renew leases")
	}
	return ledger.ValidateText("observation", c.observation)
}
