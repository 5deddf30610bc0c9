package ledgertest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// NewBoundedLedgerFunc returns a fresh, empty ledger whose targets' queues
// are bounded by bounds (see ledger.QueueBounds), and registers its own
// cleanup with t.
type NewBoundedLedgerFunc func(t *testing.T, bounds ledger.QueueBounds) ledger.Ledger

// TestQueueBounds runs the bounded queue rules against the ledgers
// newLedger returns: a store configured with a bound keeps each target's
// queue (its Offered and Leased deliveries) within it by abandoning the
// oldest Offered deliveries with cause ledger.CauseQueueBounded, in the
// enqueue that took it over, and says so in the result.
func TestQueueBounds(t *testing.T, newLedger NewBoundedLedgerFunc) {
	t.Helper()
	for _, r := range boundRules {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			l := newLedger(t, r.bounds)
			require.NotNil(t, l, "NewBoundedLedgerFunc returned nil")
			r.run(t, &ledgerFixture{t: t, l: l, ctx: t.Context()})
		})
	}
}

// boundRules are TestQueueBounds' rules, each with the bounds of its store.
var boundRules = []struct {
	name   string
	bounds ledger.QueueBounds
	run    func(t *testing.T, f *ledgerFixture)
}{
	{"OverTheBoundAbandonsTheOldestOffered", ledger.QueueBounds{Default: 3}, boundAbandonsTheOldestOffered},
	{"OldestIsTheFirstLeaseWouldHandOut", ledger.QueueBounds{Default: 2}, boundOldestInLeaseOrder},
	{"LeasedCountButAreNotAbandoned", ledger.QueueBounds{Default: 2}, boundLeasedCountButStay},
	{"AcknowledgedDoNotCount", ledger.QueueBounds{Default: 1}, boundAcknowledgedDoNotCount},
	{"NewDeliveryIsAbandonedWhenNothingOlderIsOffered", ledger.QueueBounds{Default: 1}, boundNewDeliveryItself},
	{"EachTargetHasItsOwnBound", ledger.QueueBounds{Default: 1, Targets: map[ledger.Target]int{"big": 3, "free": 0}}, boundPerTarget},
	{"NoBoundAbandonsNothing", ledger.QueueBounds{}, boundNoneAbandonsNothing},
	{"RepeatedEnqueueAbandonsNothing", ledger.QueueBounds{Default: 1}, boundRepeatedAbandonsNothing},
	{"BatchSaysSoOnTheLastRequestOfTheTarget", ledger.QueueBounds{Default: 2}, boundBatch},
	{"RedriveIsBoundedToo", ledger.QueueBounds{Default: 1}, boundRedrive},
	{"RedriveMatchingNeverChasesWhatItAbandons", ledger.QueueBounds{Default: 1}, boundRedriveMatching},
	{"AbandonedEndIsInTheHistory", ledger.QueueBounds{Default: 1}, boundHistory},
	{"ConcurrentEnqueuesNeverLeaveMoreThanTheBound", ledger.QueueBounds{Default: 5}, boundConcurrentEnqueues},
	{"ConcurrentEnqueuesFromOneBelowTheBound", ledger.QueueBounds{Default: 5}, boundConcurrentFromOneBelow},
	{"ConcurrentBatchesAndRedrivesNeverLeaveMoreThanTheBound", ledger.QueueBounds{Default: 3}, boundConcurrentBatchesAndRedrives},
}

// boundEnqueue enqueues r at now, requires OutcomeApplied and the
// abandoned IDs want, each now Expired with cause queue_bounded, and
// returns the result.
func (f *ledgerFixture) boundEnqueue(r ledger.EnqueueRequest, now time.Time, want ...ledger.DeliveryID) ledger.DeliveryResult {
	f.t.Helper()
	res, err := f.l.Enqueue(f.ctx, r, now)
	require.NoError(f.t, err)
	require.Equal(f.t, ledger.OutcomeApplied, res.Outcome, "enqueue %s", r.ID)
	require.Equal(f.t, want, res.Abandoned, "enqueue %s abandons", r.ID)
	f.requireBoundedOut(now, want...)
	require.Equal(f.t, f.get(r.ID), res.Delivery, "the result carries the record as it now stands")
	return res
}

