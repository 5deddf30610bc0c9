package ledgertest

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// This file holds named races: deterministic checks of what must hold when
// particular calls meet at the same instant. Unlike the randomised
// Concurrency group, each race pits a few known calls against each other,
// round after round, and states exactly which of them may win. Goroutines
// never touch t: each writes its own slot, and the test checks the slots
// after a bounded wait.

// Sizes of the races. They are modest so that a store on a real database
// runs each race in well under a few seconds; the rounds are many enough
// that both sides of each race get to win now and then.
const (
	raceSweepRounds       = 48 // a multiple of the three completions
	raceIncarnWorkers     = 8
	raceIncarnRounds      = 20
	raceIncarnDeliveries  = 30
	raceHolderRounds      = 15 // a multiple of the three sweeps
	raceHoldersPerRound   = 8
	raceIdempotentRounds  = 20
	raceIdempotentCallers = 16
)

// racesT0 is the fixed start of the races' logical time.
var racesT0 = time.Date(2031, time.June, 7, 8, 9, 10, 0, time.UTC)

// testLedgerRaces runs the named races of the delivery ledger.
func testLedgerRaces(t *testing.T, newLedger NewLedgerFunc) {
	runLedgerRules(t, newLedger, []ledgerRule{
		{"SweeperVsCompletionAtTheLastInstant", raceSweepVsLastInstant},
		{"LateCallFromAnEarlierGrantIsLeaseLost", raceLateCall},
		{"TwoIncarnationsLeasingAtOnce", raceIncarnations},
		{"SweepsWhileHoldersAreMidCall", raceSweepsVsHolders},
		{"IdempotentEnqueueFrom16Goroutines", raceIdempotentEnqueue},
	})
}

// raceTogether runs fns concurrently, released at once by a barrier so that
// they really meet, and waits at most raceTimeout for all of them.
func raceTogether(t *testing.T, fns ...func()) {
	t.Helper()
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, fn := range fns {
		wg.Go(func() {
			<-start
			fn()
		})
	}
	close(start)
	waitBounded(t, &wg)
}

// within returns a fixture on the same ledger for the subtest t, so that
// the checks of a subtest fail the subtest and not its parent.
func (f *ledgerFixture) within(t *testing.T) *ledgerFixture {
	return &ledgerFixture{t: t, l: f.l, ctx: t.Context()}
}

// raceLease enqueues r at now and leases it, through a filter on its
// target, to owner for dur; it returns the lease.
func (f *ledgerFixture) raceLease(r ledger.EnqueueRequest, owner ledger.Owner, now time.Time, dur time.Duration) ledger.Lease {
	f.t.Helper()
	f.enqueue(r, now)
	res := f.lease(ledger.LeaseFilter{Targets: []ledger.Target{r.Target}}, owner, now, dur, 1)
	require.Len(f.t, res.Leased, 1, "expected %s to be offerable at %s", r.ID, now)
	require.Equal(f.t, r.ID, res.Leased[0].Delivery.ID)
	return res.Leased[0].Lease
}

