package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/leaseledger/ledger"
)

// Ledger is one ledger.Ledger over several: each delivery lives on the
// shard its target is placed on, and every call goes to the shards that
// hold what it touches. See the package overview for the routing of each
// call and what it costs.
//
// A Ledger is safe for concurrent use. It holds no durable state of its
// own: every record lives on a shard, so any number of Ledgers built
// with the same shards and placement, in any number of processes, are
// one ledger.
type Ledger struct {
	state atomic.Pointer[ledgerState]
	cfg   config

	mu sync.Mutex // serialises AddShard, Place and the extra table
	// extra names, per target, the shards other than its placement that
	// still hold its open work (after a Move or a cross-shard Follow):
	// Lease asks them too until Move empties them.
	extra map[ledger.Target][]int

	seen seenOwners
}

// ledgerState is what a call reads once and keeps: shards and placement
// change together, by replacing the whole.
type ledgerState struct {
	shards []ledger.Ledger
	place  PlaceFunc
	extra  map[ledger.Target][]int // a copy: never written once published
}

type config struct {
	place   PlaceFunc
	idCheck bool
	report  ErrorFunc
}

// Option configures New and NewOutbox.
type Option func(*config)

// WithPlacement places targets with f instead of Hash over the shards
// given to New.
func WithPlacement(f PlaceFunc) Option { return func(c *config) { c.place = f } }

// WithoutIDCheck drops the look-up that Enqueue makes on the other
// shards before it writes (Ledger's and Outbox's), so that an enqueue is
// one call to one shard.
// The idempotency rule then holds within a shard only: an ID already
// used for a target on another shard is Applied again, as a second,
// separate delivery, instead of Conflict. Use it when IDs cannot repeat
// across targets (for example when they are derived from the target).
func WithoutIDCheck() Option { return func(c *config) { c.idCheck = false } }

// WithErrorFunc reports the shards that failed inside calls that
// answered from the others (see ShardError).
func WithErrorFunc(f ErrorFunc) Option { return func(c *config) { c.report = f } }

// ErrNoShards is returned by New and NewOutbox without any store.
var ErrNoShards = errors.New("shard: no shards")

// New returns a Ledger over shards, in that order: a shard's index is
// its position, part of every lease token handed out and of the
// placement, so the same stores must be given in the same order each
// time (AddShard appends). It fails with ErrNoShards when shards is empty.
func New(shards []ledger.Ledger, opts ...Option) (*Ledger, error) {
	if len(shards) == 0 {
		return nil, ErrNoShards
	}
	cfg := config{place: Hash(len(shards)), idCheck: true}
	for _, o := range opts {
		o(&cfg)
	}
	l := &Ledger{cfg: cfg, extra: map[ledger.Target][]int{}}
	l.state.Store(&ledgerState{shards: slices.Clone(shards), place: cfg.place})
	return l, nil
}

// Shards returns the stores in index order, in a new slice.
func (l *Ledger) Shards() []ledger.Ledger { return slices.Clone(l.state.Load().shards) }

// AddShard appends s as a new shard of a running ledger and returns its
// index. Nothing moves: records stay where they are and the placement is
// unchanged, so no target lands on s until a placement given to Place
// says so (Pinned, or Hash over the new count together with Move for
// the targets that changed shard).
func (l *Ledger) AddShard(s ledger.Ledger) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.state.Load()
	next := *old
	next.shards = append(slices.Clone(old.shards), s)
	l.state.Store(&next)
	return len(next.shards) - 1
}

// Place replaces the placement of targets. Calls already under way
// finish with the old one. A target whose answer changes must have no
// open work on its old shard, or be moved there from with Move.
func (l *Ledger) Place(f PlaceFunc) {
	l.mu.Lock()
	defer l.mu.Unlock()
	next := *l.state.Load()
	next.place = f
	l.state.Store(&next)
}

// publishExtra republishes the state after l.extra changed; l.mu held.
func (l *Ledger) publishExtra() {
	next := *l.state.Load()
	next.extra = make(map[ledger.Target][]int, len(l.extra))
	for t, s := range l.extra {
		next.extra[t] = slices.Clone(s)
	}
	l.state.Store(&next)
}

// home returns the shard target is placed on.
func (st *ledgerState) home(target ledger.Target) (int, error) {
	i := st.place(target)
	if i < 0 || i >= len(st.shards) {
		return 0, fmt.Errorf("shard: placement put target %q on shard %d of %d", target, i, len(st.shards))
	}
	return i, nil
}

// holders returns the shards that may hold open work of the targets: their
// homes and any extra shards, in index order without repeats.
func (st *ledgerState) holders(targets []ledger.Target) ([]int, error) {
	var idx []int
	for _, t := range targets {
		i, err := st.home(t)
		if err != nil {
			return nil, err
		}
		idx = append(idx, i)
		idx = append(idx, st.extra[t]...)
	}
	slices.Sort(idx)
	return slices.Compact(idx), nil
}

