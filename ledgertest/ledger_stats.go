package ledgertest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// testStats checks ledger.StatsReporter: the counts by state and cause,
// the queue depth and the lag of the oldest offerable delivery, overall and
// per target, ceremony or both, and the queue broken down by target
// (ByTarget: only targets with an offerable delivery). Every answer must equal what
// storekit.CountDelivery gives over every matching record read back
// with List, and Depth must be what Lease would hand out. A ledger that
// does not implement StatsReporter skips the group: stats are optional.
func testStats(t *testing.T, newLedger NewLedgerFunc) {
	runLedgerRules(t, newLedger, []ledgerRule{
		{"EmptyLedger", statsEmptyLedger},
		{"CountsByStateAndCause", statsCountsByStateAndCause},
		{"DepthAndLagOverTime", statsDepthAndLagOverTime},
		{"DepthIsWhatLeaseHandsOut", statsDepthIsWhatLeaseHandsOut},
		{"NothingDueHasNoLag", statsNothingDueHasNoLag},
		{"QueueByTarget", statsQueueByTarget},
		{"InvalidIsRejected", statsInvalidIsRejected},
	})
}

// statsReporter returns the ledger's StatsReporter, skipping the test when
// it has none.
func (f *ledgerFixture) statsReporter() ledger.StatsReporter {
	f.t.Helper()
	r, ok := f.l.(ledger.StatsReporter)
	if !ok {
		f.t.Skipf("%T does not implement ledger.StatsReporter: stats are optional", f.l)
	}
	return r
}

// stats calls Stats, requires no error and normalises the time it holds.
func (f *ledgerFixture) stats(filter ledger.StatsFilter, now time.Time) ledger.DeliveryStats {
	f.t.Helper()
	st, err := f.statsReporter().Stats(f.ctx, filter, now)
	require.NoError(f.t, err, "Stats %+v at %s", filter, now)
	if !st.OldestAvailableAt.IsZero() {
		st.OldestAvailableAt = ledger.Normalize(st.OldestAvailableAt)
	}
	for tg, q := range st.ByTarget {
		q.OldestAvailableAt = ledger.Normalize(q.OldestAvailableAt)
		st.ByTarget[tg] = q
	}
	return st
}

// scanStats counts, with the root's Count, every record matching filter
// as List returns it: what Stats must answer.
func (f *ledgerFixture) scanStats(filter ledger.StatsFilter, now time.Time) ledger.DeliveryStats {
	f.t.Helper()
	want := storekit.NewDeliveryStats()
	for _, d := range f.all() {
		if (filter.Target == "" || d.Target == filter.Target) && (filter.Ceremony == "" || d.Ceremony == filter.Ceremony) {
			storekit.CountDelivery(&want, &d, now)
		}
	}
	storekit.FinishDeliveryStats(&want, now)
	return want
}

// requireStatsMatchScan requires Stats to equal scanStats for every filter
// at every now.
func (f *ledgerFixture) requireStatsMatchScan(filters []ledger.StatsFilter, nows ...time.Time) {
	f.t.Helper()
	for _, now := range nows {
		for _, filter := range filters {
			require.Equal(f.t, f.scanStats(filter, now), f.stats(filter, now), "Stats %+v at %s", filter, now)
		}
	}
}

// statsFilters returns no filter, each of targets and ceremonies alone,
// and every pair of them.
func statsFilters(targets []ledger.Target, ceremonies []ledger.CeremonyID) []ledger.StatsFilter {
	out := []ledger.StatsFilter{{}}
	for _, tg := range targets {
		out = append(out, ledger.StatsFilter{Target: tg})
	}
	for _, c := range ceremonies {
		out = append(out, ledger.StatsFilter{Ceremony: c})
		for _, tg := range targets {
			out = append(out, ledger.StatsFilter{Target: tg, Ceremony: c})
		}
	}
	return out
}

// requireDepth requires Depth, OldestAvailableAt and Lag of filter at now.
func (f *ledgerFixture) requireDepth(filter ledger.StatsFilter, now time.Time, depth int64, oldest time.Time) {
	f.t.Helper()
	st := f.stats(filter, now)
	require.Equal(f.t, depth, st.Depth, "Depth %+v at %s", filter, now)
	if depth == 0 {
		require.True(f.t, st.OldestAvailableAt.IsZero(), "no oldest when nothing is offerable")
		require.Zero(f.t, st.Lag, "no lag when nothing is offerable")
		return
	}
	require.Equal(f.t, ledger.Normalize(oldest), st.OldestAvailableAt, "oldest %+v at %s", filter, now)
	require.Equal(f.t, ledger.Normalize(now).Sub(ledger.Normalize(oldest)), st.Lag, "lag %+v at %s", filter, now)
}