// requireBoundedOut requires each of ids to have ended at now as Expired
// with cause queue_bounded.
func (f *ledgerFixture) requireBoundedOut(now time.Time, ids ...ledger.DeliveryID) {
	f.t.Helper()
	for _, id := range ids {
		d := f.requireState(id, ledger.DeliveryStateExpired)
		require.NotNil(f.t, d.Cause, id)
		require.Equal(f.t, ledger.CauseQueueBounded, d.Cause.Kind, id)
		require.Equal(f.t, ledger.Normalize(now), d.EndedAt, id)
	}
}

// queued returns the IDs of target's queue, Offered and Leased, in ID order.
func (f *ledgerFixture) queued(target ledger.Target) []ledger.DeliveryID {
	f.t.Helper()
	return deliveryIDs(f.list(ledger.ListQuery{
		Targets: []ledger.Target{target}, Limit: ledger.MaxLimit,
		States: []ledger.DeliveryState{ledger.DeliveryStateOffered, ledger.DeliveryStateLeased},
	}))
}

func boundAbandonsTheOldestOffered(t *testing.T, f *ledgerFixture) {
	for i, id := range []ledger.DeliveryID{"d-1", "d-2", "d-3"} {
		f.boundEnqueue(req(id, "host-1"), at(time.Duration(i)*time.Second))
	}
	f.boundEnqueue(req("d-4", "host-1"), at(4*time.Second), "d-1")
	f.boundEnqueue(req("d-5", "host-1"), at(5*time.Second), "d-2")
	require.Equal(t, []ledger.DeliveryID{"d-3", "d-4", "d-5"}, f.queued("host-1"))
	require.Equal(t, []ledger.DeliveryID{"d-3", "d-4", "d-5"}, f.leaseIDs(ledger.LeaseFilter{}, ownerA, at(time.Minute), 10))
}

func boundOldestInLeaseOrder(t *testing.T, f *ledgerFixture) {
	// d-late was enqueued first but is offered only later; d-b and d-a
	// are offered at the same instant, so ID order decides.
	late := req("d-late", "host-1")
	late.AvailableAt = at(time.Hour)
	f.boundEnqueue(late, t0)
	f.boundEnqueue(req("d-b", "host-1"), at(time.Second))
	f.boundEnqueue(req("d-a", "host-1"), at(time.Second), "d-a")
	f.boundEnqueue(req("d-c", "host-1"), at(2*time.Second), "d-b")
	require.Equal(t, []ledger.DeliveryID{"d-c", "d-late"}, f.queued("host-1"))
}

func boundLeasedCountButStay(t *testing.T, f *ledgerFixture) {
	f.boundEnqueue(req("d-1", "host-1"), t0)
	f.leaseOne("d-1", ownerA, t0)
	f.boundEnqueue(req("d-2", "host-1"), at(time.Second))
	f.boundEnqueue(req("d-3", "host-1"), at(2*time.Second), "d-2")
	require.Equal(t, ledger.DeliveryStateLeased, f.get("d-1").State, "a leased delivery is never abandoned by the bound")
	require.Equal(t, []ledger.DeliveryID{"d-1", "d-3"}, f.queued("host-1"))
}

func boundAcknowledgedDoNotCount(t *testing.T, f *ledgerFixture) {
	f.acknowledged("d-1", "host-1", ownerA, t0)
	f.boundEnqueue(req("d-2", "host-1"), at(time.Second))
	f.boundEnqueue(req("d-3", "host-1"), at(2*time.Second), "d-2")
	require.Equal(t, ledger.DeliveryStateAcknowledged, f.get("d-1").State)
}

func boundNewDeliveryItself(t *testing.T, f *ledgerFixture) {
	f.boundEnqueue(req("d-1", "host-1"), t0)
	f.leaseOne("d-1", ownerA, t0)
	res := f.boundEnqueue(req("d-2", "host-1"), at(time.Second), "d-2")
	require.Equal(t, ledger.DeliveryStateExpired, res.Delivery.State,
		"the new delivery is the oldest offered one: it ends at once, and its end stays readable")
	require.Equal(t, []ledger.DeliveryID{"d-1"}, f.queued("host-1"))
}

