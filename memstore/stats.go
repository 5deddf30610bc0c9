package memstore

import (
	"context"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// Compile-time checks that both stores report stats.
var (
	_ ledger.StatsReporter       = (*Store)(nil)
	_ ledger.OutboxStatsReporter = (*Outbox)(nil)
)

// Stats is cheap because nothing in it scans the records. The counts by
// state and cause are kept up to date where records are inserted, replaced
// and purged (tallies), overall and per target, ceremony and pair of both,
// so that every filter reads its own. Depth and the oldest offerable
// delivery come from the offer indexes, which hold exactly the Offered and
// Leased deliveries by AvailableAt (for a Leased one, its lease's expiry):
// each of their keys due at now is offerable unless its attempts are used
// up, and those are kept apart in the spent index.

// tally counts deliveries by state and Expired ones by the kind of their
// cause.
type tally struct {
	total  int64
	states [len(deliveryStates)]int64 // by stateCode
	causes map[ledger.CauseKind]int64
}

// add counts d n more times (n is 1 or -1).
func (c *tally) add(d *ledger.Delivery, n int64) {
	c.total += n
	c.states[stateCode(string(d.State))] += n
	if d.State != ledger.DeliveryStateExpired || d.Cause == nil {
		return
	}
	if c.causes == nil {
		c.causes = make(map[ledger.CauseKind]int64)
	}
	if c.causes[d.Cause.Kind] += n; c.causes[d.Cause.Kind] == 0 {
		delete(c.causes, d.Cause.Kind) // caller-chosen kinds must not pile up
	}
}

// pair is a (target, ceremony) filter.
type pair struct {
	target   ledger.Target
	ceremony ledger.CeremonyID
}

// tallies counts a Store's deliveries overall and per filter. A group's
// tally is dropped when its last delivery leaves it, so that names that
// never come back do not accumulate.
type tallies struct {
	all        tally
	byTarget   map[ledger.Target]*tally
	byCeremony map[ledger.CeremonyID]*tally
	byPair     map[pair]*tally
}

// move counts the change of a record from old to d; nil stands for no
// record (an insert, or a purge).
func (ts *tallies) move(old, d *ledger.Delivery) {
	if old != nil && d != nil && old.Target == d.Target && old.Ceremony == d.Ceremony {
		// Nearly every transition: one lookup per group, and none at all
		// when the state stays (the cause changes only with it).
		if old.State == d.State {
			return
		}
		ts.all.add(old, -1)
		ts.all.add(d, 1)
		for _, c := range ts.groups(d, false) {
			if c != nil {
				c.add(old, -1)
				c.add(d, 1)
			}
		}
		return
	}
	if old != nil {
		ts.all.add(old, -1)
		for i, c := range ts.groups(old, false) {
			if c != nil {
				c.add(old, -1)
				if c.total == 0 {
					ts.drop(i, old)
				}
			}
		}
	}
	if d != nil {
		ts.all.add(d, 1)
		for _, c := range ts.groups(d, true) {
			if c != nil {
				c.add(d, 1)
			}
		}
	}
}

// groups returns d's tallies by target, by ceremony and by pair (the last
// two nil for a delivery without ceremony), creating missing ones when
// create is set; otherwise a missing one is nil.
func (ts *tallies) groups(d *ledger.Delivery, create bool) [3]*tally {
	var out [3]*tally
	out[0] = lookup(&ts.byTarget, d.Target, create)
	if d.Ceremony != "" {
		out[1] = lookup(&ts.byCeremony, d.Ceremony, create)
		out[2] = lookup(&ts.byPair, pair{d.Target, d.Ceremony}, create)
	}
	return out
}

// drop deletes group i (as groups numbers them) of d.
func (ts *tallies) drop(i int, d *ledger.Delivery) {
	switch i {
	case 0:
		delete(ts.byTarget, d.Target)
	case 1:
		delete(ts.byCeremony, d.Ceremony)
	case 2:
		delete(ts.byPair, pair{d.Target, d.Ceremony})
	}
}

func lookup[N comparable](m *map[N]*tally, name N, create bool) *tally {
	c := (*m)[name]
	if c == nil && create {
		if *m == nil {
			*m = make(map[N]*tally)
		}
		c = &tally{}
		(*m)[name] = c
	}
	return c
}

// of returns the tally of filter; nil when nothing matches it.
func (ts *tallies) of(f ledger.StatsFilter) *tally {
	switch {
	case f.Target != "" && f.Ceremony != "":
		return ts.byPair[pair{f.Target, f.Ceremony}]
	case f.Target != "":
		return ts.byTarget[f.Target]
	case f.Ceremony != "":
		return ts.byCeremony[f.Ceremony]
	}
	return &ts.all
}

// spent reports whether d belongs in the spent index: an offer candidate
// whose attempts are used up, which Lease skips and Expire ends.
func spent(d *ledger.Delivery) bool {
	return candidate(d) && d.Attempts >= d.Policy.MaxAttempts
}

// Stats counts the deliveries matching filter: by state, Expired ones by
// cause, and those Lease could hand out at now (Depth), with the oldest
// AvailableAt among them and its lag, overall and by target (ByTarget).
// The numbers are the ones storekit.CountDelivery gives over every
// matching record, one consistent snapshot under the store's lock.
//
// Cost, for n records: the counts are kept as records change, so reading
// them is O(1). The queue is counted target by target, through each
// target's offer index: its due keys a node at a time, O(log n + k/31)
// for k offerable deliveries, less the due ones whose attempts are used
// up (one step each per target, and Expire ends them); the oldest is the
// first offerable key. Without a filter that is once per target with
// offer candidates. A filter on a ceremony walks the ceremony's due keys
// one by one, O(k) for its k due deliveries. Errors: ErrInvalid,
// ctx.Err().
func (s *Store) Stats(ctx context.Context, filter ledger.StatsFilter, now time.Time) (ledger.DeliveryStats, error) {
	if err := begin(ctx, storekit.ValidateStats(filter, now)); err != nil {
		return ledger.DeliveryStats{}, err
	}
	now = ledger.Normalize(now)
	st := storekit.NewDeliveryStats()
	s.mu.Lock()
	if c := s.counts.of(filter); c != nil {
		for code, n := range c.states[1:] {
			st.ByState[ledger.DeliveryState(deliveryStates[code+1])] = n
		}
		for kind, n := range c.causes {
			st.ByCause[kind] = n
		}
	}
	s.queue(&st, filter, now)
	s.mu.Unlock()
	storekit.FinishDeliveryStats(&st, now)
	return st, nil
}

// queue counts in st, by target, the deliveries matching filter that
// Lease could hand out at now. The caller holds s.mu.
func (s *Store) queue(st *ledger.DeliveryStats, filter ledger.StatsFilter, now time.Time) {
	if filter.Ceremony != "" {
		// No index by ceremony and target: the ceremony's due keys, one
		// by one.
		t := s.byCeremony.get(filter.Ceremony)
		if t == nil {
			return
		}
		end := now.UnixMicro()
		c := t.first()
		for k, ok := c.next(); ok && k.at <= end; k, ok = c.next() {
			if p := s.recs[k.slot]; matches(p, filter) && storekit.Delivery(*p).Offerable(now) {
				storekit.AddDeliveryQueue(st, p.Target, 1, p.AvailableAt)
			}
		}
		return
	}
	if filter.Target != "" {
		n, oldest := s.depth(filter, now)
		storekit.AddDeliveryQueue(st, filter.Target, n, oldest)
		return
	}
	for target := range s.byTarget.m {
		n, oldest := s.depth(ledger.StatsFilter{Target: target}, now)
		storekit.AddDeliveryQueue(st, target, n, oldest)
	}
}

// depth returns how many deliveries matching filter Lease could hand out
// at now, and the oldest AvailableAt among them. The caller holds s.mu.
func (s *Store) depth(filter ledger.StatsFilter, now time.Time) (int64, time.Time) {
	end := now.UnixMicro()
	var (
		t *btree[slotKey]
		// exact is set when every due key of t matches filter, so that
		// the keys can be counted without looking at their records.
		exact = true
	)
	switch {
	case filter.Ceremony != "":
		t = s.byCeremony.get(filter.Ceremony)
		exact = filter.Target == ""
	case filter.Target != "":
		t = s.byTarget.get(filter.Target)
	default:
		t = &s.offers
	}
	if t == nil {
		return 0, time.Time{}
	}
	var n int64
	if exact {
		n = int64(t.countWhile(func(k slotKey) bool { return k.at <= end }))
		c := s.spent.first()
		for k, ok := c.next(); ok && k.at <= end; k, ok = c.next() {
			if matches(s.recs[k.slot], filter) {
				n--
			}
		}
	}
	var oldest time.Time
	c := t.first()
	for k, ok := c.next(); ok && k.at <= end; k, ok = c.next() {
		p := s.recs[k.slot]
		if !matches(p, filter) || !storekit.Delivery(*p).Offerable(now) {
			continue
		}
		if oldest.IsZero() {
			oldest = p.AvailableAt // the index's order is Lease's: oldest first
		}
		if exact {
			break
		}
		n++
	}
	return n, oldest
}

// matches reports whether d passes filter.
func matches(d *ledger.Delivery, f ledger.StatsFilter) bool {
	return (f.Target == "" || d.Target == f.Target) && (f.Ceremony == "" || d.Ceremony == f.Ceremony)
}

// OutboxStats counts the outbox entries by status, and those ClaimPending
// or ClaimRetryReady could hand out at now (Depth), with the oldest due
// time among them (storekit.OutboxEntry.DueAt) and its lag, overall and by
// provider (ByProvider): the numbers storekit.CountEntry gives over
// every entry.
//
// Cost, for n entries: the counts by status are kept as entries change,
// O(1) to read. The queue has no index by provider: every Pending entry
// and every scheduled entry due at now is looked at, O(log n + k) for k
// such entries. Stats are read every few seconds, not on the claims'
// path. Errors: ErrInvalid, ctx.Err().
func (o *Outbox) OutboxStats(ctx context.Context, now time.Time) (ledger.OutboxStats, error) {
	if err := begin(ctx, storekit.ValidateOutboxStats(now)); err != nil {
		return ledger.OutboxStats{}, err
	}
	now = ledger.Normalize(now)
	end := now.UnixMicro()
	st := storekit.NewOutboxStats()
	o.mu.Lock()
	for code, n := range o.counts[1:] {
		st.ByStatus[ledger.OutboxStatus(outboxStatuses[code+1])] = n
	}
	// Both indexes hold claimed entries too: DueAt leaves out those whose
	// claim is in force.
	count := func(p *entry) {
		if due, ok := storekit.OutboxEntry(p.OutboxEntry).DueAt(now); ok {
			storekit.AddOutboxQueue(&st, p.Envelope.Provider, 1, due)
		}
	}
	pc := o.pending.first()
	for k, ok := pc.next(); ok; k, ok = pc.next() {
		count(o.entries[ledger.OutboxEntryID(k.id)])
	}
	sc := o.scheduled.first()
	for k, ok := sc.next(); ok && k.at <= end; k, ok = sc.next() {
		count(o.entries[ledger.OutboxEntryID(k.id)])
	}
	o.mu.Unlock()
	storekit.FinishOutboxStats(&st, now)
	return st, nil
}