// raceSweepVsLastInstant: a completion made at the lease's last instant
// (ExpiresAt-1µs) meets the sweeper running at ExpiresAt. Exactly one of
// them wins: either the completion applied and Expire left the record
// alone, or Expire took the lease back and the completion answered
// LeaseLost (or LeaseExpired); never both.
func raceSweepVsLastInstant(t *testing.T, f *ledgerFixture) {
	l, ctx := f.l, f.ctx
	const dur = 10 * time.Second
	completions := []struct {
		name string
		call func(ledger.Lease, time.Time) (ledger.DeliveryResult, error)
		// after is the state a completion that won leaves behind.
		after ledger.DeliveryState
	}{
		{"Acknowledge", func(ls ledger.Lease, now time.Time) (ledger.DeliveryResult, error) {
			return l.Acknowledge(ctx, ls, "seen", now)
		}, ledger.DeliveryStateAcknowledged},
		{"MarkFailed", func(ls ledger.Lease, now time.Time) (ledger.DeliveryResult, error) {
			return l.MarkFailed(ctx, ls, ledger.FailureReason{Message: "boom"}, now)
		}, ledger.DeliveryStateOffered},
		{"Release", func(ls ledger.Lease, now time.Time) (ledger.DeliveryResult, error) {
			return l.Release(ctx, ls, now)
		}, ledger.DeliveryStateOffered},
	}
	wins := map[string]int{}
	for i := range raceSweepRounds {
		c := completions[i%len(completions)]
		// Each round lives a day after the previous one, so that nothing of
		// an earlier round is due in this round's sweep window by accident.
		now := racesT0.Add(time.Duration(i) * 24 * time.Hour)
		id := ledger.DeliveryID(fmt.Sprintf("sweep-%04d", i))
		target := ledger.Target(fmt.Sprintf("host-%04d", i)) // earlier rounds' work stays offered
		lease := f.raceLease(req(id, target), ownerA, now, dur)

		var done ledger.DeliveryResult
		var sweep ledger.SweepResult
		var doneErr, sweepErr error
		raceTogether(t,
			func() { done, doneErr = c.call(lease, lease.ExpiresAt.Add(-time.Microsecond)) },
			func() { sweep, sweepErr = l.Expire(ctx, lease.ExpiresAt) },
		)
		require.NoError(t, doneErr, "round %d: %s", i, c.name)
		require.NoError(t, sweepErr, "round %d: Expire", i)
		final := f.get(id)
		swept := slices.Contains(sweep.Changed, id)
		if done.Applied() {
			wins[c.name+" won"]++
			require.False(t, swept, "round %d: %s applied and Expire changed the record too", i, c.name)
			require.Equal(t, c.after, final.State, "round %d", i)
		} else {
			wins["sweep won against "+c.name]++
			require.True(t, swept, "round %d: %s did not apply (%s) but Expire did not change the record", i, c.name, done.Outcome)
			require.Contains(t, []ledger.Outcome{ledger.OutcomeLeaseLost, ledger.OutcomeLeaseExpired}, done.Outcome, "round %d", i)
			require.Equal(t, ledger.DeliveryStateOffered, final.State, "round %d", i)
			require.NotNil(t, final.LastFailure, "round %d: the sweep records why the lease ended", i)
			require.Equal(t, ledger.FailureLeaseExpired, final.LastFailure.Kind, "round %d", i)
		}
		if final.State != ledger.DeliveryStateAcknowledged {
			require.Nil(t, final.Lease, "round %d: the lease is over either way", i)
		}
	}
	t.Logf("winners: %v", wins)
}

// raceLateCall: a call from an earlier grant arriving after the record was
// leased again (after expiry, or by the incarnation rule) answers LeaseLost
// and changes nothing, whatever now it carries.
func raceLateCall(t *testing.T, f *ledgerFixture) {
	const dur = 10 * time.Second
	for _, tc := range []struct {
		name string
		// regrant leases the record again through filter, the earlier
		// grant being first.
		regrant func(g *ledgerFixture, filter ledger.LeaseFilter, first ledger.Lease) ledger.Lease
	}{
		{"AfterExpiry", func(g *ledgerFixture, filter ledger.LeaseFilter, first ledger.Lease) ledger.Lease {
			res := g.lease(filter, ownerB, first.ExpiresAt, dur, 1)
			require.Len(g.t, res.Leased, 1)
			return res.Leased[0].Lease
		}},
		{"ByNewIncarnation", func(g *ledgerFixture, filter ledger.LeaseFilter, first ledger.Lease) ledger.Lease {
			res := g.lease(filter, ownerA2, first.GrantedAt.Add(time.Second), dur, 1)
			require.Equal(g.t, []ledger.DeliveryID{first.DeliveryID}, res.Reclaimed)
			require.Len(g.t, res.Leased, 1)
			return res.Leased[0].Lease
		}},
		{"AfterExpirySweep", func(g *ledgerFixture, filter ledger.LeaseFilter, first ledger.Lease) ledger.Lease {
			_, err := g.l.Expire(g.ctx, first.ExpiresAt)
			require.NoError(g.t, err)
			res := g.lease(filter, ownerB, first.ExpiresAt, dur, 1)
			require.Len(g.t, res.Leased, 1)
			return res.Leased[0].Lease
		}},
	} {
		// The subtests share the rule's ledger and so run one after the
		// other; their IDs and targets keep them apart.
		t.Run(tc.name, func(t *testing.T) {
			g := f.within(t)
			l, ctx := g.l, g.ctx
			now := racesT0.Add(365 * 24 * time.Hour)
			id := ledger.DeliveryID("late-" + tc.name)
			target := ledger.Target("host-" + tc.name)
			first := g.raceLease(req(id, target), ownerA, now, dur)
			second := tc.regrant(g, ledger.LeaseFilter{Targets: []ledger.Target{target}}, first)
			require.Equal(t, first.Seq+1, second.Seq)
			before := g.get(id)

			// A slow clock (a now inside the first lease) or a true one:
			// the token and the sequence are the guards, not time.
			for _, at := range []time.Time{first.GrantedAt.Add(time.Second), second.GrantedAt.Add(time.Second)} {
				calls := []struct {
					name string
					call func() (ledger.DeliveryResult, error)
				}{
					{"Acknowledge", func() (ledger.DeliveryResult, error) { return l.Acknowledge(ctx, first, "late", at) }},
					{"MarkFailed", func() (ledger.DeliveryResult, error) {
						return l.MarkFailed(ctx, first, ledger.FailureReason{Message: "late"}, at)
					}},
					{"MarkFailedPermanent", func() (ledger.DeliveryResult, error) {
						return l.MarkFailed(ctx, first, ledger.FailureReason{Message: "late", Permanent: true}, at)
					}},
					{"Release", func() (ledger.DeliveryResult, error) { return l.Release(ctx, first, at) }},
				}
				for _, c := range calls {
					res, err := c.call()
					require.NoError(t, err, c.name)
					assert.Equal(t, ledger.OutcomeLeaseLost, res.Outcome, "%s at %s", c.name, at)
					assert.Equal(t, before, res.Delivery, "%s must answer the record as it stands", c.name)
				}
			}
			g.requireUnchanged(before)
			// The later grant is untouched and still works.
			g.applied(before, second.GrantedAt.Add(time.Second))(l.Acknowledge(ctx, second, "on time", second.GrantedAt.Add(time.Second)))
		})
	}
}