func statsEmptyLedger(t *testing.T, f *ledgerFixture) {
	for _, filter := range statsFilters([]ledger.Target{"host-1"}, []ledger.CeremonyID{"cer-1"}) {
		st := f.stats(filter, t0)
		require.Equal(t, storekit.NewDeliveryStats(), st, "every state present and zero, nothing else")
	}
}

func statsCountsByStateAndCause(t *testing.T, f *ledgerFixture) {
	inCeremony := func(id ledger.DeliveryID, target ledger.Target, c ledger.CeremonyID) ledger.EnqueueRequest {
		r := req(id, target)
		r.Ceremony = c
		return r
	}
	// Open: one leased, one acknowledged, and (enqueued last, so that
	// leaseOne never meets them) two offered, one of them not available yet.
	f.enqueue(inCeremony("b-leased", "host-1", "cer-1"), t0)
	f.leaseOne("b-leased", ownerA, t0)
	f.enqueue(inCeremony("c-acked", "host-2", "cer-2"), t0)
	l := f.leaseOne("c-acked", ownerB, t0)
	f.applied(f.get("c-acked"), t0)(f.l.Acknowledge(f.ctx, l, "", t0))
	// Ended: processed, failed, and expired for four causes of three kinds.
	f.acknowledged("d-processed", "host-1", ownerA, t0)
	f.process("d-processed", ownerA, nil, t0)
	f.enqueue(req("e-failed", "host-2"), t0)
	lf := f.leaseOne("e-failed", ownerA, t0)
	f.applied(f.get("e-failed"), t0)(f.l.MarkFailed(f.ctx, lf, ledger.FailureReason{Message: "no", Permanent: true}, t0))
	for _, id := range []ledger.DeliveryID{"f-dropped-1", "f-dropped-2"} {
		f.enqueue(inCeremony(id, "host-1", "cer-1"), t0)
		f.applied(f.get(id), t0)(f.l.Abandon(f.ctx, id, ledger.Cause{Kind: ledger.CauseQueueBounded}, t0))
	}
	f.enqueue(inCeremony("g-ceremony", "host-3", "cer-3"), t0)
	f.expireCeremony("cer-3", ledger.Cause{Kind: ledger.CauseCeremonyEnded}, t0, "g-ceremony")
	f.enqueue(inCeremony("h-superseded", "host-4", "cer-1"), t0)
	_, err := f.l.Supersede(f.ctx, "host-4", "host-5", ledger.LeaveBehind, t0)
	require.NoError(t, err)
	f.enqueue(inCeremony("a-offered", "host-1", "cer-1"), t0)
	later := inCeremony("a-later", "host-2", "")
	later.AvailableAt = at(time.Hour)
	f.enqueue(later, t0)

	st := f.stats(ledger.StatsFilter{}, t0)
	require.Equal(t, map[ledger.DeliveryState]int64{
		ledger.DeliveryStateOffered: 2, ledger.DeliveryStateLeased: 1, ledger.DeliveryStateAcknowledged: 1,
		ledger.DeliveryStateProcessed: 1, ledger.DeliveryStateFailed: 1, ledger.DeliveryStateExpired: 4,
	}, st.ByState)
	require.Equal(t, map[ledger.CauseKind]int64{
		ledger.CauseQueueBounded: 2, ledger.CauseCeremonyEnded: 1, ledger.CauseSuperseded: 1,
	}, st.ByCause)
	require.Equal(t, int64(1), st.Depth, "only a-offered can be leased now")

	cer1 := f.stats(ledger.StatsFilter{Ceremony: "cer-1"}, t0)
	require.Equal(t, int64(1), cer1.ByState[ledger.DeliveryStateOffered])
	require.Equal(t, int64(1), cer1.ByState[ledger.DeliveryStateLeased])
	require.Equal(t, int64(3), cer1.ByState[ledger.DeliveryStateExpired])
	require.Equal(t, map[ledger.CauseKind]int64{ledger.CauseQueueBounded: 2, ledger.CauseSuperseded: 1}, cer1.ByCause)
	pair := f.stats(ledger.StatsFilter{Target: "host-2", Ceremony: "cer-2"}, t0)
	require.Equal(t, int64(1), pair.ByState[ledger.DeliveryStateAcknowledged])
	require.Equal(t, int64(1), sumStates(pair), "only c-acked is on host-2 in cer-2")

	filters := statsFilters([]ledger.Target{"host-1", "host-2", "host-3", "host-4", "absent"},
		[]ledger.CeremonyID{"cer-1", "cer-2", "cer-3", "absent"})
	f.requireStatsMatchScan(filters, t0, at(time.Minute), at(time.Hour))
}

// sumStates adds up the counts by state.
func sumStates(st ledger.DeliveryStats) int64 {
	var n int64
	for _, c := range st.ByState {
		n += c
	}
	return n
}

