package dispatch

import (
	"fmt"
	"os"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// Defaults of a Sweeper.
const (
	// DefaultSweepInterval is how often a Sweeper sweeps.
	DefaultSweepInterval = 30 * time.Second
	// DefaultPurgeBatchSize is how many records one retention call
	// deletes at most.
	DefaultPurgeBatchSize = ledger.MaxLimit
	// PurgeBatchesPerSweep bounds the retention calls of one kind in one
	// sweep, so that a sweep that finds a large backlog ends (the next
	// one goes on with it) and keeps renewing its lead between calls.
	PurgeBatchesPerSweep = 100
	// MaxSweepInterval bounds WithSweepInterval: a lead lasts three
	// intervals, and a lead, like a lease, at most
	// ledger.MaxLeaseDuration.
	MaxSweepInterval = 24 * time.Hour
	// MaxRetention bounds WithRetention: far enough back for any
	// retention policy, near enough that the cut-off stays a valid time.
	MaxRetention = 100 * 365 * 24 * time.Hour
	// leadTTLIntervals is how many sweep intervals a lead lasts: a
	// holder renews it every interval, so it survives a sweep that runs
	// long or a renewal that fails once, and a holder that died is taken
	// over within three intervals.
	leadTTLIntervals = 3
)

// SweeperOption configures a Sweeper. Every Option (WithClock,
// WithAfterFunc, WithLogger, WithObserver) is one; so are WithSweepInterval,
// WithRetention, WithPurgeBatchSize, WithHolder and WithoutLeadership. Pass them to
// NewSweeper, or to WithSweeper for the Sweeper inside a Worker or a
// Dispatcher; the poll loops' options do not compile here.
type SweeperOption interface {
	applySweeper(*sweeperConfig)
}

// sweeperOptionFunc is a SweeperOption only a Sweeper understands.
type sweeperOptionFunc func(*sweeperConfig)

func (f sweeperOptionFunc) applySweeper(c *sweeperConfig) { f(c) }

// WithSweepInterval sets how often the Sweeper sweeps
// (DefaultSweepInterval), at least a millisecond and at most
// MaxSweepInterval; a random jitter of up to a tenth is added to
// every wait, so that sweepers started together do not contend for their
// leads in step. A lead lasts three intervals: a sweeper that dies is
// taken over by another within about that long. Lapsed acknowledgements
// end, and expired leases whose attempts ran out fail, up to an interval
// late.
func WithSweepInterval(d time.Duration) SweeperOption {
	return sweeperOptionFunc(func(c *sweeperConfig) { c.interval = d })
}

// WithRetention makes every sweep delete what ended more than d ago
// (ledger.Purger.PurgeDeliveries, ledger.OutboxPurger.PurgeEntries), in
// calls of WithPurgeBatchSize records, at most PurgeBatchesPerSweep calls
// of each per sweep. Open work is never deleted. Without it nothing is
// deleted: terminal records stay, readable, until something purges them.
// d must be positive and at most MaxRetention, and the stores swept must
// implement the purger interfaces, or the constructor fails.
func WithRetention(d time.Duration) SweeperOption {
	return sweeperOptionFunc(func(c *sweeperConfig) { c.retention, c.retain = d, true })
}

// WithPurgeBatchSize sets how many records one retention call deletes at
// most, 1 to ledger.MaxLimit (DefaultPurgeBatchSize): each call is one
// transaction on pgstore, holding that many row locks.
func WithPurgeBatchSize(n int) SweeperOption {
	return sweeperOptionFunc(func(c *sweeperConfig) { c.purgeBatch = n })
}

// WithHolder names the Sweeper in the leads it takes (ledger.Lead.Holder),
// so that an operator reading a lead sees who sweeps. The default is the
// host name, the process ID and a random suffix; the Sweeper of a Worker
// or a Dispatcher is named after it. Two live sweepers may share a name:
// their leads still tell them apart by token.
func WithHolder(name string) SweeperOption {
	return sweeperOptionFunc(func(c *sweeperConfig) { c.holder = name })
}

// WithoutLeadership makes the Sweeper do every job at every sweep, without
// taking leads, even over a store that keeps them: for a host that runs
// exactly one sweeper and wants no rows written for it. Expire and the
// purges are safe to run from several sweepers at once; with leads they
// are only not run twice for nothing.
func WithoutLeadership() SweeperOption {
	return sweeperOptionFunc(func(c *sweeperConfig) { c.noLeads = true })
}

type sweeperConfig struct {
	common
	interval   time.Duration
	retention  time.Duration
	retain     bool // WithRetention was given
	purgeBatch int
	holder     string
	noLeads    bool // WithoutLeadership
}

func defaultSweeperConfig(c common, holder string) sweeperConfig {
	return sweeperConfig{
		common:     c,
		interval:   DefaultSweepInterval,
		purgeBatch: DefaultPurgeBatchSize,
		holder:     holder,
	}
}

// defaultHolder names a standalone Sweeper: where it runs, and which of
// the sweepers in that process it is.
func defaultHolder() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "sweeper"
	}
	return sanitizeName(fmt.Sprintf("%s/%d/%s", host, os.Getpid(), string(storekit.NewToken())[:8]))
}

// leadTTL is how long a lead the Sweeper takes or renews lasts.
func (c *sweeperConfig) leadTTL() time.Duration { return leadTTLIntervals * c.interval }

// validate reports the first malformed setting as a *ledger.InvalidError.
func (c *sweeperConfig) validate() error {
	if err := c.common.validate(); err != nil {
		return err
	}
	switch {
	case c.interval < time.Millisecond || c.interval > MaxSweepInterval:
		return invalid("sweep interval", fmt.Sprintf("must be between 1ms and %s", MaxSweepInterval))
	case c.retain && (c.retention <= 0 || c.retention > MaxRetention):
		return invalid("retention", fmt.Sprintf("must be positive and at most %s", MaxRetention))
	}
	if err := storekit.ValidateLimit("purge batch size", c.purgeBatch); err != nil {
		return err
	}
	return storekit.ValidateName("holder", c.holder)
}
