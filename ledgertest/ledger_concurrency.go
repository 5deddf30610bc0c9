package ledgertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// testConcurrency races many owners over one ledger and checks the
// invariants of ledger_invariants.go on the log of every grant.
func testConcurrency(t *testing.T, newLedger NewLedgerFunc) {
	runLedgerRules(t, newLedger, []ledgerRule{
		{"WorkersRace", concurrencyWorkersRace},
		{"TwoIncarnationsRace", concurrencyTwoIncarnationsRace},
	})
}

// raceTimeout bounds every wait of a race; the suite is far faster.
const raceTimeout = time.Minute

// raceRun is the shared state of one race: a logical clock, the grant log
// and the problems the goroutines found. Goroutines never fail the test;
// the test reports the problems after every goroutine has returned.
type raceRun struct {
	l ledger.Ledger
	// clock counts microseconds after t0. Each call takes a fresh now from
	// it, so time moves on as the race goes and never reads the wall clock.
	clock atomic.Int64

	mu       sync.Mutex
	grants   []Grant
	problems []error
	// reclaimed counts, per delivery, how often a Lease call reported it in
	// LeaseResult.Reclaimed.
	reclaimed map[ledger.DeliveryID]int
	// outcomes counts the answers of the holders' calls, for the log.
	outcomes map[string]int
}

func newRaceRun(l ledger.Ledger) *raceRun {
	return &raceRun{l: l, reclaimed: map[ledger.DeliveryID]int{}, outcomes: map[string]int{}}
}

// now returns a fresh logical time, step microseconds after the last.
func (r *raceRun) now(step int) time.Time {
	return t0.Add(time.Duration(r.clock.Add(int64(step))) * time.Microsecond)
}

func (r *raceRun) problem(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.problems = append(r.problems, fmt.Errorf(format, args...))
}

func (r *raceRun) log(gs ...Grant) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.grants = append(r.grants, gs...)
}

// lease calls Lease and records what it reclaimed; it returns a Grant per
// delivery leased.
func (r *raceRun) lease(ctx context.Context, owner ledger.Owner, now time.Time, d time.Duration, limit int) ([]Grant, bool) {
	res, err := r.l.Lease(ctx, ledger.LeaseFilter{}, owner, now, d, limit)
	if err != nil {
		r.problem("Lease by %s at %s: %w", owner, now, err)
		return nil, false
	}
	gs := make([]Grant, 0, len(res.Leased))
	for _, ld := range res.Leased {
		if ld.Lease.Owner != owner || ld.Lease.DeliveryID != ld.Delivery.ID || ld.Delivery.State != ledger.DeliveryStateLeased {
			r.problem("Lease by %s returned %+v for %s in state %s", owner, ld.Lease, ld.Delivery.ID, ld.Delivery.State)
		}
		gs = append(gs, Grant{Lease: ld.Lease})
	}
	if len(res.Reclaimed) > 0 {
		r.mu.Lock()
		for _, id := range res.Reclaimed {
			r.reclaimed[id]++
		}
		r.mu.Unlock()
	}
	return gs, true
}

// expect records a problem unless the call succeeded with one of the
// outcomes allowed.
func (r *raceRun) expect(what string, g *Grant, res ledger.DeliveryResult, err error, allowed ...ledger.Outcome) bool {
	if err != nil {
		r.problem("%s of %s seq %d: %w", what, g.Lease.DeliveryID, g.Lease.Seq, err)
		return false
	}
	r.mu.Lock()
	r.outcomes[what+"/"+string(res.Outcome)]++
	r.mu.Unlock()
	for _, o := range allowed {
		if res.Outcome == o {
			return res.Applied()
		}
	}
	r.problem("%s of %s seq %d by %s: unexpected outcome %s", what, g.Lease.DeliveryID, g.Lease.Seq, g.Lease.Owner, res.Outcome)
	return false
}