func statsDepthAndLagOverTime(t *testing.T, f *ledgerFixture) {
	// On host-2, one lease that runs out and is offered again, and one on
	// the last attempt, which runs out but is not offerable again.
	f.enqueue(req("d-expiring", "host-2"), t0)
	spent := req("d-spent", "host-2")
	spent.Policy.MaxAttempts = 1
	f.enqueue(spent, t0)
	require.Len(t, f.lease(ledger.LeaseFilter{}, ownerA, t0, leaseFor, 2).Leased, 2)
	// On host-1, one offered now and one offered in an hour.
	f.enqueue(req("d-now", "host-1"), t0)
	later := req("d-later", "host-1")
	later.AvailableAt = at(time.Hour)
	f.enqueue(later, t0)

	all, host1, host2 := ledger.StatsFilter{}, ledger.StatsFilter{Target: "host-1"}, ledger.StatsFilter{Target: "host-2"}
	f.requireDepth(all, t0, 1, t0)
	f.requireDepth(all, at(30*time.Second), 1, t0)
	f.requireDepth(host2, at(30*time.Second), 0, time.Time{})
	expiry := at(leaseFor)
	f.requireDepth(all, expiry, 2, t0)
	f.requireDepth(host2, expiry, 1, expiry)
	f.requireDepth(host2, expiry.Add(time.Minute), 1, expiry)
	f.requireDepth(host1, expiry, 1, t0)
	f.requireDepth(all, at(time.Hour), 3, t0)
	f.requireDepth(host1, at(time.Hour), 2, t0)
	filters := statsFilters([]ledger.Target{"host-1", "host-2"}, nil)
	f.requireStatsMatchScan(filters, t0, expiry.Add(-time.Microsecond), expiry, at(time.Hour))

	// The sweep ends the spent one and puts the other back in the offer:
	// the depth stays what it was.
	f.expire(expiry, "d-expiring", "d-spent")
	f.requireDepth(all, at(time.Hour), 3, t0)
	f.requireDepth(host2, at(time.Hour), 1, expiry)
	f.requireStatsMatchScan(filters, expiry, at(time.Hour))
}

func statsDepthIsWhatLeaseHandsOut(t *testing.T, f *ledgerFixture) {
	for i, id := range []ledger.DeliveryID{"d-1", "d-2", "d-3", "d-4", "d-5"} {
		r := req(id, ledger.Target([]string{"host-1", "host-2"}[i%2]))
		r.Ceremony = ledger.CeremonyID([]string{"cer-1", "cer-2", ""}[i%3])
		r.AvailableAt = at(time.Duration(i) * time.Second)
		f.enqueue(r, t0)
	}
	f.lease(ledger.LeaseFilter{Targets: []ledger.Target{"host-2"}}, ownerB, at(5*time.Second), time.Second, 1)
	now := at(6 * time.Second)
	for _, filter := range statsFilters([]ledger.Target{"host-1", "host-2"}, []ledger.CeremonyID{"cer-1", "cer-2"}) {
		st := f.stats(filter, now)
		require.Equal(t, f.scanStats(filter, now), st, "Stats %+v", filter)
		// Leasing under a filter changes what the next filter sees, so
		// each is checked by a lease that is released at once.
		lf := ledger.LeaseFilter{Ceremony: filter.Ceremony}
		if filter.Target != "" {
			lf.Targets = []ledger.Target{filter.Target}
		}
		before := map[ledger.DeliveryID]time.Time{}
		for _, d := range f.all() {
			before[d.ID] = d.AvailableAt
		}
		res := f.lease(lf, ownerA, now, leaseFor, ledger.MaxLimit)
		require.Equal(t, st.Depth, int64(len(res.Leased)), "Depth %+v is what Lease hands out", filter)
		if len(res.Leased) > 0 {
			first := res.Leased[0].Delivery.ID
			require.Equal(t, ledger.Normalize(before[first]), st.OldestAvailableAt, "the oldest is what Lease hands out first")
		}
		for _, ld := range res.Leased {
			f.applied(ld.Delivery, now)(f.l.Release(f.ctx, ld.Lease, now))
		}
	}
}

func statsNothingDueHasNoLag(t *testing.T, f *ledgerFixture) {
	later := req("d-later", "host-1")
	later.AvailableAt = at(time.Hour)
	f.enqueue(later, t0)
	f.enqueue(req("d-held", "host-1"), t0)
	f.leaseOne("d-held", ownerA, t0)
	f.acknowledged("d-acked", "host-1", ownerA, t0)
	for _, now := range []time.Time{t0, at(30 * time.Second)} {
		st := f.stats(ledger.StatsFilter{}, now)
		require.Zero(t, st.Depth)
		require.Zero(t, st.Lag)
		require.True(t, st.OldestAvailableAt.IsZero())
	}
}

