package ledgertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// Sizes of the concurrency test. The claim duration is short in logical
// time, so that claims run out while the workers still hold them and are
// taken over by others.
const (
	claimConcEntries = 1000
	claimConcWorkers = 16
	claimConcRounds  = 80
	claimConcLease   = 400 * time.Microsecond
	claimConcTimeout = 2 * time.Minute
)

// claimClock is the concurrency test's shared logical clock: microsecond
// offsets from claimT0, each reading later than the one before. It also
// knows the Now of every claim call in flight, so that it can date the end
// of a claim conservatively (see ClaimEnd.At).
type claimClock struct {
	offset   atomic.Int64
	mu       sync.Mutex
	inFlight map[int]time.Time
}

func newClaimClock() *claimClock { return &claimClock{inFlight: make(map[int]time.Time)} }

// tick returns the next logical time.
func (c *claimClock) tick() time.Time {
	return claimT0.Add(time.Duration(c.offset.Add(1)) * time.Microsecond)
}

// jump moves the clock d forward and returns the new time.
func (c *claimClock) jump(d time.Duration) time.Time {
	return claimT0.Add(time.Duration(c.offset.Add(int64(d/time.Microsecond))) * time.Microsecond)
}

// startClaim returns the Now of a claim call by worker w and records it as
// in flight until doneClaim.
func (c *claimClock) startClaim(w int) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.tick()
	c.inFlight[w] = now
	return now
}

func (c *claimClock) doneClaim(w int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.inFlight, w)
}

// endAt returns the time by which a completion about to start ends its
// claim: no later than the Now of any claim granted after it applies. A
// claim call registered before this reading is in flight or already done;
// one registered after it reads a later tick.
func (c *claimClock) endAt() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	at := c.tick()
	for _, now := range c.inFlight {
		if now.Before(at) {
			at = now
		}
	}
	return at
}

// claimRecorder is what the workers share: the clock, the claim log and
// the problems they saw, which the test reports once they are done
// (goroutines never fail the test themselves).
type claimRecorder struct {
	s     ledger.ClaimStore
	clock *claimClock

	mu       sync.Mutex
	log      ClaimLog
	problems claimViolations
	outcomes map[ledger.Outcome]int
}

func (r *claimRecorder) problem(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.problems.addf(format, args...)
}