// work is one grant's fate, chosen at random: acknowledge and process it,
// fail it (for now or for good), release it, only acknowledge it, or let
// its lease run out. A lease may run out or be taken over at any point,
// so LeaseExpired, LeaseLost and Ended are expected answers; nothing else
// is.
func (r *raceRun) work(ctx context.Context, g *Grant, rng *rand.Rand) {
	id, owner := g.Lease.DeliveryID, g.Lease.Owner
	gone := []ledger.Outcome{ledger.OutcomeApplied, ledger.OutcomeLeaseLost, ledger.OutcomeEnded}
	switch p := rng.IntN(100); {
	case p < 70:
		now := r.now(1 + rng.IntN(3))
		res, err := r.l.Acknowledge(ctx, g.Lease, "seen", now)
		if !r.expect("Acknowledge", g, res, err, append(gone, ledger.OutcomeLeaseExpired)...) {
			return
		}
		g.Acknowledged = true
		if p >= 60 {
			return // acknowledged and never processed: the sweep lapses it
		}
		now = r.now(1 + rng.IntN(3))
		// Nobody else can touch an acknowledged delivery during the race,
		// and its deadline is hours away: processing must apply.
		res, err = r.l.MarkProcessed(ctx, id, owner, nil, "done", now)
		if r.expect("MarkProcessed", g, res, err, ledger.OutcomeApplied) {
			g.Processed, g.EndedAt = true, now
		}
	case p < 82:
		now := r.now(1 + rng.IntN(3))
		res, err := r.l.MarkFailed(ctx, g.Lease, ledger.FailureReason{Message: "race", Permanent: p >= 79}, now)
		if r.expect("MarkFailed", g, res, err, gone...) {
			g.EndedAt = now
		}
	case p < 94:
		now := r.now(1 + rng.IntN(3))
		res, err := r.l.Release(ctx, g.Lease, now)
		if r.expect("Release", g, res, err, gone...) {
			g.EndedAt, g.AttemptReturned = now, true
		}
	default:
		// Let the lease run out.
	}
}

// racePolicy lets leases, backoffs and attempts run out during a race,
// but keeps acknowledgements open until the race is over.
func racePolicy() ledger.Policy {
	return ledger.Policy{MaxAttempts: 4, BackoffBase: 100 * time.Microsecond, BackoffMax: time.Millisecond, AckWindow: time.Hour}
}

// enqueueMany enqueues n deliveries with policy in one batch.
func (f *ledgerFixture) enqueueMany(prefix string, n int, policy ledger.Policy) {
	f.t.Helper()
	reqs := make([]ledger.EnqueueRequest, 0, n)
	for _, id := range manyIDs(prefix, n) {
		r := req(id, ledger.Target(fmt.Sprintf("host-%d", len(reqs)%5)))
		r.Policy = policy
		reqs = append(reqs, r)
	}
	results, err := f.batcher().EnqueueBatch(f.ctx, reqs, t0)
	require.NoError(f.t, err)
	for _, res := range results {
		require.Equal(f.t, ledger.OutcomeApplied, res.Outcome)
	}
}

// waitBounded waits for wg, failing the test if that takes longer than
// raceTimeout; the goroutines also stop when ctx ends.
func waitBounded(t *testing.T, wg *sync.WaitGroup) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(raceTimeout):
		t.Fatalf("goroutines still running after %s", raceTimeout)
	}
}

func (r *raceRun) requireNoProblems(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, p := range r.problems {
		if i == maxViolations {
			t.Errorf("and %d more problems", len(r.problems)-i)
			break
		}
		t.Error(p)
	}
	if len(r.problems) > 0 {
		t.FailNow()
	}
}

func concurrencyWorkersRace(t *testing.T, f *ledgerFixture) {
	const deliveries, workers, rounds = 1000, 16, 200
	f.enqueueMany("race", deliveries, racePolicy())
	ctx, cancel := context.WithTimeout(f.ctx, raceTimeout)
	defer cancel()
	r := newRaceRun(f.l)

	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 0x1ed9e7))
			owner := ledger.Owner{Agent: fmt.Sprintf("worker-%02d", w), Incarnation: "boot-1"}
			idle := 0
			for round := 0; round < rounds && idle < 20 && ctx.Err() == nil; round++ {
				if w == 0 && round%4 == 3 {
					if _, err := f.l.Expire(ctx, r.now(1)); err != nil {
						r.problem("Expire: %w", err)
						return
					}
				}
				d := time.Duration(20+rng.IntN(400)) * time.Microsecond
				gs, ok := r.lease(ctx, owner, r.now(1+rng.IntN(3)), d, 1+rng.IntN(8))
				if !ok {
					return
				}
				if len(gs) == 0 {
					idle++
					continue
				}
				idle = 0
				for i := range gs {
					r.work(ctx, &gs[i], rng)
				}
				r.log(gs...)
			}
		})
	}
	waitBounded(t, &wg)
	r.requireNoProblems(t)

	// Drive time past every lease, backoff and acknowledgement deadline,
	// sweep until nothing changes, then finish whatever is still open.
	finisher := ledger.Owner{Agent: "finisher", Incarnation: "boot-1"}
	for round := range 10 {
		now := r.now(int((3*time.Hour + time.Duration(round)*time.Hour) / time.Microsecond))
		for sweep := 0; ; sweep++ {
			require.Less(t, sweep, 10, "Expire keeps changing records")
			res, err := f.l.Expire(ctx, now)
			require.NoError(t, err)
			if len(res.Changed) == 0 {
				break
			}
		}
		gs, ok := r.lease(ctx, finisher, now, time.Minute, ledger.MaxLimit)
		r.requireNoProblems(t)
		require.True(t, ok)
		if len(gs) == 0 {
			break
		}
		for i := range gs {
			g := &gs[i]
			f.applied(f.get(g.Lease.DeliveryID), now)(f.l.Acknowledge(ctx, g.Lease, "finally", now))
			f.applied(f.get(g.Lease.DeliveryID), now)(f.l.MarkProcessed(ctx, g.Lease.DeliveryID, finisher, nil, "done", now))
			g.Acknowledged, g.Processed, g.EndedAt = true, true, now
		}
		r.log(gs...)
	}

	all := f.all()
	require.Len(t, all, deliveries)
	require.NoError(t, CheckAllTerminal(all))
	require.NoError(t, CheckRecords(all))
	require.NoError(t, CheckNoOverlappingLeases(r.grants))
	require.NoError(t, CheckLeaseSeq(all, r.grants))
	require.NoError(t, CheckAttempts(all, r.grants))
	require.NoError(t, CheckProcessedByAcknowledger(all, r.grants))
	require.Greater(t, len(r.grants), deliveries, "the race should have re-leased some deliveries")
	states := map[ledger.DeliveryState]int{}
	for _, d := range all {
		states[d.State]++
	}
	t.Logf("%d grants; outcomes %v; final states %v", len(r.grants), r.outcomes, states)
}