func boundPerTarget(t *testing.T, f *ledgerFixture) {
	for i := range 4 {
		now := at(time.Duration(i) * time.Second)
		var big, small []ledger.DeliveryID
		if i >= 3 {
			big = []ledger.DeliveryID{"big-0"}
		}
		if i >= 1 {
			small = []ledger.DeliveryID{ledger.DeliveryID(fmt.Sprintf("small-%d", i-1))}
		}
		f.boundEnqueue(req(ledger.DeliveryID(fmt.Sprintf("big-%d", i)), "big"), now, big...)
		f.boundEnqueue(req(ledger.DeliveryID(fmt.Sprintf("small-%d", i)), "small"), now, small...)
		f.boundEnqueue(req(ledger.DeliveryID(fmt.Sprintf("free-%d", i)), "free"), now)
	}
	require.Equal(t, []ledger.DeliveryID{"big-1", "big-2", "big-3"}, f.queued("big"))
	require.Equal(t, []ledger.DeliveryID{"small-3"}, f.queued("small"))
	require.Len(t, f.queued("free"), 4)
}

func boundNoneAbandonsNothing(t *testing.T, f *ledgerFixture) {
	for i := range 20 {
		f.boundEnqueue(req(ledger.DeliveryID(fmt.Sprintf("d-%02d", i)), "host-1"), at(time.Duration(i)*time.Second))
	}
	require.Len(t, f.queued("host-1"), 20)
}

func boundRepeatedAbandonsNothing(t *testing.T, f *ledgerFixture) {
	f.boundEnqueue(req("d-1", "host-1"), t0)
	res, err := f.l.Enqueue(f.ctx, req("d-1", "host-1"), at(time.Second))
	require.NoError(t, err)
	require.Equal(t, ledger.OutcomeRepeated, res.Outcome)
	require.Empty(t, res.Abandoned)
	require.Equal(t, ledger.DeliveryStateOffered, f.get("d-1").State)
}

func boundBatch(t *testing.T, f *ledgerFixture) {
	f.boundEnqueue(req("h1-old", "h1"), t0)
	now := at(time.Second)
	res, err := f.batcher().EnqueueBatch(f.ctx, []ledger.EnqueueRequest{
		req("h1-a", "h1"), req("h2-a", "h2"), req("h1-b", "h1"), req("h2-b", "h2"), req("h1-a", "h1"), req("h2-c", "h2"),
	}, now)
	require.NoError(t, err)
	require.Len(t, res, 6)
	want := [][]ledger.DeliveryID{nil, nil, {"h1-old"}, nil, nil, {"h2-a"}}
	for i, r := range res {
		require.Equal(t, want[i], r.Abandoned, "result %d", i)
		require.Equal(t, f.get(r.Delivery.ID), r.Delivery, "result %d carries its record as it now stands", i)
	}
	require.Equal(t, ledger.OutcomeRepeated, res[4].Outcome)
	f.requireBoundedOut(now, "h1-old", "h2-a")
	require.Equal(t, []ledger.DeliveryID{"h1-a", "h1-b"}, f.queued("h1"))
	require.Equal(t, []ledger.DeliveryID{"h2-b", "h2-c"}, f.queued("h2"))
}

func boundRedrive(t *testing.T, f *ledgerFixture) {
	f.redriver()
	f.failedAt("d-1", "host-1", t0)
	f.boundEnqueue(req("d-2", "host-1"), at(time.Second))
	now := at(time.Minute)
	res := f.redrive(ledger.RedriveRequest{ID: "d-1"}, now)
	require.True(t, res.Applied())
	require.Equal(t, []ledger.DeliveryID{"d-2"}, res.Abandoned)
	f.requireBoundedOut(now, "d-2")
	require.Equal(t, []ledger.DeliveryID{"d-1/redrive"}, f.queued("host-1"))
}

func boundRedriveMatching(t *testing.T, f *ledgerFixture) {
	f.redriver()
	f.failedAt("x-1", "host-1", at(time.Second))
	f.failedAt("x-2", "host-1", at(2*time.Second))
	now := at(time.Minute)
	b, err := f.redriver().RedriveMatching(f.ctx, ledger.RedriveQuery{Limit: 10}, now)
	require.NoError(t, err)
	require.Equal(t, []ledger.DeliveryID{"x-1", "x-2"}, redrivenIDs(b.Results))
	require.Equal(t, []ledger.DeliveryID{"x-1/redrive"}, b.Results[1].Abandoned)
	f.requireBoundedOut(now, "x-1/redrive")
	// What the call abandoned ended at its now: neither it nor a later
	// call at that time takes it, so a pass cannot chase its own tail.
	again, err := f.redriver().RedriveMatching(f.ctx, ledger.RedriveQuery{Limit: 10}, now)
	require.NoError(t, err)
	require.Empty(t, again.Results)
	require.Equal(t, []ledger.DeliveryID{"x-2/redrive"}, f.queued("host-1"))
}

