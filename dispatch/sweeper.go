package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// SweepJob names one kind of work a Sweeper does. It is also the name of
// the lead (ledger.Lead.Name) under which one sweeper at a time does it,
// so that sweepers configured differently (a Worker's, which only
// expires, and one with retention) each take the leads of what they do.
type SweepJob string

// The jobs of a sweep, in the order a sweep does them.
const (
	// SweepExpire runs ledger.Ledger.Expire: expired leases go back to
	// Offered (or end as Failed when their attempts are used up), and
	// acknowledgements past their deadline end as Expired.
	SweepExpire SweepJob = "dispatch.sweep.expire"
	// SweepPurgeDeliveries deletes deliveries that ended before the
	// retention cut-off (WithRetention).
	SweepPurgeDeliveries SweepJob = "dispatch.sweep.purge_deliveries"
	// SweepPurgeEntries deletes outbox entries that ended before the
	// retention cut-off (WithRetention).
	SweepPurgeEntries SweepJob = "dispatch.sweep.purge_entries"
)

// resignTimeout bounds giving the leads up when Run returns: a store that
// does not answer by then lets them lapse instead.
const resignTimeout = 5 * time.Second

// SweepStats counts what one sweep (RunOnce) did.
type SweepStats struct {
	// Expired counts the deliveries Expire changed.
	Expired int
	// PurgedDeliveries and PurgedEntries count what retention deleted.
	PurgedDeliveries int
	PurgedEntries    int
	// Done counts the jobs this sweeper did: it held their lead, or the
	// store keeps no leads. Skipped counts the jobs it left to the
	// sweeper that holds their lead.
	Done    int
	Skipped int
}

// Sweeper is the maintenance loop of a ledger and an outbox: at an
// interval, with jitter, it runs Expire, so that expired leases whose
// attempts ran out end as Failed and acknowledgements past their deadline
// (a handler that never marked its delivery processed, a fence that was
// rejected) end as Expired, and, with WithRetention, deletes what ended
// long enough ago. Nothing else in the library calls Expire: without a
// sweeper such records stay open (see the Worker, which runs one by
// default).
//
// Any number of processes may run a Sweeper over the same store. When the
// store is a ledger.Elector (memstore and pgstore are), each job of a
// sweep is done only by the sweeper that holds its lead, a named lease
// kept as row state and renewed at every sweep, so one process does the
// work at a time; when that process dies its lead lapses after three
// sweep intervals and another sweeper takes the job over; a sweeper that
// stops gives its leads up at once. Over a store that keeps no leads,
// every sweeper does every job: the work is safe to repeat, only wasted.
//
// A Sweeper is safe for concurrent use; run one Run loop per Sweeper.
type Sweeper struct {
	ledger ledger.Ledger
	outbox ledger.OutboxStore
	cfg    sweeperConfig
	health health // what Run knows of the store, for Ready

	mu   sync.Mutex // one sweep at a time; guards the jobs' leads
	jobs []*sweepJob
}

// sweepJob is one job of a sweep and the lead this sweeper holds for it.
type sweepJob struct {
	name    SweepJob
	elector ledger.Elector // nil: the store keeps no leads
	held    *ledger.Lead   // the term held, with its token; nil when none
	run     func(ctx context.Context, j *sweepJob, now time.Time) (int, error)
}

// NewSweeper returns a Sweeper over l and outbox, either of which may be
// nil: it expires l's deliveries and, with WithRetention, purges what
// ended in l and in outbox. It fails with an error matching
// ledger.ErrInvalid when an option is malformed, when retention is asked
// of a store that cannot purge (ledger.Purger, ledger.OutboxPurger), or
// when it would have nothing to do (no ledger, and no outbox with
// retention).
func NewSweeper(l ledger.Ledger, outbox ledger.OutboxStore, opts ...SweeperOption) (*Sweeper, error) {
	return newSweeper(l, outbox, defaultCommon(), defaultHolder(), opts)
}