// raceIncarnations: two incarnations of one agent lease from many
// goroutines at once. Nothing expires and nobody completes, so the only
// way a lease ends is the incarnation rule: afterwards every delivery's
// grants form one unbroken sequence (no two owners at once), every grant
// but a delivery's last was reclaimed exactly once, by the other
// incarnation, and the next call by one incarnation takes back everything
// the other still holds.
func raceIncarnations(t *testing.T, f *ledgerFixture) {
	l, ctx := f.l, f.ctx
	policy := testPolicy()
	policy.MaxAttempts = ledger.MaxAttemptsLimit // attempts must not run out during the race
	for i := range raceIncarnDeliveries {
		r := req(ledger.DeliveryID(fmt.Sprintf("inc-%02d", i)), "host-a")
		r.Policy = policy
		f.enqueue(r, racesT0)
	}
	incs := []string{ownerA.Incarnation, ownerA2.Incarnation}
	type call struct {
		owner ledger.Owner
		res   ledger.LeaseResult
		err   error
	}
	logs := make([][]call, raceIncarnWorkers)
	fns := make([]func(), raceIncarnWorkers)
	for w := range raceIncarnWorkers {
		owner := ledger.Owner{Agent: ownerA.Agent, Incarnation: incs[w%2]}
		fns[w] = func() {
			for r := range raceIncarnRounds {
				// Leases last a day and the clock moves by microseconds:
				// nothing expires during the race.
				now := racesT0.Add(time.Duration(r*raceIncarnWorkers+w+1) * time.Microsecond)
				res, err := l.Lease(ctx, ledger.LeaseFilter{}, owner, now, 24*time.Hour, 1+r%3)
				logs[w] = append(logs[w], call{owner, res, err})
				if err != nil {
					return
				}
			}
		}
	}
	raceTogether(t, fns...)

	grants := map[ledger.DeliveryID][]ledger.Lease{}
	reclaimsBy := map[ledger.DeliveryID]map[string]int{} // delivery -> reclaiming incarnation -> count
	for _, log := range logs {
		for _, c := range log {
			require.NoError(t, c.err, "Lease by %s", c.owner)
			for _, ld := range c.res.Leased {
				grants[ld.Lease.DeliveryID] = append(grants[ld.Lease.DeliveryID], ld.Lease)
			}
			for _, id := range c.res.Reclaimed {
				if reclaimsBy[id] == nil {
					reclaimsBy[id] = map[string]int{}
				}
				reclaimsBy[id][c.owner.Incarnation]++
			}
		}
	}
	require.NotEmpty(t, grants)
	holders := map[string]int{}
	total, reclaims := 0, 0
	for i := range raceIncarnDeliveries {
		id := ledger.DeliveryID(fmt.Sprintf("inc-%02d", i))
		d := f.get(id)
		gs := grants[id]
		slices.SortFunc(gs, func(a, b ledger.Lease) int { return cmp.Compare(a.Seq, b.Seq) })
		// No grant twice, none skipped: one holder at a time.
		for k, g := range gs {
			require.Equal(t, int64(k+1), g.Seq, "%s: grants %v", id, gs)
		}
		require.Equal(t, int64(len(gs)), d.LeaseSeq, "%s", id)
		require.Equal(t, len(gs), d.Attempts, "%s: every grant counts, none is given back", id)
		// Every grant that ended was reclaimed, by the other incarnation.
		ended := gs
		if d.State == ledger.DeliveryStateLeased {
			require.NotEmpty(t, gs, "%s is leased but no Lease call granted it", id)
			require.NotNil(t, d.Lease, "%s is leased without a lease", id)
			require.Equal(t, withoutToken(gs[len(gs)-1]), *d.Lease, "%s: the last grant is the one in force", id)
			holders[d.Lease.Owner.Incarnation]++
			ended = gs[:len(gs)-1]
		} else {
			require.Equal(t, ledger.DeliveryStateOffered, d.State, "%s", id)
		}
		wantBy := map[string]int{}
		for _, g := range ended {
			other := incs[0]
			if g.Owner.Incarnation == incs[0] {
				other = incs[1]
			}
			wantBy[other]++
		}
		got := reclaimsBy[id]
		if got == nil {
			got = map[string]int{}
		}
		require.Equal(t, wantBy, got, "%s: reclaims must match the grants that ended", id)
		total += len(gs)
		for _, n := range got {
			reclaims += n
		}
	}
	t.Logf("%d grants, %d reclaims, final holders %v", total, reclaims, holders)
	require.Positive(t, reclaims, "the incarnations must have met")
	require.LessOrEqual(t, len(holders), 1,
		"the incarnation rule holds as if the calls ran one after the other: whichever called last holds every lease")

	// Calls that overlap have no newer incarnation between them, so both
	// may hold leases when the race is over. The next call settles it: it
	// takes back everything the other incarnation still holds, whatever
	// its filter, and then no delivery is held by that incarnation.
	var held []ledger.DeliveryID
	for _, d := range f.all() {
		if d.State == ledger.DeliveryStateLeased && d.Lease != nil && d.Lease.Owner == ownerA {
			held = append(held, d.ID)
		}
	}
	now := racesT0.Add(time.Second)
	res := f.lease(ledger.LeaseFilter{Targets: []ledger.Target{"host-none"}}, ownerA2, now, time.Hour, 1)
	require.ElementsMatch(t, held, res.Reclaimed, "the next call takes back what %s still holds", ownerA)
	require.Empty(t, res.Leased, "the filter matches nothing")
	for _, d := range f.all() {
		if d.Lease != nil {
			require.Equal(t, ownerA2, d.Lease.Owner, "%s is still held by %s after %s leased", d.ID, d.Lease.Owner, ownerA2)
		}
	}
}

