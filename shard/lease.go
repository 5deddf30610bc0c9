package shard

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// ReclaimTarget is the target name a Lease asks a shard for when it only
// needs the shard to apply the incarnation rule (see Ledger.Lease). It
// must not be used for real deliveries: its work would be leased by such
// calls.
const ReclaimTarget ledger.Target = "leaseledger.shard.reclaim"

// maxSeen bounds the memory of which incarnation each agent last leased
// with on each shard; past it the memory starts over, which costs one
// extra call per shard for the agents leasing next, never a wrong answer.
const maxSeen = 1 << 14

// seenOwners remembers, per agent and shard, the incarnation this Ledger
// last presented to the shard, so that the incarnation rule reaches the
// shards a Lease does not otherwise ask.
type seenOwners struct {
	mu sync.Mutex
	// last is the incarnation last presented; "" when unknown, which
	// forces a reclaim call.
	last map[agentShard]string
	// flying tracks the calls under way per agent and shard.
	flying map[agentShard]flight
	// next rotates which shard a Lease asks first, so that consecutive
	// Leases take from every shard in turn.
	next atomic.Uint64
}

type agentShard struct {
	agent string
	shard int
}

// flight counts the Lease calls under way for one agent on one shard;
// mixed marks that calls of two incarnations overlapped, so that their
// order at the shard is unknown.
type flight struct {
	incarnation string
	n           int
	mixed       bool
}

// begin records a Lease by owner under way over n shards.
func (s *seenOwners) begin(owner ledger.Owner, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil || len(s.last) >= maxSeen {
		s.last = make(map[agentShard]string)
	}
	if s.flying == nil {
		s.flying = make(map[agentShard]flight)
	}
	for i := range n {
		k := agentShard{owner.Agent, i}
		f := s.flying[k]
		if f.n > 0 && f.incarnation != owner.Incarnation {
			f.mixed = true
		}
		f.incarnation = owner.Incarnation
		f.n++
		s.flying[k] = f
	}
}

// stale returns the shards of n, not in asked, that may hold leases of
// owner's agent under another incarnation.
func (s *seenOwners) stale(owner ledger.Owner, n int, asked []int) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int
	for i := range n {
		if s.last[agentShard{owner.Agent, i}] != owner.Incarnation && !slices.Contains(asked, i) {
			out = append(out, i)
		}
	}
	return out
}

// end closes what begin opened: the shards in presented have now seen
// owner's incarnation, unless another incarnation's call overlapped.
func (s *seenOwners) end(owner ledger.Owner, n int, presented []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range n {
		k := agentShard{owner.Agent, i}
		f := s.flying[k]
		switch {
		case f.mixed:
			s.last[k] = ""
		case slices.Contains(presented, i):
			s.last[k] = owner.Incarnation
		}
		if f.n--; f.n == 0 {
			delete(s.flying, k)
		} else {
			s.flying[k] = f
		}
	}
}