// newSweeper is NewSweeper with the shared settings and holder name of
// the loop it runs in.
func newSweeper(l ledger.Ledger, outbox ledger.OutboxStore, c common, holder string, opts []SweeperOption) (*Sweeper, error) {
	cfg := defaultSweeperConfig(c, sanitizeName(holder))
	for _, o := range opts {
		if o != nil {
			o.applySweeper(&cfg)
		}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Sweeper{ledger: l, outbox: outbox, cfg: cfg}
	electorOf := func(store any) ledger.Elector {
		e, _ := store.(ledger.Elector)
		if cfg.noLeads {
			return nil
		}
		return e
	}
	if l != nil {
		s.jobs = append(s.jobs, &sweepJob{name: SweepExpire, elector: electorOf(l), run: s.expire})
		if cfg.retain {
			p, ok := l.(ledger.Purger)
			if !ok {
				return nil, invalid("retention", "the ledger does not implement ledger.Purger")
			}
			s.jobs = append(s.jobs, &sweepJob{name: SweepPurgeDeliveries, elector: electorOf(l), run: s.purger(p.PurgeDeliveries)})
		}
	}
	if outbox != nil && cfg.retain {
		p, ok := outbox.(ledger.OutboxPurger)
		if !ok {
			return nil, invalid("retention", "the outbox does not implement ledger.OutboxPurger")
		}
		s.jobs = append(s.jobs, &sweepJob{name: SweepPurgeEntries, elector: electorOf(outbox), run: s.purger(p.PurgeEntries)})
	}
	if len(s.jobs) == 0 {
		return nil, invalid("sweeper", "has nothing to do: give it a ledger, or an outbox and WithRetention")
	}
	return s, nil
}

// Holder returns the name the Sweeper takes its leads under.
func (s *Sweeper) Holder() string { return s.cfg.holder }

// Run sweeps until ctx is cancelled: a sweep (RunOnce) at once, then one
// every sweep interval, with jitter. When ctx is cancelled it gives up the
// leads it holds (with a context of its own, bounded), so that another
// sweeper takes over at its next sweep, and returns nil. A sweep that
// fails is retried after a backoff, as the poll loops' cycles are; a
// store that cannot work at all (ledger.ErrUnusable) stops Run with that
// error.
func (s *Sweeper) Run(ctx context.Context) error {
	if err := storekit.ValidateContext(ctx); err != nil {
		return err
	}
	s.health.begin()
	defer s.resign(ctx)
	err := s.cfg.runLoop(ctx, &s.health, loopSpec{
		what:  "sweeper",
		attrs: []slog.Attr{slog.String("holder", s.cfg.holder)},
		base:  s.cfg.interval,
		limit: max(s.cfg.interval, MaxErrorBackoff),
		cycle: func(ctx context.Context) (bool, error) {
			_, err := s.RunOnce(ctx)
			return false, err
		},
		idle: s.waitInterval,
	})
	s.health.end(err)
	return err
}

// waitInterval waits the sweep interval plus up to a tenth of it.
func (s *Sweeper) waitInterval(ctx context.Context) bool {
	d := s.cfg.interval
	if d >= 10 {
		d += rand.N(d / 10)
	}
	return s.cfg.sleep(ctx, d)
}

// Ready reports whether the Sweeper can work, as Dispatcher.Ready does,
// looking one record up in its ledger (or outbox) to see that the store
// answers.
func (s *Sweeper) Ready(ctx context.Context) error {
	return s.health.ready(ctx, func(ctx context.Context) error {
		if s.ledger != nil {
			_, err := s.ledger.Get(ctx, readyProbeID)
			return err
		}
		_, err := s.outbox.FindByID(ctx, readyProbeID)
		return err
	})
}

// RunOnce runs one sweep at the clock's now: for each job (SweepExpire,
// then the purges when retention is on), it takes or renews the job's
// lead and, when it holds it (or the store keeps no leads), does the job.
// Every job is tried even when an earlier one failed. The error joins the
// jobs' errors and ctx.Err() when ctx was cancelled; the stats count what
// happened either way.
func (s *Sweeper) RunOnce(ctx context.Context) (SweepStats, error) {
	if err := storekit.ValidateContext(ctx); err != nil {
		return SweepStats{}, err
	}
	if err := ctx.Err(); err != nil {
		return SweepStats{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var st SweepStats
	var errs []error
	now := s.cfg.clock()
	for _, j := range s.jobs {
		lead, err := s.lead(ctx, j, now)
		if err != nil {
			errs = append(errs, s.failed(ctx, j, fmt.Errorf("lead %s: %w", j.name, err)))
			continue
		}
		if !lead {
			st.Skipped++
			continue
		}
		st.Done++
		start := s.cfg.clock()
		n, err := j.run(ctx, j, now)
		switch j.name {
		case SweepExpire:
			st.Expired += n
		case SweepPurgeDeliveries:
			st.PurgedDeliveries += n
		case SweepPurgeEntries:
			st.PurgedEntries += n
		}
		if err != nil {
			errs = append(errs, s.failed(ctx, j, fmt.Errorf("%s: %w", j.name, err)))
			continue
		}
		s.cfg.observer.Observe(Event{Kind: EventSwept, Job: j.name, Count: n, Duration: s.cfg.clock().Sub(start)})
		if n > 0 {
			s.cfg.logger.LogAttrs(ctx, slog.LevelInfo, "dispatch: swept",
				slog.String("holder", s.cfg.holder), slog.String("job", string(j.name)), slog.Int("records", n))
		}
	}
	return st, errors.Join(append(errs, ctx.Err())...)
}

// failed observes a failed job and returns err. A job cut short by
// shutdown is no failure worth observing.
func (s *Sweeper) failed(ctx context.Context, j *sweepJob, err error) error {
	if ctx.Err() == nil {
		s.cfg.observer.Observe(Event{Kind: EventSweepFailed, Job: j.name, Err: err})
	}
	return err
}

// lead reports whether this sweeper does j now: it renews the lead it
// holds, or takes the lead when nobody holds it. A store error leaves the
// job undone this time (the lead, if held, lapses unless a later renewal
// works).
func (s *Sweeper) lead(ctx context.Context, j *sweepJob, now time.Time) (bool, error) {
	if j.elector == nil {
		return true, nil
	}
	ttl := s.cfg.leadTTL()
	if j.held != nil {
		res, err := j.elector.RenewLead(ctx, *j.held, now, ttl)
		if err != nil {
			return false, err
		}
		if res.Applied() {
			j.held = &res.Lead
			return true, nil
		}
		j.held = nil
		s.cfg.observer.Observe(Event{Kind: EventLeadLost, Job: j.name, Outcome: string(res.Outcome)})
		s.cfg.logger.LogAttrs(ctx, slog.LevelInfo, "dispatch: lost the lead of a sweep job",
			slog.String("holder", s.cfg.holder), slog.String("job", string(j.name)),
			slog.String("outcome", string(res.Outcome)), slog.String("leader", res.Lead.Holder))
	}
	res, err := j.elector.TakeLead(ctx, string(j.name), s.cfg.holder, now, ttl)
	if err != nil || !res.Applied() {
		return false, err
	}
	lead := res.Lead
	j.held = &lead
	s.cfg.observer.Observe(Event{Kind: EventLeadTaken, Job: j.name, Outcome: string(res.Outcome)})
	s.cfg.logger.LogAttrs(ctx, slog.LevelInfo, "dispatch: took the lead of a sweep job",
		slog.String("holder", s.cfg.holder), slog.String("job", string(j.name)), slog.Int64("term", lead.Seq))
	return true, nil
}

// resign gives up every lead held, so that another sweeper takes over at
// its next sweep instead of after the lead lapses.
func (s *Sweeper) resign(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), resignTimeout)
	defer cancel()
	for _, j := range s.jobs {
		if j.held == nil {
			continue
		}
		res, err := j.elector.ReleaseLead(rctx, *j.held, s.cfg.clock())
		j.held = nil
		if err != nil {
			s.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "dispatch: could not give the lead up; it lapses at its expiry",
				slog.String("holder", s.cfg.holder), slog.String("job", string(j.name)), slog.Any("error", err))
			continue
		}
		s.cfg.observer.Observe(Event{Kind: EventLeadLost, Job: j.name, Outcome: string(res.Outcome)})
	}
}