// statsQueueByTarget pins ByTarget: per target, the deliveries Lease could
// hand out at now, the oldest AvailableAt among them and its lag; a
// delivery not yet available, a lease in force, a lease on its last
// attempt and an ended or acknowledged delivery are never counted, and a
// target with nothing offerable has no entry.
func statsQueueByTarget(t *testing.T, f *ledgerFixture) {
	// host-3: acknowledged and processed, never in the queue.
	f.acknowledged("c-acked", "host-3", ownerA, t0)
	f.acknowledged("c-done", "host-3", ownerA, t0)
	f.process("c-done", ownerA, nil, t0)
	// host-2: one lease that runs out at expiry, one on its last attempt.
	held := req("b-held", "host-2")
	held.Ceremony = "cer-1"
	f.enqueue(held, t0)
	spent := req("b-spent", "host-2")
	spent.Policy.MaxAttempts = 1
	f.enqueue(spent, t0)
	require.Len(t, f.lease(ledger.LeaseFilter{Targets: []ledger.Target{"host-2"}}, ownerA, t0, leaseFor, 2).Leased, 2)
	// host-1: one available now, one in an hour.
	now1 := req("a-now", "host-1")
	now1.Ceremony = "cer-1"
	f.enqueue(now1, t0)
	later := req("a-later", "host-1")
	later.AvailableAt = at(time.Hour)
	f.enqueue(later, t0)

	expiry := at(leaseFor)
	type q = ledger.TargetQueueStats
	for _, c := range []struct {
		filter ledger.StatsFilter
		now    time.Time
		want   map[ledger.Target]q
	}{
		{ledger.StatsFilter{}, t0, map[ledger.Target]q{"host-1": {Depth: 1, OldestAvailableAt: t0}}},
		{ledger.StatsFilter{}, expiry, map[ledger.Target]q{
			"host-1": {Depth: 1, OldestAvailableAt: t0, Lag: leaseFor},
			"host-2": {Depth: 1, OldestAvailableAt: expiry},
		}},
		{ledger.StatsFilter{}, at(time.Hour), map[ledger.Target]q{
			"host-1": {Depth: 2, OldestAvailableAt: t0, Lag: time.Hour},
			"host-2": {Depth: 1, OldestAvailableAt: expiry, Lag: time.Hour - leaseFor},
		}},
		{ledger.StatsFilter{Target: "host-2"}, at(time.Hour), map[ledger.Target]q{
			"host-2": {Depth: 1, OldestAvailableAt: expiry, Lag: time.Hour - leaseFor},
		}},
		{ledger.StatsFilter{Target: "host-3"}, at(time.Hour), map[ledger.Target]q{}},
		{ledger.StatsFilter{Ceremony: "cer-1"}, at(time.Hour), map[ledger.Target]q{
			"host-1": {Depth: 1, OldestAvailableAt: t0, Lag: time.Hour},
			"host-2": {Depth: 1, OldestAvailableAt: expiry, Lag: time.Hour - leaseFor},
		}},
		{ledger.StatsFilter{Target: "host-1", Ceremony: "cer-1"}, at(time.Hour), map[ledger.Target]q{
			"host-1": {Depth: 1, OldestAvailableAt: t0, Lag: time.Hour},
		}},
	} {
		st := f.stats(c.filter, c.now)
		require.Equal(t, c.want, st.ByTarget, "ByTarget %+v at %s", c.filter, c.now)
		var depth int64
		for _, tq := range st.ByTarget {
			depth += tq.Depth
		}
		require.Equal(t, st.Depth, depth, "the targets' depths add up to Depth")
	}
	filters := statsFilters([]ledger.Target{"host-1", "host-2", "host-3"}, []ledger.CeremonyID{"cer-1"})
	f.requireStatsMatchScan(filters, t0, expiry, at(time.Hour))
}

func statsInvalidIsRejected(t *testing.T, f *ledgerFixture) {
	r := f.statsReporter()
	for _, filter := range []ledger.StatsFilter{
		{Target: "bad\n"}, {Ceremony: "bad\xff"},
		{Target: ledger.Target(strings.Repeat("x", ledger.MaxNameBytes+1))},
	} {
		_, err := r.Stats(f.ctx, filter, t0)
		requireInvalid(t, err)
	}
	for _, now := range []time.Time{{}, storekit.MaxTime().Add(time.Second), storekit.MinTime().Add(-time.Second)} {
		_, err := r.Stats(f.ctx, ledger.StatsFilter{}, now)
		requireInvalid(t, err)
	}
	_, err := r.Stats(nilContext(), ledger.StatsFilter{}, t0)
	requireInvalid(t, err)
	_, err = r.Stats(cancelledContext(t), ledger.StatsFilter{}, t0)
	require.ErrorIs(t, err, context.Canceled)
}
