package memstore_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/memstore"
)

// This file holds named races: deterministic tests of what must hold when
// particular calls meet at the same instant. Each race is a function of a
// ledger.Ledger (or ledger.ClaimStore) and takes a fresh, empty store, so
// that it can be lifted into ledgertest and run on pgstore as is. Goroutines
// never touch t: each writes its own slot, and the test checks the slots
// after a bounded wait.

var raceT0 = time.Date(2031, time.June, 7, 8, 9, 10, 0, time.UTC)

// raceWait bounds every wait for the goroutines of one round.
const raceWait = 30 * time.Second

// together runs fns concurrently, released at once by a barrier so that
// they really meet, and waits at most raceWait for all of them.
func together(t *testing.T, fns ...func()) {
	t.Helper()
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, fn := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			fn()
		}()
	}
	close(start)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(raceWait):
		t.Fatalf("goroutines did not finish within %s", raceWait)
	}
}

// leaseOne enqueues id and leases it to owner at now for dur.
func leaseOne(t *testing.T, l ledger.Ledger, req ledger.EnqueueRequest, owner ledger.Owner, now time.Time, dur time.Duration) ledger.Lease {
	t.Helper()
	ctx := context.Background()
	res, err := l.Enqueue(ctx, req, now)
	require.NoError(t, err)
	require.Equal(t, ledger.OutcomeApplied, res.Outcome)
	got, err := l.Lease(ctx, ledger.LeaseFilter{Targets: []ledger.Target{req.Target}}, owner, now, dur, 1)
	require.NoError(t, err)
	require.Len(t, got.Leased, 1)
	require.Equal(t, req.ID, got.Leased[0].Delivery.ID)
	return got.Leased[0].Lease
}

// raceSweepVsLastInstant: a completion made at the lease's last instant
// (ExpiresAt-1µs) meets the sweeper running at ExpiresAt. Exactly one of
// them wins: either the completion applied and Expire left the record
// alone, or Expire took the lease back and the completion answered
// LeaseLost (or LeaseExpired); never both.
func raceSweepVsLastInstant(t *testing.T, l ledger.Ledger, rounds int) {
	ctx := context.Background()
	owner := ledger.Owner{Agent: "agent-a", Incarnation: "boot-1"}
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
	for i := range rounds {
		c := completions[i%len(completions)]
		// Each round lives a day after the previous one, so that nothing of
		// an earlier round is due in this round's sweep window by accident.
		now := raceT0.Add(time.Duration(i) * 24 * time.Hour)
		id := ledger.DeliveryID(fmt.Sprintf("sweep-%04d", i))
		target := ledger.Target(fmt.Sprintf("host-%04d", i)) // earlier rounds' work stays offered
		lease := leaseOne(t, l, ledger.EnqueueRequest{ID: id, Target: target}, owner, now, dur)

		var done ledger.DeliveryResult
		var sweep ledger.SweepResult
		var doneErr, sweepErr error
		together(t,
			func() { done, doneErr = c.call(lease, lease.ExpiresAt.Add(-time.Microsecond)) },
			func() { sweep, sweepErr = l.Expire(ctx, lease.ExpiresAt) },
		)
		require.NoError(t, doneErr)
		require.NoError(t, sweepErr)
		final, err := l.Get(ctx, id)
		require.NoError(t, err)
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
			require.NotNil(t, final.LastFailure)
			require.Equal(t, ledger.FailureLeaseExpired, final.LastFailure.Kind, "round %d", i)
		}
		if final.State != ledger.DeliveryStateAcknowledged {
			require.Nil(t, final.Lease, "round %d: the lease is over either way", i)
		}
	}
	t.Logf("winners: %v", wins)
}