// expire is the SweepExpire job.
func (s *Sweeper) expire(ctx context.Context, _ *sweepJob, now time.Time) (int, error) {
	// A store that sweeps in batches may answer the IDs its committed
	// batches changed beside an error: they count.
	res, err := s.ledger.Expire(ctx, now)
	return len(res.Changed), err
}

// purger returns a retention job deleting through del: what ended before
// now less the retention, in calls of the purge batch size, until a call
// deletes less than a batch, at most PurgeBatchesPerSweep calls, keeping
// the job's lead between calls and stopping when it is lost.
func (s *Sweeper) purger(del func(ctx context.Context, olderThan time.Time, limit int) (int, error)) func(context.Context, *sweepJob, time.Time) (int, error) {
	return func(ctx context.Context, j *sweepJob, now time.Time) (int, error) {
		cutoff := now.Add(-s.cfg.retention)
		if cutoff.Before(storekit.MinTime()) {
			return 0, nil // nothing can have ended that long ago
		}
		total := 0
		for range PurgeBatchesPerSweep {
			n, err := del(ctx, cutoff, s.cfg.purgeBatch)
			total += n
			if err != nil || n < s.cfg.purgeBatch {
				return total, err
			}
			if ok, err := s.lead(ctx, j, s.cfg.clock()); err != nil || !ok {
				return total, err
			}
		}
		return total, nil
	}
}