func boundHistory(t *testing.T, f *ledgerFixture) {
	f.historian()
	f.boundEnqueue(req("d-1", "host-1"), t0)
	now := at(time.Second)
	f.boundEnqueue(req("d-2", "host-1"), now, "d-1")
	f.requireHistory("d-1", created(t0),
		step(ledger.OpAbandon, offered, expired, nobody, "queue_bounded: "+storekit.QueueBoundedCause(1).Detail, now))
	f.requireHistory("d-2", created(now))
}

// boundConcurrency is the shape of the concurrent rule.
const (
	boundWriters   = 8
	boundPerWriter = 25
)

func boundConcurrentEnqueues(t *testing.T, f *ledgerFixture) {
	const bound = 5
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		problems  []error
		abandoned []ledger.DeliveryID
	)
	for w := range boundWriters {
		wg.Go(func() {
			for i := range boundPerWriter {
				id := ledger.DeliveryID(fmt.Sprintf("w%d-%03d", w, i))
				now := at(time.Duration(i*boundWriters+w) * time.Millisecond)
				res, err := f.l.Enqueue(f.ctx, req(id, "host-1"), now)
				mu.Lock()
				switch {
				case err != nil:
					problems = append(problems, fmt.Errorf("enqueue %s: %w", id, err))
				case res.Outcome != ledger.OutcomeApplied:
					problems = append(problems, fmt.Errorf("enqueue %s: %s", id, res.Outcome))
				default:
					abandoned = append(abandoned, res.Abandoned...)
				}
				mu.Unlock()
				if i%5 == 4 {
					// A lease takes work out of the offered set while others
					// enqueue; the queue still counts it.
					if _, err := f.l.Lease(f.ctx, ledger.LeaseFilter{}, ownerA, now, time.Hour, 1); err != nil {
						mu.Lock()
						problems = append(problems, fmt.Errorf("lease: %w", err))
						mu.Unlock()
					}
				}
			}
		})
	}
	wg.Wait()
	require.Empty(t, problems)
	require.NoError(t, checkQueueBound(f.all(), "host-1", bound, abandoned))
}

// boundRaceRounds and boundRacers size boundConcurrentFromOneBelow. A
// store whose enqueues can both see room (a shared lock where an
// exclusive one is needed) overfills the queue only when they meet at
// its edge; with 12 racers pgstore with a shared lock did so within the
// first ten rounds, in each of three runs.
const (
	boundRaceRounds = 40
	boundRacers     = 12
)

// boundConcurrentFromOneBelow: many rounds, each on a target of its own
// holding one delivery less than its bound, in which enqueues started
// together race for the last place. Exactly one may take it without
// abandoning anything; the queue never ends over its bound.
func boundConcurrentFromOneBelow(t *testing.T, f *ledgerFixture) {
	const bound = 5
	for round := range boundRaceRounds {
		target := ledger.Target(fmt.Sprintf("host-%02d", round))
		for i := range bound - 1 {
			f.enqueue(req(ledger.DeliveryID(fmt.Sprintf("%s-q%d", target, i)), target), t0)
		}
		var (
			abandoned []ledger.DeliveryID
			wg        sync.WaitGroup
			mu        sync.Mutex
			problems  []error
			start     = make(chan struct{})
		)
		for w := range boundRacers {
			wg.Go(func() {
				<-start
				id := ledger.DeliveryID(fmt.Sprintf("%s-r%02d", target, w))
				res, err := f.l.Enqueue(f.ctx, req(id, target), at(time.Duration(w+1)*time.Millisecond))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					problems = append(problems, fmt.Errorf("enqueue %s: %w", id, err))
				case res.Outcome != ledger.OutcomeApplied:
					problems = append(problems, fmt.Errorf("enqueue %s: %s", id, res.Outcome))
				default:
					abandoned = append(abandoned, res.Abandoned...)
				}
			})
		}
		close(start)
		wg.Wait()
		require.Empty(t, problems, "round %d", round)
		require.NoError(t, checkQueueBound(f.all(), target, bound, abandoned), "round %d", round)
	}
}

