package dispatch

import (
	"context"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
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

// WorkerOption configures a Worker: a LoopOption (WithClock,
// WithAfterFunc, WithLogger, WithObserver, WithLeaseDuration,
// WithBatchSize, WithConcurrency, WithPollInterval, WithoutPollJitter,
// WithWake, WithShutdownTimeout, WithSweeper) or one of the Worker's own.
// The Dispatcher's own options are not WorkerOptions: a Worker is named
// by its agent, bounds its handler with WithHandleTimeout, finds a
// delivery's retry policy on the delivery, and completes each delivery
// with one call.
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
	return storekit.ValidateText("observation", c.observation)
}