// raceSweepsVsHolders: ExpireCeremony or Supersede runs while the holders
// of the swept deliveries are mid-call (acknowledging, processing,
// releasing, failing). A holder's call applies only if it reached the
// record before the sweep did; once the sweep changed a record, its
// holder gets Ended (the record ended) or LeaseLost (Follow revoked the
// lease), never Applied.
func raceSweepsVsHolders(t *testing.T, f *ledgerFixture) {
	l, ctx := f.l, f.ctx
	sweeps := []string{"ExpireCeremony", "SupersedeFollow", "SupersedeLeaveBehind"}
	seen := map[string]int{} // which side won, for the log
	defer func() { t.Logf("holder calls: %v", seen) }()
	for r := range raceHolderRounds {
		sweepName := sweeps[r%len(sweeps)]
		now := racesT0.Add(time.Duration(r) * 24 * time.Hour)
		prev, repl := ledger.Target(fmt.Sprintf("prev-%03d", r)), ledger.Target(fmt.Sprintf("repl-%03d", r))
		cer := ledger.CeremonyID(fmt.Sprintf("cer-%03d", r))
		leases := make([]ledger.Lease, raceHoldersPerRound)
		for i := range leases {
			rq := req(ledger.DeliveryID(fmt.Sprintf("held-%03d-%d", r, i)), prev)
			rq.Ceremony = cer
			owner := ledger.Owner{Agent: fmt.Sprintf("holder-%d", i), Incarnation: "boot-1"}
			leases[i] = f.raceLease(rq, owner, now, time.Minute)
		}
		at := now.Add(time.Second)
		// Each holder makes one or two calls; calls[i] collects them. The
		// sweep's error goes in the last slot of errs.
		calls := make([][]ledger.DeliveryResult, raceHoldersPerRound)
		errs := make([]error, raceHoldersPerRound+1)
		var swept []ledger.DeliveryID
		fns := []func(){func() {
			switch sweepName {
			case "ExpireCeremony":
				res, err := l.ExpireCeremony(ctx, cer, ledger.Cause{Kind: ledger.CauseCeremonyEnded}, at)
				swept, errs[raceHoldersPerRound] = res.Changed, err
			case "SupersedeFollow":
				res, err := l.Supersede(ctx, prev, repl, ledger.Follow, at)
				swept, errs[raceHoldersPerRound] = res.Moved, err
			default:
				res, err := l.Supersede(ctx, prev, repl, ledger.LeaveBehind, at)
				swept, errs[raceHoldersPerRound] = res.Ended, err
			}
		}}
		for i, ls := range leases {
			fns = append(fns, func() {
				var res ledger.DeliveryResult
				var err error
				switch i % 4 {
				case 0, 1:
					res, err = l.Acknowledge(ctx, ls, "seen", at)
					if err == nil && res.Applied() && i%4 == 0 {
						calls[i] = append(calls[i], res)
						res, err = l.MarkProcessed(ctx, ls.DeliveryID, ls.Owner, nil, "done", at)
					}
				case 2:
					res, err = l.Release(ctx, ls, at)
				default:
					res, err = l.MarkFailed(ctx, ls, ledger.FailureReason{Message: "boom"}, at)
				}
				calls[i], errs[i] = append(calls[i], res), err
			})
		}
		raceTogether(t, fns...)
		for i, err := range errs {
			require.NoError(t, err, "round %d %s: call %d", r, sweepName, i)
		}

		// The outcome a holder gets once the sweep changed its record.
		lost := ledger.OutcomeEnded
		if sweepName == "SupersedeFollow" {
			lost = ledger.OutcomeLeaseLost
		}
		for i, ls := range leases {
			id := ls.DeliveryID
			final := f.get(id)
			changed := slices.Contains(swept, id)
			for _, res := range calls[i] {
				seen[sweepName+" "+string(res.Outcome)]++
				if res.Applied() {
					// It reached the record first: the record it saw was
					// still the holder's, and the sweep wrote after it.
					assert.Equal(t, prev, res.Delivery.Target, "round %d %s: %s applied after the sweep", r, sweepName, id)
					if changed {
						assert.Less(t, res.Delivery.Version, final.Version, "round %d %s: %s applied after the sweep", r, sweepName, id)
					}
					continue
				}
				assert.True(t, changed, "round %d %s: %s did not apply (%s) though the sweep left it alone", r, sweepName, id, res.Outcome)
				assert.Equal(t, lost, res.Outcome, "round %d %s: %s", r, sweepName, id)
			}
			if !changed {
				// Only acknowledged or processed work escapes the sweep.
				want := []ledger.DeliveryState{ledger.DeliveryStateAcknowledged, ledger.DeliveryStateProcessed}
				if sweepName == "ExpireCeremony" {
					want = want[1:]
				}
				assert.Contains(t, want, final.State, "round %d %s: %s", r, sweepName, id)
				continue
			}
			// Afterwards the holder's lease is dead.
			res, err := l.Acknowledge(ctx, ls, "too late", at.Add(time.Microsecond))
			require.NoError(t, err)
			assert.Equal(t, lost, res.Outcome, "round %d %s: %s", r, sweepName, id)
		}
		if t.Failed() {
			return
		}
	}
}