// concurrencyTwoIncarnationsRace races two incarnations of one agent,
// each taking the other's leases back, against agents that lease too.
// Leases last an hour, so a grant ends only when the incarnation rule takes
// it back: every grant but the last of a delivery must have been held by
// the shared agent and reported as reclaimed.
func concurrencyTwoIncarnationsRace(t *testing.T, f *ledgerFixture) {
	const deliveries, rounds = 300, 40
	policy := racePolicy()
	policy.MaxAttempts = ledger.MaxAttemptsLimit
	f.enqueueMany("inc", deliveries, policy)
	ctx, cancel := context.WithTimeout(f.ctx, raceTimeout)
	defer cancel()
	r := newRaceRun(f.l)

	x1 := ledger.Owner{Agent: "agent-x", Incarnation: "boot-1"}
	x2 := ledger.Owner{Agent: "agent-x", Incarnation: "boot-2"}
	owners := []ledger.Owner{x1, x2, x1, x2}
	for i := range 4 {
		owners = append(owners, ledger.Owner{Agent: fmt.Sprintf("agent-%d", i), Incarnation: "boot-1"})
	}
	var wg sync.WaitGroup
	for w, owner := range owners {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 0x2a11))
			for round := 0; round < rounds && ctx.Err() == nil; round++ {
				gs, ok := r.lease(ctx, owner, r.now(1+rng.IntN(3)), time.Hour, 1+rng.IntN(3))
				if !ok {
					return
				}
				r.log(gs...)
			}
		})
	}
	waitBounded(t, &wg)
	r.requireNoProblems(t)

	// One last call by boot-2 takes back everything boot-1 still holds.
	now := r.now(1)
	gs, ok := r.lease(ctx, x2, now, time.Hour, 1)
	r.requireNoProblems(t)
	require.True(t, ok)
	r.log(gs...)

	all := f.all()
	require.Len(t, all, deliveries)
	require.NoError(t, CheckRecords(all))
	require.NoError(t, CheckLeaseSeq(all, r.grants))
	require.NoError(t, CheckAttempts(all, r.grants))

	by := grantsByDelivery(r.grants)
	for _, d := range all {
		gs := by[d.ID]
		ended := len(gs) // grants of d that were taken back
		if d.State == ledger.DeliveryStateLeased {
			ended--
			last := gs[len(gs)-1].Lease
			require.True(t, sameLease(last, *d.Lease), "delivery %s must be held by its last grant", d.ID)
			require.NotEqual(t, x1, d.Lease.Owner, "delivery %s still held by the older incarnation", d.ID)
		} else {
			require.Equal(t, ledger.DeliveryStateOffered, d.State, d.ID)
		}
		for _, g := range gs[:max(ended, 0)] {
			require.Equal(t, "agent-x", g.Lease.Owner.Agent,
				"delivery %s: seq %d of %s was granted again within its hour", d.ID, g.Lease.Seq, g.Lease.Owner)
		}
		require.Equal(t, max(ended, 0), r.reclaimed[d.ID], "delivery %s: grants taken back vs reported as reclaimed", d.ID)

		// Every grant but the one in force is dead: no delivery is held
		// by two owners.
		for _, g := range gs {
			if d.Lease != nil && sameLease(g.Lease, *d.Lease) {
				continue
			}
			f.notApplied(d, ledger.OutcomeLeaseLost)(f.l.Acknowledge(f.ctx, g.Lease, "stale", now))
		}
	}
}

// sameLease reports whether a and b are the same grant.
func sameLease(a, b ledger.Lease) bool {
	// A record read back shows its lease without the token; the sequence
	// number names the grant.
	return a.DeliveryID == b.DeliveryID && a.Seq == b.Seq && a.Owner == b.Owner
}