// raceLateCompletion: a call from an earlier grant arriving after the
// record was leased again (after expiry, or by the incarnation rule)
// answers LeaseLost and changes nothing, whatever now it carries.
func raceLateCompletion(t *testing.T, l ledger.Ledger) {
	ctx := context.Background()
	a1 := ledger.Owner{Agent: "agent-a", Incarnation: "boot-1"}
	a2 := ledger.Owner{Agent: "agent-a", Incarnation: "boot-2"}
	b := ledger.Owner{Agent: "agent-b", Incarnation: "boot-1"}
	const dur = 10 * time.Second
	for _, tc := range []struct {
		name string
		// regrant leases the record again through f, the earlier grant
		// being first.
		regrant func(f ledger.LeaseFilter, first ledger.Lease) ledger.Lease
	}{
		{"AfterExpiry", func(f ledger.LeaseFilter, first ledger.Lease) ledger.Lease {
			res, err := l.Lease(ctx, f, b, first.ExpiresAt, dur, 1)
			require.NoError(t, err)
			require.Len(t, res.Leased, 1)
			return res.Leased[0].Lease
		}},
		{"ByNewIncarnation", func(f ledger.LeaseFilter, first ledger.Lease) ledger.Lease {
			res, err := l.Lease(ctx, f, a2, first.GrantedAt.Add(time.Second), dur, 1)
			require.NoError(t, err)
			require.Equal(t, []ledger.DeliveryID{first.DeliveryID}, res.Reclaimed)
			require.Len(t, res.Leased, 1)
			return res.Leased[0].Lease
		}},
		{"AfterExpirySweep", func(f ledger.LeaseFilter, first ledger.Lease) ledger.Lease {
			_, err := l.Expire(ctx, first.ExpiresAt)
			require.NoError(t, err)
			res, err := l.Lease(ctx, f, b, first.ExpiresAt, dur, 1)
			require.NoError(t, err)
			require.Len(t, res.Leased, 1)
			return res.Leased[0].Lease
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := raceT0.Add(time.Hour * 24 * 365)
			id := ledger.DeliveryID("late-" + tc.name)
			target := ledger.Target("host-" + tc.name)
			first := leaseOne(t, l, ledger.EnqueueRequest{ID: id, Target: target}, a1, now, dur)
			second := tc.regrant(ledger.LeaseFilter{Targets: []ledger.Target{target}}, first)
			require.Equal(t, first.Seq+1, second.Seq)
			before, err := l.Get(ctx, id)
			require.NoError(t, err)

			// A slow clock (a now inside the first lease) or a true one:
			// the token and the sequence are the guards, not time.
			for _, at := range []time.Time{first.GrantedAt.Add(time.Second), second.GrantedAt.Add(time.Second)} {
				calls := map[string]func() (ledger.DeliveryResult, error){
					"Acknowledge": func() (ledger.DeliveryResult, error) { return l.Acknowledge(ctx, first, "late", at) },
					"MarkFailed": func() (ledger.DeliveryResult, error) {
						return l.MarkFailed(ctx, first, ledger.FailureReason{Message: "late"}, at)
					},
					"MarkFailedPermanent": func() (ledger.DeliveryResult, error) {
						return l.MarkFailed(ctx, first, ledger.FailureReason{Message: "late", Permanent: true}, at)
					},
					"Release": func() (ledger.DeliveryResult, error) { return l.Release(ctx, first, at) },
				}
				for name, call := range calls {
					res, err := call()
					require.NoError(t, err, name)
					assert.Equal(t, ledger.OutcomeLeaseLost, res.Outcome, "%s at %s", name, at)
					assert.Equal(t, before, res.Delivery, "%s must answer the record as it stands", name)
				}
			}
			after, err := l.Get(ctx, id)
			require.NoError(t, err)
			require.Equal(t, before, after, "late calls must change nothing")
			// The later grant is untouched and still works.
			res, err := l.Acknowledge(ctx, second, "on time", second.GrantedAt.Add(time.Second))
			require.NoError(t, err)
			require.Equal(t, ledger.OutcomeApplied, res.Outcome)
		})
	}
}

