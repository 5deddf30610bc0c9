package pgstore

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/leaseledger/ledger"
)

// DefaultSkewThreshold is how far the caller's now may drift from the
// database's clock before the store logs a warning, unless
// WithSkewThreshold says otherwise.
const DefaultSkewThreshold = time.Second

// skewSampleEvery bounds how often a store that trusts the caller's clock
// spends a round trip reading the database's: skew moves slowly, and a
// query per call would double the cost of the cheapest calls.
const skewSampleEvery = 30 * time.Second

// WithDatabaseClock makes the store take every decision that depends on
// time on the database server's clock instead of the caller's now: lease
// and claim grants and expiries, acknowledgement deadlines, retries that
// come due, sweeps. The caller's now is still validated, and compared with
// the database's clock to measure skew. It costs one extra round trip per
// call.
//
// Off by default, so that pgstore and memstore take the same decisions for
// the same calls, as the contract asks. Turn it on when workers run on
// machines whose clocks cannot be trusted to agree: with it, one clock
// decides for all of them.
func WithDatabaseClock(on bool) Option {
	return func(c *config) { c.dbClock = on }
}

// WithLogger sets the logger for the store's warnings; today that is clock
// skew (see WithSkewThreshold). Default slog.Default(). A nil logger makes
// New fail with ErrInvalid.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.fail(&ledger.InvalidError{Field: "logger", Reason: "must not be nil"})
			return
		}
		c.logger = l
	}
}

// WithSkewThreshold sets how far (either way) the caller's now may be from
// the database's clock before the store logs a warning (default
// DefaultSkewThreshold; at least a millisecond, since a round trip alone
// takes some). With WithDatabaseClock the skew is measured on every call;
// otherwise at most every 30 seconds, on the next call that comes by.
func WithSkewThreshold(d time.Duration) Option {
	return func(c *config) {
		if d < time.Millisecond {
			c.fail(&ledger.InvalidError{Field: "skew threshold", Reason: "must be at least 1ms"})
			return
		}
		c.skewThreshold = d
	}
}

// skewMeter remembers the last skew measured between callers' clocks and
// the database's. It is shared by a Store and every store WithTx derives
// from it.
type skewMeter struct {
	mu       sync.Mutex
	sampled  time.Time     // local wall time of the last measurement begun
	warned   time.Time     // local wall time of the last warning
	skew     time.Duration // caller's now minus the database's clock
	measured bool
}

// ClockSkew returns the last measured difference between a caller's now
// and the database's clock (positive: the caller's clock runs ahead), and
// whether anything was measured yet.
func (s *Store) ClockSkew() (time.Duration, bool) {
	s.skew.mu.Lock()
	defer s.skew.mu.Unlock()
	return s.skew.skew, s.skew.measured
}

// decisionTime returns the now a call decides with: the caller's, or with
// WithDatabaseClock the database's. On the way it measures skew, on every
// call with the database clock and otherwise when a sample is due, and
// logs it when it passes the threshold.
func (s *Store) decisionTime(ctx context.Context, op string, now time.Time) (time.Time, error) {
	if !s.cfg.dbClock && !s.skewSampleDue(time.Now()) {
		return now, nil
	}
	var db time.Time
	if err := s.read(ctx, op, func(q dbtx) error {
		return q.QueryRow(ctx, "SELECT statement_timestamp()").Scan(&db)
	}); err != nil {
		return now, err
	}
	db = ledger.Normalize(db)
	s.recordSkew(ctx, op, ledger.Normalize(now).Sub(db))
	if s.cfg.dbClock {
		return db, nil
	}
	return now, nil
}

// skewSampleDue reports whether a store on the caller's clock should
// measure skew now, and if so marks the sample taken so that concurrent
// calls do not all pay for one.
func (s *Store) skewSampleDue(wall time.Time) bool {
	s.skew.mu.Lock()
	defer s.skew.mu.Unlock()
	if !s.skew.sampled.IsZero() && wall.Sub(s.skew.sampled) < skewSampleEvery {
		return false
	}
	s.skew.sampled = wall
	return true
}

// recordSkew stores a measurement and warns when it passes the threshold,
// at most once per sampling period so that a skewed worker calling in a
// loop does not flood the log.
func (s *Store) recordSkew(ctx context.Context, op string, skew time.Duration) {
	wall := time.Now()
	m := s.skew
	m.mu.Lock()
	m.skew, m.measured = skew, true
	warn := (skew > s.cfg.skewThreshold || -skew > s.cfg.skewThreshold) && wall.Sub(m.warned) >= skewSampleEvery
	if warn {
		m.warned = wall
	}
	m.mu.Unlock()
	if warn {
		s.cfg.logger.WarnContext(ctx, "pgstore: caller's clock differs from the database's",
			slog.String("op", op), slog.Duration("skew", skew), slog.Duration("threshold", s.cfg.skewThreshold),
			slog.Bool("database_clock", s.cfg.dbClock))
	}
}
