package pgstore_test

import (
	"fmt"
	"time"

	"github.com/leaseledger/ledger"
)

// The retention, history and stats part of
// TestRandomSequencesMatchMemstore: the purges the generator draws, and
// the comparisons of every record's history and of the stats.

// purged is what a purge answers, so that outcomesOf can tell a purge
// that deleted something from one that did not.
type purged int

// purgeHorizon draws the olderThan of a purge: before, at or after the
// clock, so that purges delete nothing, what ended before this step, or
// everything that ended.
func (r *diffRun) purgeHorizon() time.Time {
	return r.w.now.Add(pickOne(r, []time.Duration{-time.Minute, 0, time.Microsecond, time.Hour}))
}

func (r *diffRun) opPurgeDeliveries() diffOp {
	olderThan, limit := r.purgeHorizon(), 1+r.rng.IntN(3)
	return diffOp{"PurgeDeliveries", fmt.Sprintf("PurgeDeliveries older than %s, limit %d", atT0(olderThan), limit), writesDeliveries, nil,
		func(s *diffSide) (any, error) {
			n, err := s.l.(ledger.Purger).PurgeDeliveries(r.ctx, olderThan, limit)
			return purged(n), err
		}}
}

func (r *diffRun) opPurgeEntries() diffOp {
	olderThan, limit := r.purgeHorizon(), 1+r.rng.IntN(3)
	return diffOp{"PurgeEntries", fmt.Sprintf("PurgeEntries older than %s, limit %d", atT0(olderThan), limit), writesEntries, diffKeys,
		func(s *diffSide) (any, error) {
			n, err := s.o.(ledger.OutboxPurger).PurgeEntries(r.ctx, olderThan, limit)
			return purged(n), err
		}}
}

// compareHistories compares the history of every delivery and outbox
// entry, present or not.
func (r *diffRun) compareHistories(step int, what string) {
	r.compareRead(step, what, "History", func(s *diffSide) (any, error) {
		h := s.l.(ledger.Historian)
		var out []any
		for _, id := range diffIDs {
			ts, err := h.History(r.ctx, id)
			out = append(out, id, ts, errClass(err))
		}
		return out, nil
	})
	r.compareRead(step, what, "EntryHistory", func(s *diffSide) (any, error) {
		h := s.o.(ledger.OutboxHistorian)
		var out []any
		for _, key := range diffKeys {
			ts, err := h.EntryHistory(r.ctx, ledger.OutboxEntryIDFor(key))
			out = append(out, key, ts, errClass(err))
		}
		return out, nil
	})
}

// diffStatsFilters are the filters the stats are compared under: none,
// every target (h4 only ever gets work by Supersede) and ceremony, and
// pairs of them.
var diffStatsFilters = []ledger.StatsFilter{
	{}, {Target: "h1"}, {Target: "h2"}, {Target: "h3"}, {Target: "h4"}, {Ceremony: "c1"}, {Ceremony: "c2"},
	{Target: "h1", Ceremony: "c1"}, {Target: "h2", Ceremony: "c2"}, {Target: "h3", Ceremony: "c1"},
}

// compareStats compares Stats under every filter and OutboxStats, each at
// the start of the sequence (nothing is due yet, or everything is late),
// at the clock, and ten minutes later, when leases, claims and retries
// have come due.
func (r *diffRun) compareStats(step int, what string) {
	nows := []time.Time{t0, r.w.now, r.w.now.Add(10 * time.Minute)}
	r.compareRead(step, what, "Stats", func(s *diffSide) (any, error) {
		sr := s.l.(ledger.StatsReporter)
		var out []any
		for _, now := range nows {
			for _, f := range diffStatsFilters {
				st, err := sr.Stats(r.ctx, f, now)
				out = append(out, fmt.Sprintf("%+v at %s", f, atT0(now)), st, errClass(err))
			}
		}
		return out, nil
	})
	r.compareRead(step, what, "OutboxStats", func(s *diffSide) (any, error) {
		sr := s.o.(ledger.OutboxStatsReporter)
		var out []any
		for _, now := range nows {
			st, err := sr.OutboxStats(r.ctx, now)
			out = append(out, atT0(now), st, errClass(err))
		}
		return out, nil
	})
}