// Lease takes up to limit deliveries from the shards that hold the
// filter's targets (every shard when the filter names none). It asks one
// of them first, for the whole limit, the first shard rotating from call
// to call, so that a busy ledger costs one call to one shard per Lease,
// as one store does, and consecutive Leases take from every shard in
// turn. What that shard leaves of the limit is split evenly over the
// others, asked concurrently, and what they leave is offered to those
// that filled their share, in further rounds. Order is oldest first
// within each shard (and so within each target); across shards it is
// not: a call takes from its first shard even when another holds older
// work.
//
// The incarnation rule is applied on every shard: a shard not asked by
// this call that has not seen the owner's incarnation from this Ledger
// is sent a Lease for ReclaimTarget only, so that it takes the agent's
// old leases back. (A Ledger in another process does not know what this
// one presented: the rule is exact for an agent whose incarnations lease
// through one Ledger, and at each shard the first time otherwise.)
//
// A shard that fails is skipped and reported to the ErrorFunc; the call
// fails only when every shard it needed failed.
func (l *Ledger) Lease(ctx context.Context, filter ledger.LeaseFilter, owner ledger.Owner, now time.Time, duration time.Duration, limit int) (ledger.LeaseResult, error) {
	if err := storekit.ValidateContext(ctx); err != nil {
		return ledger.LeaseResult{}, err
	}
	if err := storekit.ValidateLease(filter, owner, now, duration, limit); err != nil {
		return ledger.LeaseResult{}, err
	}
	st := l.state.Load()
	idx := st.every()
	if len(filter.Targets) > 0 {
		var err error
		if idx, err = st.holders(filter.Targets); err != nil {
			return ledger.LeaseResult{}, err
		}
	}
	var (
		mu  sync.Mutex
		out ledger.LeaseResult
		// presented lists the shards that answered a call of this Lease.
		presented []int
		// runs holds each shard's grants, in its order, over all rounds.
		runs = make([][]ledger.LeasedDelivery, len(st.shards))
	)
	grant := func(ctx context.Context, i int, f ledger.LeaseFilter, n int) (int, error) {
		res, err := st.shards[i].Lease(ctx, f, owner, now, duration, n)
		if err != nil {
			return 0, err
		}
		mu.Lock()
		defer mu.Unlock()
		presented = append(presented, i)
		for k := range res.Leased {
			res.Leased[k].Lease.Token = wrapToken(i, res.Leased[k].Lease.Token)
		}
		if runs[i] == nil {
			runs[i] = res.Leased // the common case: one round, no copy
		} else {
			runs[i] = append(runs[i], res.Leased...)
		}
		out.Reclaimed = append(out.Reclaimed, res.Reclaimed...)
		return len(res.Leased), nil
	}

	var errs []error
	var asked []int
	l.seen.begin(owner, len(st.shards))
	// Only a shard that answered has seen the incarnation.
	defer func() { l.seen.end(owner, len(st.shards), presented) }()
	open := idx // shards that may have more
	left := limit
	for round := 0; left > 0 && len(open) > 0; round++ {
		share := shares(round, left, len(open), int(l.seen.next.Add(1)))
		var ask, askShare []int
		for k, i := range open {
			if share[k] > 0 {
				ask, askShare = append(ask, i), append(askShare, share[k])
			}
		}
		got := make([]int, len(ask))
		roundErrs := fanOut(ctx, ask, func(ctx context.Context, pos, i int) error {
			var err error
			got[pos], err = grant(ctx, i, filter, askShare[pos])
			return err
		})
		errs = append(errs, roundErrs...)
		asked = append(asked, ask...)
		next := open[:0:0]
		for _, i := range open {
			pos := slices.Index(ask, i)
			switch {
			case pos < 0:
				next = append(next, i) // not asked this round
			case roundErrs[pos] != nil:
				// failed: not asked again by this call
			case got[pos] == askShare[pos]:
				next = append(next, i) // filled its share: may have more
			}
		}
		taken := 0
		for _, n := range got {
			taken += n
		}
		left -= taken
		if taken == 0 && len(next) == len(open) {
			break
		}
		open = next
	}
	// The incarnation rule on the shards this call did not ask and that
	// have not seen this incarnation from this Ledger.
	if extra := l.seen.stale(owner, len(st.shards), asked); len(extra) > 0 {
		only := ledger.LeaseFilter{Targets: []ledger.Target{ReclaimTarget}}
		errs = append(errs, fanOut(ctx, extra, func(ctx context.Context, _, i int) error {
			_, err := grant(ctx, i, only, 1)
			return err
		})...)
		asked = append(asked, extra...)
	}
	if err := partial(errs, l.cfg.report); err != nil {
		return ledger.LeaseResult{}, err
	}
	out.Leased = interleave(runs)
	slices.Sort(out.Reclaimed)
	return out, nil
}

// shares is how a Lease or a claim spreads what is left of its limit
// over the k shards still open in a round: the whole of it to the shard
// at position start (mod k) in the first round, which is all a call
// needs while that shard has work, and an even split from the second
// round on.
func shares(round, left, k, start int) []int {
	if round > 0 {
		return split(left, k, start)
	}
	share := make([]int, k)
	share[position(start, k)] = left
	return share
}

// position is start modulo k, never negative: start comes from a
// counter converted to int, which turns negative once it passes the
// largest int.
func position(start, k int) int {
	p := start % k
	if p < 0 {
		p += k
	}
	return p
}

// split divides n over k shares as evenly as it can, the remainder going
// to the shares from position start (mod k) on.
func split(n, k, start int) []int {
	share := make([]int, k)
	for j := range share {
		share[j] = n / k
	}
	for j := range n % k {
		share[position(start+j, k)]++
	}
	return share
}

// interleave merges the shards' grants, keeping each shard's order (the
// store's oldest-first) and placing the runs among each other by creation
// time then ID: the order one store would give when offers are made at
// enqueue, as most are.
func interleave(runs [][]ledger.LeasedDelivery) []ledger.LeasedDelivery {
	total, nonEmpty := 0, 0
	for _, run := range runs {
		total += len(run)
		if len(run) > 0 {
			nonEmpty++
		}
	}
	if nonEmpty <= 1 {
		for _, run := range runs {
			if len(run) > 0 {
				return run
			}
		}
		return nil
	}
	out := make([]ledger.LeasedDelivery, 0, total)
	for {
		best := -1
		for r, run := range runs {
			if len(run) == 0 {
				continue
			}
			if best < 0 || before(run[0].Delivery, runs[best][0].Delivery) {
				best = r
			}
		}
		if best < 0 {
			return out
		}
		out = append(out, runs[best][0])
		runs[best] = runs[best][1:]
	}
}

func before(a, b ledger.Delivery) bool {
	if !a.CreatedAt.Equal(b.CreatedAt) {
		return a.CreatedAt.Before(b.CreatedAt)
	}
	return a.ID < b.ID
}