// raceIdempotentEnqueue: one ID enqueued by 16 goroutines at once is
// written once: exactly one Applied, 15 Repeated, one record that every
// caller sees.
func raceIdempotentEnqueue(t *testing.T, f *ledgerFixture) {
	l, ctx := f.l, f.ctx
	for r := range raceIdempotentRounds {
		rq := req(ledger.DeliveryID(fmt.Sprintf("idem-%03d", r)), "host-a")
		results := make([]ledger.DeliveryResult, raceIdempotentCallers)
		errs := make([]error, raceIdempotentCallers)
		fns := make([]func(), raceIdempotentCallers)
		for c := range raceIdempotentCallers {
			// Different callers' clocks: the record keeps the winner's.
			fns[c] = func() { results[c], errs[c] = l.Enqueue(ctx, rq, racesT0.Add(time.Duration(c)*time.Microsecond)) }
		}
		raceTogether(t, fns...)
		counts := map[ledger.Outcome]int{}
		for c := range raceIdempotentCallers {
			require.NoError(t, errs[c], "round %d: caller %d", r, c)
			counts[results[c].Outcome]++
		}
		require.Equal(t, map[ledger.Outcome]int{ledger.OutcomeApplied: 1, ledger.OutcomeRepeated: raceIdempotentCallers - 1}, counts, "round %d", r)
		stored := f.get(rq.ID)
		require.Equal(t, int64(1), stored.Version, "round %d: written once", r)
		for c := range raceIdempotentCallers {
			require.Equal(t, stored, results[c].Delivery, "round %d: caller %d must see the one record", r, c)
		}
	}
	require.Len(t, f.all(), raceIdempotentRounds, "one record per ID")
}