func (st *ledgerState) every() []int {
	idx := make([]int, len(st.shards))
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// locate finds the shard that holds delivery id: one Get on every shard,
// concurrently (one round trip of latency, one read per shard). found is
// false when no shard has it. Shards that fail are skipped while another
// has the record; when none has it and one failed, that error is
// returned, since the record may be on it.
func (l *Ledger) locate(ctx context.Context, st *ledgerState, id ledger.DeliveryID) (shard int, d ledger.Delivery, found bool, err error) {
	return l.locateIn(ctx, st, st.every(), id)
}

// locateIn is locate over the shards in idx only.
func (l *Ledger) locateIn(ctx context.Context, st *ledgerState, idx []int, id ledger.DeliveryID) (shard int, d ledger.Delivery, found bool, err error) {
	recs := make([]ledger.Delivery, len(st.shards))
	errs := make([]error, len(st.shards))
	for i := range errs {
		errs[i] = ledger.ErrNotFound
	}
	got := fanOut(ctx, idx, func(ctx context.Context, pos, i int) error {
		var err error
		recs[i], err = st.shards[i].Get(ctx, id)
		return err
	})
	for pos, i := range idx {
		errs[i] = got[pos]
	}
	var failed error
	for i, err := range errs {
		switch {
		case err == nil:
			// An open record wins over an ended one: a Move leaves the
			// source's copy ended (see Move).
			if !found || (recs[shard].State.Terminal() && !recs[i].State.Terminal()) {
				shard, d, found = i, recs[i], true
			}
		case errors.Is(err, ledger.ErrNotFound):
		case isCallerError(err):
			return 0, ledger.Delivery{}, false, unwrapShard(err)
		default:
			failed = err
		}
	}
	if !found && failed != nil {
		return 0, ledger.Delivery{}, false, failed
	}
	return shard, d, found, nil
}

// byID routes a call that names a delivery by ID: to the shard that holds
// it, or, when none does, to shard 0, which answers NotFound (or
// ErrInvalid) as any store would.
func (l *Ledger) byID(ctx context.Context, id ledger.DeliveryID) (*ledgerState, int, error) {
	st := l.state.Load()
	if len(st.shards) == 1 {
		return st, 0, nil
	}
	i, _, found, err := l.locate(ctx, st, id)
	if err != nil {
		return nil, 0, err
	}
	if !found {
		i = 0
	}
	return st, i, nil
}

// byLease routes a call that carries a lease: to the shard its token
// names, with the shard's own token. A token this ledger did not mint is
// routed by the delivery's ID and passed on unchanged, so the shard
// answers it as it answers any stale or forged token.
func (l *Ledger) byLease(ctx context.Context, lease ledger.Lease) (*ledgerState, int, ledger.Lease, error) {
	st := l.state.Load()
	if i, inner, ok := unwrapToken(lease.Token, len(st.shards)); ok {
		lease.Token = inner
		return st, i, lease, nil
	}
	st, i, err := l.byID(ctx, lease.DeliveryID)
	return st, i, lease, err
}

// withLease runs call on the shard the lease routes to. The token names
// a shard, but the delivery ID decides where the record is: when that
// shard answers NotFound (a lease passed with another delivery's ID),
// the call is made again on the shard that holds the ID, which answers
// it as one store would (LeaseLost). The common path is one call.
func (l *Ledger) withLease(ctx context.Context, lease ledger.Lease, call func(s ledger.Ledger, lease ledger.Lease) (ledger.Outcome, error)) error {
	st, i, inner, err := l.byLease(ctx, lease)
	if err != nil {
		return err
	}
	out, err := call(st.shards[i], inner)
	if err != nil || out != ledger.OutcomeNotFound || len(st.shards) == 1 {
		return wrapShard(i, err)
	}
	st2, j, err := l.byID(ctx, lease.DeliveryID)
	if err != nil || st2.shards[j] == st.shards[i] {
		return err
	}
	_, err = call(st2.shards[j], inner)
	return wrapShard(j, err)
}

func isCallerError(err error) bool { return errors.Is(err, ledger.ErrInvalid) }

// Compile-time checks: the interfaces the dispatch loops, the sweeper and
// ledgerctl detect.
var (
	_ ledger.Ledger        = (*Ledger)(nil)
	_ ledger.BatchEnqueuer = (*Ledger)(nil)
	_ ledger.AckProcessor  = (*Ledger)(nil)
	_ ledger.Renewer       = (*Ledger)(nil)
	_ ledger.StatsReporter = (*Ledger)(nil)
	_ ledger.Historian     = (*Ledger)(nil)
	_ ledger.Purger        = (*Ledger)(nil)
	_ ledger.Elector       = (*Ledger)(nil)
)