// raceIncarnations: two incarnations of one agent lease from many
// goroutines at once. Nothing expires and nobody completes, so the only
// way a lease ends is the incarnation rule: afterwards every delivery's
// grants form one unbroken sequence (no two owners at once), every grant
// but a delivery's last was reclaimed exactly once, by the other
// incarnation, and whichever incarnation called last holds every lease.
func raceIncarnations(t *testing.T, l ledger.Ledger, workers, rounds int) {
	ctx := context.Background()
	const deliveries = 30
	for i := range deliveries {
		// Attempts must not run out during the race.
		req := ledger.EnqueueRequest{ID: ledger.DeliveryID(fmt.Sprintf("inc-%02d", i)), Target: "host-a", Policy: ledger.Policy{MaxAttempts: ledger.MaxAttemptsLimit}}
		_, err := l.Enqueue(ctx, req, raceT0)
		require.NoError(t, err)
	}
	incs := []string{"boot-1", "boot-2"}
	type call struct {
		owner ledger.Owner
		res   ledger.LeaseResult
		err   error
	}
	logs := make([][]call, workers)
	fns := make([]func(), workers)
	for w := range workers {
		owner := ledger.Owner{Agent: "agent-a", Incarnation: incs[w%2]}
		fns[w] = func() {
			for r := range rounds {
				// Leases last a day and the clock moves by microseconds:
				// nothing expires during the race.
				now := raceT0.Add(time.Duration(r*workers+w+1) * time.Microsecond)
				res, err := l.Lease(ctx, ledger.LeaseFilter{}, owner, now, 24*time.Hour, 1+r%3)
				logs[w] = append(logs[w], call{owner, res, err})
			}
		}
	}
	together(t, fns...)

	grants := map[ledger.DeliveryID][]ledger.Lease{}
	reclaimsBy := map[ledger.DeliveryID]map[string]int{} // delivery -> reclaiming incarnation -> count
	for _, log := range logs {
		for _, c := range log {
			require.NoError(t, c.err)
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
	for i := range deliveries {
		id := ledger.DeliveryID(fmt.Sprintf("inc-%02d", i))
		d, err := l.Get(ctx, id)
		require.NoError(t, err)
		gs := grants[id]
		slices.SortFunc(gs, func(a, b ledger.Lease) int { return int(a.Seq - b.Seq) })
		// No grant twice, none skipped: one holder at a time.
		for k, g := range gs {
			require.Equal(t, int64(k+1), g.Seq, "%s: grants %v", id, gs)
		}
		require.Equal(t, int64(len(gs)), d.LeaseSeq, "%s", id)
		require.Equal(t, len(gs), d.Attempts, "%s: every grant counts, none is given back", id)
		// Every grant that ended was reclaimed, by the other incarnation.
		ended := gs
		if d.State == ledger.DeliveryStateLeased {
			require.NotEmpty(t, gs, "%s", id)
			require.Equal(t, gs[len(gs)-1], *d.Lease, "%s: the last grant is the one in force", id)
			holders[d.Lease.Owner.Incarnation]++
			ended = gs[:len(gs)-1]
		} else {
			require.Contains(t, []ledger.DeliveryState{ledger.DeliveryStateOffered, ledger.DeliveryStateFailed}, d.State, "%s", id)
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
	}
	require.LessOrEqual(t, len(holders), 1, "after the race one incarnation holds every lease: %v", holders)
	total, reclaims := 0, 0
	for id, gs := range grants {
		total += len(gs)
		for _, n := range reclaimsBy[id] {
			reclaims += n
		}
	}
	t.Logf("%d grants, %d reclaims, final holders %v", total, reclaims, holders)
	require.Positive(t, reclaims, "the incarnations must have met")
}

// raceSweepsVsHolders: ExpireCeremony or Supersede runs while the holders
// of the swept deliveries are mid-call (acknowledging, processing,
// releasing, failing). A holder's call applies only if it reached the
// record before the sweep did; once the sweep changed a record, its
// holder gets Ended (the record ended) or LeaseLost (Follow revoked the
// lease), never Applied.
func raceSweepsVsHolders(t *testing.T, l ledger.Ledger, rounds int) {
	ctx := context.Background()
	const perRound = 8
	sweeps := []string{"ExpireCeremony", "SupersedeFollow", "SupersedeLeaveBehind"}
	seen := map[string]int{} // which side won, for the log
	defer func() { t.Logf("holder calls: %v", seen) }()
	for r := range rounds {
		sweepName := sweeps[r%len(sweeps)]
		now := raceT0.Add(time.Duration(r) * 24 * time.Hour)
		prev, repl := ledger.Target(fmt.Sprintf("prev-%03d", r)), ledger.Target(fmt.Sprintf("repl-%03d", r))
		cer := ledger.CeremonyID(fmt.Sprintf("cer-%03d", r))
		leases := make([]ledger.Lease, perRound)
		for i := range leases {
			req := ledger.EnqueueRequest{ID: ledger.DeliveryID(fmt.Sprintf("held-%03d-%d", r, i)), Target: prev, Ceremony: cer}
			owner := ledger.Owner{Agent: fmt.Sprintf("holder-%d", i), Incarnation: "boot-1"}
			leases[i] = leaseOne(t, l, req, owner, now, time.Minute)
		}
		at := now.Add(time.Second)
		// Each holder makes one or two calls; calls[i] collects them.
		calls := make([][]ledger.DeliveryResult, perRound)
		errs := make([]error, perRound+1)
		var swept []ledger.DeliveryID
		fns := []func(){func() {
			switch sweepName {
			case "ExpireCeremony":
				res, err := l.ExpireCeremony(ctx, cer, ledger.Cause{Kind: ledger.CauseCeremonyEnded}, at)
				swept, errs[perRound] = res.Changed, err
			case "SupersedeFollow":
				res, err := l.Supersede(ctx, prev, repl, ledger.Follow, at)
				swept, errs[perRound] = res.Moved, err
			default:
				res, err := l.Supersede(ctx, prev, repl, ledger.LeaveBehind, at)
				swept, errs[perRound] = res.Ended, err
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
		together(t, fns...)
		for _, err := range errs {
			require.NoError(t, err)
		}

		// The outcome a holder gets once the sweep changed its record.
		lost := ledger.OutcomeEnded
		if sweepName == "SupersedeFollow" {
			lost = ledger.OutcomeLeaseLost
		}
		for i, ls := range leases {
			id := ls.DeliveryID
			final, err := l.Get(ctx, id)
			require.NoError(t, err)
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
// written once: exactly one Applied, 15 Repeated, one record.
func raceIdempotentEnqueue(t *testing.T, l ledger.Ledger, rounds int) {
	ctx := context.Background()
	const callers = 16
	for r := range rounds {
		req := ledger.EnqueueRequest{ID: ledger.DeliveryID(fmt.Sprintf("idem-%03d", r)), Target: "host-a", Payload: []byte("same")}
		results := make([]ledger.DeliveryResult, callers)
		errs := make([]error, callers)
		fns := make([]func(), callers)
		for c := range callers {
			// Different callers' clocks: the record keeps the winner's.
			fns[c] = func() { results[c], errs[c] = l.Enqueue(ctx, req, raceT0.Add(time.Duration(c)*time.Microsecond)) }
		}
		together(t, fns...)
		counts := map[ledger.Outcome]int{}
		for c := range callers {
			require.NoError(t, errs[c])
			counts[results[c].Outcome]++
		}
		require.Equal(t, map[ledger.Outcome]int{ledger.OutcomeApplied: 1, ledger.OutcomeRepeated: callers - 1}, counts, "round %d", r)
		stored, err := l.Get(ctx, req.ID)
		require.NoError(t, err)
		require.Equal(t, int64(1), stored.Version, "round %d: written once", r)
		for c := range callers {
			require.Equal(t, stored, results[c].Delivery, "round %d: every caller sees the one record", r)
		}
	}
}

// raceIdempotentOutboxEnqueue is raceIdempotentEnqueue for outbox entries.
func raceIdempotentOutboxEnqueue(t *testing.T, o ledger.ClaimStore, rounds int) {
	ctx := context.Background()
	const callers = 16
	for r := range rounds {
		env := ledger.Envelope{Provider: "mail", Kind: "welcome", Payload: []byte("same"), IdempotencyKey: fmt.Sprintf("idem-%03d", r)}
		results := make([]ledger.OutboxResult, callers)
		errs := make([]error, callers)
		fns := make([]func(), callers)
		for c := range callers {
			fns[c] = func() { results[c], errs[c] = o.Enqueue(ctx, env) }
		}
		together(t, fns...)
		counts := map[ledger.Outcome]int{}
		for c := range callers {
			require.NoError(t, errs[c])
			counts[results[c].Outcome]++
		}
		require.Equal(t, map[ledger.Outcome]int{ledger.OutcomeApplied: 1, ledger.OutcomeRepeated: callers - 1}, counts, "round %d", r)
		stored, err := o.FindByID(ctx, ledger.OutboxEntryIDFor(env.IdempotencyKey))
		require.NoError(t, err)
		require.Equal(t, int64(1), stored.Version, "round %d: written once", r)
		for c := range callers {
			require.Equal(t, stored, results[c].Entry, "round %d: every caller sees the one entry", r)
		}
		pending, err := o.FindPending(ctx, ledger.MaxLimit)
		require.NoError(t, err)
		require.Len(t, pending, r+1, "round %d: one entry per key", r)
	}
}

// TestRaces runs the named races on memstore.
func TestRaces(t *testing.T) {
	t.Parallel()
	rounds := 200
	if testing.Short() {
		rounds = 20
	}
	t.Run("SweepVsCompletionAtLastInstant", func(t *testing.T) {
		t.Parallel()
		raceSweepVsLastInstant(t, memstore.New(), rounds)
	})
	t.Run("LateCompletionFromEarlierGrant", func(t *testing.T) {
		t.Parallel()
		raceLateCompletion(t, memstore.New())
	})
	t.Run("TwoIncarnationsLeaseAtOnce", func(t *testing.T) {
		t.Parallel()
		raceIncarnations(t, memstore.New(), 8, rounds/4)
	})
	t.Run("SweepsVsHoldersMidCall", func(t *testing.T) {
		t.Parallel()
		raceSweepsVsHolders(t, memstore.New(), rounds/2)
	})
	t.Run("IdempotentEnqueue", func(t *testing.T) {
		t.Parallel()
		raceIdempotentEnqueue(t, memstore.New(), rounds/4)
	})
	t.Run("IdempotentOutboxEnqueue", func(t *testing.T) {
		t.Parallel()
		raceIdempotentOutboxEnqueue(t, memstore.NewOutbox(), rounds/4)
	})
}