// claim makes one claim call for worker w and logs what it granted.
func (r *claimRecorder) claim(ctx context.Context, w int, retry bool, limit int) []ledger.ClaimedEntry {
	now := r.clock.startClaim(w)
	req := ledger.ClaimRequest{Worker: fmt.Sprintf("worker-%d", w), Now: now, LeaseDuration: claimConcLease, Limit: limit}
	var got []ledger.ClaimedEntry
	var err error
	if retry {
		got, err = r.s.ClaimRetryReady(ctx, req)
	} else {
		got, err = r.s.ClaimPending(ctx, req)
	}
	r.clock.doneClaim(w)
	if err != nil {
		if ctx.Err() == nil {
			r.problem("claim (retry %v) at %s: %v", retry, now, err)
		}
		return nil
	}
	if len(got) > limit {
		r.problem("claim at %s: %d entries for a limit of %d", now, len(got), limit)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ce := range got {
		r.log.Grants = append(r.log.Grants, ce.Claim)
		c, e := ce.Claim, ce.Entry
		switch {
		case c.EntryID != e.ID || e.Claim == nil || e.Claim.Token != "" || c.Token == "" || e.Claim.Seq != c.Seq || e.ClaimSeq != c.Seq:
			r.problems.addf("entry %s seq %d: the claimed entry does not carry its claim (without its token), or the claim lacks its token", e.ID, c.Seq)
		case !c.ClaimedAt.Equal(now) || !c.ExpiresAt.Equal(now.Add(claimConcLease)):
			r.problems.addf("entry %s seq %d: claim [%s, %s) for Now %s", e.ID, c.Seq, c.ClaimedAt, c.ExpiresAt, now)
		case !retry && e.Status != ledger.OutboxStatusPending:
			r.problems.addf("entry %s: ClaimPending claimed a %s entry", e.ID, e.Status)
		case retry && !storekit.OutboxEntry(e).RetryReady(now):
			r.problems.addf("entry %s: ClaimRetryReady claimed a %s entry due %s at %s", e.ID, e.Status, e.NextAttemptAt, now)
		}
	}
	return got
}

// complete ends claim c with op and logs the end when it applied.
func (r *claimRecorder) complete(ctx context.Context, c ledger.Claim, op ledger.Operation, rng *rand.Rand) {
	at := r.clock.endAt()
	emissionErr := ledger.EmissionError{Code: "conc", Message: "concurrency test"}
	var res ledger.OutboxResult
	var err error
	switch op {
	case ledger.OpMarkDelivered:
		res, err = r.s.MarkClaimDelivered(ctx, c, ledger.EmissionResult{ProviderRef: "conc"})
	case ledger.OpMarkFailed:
		var next *time.Time
		if rng.IntN(4) > 0 {
			t := r.clock.tick().Add(time.Duration(rng.IntN(300)) * time.Microsecond)
			next = &t
		}
		res, err = r.s.MarkClaimFailed(ctx, c, emissionErr, next)
	case ledger.OpMarkDeadLettered:
		res, err = r.s.MarkClaimDeadLettered(ctx, c, emissionErr, "concurrency test")
	case ledger.OpReleaseClaim:
		res, err = r.s.ReleaseClaim(ctx, c, "concurrency test")
	case ledger.OpSaveClaim:
		in := ledger.OutboxEntry{ID: c.EntryID, Status: ledger.OutboxStatusDeferred, NextAttemptAt: r.clock.tick(), Version: 1}
		res, err = r.s.SaveClaim(ctx, c, in)
	}
	if err != nil {
		if ctx.Err() == nil {
			r.problem("entry %s seq %d: %s: %v", c.EntryID, c.Seq, op, err)
		}
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outcomes[res.Outcome]++
	switch res.Outcome {
	case ledger.OutcomeApplied:
		r.log.Ends = append(r.log.Ends, ClaimEnd{Claim: c, Op: op, At: at})
		if res.Entry.ID != c.EntryID || res.Entry.Claim != nil {
			r.problems.addf("entry %s seq %d: %s applied but the entry is still claimed", c.EntryID, c.Seq, op)
		}
	case ledger.OutcomeLeaseLost, ledger.OutcomeEnded:
		// The claim ran out and someone else took the entry (and maybe
		// ended it) first.
	default:
		r.problems.addf("entry %s seq %d: %s answered %s", c.EntryID, c.Seq, op, res.Outcome)
	}
}

// work is one worker: it claims from both calls and ends what it claimed in
// every way, sometimes holding a claim past its expiry before ending it.
func (r *claimRecorder) work(ctx context.Context, w int) {
	rng := rand.New(rand.NewPCG(uint64(w), 0x5eed))
	var held []ledger.Claim
	for round := 0; round < claimConcRounds && ctx.Err() == nil; round++ {
		if len(held) > 0 && rng.IntN(3) == 0 {
			r.complete(ctx, held[0], ledger.OpMarkDelivered, rng)
			held = held[1:]
		}
		for _, ce := range r.claim(ctx, w, round%2 == 1, 1+rng.IntN(4)) {
			switch p := rng.IntN(100); {
			case p < 40:
				r.complete(ctx, ce.Claim, ledger.OpMarkDelivered, rng)
			case p < 60:
				r.complete(ctx, ce.Claim, ledger.OpMarkFailed, rng)
			case p < 65:
				r.complete(ctx, ce.Claim, ledger.OpMarkDeadLettered, rng)
			case p < 80:
				r.complete(ctx, ce.Claim, ledger.OpReleaseClaim, rng)
			case p < 85:
				r.complete(ctx, ce.Claim, ledger.OpSaveClaim, rng)
			default:
				held = append(held, ce.Claim)
			}
		}
	}
	for _, c := range held {
		r.complete(ctx, c, ledger.OpReleaseClaim, rng)
	}
}

// testClaimConcurrency runs claimConcWorkers workers claiming and ending
// claimConcEntries entries at once on a shared logical clock, then drives
// time forward and delivers the rest, and checks the invariants on the
// log of every claim: claims were exclusive, every entry ended, and
// Attempts counts claims less releases.
func testClaimConcurrency(t *testing.T, newStore NewClaimStoreFunc) {
	claimRun(t, "ClaimsStayExclusiveAndEveryEntryEnds", newStore, func(t *testing.T, s ledger.ClaimStore) {
		envs := make([]ledger.Envelope, claimConcEntries)
		for i := range envs {
			envs[i] = claimEnvelope(fmt.Sprintf("conc-%04d", i))
		}
		res, err := claimBatcher(t, s).EnqueueBatch(t.Context(), envs)
		require.NoError(t, err)
		require.Len(t, res, claimConcEntries)

		ctx, cancel := context.WithTimeout(t.Context(), claimConcTimeout)
		defer cancel()
		r := &claimRecorder{s: s, clock: newClaimClock(), outcomes: make(map[ledger.Outcome]int)}
		var wg sync.WaitGroup
		for w := range claimConcWorkers {
			wg.Go(func() { r.work(ctx, w) })
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(claimConcTimeout + 10*time.Second):
			t.Fatal("workers did not finish in time")
		}
		require.NoError(t, ctx.Err(), "workers ran out of time")
		concurrentGrants := len(r.log.Grants)

		claimDrain(t, r)
		entries := make([]ledger.OutboxEntry, 0, claimConcEntries)
		for _, env := range envs {
			entries = append(entries, claimFind(t, s, ledger.OutboxEntryIDFor(env.IdempotencyKey)))
		}
		t.Logf("%d claims while concurrent, %d in all; outcomes %v", concurrentGrants, len(r.log.Grants), r.outcomes)
		// Report every kind of violation, not just the first.
		assert.NoError(t, r.problems.err(), "what the workers saw")
		assert.NoError(t, CheckClaimsExclusive(r.log), "exclusive claims")
		assert.NoError(t, CheckClaimsTerminal(entries), "every entry ended")
		assert.NoError(t, CheckClaimAttempts(r.log, entries), "attempts")
	})
}

// claimDrain drives time forward past every claim and retry and delivers
// what is left, until nothing is pending or due.
func claimDrain(t *testing.T, r *claimRecorder) {
	t.Helper()
	rng := rand.New(rand.NewPCG(0, 0))
	for range 20 {
		r.clock.jump(time.Hour)
		claimed := r.claim(t.Context(), -1, false, ledger.MaxLimit)
		claimed = append(claimed, r.claim(t.Context(), -1, true, ledger.MaxLimit)...)
		for _, ce := range claimed {
			r.complete(t.Context(), ce.Claim, ledger.OpMarkDelivered, rng)
		}
		if len(claimed) == 0 {
			return
		}
	}
	t.Fatal("entries were still claimable after 20 rounds of draining")
}