// checkQueueBound checks the records of a ledger after enqueues for
// target under bound, which answered abandoned in all: the queue holds at
// most bound deliveries; every delivery that ended did so by the bound
// and was reported exactly once; none that was reported is still open.
func checkQueueBound(all []ledger.Delivery, target ledger.Target, bound int, abandoned []ledger.DeliveryID) error {
	reported := map[ledger.DeliveryID]int{}
	for _, id := range abandoned {
		reported[id]++
	}
	queued := 0
	var ended []ledger.DeliveryID
	for _, d := range all {
		if d.Target != target {
			continue
		}
		if storekit.Delivery(d).Queued() {
			queued++
		}
		if d.State.Terminal() {
			if d.State != ledger.DeliveryStateExpired || d.Cause == nil || d.Cause.Kind != ledger.CauseQueueBounded {
				return fmt.Errorf("%s ended as %s, not by the bound", d.ID, d.State)
			}
			ended = append(ended, d.ID)
		}
		if n := reported[d.ID]; n > 1 || (n == 1 && !d.State.Terminal()) {
			return fmt.Errorf("%s was reported abandoned %d times and is %s", d.ID, n, d.State)
		}
	}
	if queued > bound {
		return fmt.Errorf("the queue of %s holds %d deliveries, over its bound of %d", target, queued, bound)
	}
	slices.Sort(ended)
	slices.Sort(abandoned)
	if !slices.Equal(ended, abandoned) {
		return fmt.Errorf("%d deliveries ended by the bound, %d were reported", len(ended), len(abandoned))
	}
	return nil
}

// boundConcurrentBatchesAndRedrives: batches that add to two bounded
// targets, in either order, race redrives by filter that send the
// deliveries the bound abandoned back into the same queues. No queue ends
// over its bound, every delivery the bound ended was reported exactly
// once, and no call fails (a store that took the targets' turns in
// different orders would deadlock here).
func boundConcurrentBatchesAndRedrives(t *testing.T, f *ledgerFixture) {
	const bound = 3
	r, batcher := f.redriver(), f.batcher()
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		problems  []error
		abandoned []ledger.DeliveryID
	)
	report := func(err error, gone []ledger.DeliveryID) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			problems = append(problems, err)
		}
		abandoned = append(abandoned, gone...)
	}
	for w := range boundWriters {
		wg.Go(func() {
			for i := range boundPerWriter {
				now := at(time.Duration(i*boundWriters+w+1) * time.Millisecond)
				a := req(ledger.DeliveryID(fmt.Sprintf("w%d-%03d-a", w, i)), "host-a")
				b := req(ledger.DeliveryID(fmt.Sprintf("w%d-%03d-b", w, i)), "host-b")
				reqs := []ledger.EnqueueRequest{a, b}
				if w%2 == 1 {
					reqs = []ledger.EnqueueRequest{b, a}
				}
				rs, err := batcher.EnqueueBatch(f.ctx, reqs, now)
				var gone []ledger.DeliveryID
				for j, res := range rs {
					if res.Outcome != ledger.OutcomeApplied {
						err = errors.Join(err, fmt.Errorf("enqueue %s: %s", reqs[j].ID, res.Outcome))
					}
					gone = append(gone, res.Abandoned...)
				}
				report(err, gone)
				if i%4 != 3 {
					continue
				}
				rb, err := r.RedriveMatching(f.ctx, ledger.RedriveQuery{States: []ledger.DeliveryState{ledger.DeliveryStateExpired}, Limit: 2}, now)
				gone = nil
				for _, res := range rb.Results {
					if res.Outcome != ledger.OutcomeApplied && res.Outcome != ledger.OutcomeRepeated {
						err = errors.Join(err, fmt.Errorf("redrive %s: %s", res.Original.ID, res.Outcome))
					}
					gone = append(gone, res.Abandoned...)
				}
				report(err, gone)
			}
		})
	}
	wg.Wait()
	require.Empty(t, problems)
	all := f.all()
	targetOf := map[ledger.DeliveryID]ledger.Target{}
	redriven := 0
	for _, d := range all {
		targetOf[d.ID] = d.Target
		if d.RedrivenFrom != "" {
			redriven++
		}
	}
	// Each report goes to its record's target, a repeated one twice.
	byTarget := map[ledger.Target][]ledger.DeliveryID{}
	for _, id := range abandoned {
		target, ok := targetOf[id]
		require.True(t, ok, "%s was reported abandoned and does not exist", id)
		byTarget[target] = append(byTarget[target], id)
	}
	require.Positive(t, redriven, "the redrives sent some abandoned deliveries again")
	for _, target := range []ledger.Target{"host-a", "host-b"} {
		require.NoError(t, checkQueueBound(all, target, bound, byTarget[target]))
	}
}
