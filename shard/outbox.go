package shard

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// Outbox is one ledger.ClaimStore over several. Each entry lives on the
// shard given by a hash of its envelope's provider, as a delivery lives on
// its target's: the outbox's order rules (pending in enqueue order,
// retries by due time) then hold exactly among a provider's entries, on
// one store, and a claim over several providers takes from each shard in
// turn. Hashing the entry ID would spread one busy provider over every
// shard, but no store could then say which of two entries enqueued at
// the same instant came first, and the order a provider's emitter sees
// would depend on the shard count.
//
// Claims carry their shard in their token, as leases do, so completing a
// claim is one call. The calls of ledger.OutboxStore that name an entry
// by ID (FindByID, Save, MarkDelivered, MarkFailed, MarkDeadLettered) look
// the ID up on every shard first, concurrently: one round trip more.
// Enqueue looks the entry's ID up on every shard but its provider's, in
// one call per shard for a whole batch (FindEntryIDs where the store
// offers it, see EntryIDFinder), so that a key already
// used under another provider is Conflict, as on one store (the same
// race as Ledger.Enqueue's remains between two concurrent first
// enqueues).
//
// Entries never move: the number of shards is fixed when the Outbox is
// built. (Deliveries, which need to grow by target, are the Ledger's.)
type Outbox struct {
	shards  []ledger.ClaimStore
	report  ErrorFunc
	idCheck bool
	next    atomic.Uint64 // rotates the shard a claim asks first
}

// NewOutbox returns an Outbox over shards, in that order; the same stores
// must be given in the same order each time. WithErrorFunc and
// WithoutIDCheck apply (the latter makes an enqueue one call to its
// provider's shard, with the rule then holding per shard); WithPlacement
// does not. It fails with ErrNoShards when shards is empty.
func NewOutbox(shards []ledger.ClaimStore, opts ...Option) (*Outbox, error) {
	if len(shards) == 0 {
		return nil, ErrNoShards
	}
	cfg := config{idCheck: true}
	for _, o := range opts {
		o(&cfg)
	}
	return &Outbox{shards: slices.Clone(shards), report: cfg.report, idCheck: cfg.idCheck}, nil
}

// Compile-time checks: the interfaces the dispatch loops, the sweeper and
// ledgerctl detect.
var (
	_ ledger.ClaimStore          = (*Outbox)(nil)
	_ ledger.OutboxBatchEnqueuer = (*Outbox)(nil)
	_ ledger.DueClaimer          = (*Outbox)(nil)
	_ ledger.ClaimCompleter      = (*Outbox)(nil)
	_ ledger.ClaimRenewer        = (*Outbox)(nil)
	_ ledger.OutboxStatsReporter = (*Outbox)(nil)
	_ ledger.OutboxHistorian     = (*Outbox)(nil)
	_ ledger.OutboxPurger        = (*Outbox)(nil)
	_ ledger.OutboxLister        = (*Outbox)(nil)
	_ ledger.Elector             = (*Outbox)(nil)
)

// home is the shard of a provider's entries.
func (o *Outbox) home(provider string) int {
	return int(hash(provider) % uint64(len(o.shards)))
}

// locate finds the shard that holds entry id: one FindByID on every shard,
// concurrently. found is false when none has it; a shard that fails is
// skipped unless no other has the entry.
func (o *Outbox) locate(ctx context.Context, id ledger.OutboxEntryID) (shard int, found bool, err error) {
	if len(o.shards) == 1 {
		return 0, true, nil
	}
	errs := fanOut(ctx, o.every(), func(ctx context.Context, pos, i int) error {
		_, err := o.shards[i].FindByID(ctx, id)
		return err
	})
	var failed error
	for i, err := range errs {
		switch {
		case err == nil:
			return i, true, nil
		case errors.Is(err, ledger.ErrNotFound):
		case isCallerError(err):
			return 0, false, unwrapShard(err)
		default:
			failed = err
		}
	}
	return 0, false, failed
}

// of routes a call that names entry id: to its shard, or to shard 0,
// which answers NotFound (or ErrInvalid) as any store would.
func (o *Outbox) of(ctx context.Context, id ledger.OutboxEntryID) (ledger.ClaimStore, error) {
	i, _, err := o.locate(ctx, id)
	if err != nil {
		return nil, err
	}
	return o.shards[i], nil
}

// byClaim routes a call that carries a claim: to the shard its token
// names, with the shard's own token; a token this Outbox did not mint is
// routed by the entry's ID and passed on unchanged.
func (o *Outbox) byClaim(ctx context.Context, c ledger.Claim) (int, ledger.Claim, error) {
	if i, inner, ok := unwrapToken(c.Token, len(o.shards)); ok {
		c.Token = inner
		return i, c, nil
	}
	i, _, err := o.locate(ctx, c.EntryID)
	return i, c, err
}

// enqueueShard is where env goes: the shard that has its entry, else its
// provider's.
func (o *Outbox) enqueueShard(ctx context.Context, env ledger.Envelope) (int, error) {
	if !o.idCheck || len(o.shards) == 1 || storekit.ValidateName("idempotency key", env.IdempotencyKey) != nil {
		return o.home(env.Provider), nil
	}
	dest, err := o.batchShards(ctx, []ledger.Envelope{env})
	if err != nil {
		return 0, err
	}
	return dest[0], nil
}

// batchShards is where each of envs goes: the shard that has its entry,
// else its provider's. Every shard is asked once, concurrently, for the
// IDs it is not home to; entries never move, so at most one holds each.
// A later envelope with a key seen earlier goes where the first went.
func (o *Outbox) batchShards(ctx context.Context, envs []ledger.Envelope) ([]int, error) {
	dest := make([]int, len(envs))
	ids := make([]ledger.OutboxEntryID, len(envs))
	for k, env := range envs {
		dest[k] = o.home(env.Provider)
		ids[k] = ledger.OutboxEntryIDFor(env.IdempotencyKey)
	}
	if o.idCheck && len(o.shards) > 1 {
		where, failed, err := holders(ctx, len(o.shards), dest, ids, func(ctx context.Context, i int, ids []ledger.OutboxEntryID) ([]bool, error) {
			return heldEntries(ctx, o.shards[i], ids)
		})
		if err != nil {
			return nil, err
		}
		for _, e := range failed {
			var se *ShardError
			if o.report != nil && errors.As(e, &se) {
				o.report(se)
			}
		}
		for k := range envs {
			if len(where[k]) > 0 {
				dest[k] = where[k][0]
			}
		}
	}
	firstAt := make(map[ledger.OutboxEntryID]int, len(envs))
	for k, id := range ids {
		if j, ok := firstAt[id]; ok {
			dest[k] = dest[j]
			continue
		}
		firstAt[id] = k
	}
	return dest, nil
}

func (o *Outbox) every() []int {
	idx := make([]int, len(o.shards))
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// Enqueue writes the entry on its provider's shard, after looking its ID
// up on the others (see Outbox): two round trips of latency.
func (o *Outbox) Enqueue(ctx context.Context, env ledger.Envelope) (ledger.OutboxResult, error) {
	i, err := o.enqueueShard(ctx, env)
	if err != nil {
		return ledger.OutboxResult{}, err
	}
	return o.shards[i].Enqueue(ctx, env)
}

// EnqueueBatch writes each shard's part of the batch in one call,
// concurrently. It is atomic per shard, not across shards.
func (o *Outbox) EnqueueBatch(ctx context.Context, envs []ledger.Envelope) ([]ledger.OutboxResult, error) {
	if err := storekit.ValidateContext(ctx); err != nil {
		return nil, err
	}
	dest, err := o.batchShards(ctx, envs)
	if err != nil {
		return nil, err
	}
	if i, one := oneShard(dest); one {
		// The shard checks the whole batch and writes all or nothing.
		res, err := entriesOn(ctx, o.shards[i], envs)
		return res, wrapShard(i, err)
	}
	// The payload limit is each shard's own; the rest is checked here,
	// so that one invalid envelope writes nothing anywhere.
	if err := storekit.ValidateEnvelopeBatch(envs, math.MaxInt); err != nil {
		return nil, err
	}
	return scatter(ctx, dest, envs, func(ctx context.Context, i int, part []ledger.Envelope) ([]ledger.OutboxResult, error) {
		return entriesOn(ctx, o.shards[i], part)
	})
}

// entriesOn writes envs on the shard s: in one call when it is a
// ledger.OutboxBatchEnqueuer, one Enqueue each otherwise.
func entriesOn(ctx context.Context, s ledger.ClaimStore, envs []ledger.Envelope) ([]ledger.OutboxResult, error) {
	if b, ok := s.(ledger.OutboxBatchEnqueuer); ok {
		return b.EnqueueBatch(ctx, envs)
	}
	res := make([]ledger.OutboxResult, len(envs))
	for n, env := range envs {
		var err error
		if res[n], err = s.Enqueue(ctx, env); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// Save finds the entry's shard (one round trip to every shard) and
// calls it.
func (o *Outbox) Save(ctx context.Context, entry ledger.OutboxEntry) (ledger.OutboxEntry, error) {
	s, err := o.of(ctx, entry.ID)
	if err != nil {
		return ledger.OutboxEntry{}, err
	}
	return s.Save(ctx, entry)
}

// FindByID finds the entry's shard (one round trip to every shard) and
// calls it.
func (o *Outbox) FindByID(ctx context.Context, id ledger.OutboxEntryID) (ledger.OutboxEntry, error) {
	s, err := o.of(ctx, id)
	if err != nil {
		return ledger.OutboxEntry{}, err
	}
	return s.FindByID(ctx, id)
}

// FindPending reads up to limit from every shard and keeps the limit
// oldest: the same answer as one store. It needs every shard.
func (o *Outbox) FindPending(ctx context.Context, limit int) ([]ledger.OutboxEntry, error) {
	return o.find(ctx, limit, func(ctx context.Context, s ledger.ClaimStore) ([]ledger.OutboxEntry, error) {
		return s.FindPending(ctx, limit)
	}, storekit.PendingBefore)
}

// FindRetryReady reads as FindPending does, in retry order.
func (o *Outbox) FindRetryReady(ctx context.Context, now time.Time, limit int) ([]ledger.OutboxEntry, error) {
	return o.find(ctx, limit, func(ctx context.Context, s ledger.ClaimStore) ([]ledger.OutboxEntry, error) {
		return s.FindRetryReady(ctx, now, limit)
	}, storekit.RetryBefore)
}

func (o *Outbox) find(ctx context.Context, limit int, f func(context.Context, ledger.ClaimStore) ([]ledger.OutboxEntry, error), less func(a, b ledger.OutboxEntry) bool) ([]ledger.OutboxEntry, error) {
	if err := storekit.ValidateContext(ctx); err != nil {
		return nil, err
	}
	if err := storekit.ValidateLimit("limit", limit); err != nil {
		return nil, err
	}
	parts, errs := gather(ctx, o.every(), func(ctx context.Context, i int) ([]ledger.OutboxEntry, error) {
		return f(ctx, o.shards[i])
	})
	if err := all(errs); err != nil {
		return nil, err
	}
	// Each shard's answer is in its own order (which knows enqueue
	// order within an instant); the runs are placed among each other by
	// less.
	out := []ledger.OutboxEntry{}
	for len(out) < limit {
		best := -1
		for r, run := range parts {
			if len(run) > 0 && (best < 0 || less(run[0], parts[best][0])) {
				best = r
			}
		}
		if best < 0 {
			break
		}
		out = append(out, parts[best][0])
		parts[best] = parts[best][1:]
	}
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// MarkDelivered finds the entry's shard (one round trip to every shard) and
// calls it.
func (o *Outbox) MarkDelivered(ctx context.Context, id ledger.OutboxEntryID, result ledger.EmissionResult) (ledger.OutboxEntry, error) {
	s, err := o.of(ctx, id)
	if err != nil {
		return ledger.OutboxEntry{}, err
	}
	return s.MarkDelivered(ctx, id, result)
}

// MarkFailed finds the entry's shard (one round trip to every shard) and
// calls it.
func (o *Outbox) MarkFailed(ctx context.Context, id ledger.OutboxEntryID, emissionErr ledger.EmissionError, nextRetry *time.Time) (ledger.OutboxEntry, error) {
	s, err := o.of(ctx, id)
	if err != nil {
		return ledger.OutboxEntry{}, err
	}
	return s.MarkFailed(ctx, id, emissionErr, nextRetry)
}

// MarkDeadLettered finds the entry's shard (one round trip to every shard) and
// calls it.
func (o *Outbox) MarkDeadLettered(ctx context.Context, id ledger.OutboxEntryID, emissionErr ledger.EmissionError, reason string) (ledger.OutboxEntry, error) {
	s, err := o.of(ctx, id)
	if err != nil {
		return ledger.OutboxEntry{}, err
	}
	return s.MarkDeadLettered(ctx, id, emissionErr, reason)
}

// ClaimPending claims from the shards as Ledger.Lease leases: the whole
// limit from one shard first, rotating from call to call, and what it
// leaves split over the others. Each claim's token names its shard. A
// shard that fails is skipped and reported; the call fails only when
// every shard failed.
func (o *Outbox) ClaimPending(ctx context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	return o.claim(ctx, req, func(ctx context.Context, s ledger.ClaimStore, r ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
		return s.ClaimPending(ctx, r)
	}, storekit.PendingBefore)
}

// ClaimRetryReady claims as ClaimPending does, from the retries due.
func (o *Outbox) ClaimRetryReady(ctx context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	return o.claim(ctx, req, func(ctx context.Context, s ledger.ClaimStore, r ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
		return s.ClaimRetryReady(ctx, r)
	}, storekit.RetryBefore)
}

// ClaimDue claims as ClaimPending does, from what each shard's ClaimDue
// hands out (pending and due retries); a shard that is not a
// ledger.DueClaimer is asked with ClaimPending.
func (o *Outbox) ClaimDue(ctx context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	return o.claim(ctx, req, func(ctx context.Context, s ledger.ClaimStore, r ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
		if d, ok := s.(ledger.DueClaimer); ok {
			return d.ClaimDue(ctx, r)
		}
		return s.ClaimPending(ctx, r)
	}, nil)
}

func (o *Outbox) claim(ctx context.Context, req ledger.ClaimRequest, f func(context.Context, ledger.ClaimStore, ledger.ClaimRequest) ([]ledger.ClaimedEntry, error), less func(a, b ledger.OutboxEntry) bool) ([]ledger.ClaimedEntry, error) {
	if err := storekit.ValidateContext(ctx); err != nil {
		return nil, err
	}
	if err := storekit.ValidateClaimRequest(req); err != nil {
		return nil, err
	}
	var (
		mu   sync.Mutex
		runs = make([][]ledger.ClaimedEntry, len(o.shards))
		errs []error
	)
	open := o.every()
	left := req.Limit
	for round := 0; left > 0 && len(open) > 0; round++ {
		share := shares(round, left, len(open), int(o.next.Add(1)))
		var ask, askShare []int
		for k, i := range open {
			if share[k] > 0 {
				ask, askShare = append(ask, i), append(askShare, share[k])
			}
		}
		got := make([]int, len(ask))
		roundErrs := fanOut(ctx, ask, func(ctx context.Context, pos, i int) error {
			r := req
			r.Limit = askShare[pos]
			res, err := f(ctx, o.shards[i], r)
			if err != nil {
				return err
			}
			for k := range res {
				res[k].Claim.Token = wrapToken(i, res[k].Claim.Token)
			}
			mu.Lock()
			defer mu.Unlock()
			runs[i] = append(runs[i], res...)
			got[pos] = len(res)
			return nil
		})
		errs = append(errs, roundErrs...)
		var next []int
		taken := 0
		for _, i := range open {
			pos := slices.Index(ask, i)
			switch {
			case pos < 0:
				next = append(next, i)
			case roundErrs[pos] != nil:
			case got[pos] == askShare[pos]:
				next = append(next, i)
			}
		}
		for _, n := range got {
			taken += n
		}
		left -= taken
		open = next
	}
	if err := partial(errs, o.report); err != nil {
		return nil, err
	}
	return interleaveClaims(runs, less), nil
}

// interleaveClaims merges the shards' claims keeping each shard's order,
// the runs placed among each other by less (creation order when nil).
func interleaveClaims(runs [][]ledger.ClaimedEntry, less func(a, b ledger.OutboxEntry) bool) []ledger.ClaimedEntry {
	if less == nil {
		less = storekit.PendingBefore
	}
	out := []ledger.ClaimedEntry{}
	for {
		best := -1
		for r, run := range runs {
			if len(run) > 0 && (best < 0 || less(run[0].Entry, runs[best][0].Entry)) {
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

// MarkClaimDelivered goes to the shard the claim's token names: one call.
func (o *Outbox) MarkClaimDelivered(ctx context.Context, claim ledger.Claim, result ledger.EmissionResult) (ledger.OutboxResult, error) {
	return o.withClaim(ctx, claim, func(s ledger.ClaimStore, claim ledger.Claim) (ledger.OutboxResult, error) {
		return s.MarkClaimDelivered(ctx, claim, result)
	})
}

// MarkClaimFailed goes to the shard the claim's token names: one call.
func (o *Outbox) MarkClaimFailed(ctx context.Context, claim ledger.Claim, emissionErr ledger.EmissionError, nextRetry *time.Time) (ledger.OutboxResult, error) {
	return o.withClaim(ctx, claim, func(s ledger.ClaimStore, claim ledger.Claim) (ledger.OutboxResult, error) {
		return s.MarkClaimFailed(ctx, claim, emissionErr, nextRetry)
	})
}

// MarkClaimDeadLettered goes to the shard the claim's token names: one call.
func (o *Outbox) MarkClaimDeadLettered(ctx context.Context, claim ledger.Claim, emissionErr ledger.EmissionError, reason string) (ledger.OutboxResult, error) {
	return o.withClaim(ctx, claim, func(s ledger.ClaimStore, claim ledger.Claim) (ledger.OutboxResult, error) {
		return s.MarkClaimDeadLettered(ctx, claim, emissionErr, reason)
	})
}

// ReleaseClaim goes to the shard the claim's token names: one call.
func (o *Outbox) ReleaseClaim(ctx context.Context, claim ledger.Claim, reason string) (ledger.OutboxResult, error) {
	return o.withClaim(ctx, claim, func(s ledger.ClaimStore, claim ledger.Claim) (ledger.OutboxResult, error) {
		return s.ReleaseClaim(ctx, claim, reason)
	})
}

// SaveClaim goes to the shard the claim's token names: one call.
func (o *Outbox) SaveClaim(ctx context.Context, claim ledger.Claim, entry ledger.OutboxEntry) (ledger.OutboxResult, error) {
	return o.withClaim(ctx, claim, func(s ledger.ClaimStore, claim ledger.Claim) (ledger.OutboxResult, error) {
		return s.SaveClaim(ctx, claim, entry)
	})
}

// RenewClaim goes to the shard the claim's token names: one call. A shard that
// is not a ledger.ClaimRenewer answers ErrInvalid.
func (o *Outbox) RenewClaim(ctx context.Context, claim ledger.Claim, now time.Time, duration time.Duration) (ledger.OutboxResult, error) {
	return o.withClaim(ctx, claim, func(s ledger.ClaimStore, claim ledger.Claim) (ledger.OutboxResult, error) {
		r, ok := s.(ledger.ClaimRenewer)
		if !ok {
			return ledger.OutboxResult{}, &ledger.InvalidError{Field: "outbox", Reason: "the shard does not renew claims"}
		}
		return r.RenewClaim(ctx, claim, now, duration)
	})
}

// withClaim runs call on the shard the claim routes to and, when that
// shard does not know the entry (a claim passed with another entry's ID),
// again on the shard that holds the ID, which answers it as one store
// would. The common path is one call.
func (o *Outbox) withClaim(ctx context.Context, c ledger.Claim, call func(ledger.ClaimStore, ledger.Claim) (ledger.OutboxResult, error)) (ledger.OutboxResult, error) {
	i, inner, err := o.byClaim(ctx, c)
	if err != nil {
		return ledger.OutboxResult{}, err
	}
	res, err := call(o.shards[i], inner)
	if err != nil || res.Outcome != ledger.OutcomeNotFound || len(o.shards) == 1 {
		return res, wrapShard(i, err)
	}
	j, found, err := o.locate(ctx, c.EntryID)
	if err != nil || !found || j == i {
		return res, err
	}
	res, err = call(o.shards[j], inner)
	return res, wrapShard(j, err)
}

// CompleteClaims completes each shard's part in one call, concurrently,
// and answers in the order of cs. It is atomic per shard, not across
// shards; a shard that fails fails the call, the others' parts written.
func (o *Outbox) CompleteClaims(ctx context.Context, cs []ledger.ClaimCompletion) ([]ledger.OutboxResult, error) {
	if err := storekit.ValidateContext(ctx); err != nil {
		return nil, err
	}
	if err := storekit.ValidateClaimCompletions(cs); err != nil {
		return nil, err
	}
	dest := make([]int, len(cs))
	inner := make([]ledger.ClaimCompletion, len(cs)) // each under its shard's claim
	for k, c := range cs {
		i, claim, err := o.byClaim(ctx, c.Claim)
		if err != nil {
			return nil, err
		}
		dest[k], inner[k] = i, c
		inner[k].Claim = claim
	}
	return scatter(ctx, dest, inner, func(ctx context.Context, i int, part []ledger.ClaimCompletion) ([]ledger.OutboxResult, error) {
		cc, err := capability[ledger.ClaimCompleter](o.shards[i], "outbox", "complete claims in batches")
		if err != nil {
			return nil, err
		}
		return cc.CompleteClaims(ctx, part)
	})
}

// EntryHistory finds the entry's shard and reads from it.
func (o *Outbox) EntryHistory(ctx context.Context, id ledger.OutboxEntryID) ([]ledger.Transition, error) {
	st, err := o.of(ctx, id)
	if err != nil {
		return nil, err
	}
	h, ok := st.(ledger.OutboxHistorian)
	if !ok {
		return nil, &ledger.InvalidError{Field: "outbox", Reason: "the shard keeps no history"}
	}
	return h.EntryHistory(ctx, id)
}

// OutboxStats adds up every shard's statistics. It needs every shard.
func (o *Outbox) OutboxStats(ctx context.Context, now time.Time) (ledger.OutboxStats, error) {
	if err := storekit.ValidateContext(ctx); err != nil {
		return ledger.OutboxStats{}, err
	}
	if err := storekit.ValidateOutboxStats(now); err != nil {
		return ledger.OutboxStats{}, err
	}
	parts, errs := gather(ctx, o.every(), func(ctx context.Context, i int) (ledger.OutboxStats, error) {
		r, err := capability[ledger.OutboxStatsReporter](o.shards[i], "outbox", "report statistics")
		if err != nil {
			return ledger.OutboxStats{}, err
		}
		return r.OutboxStats(ctx, now)
	})
	if err := all(errs); err != nil {
		return ledger.OutboxStats{}, err
	}
	out := storekit.NewOutboxStats()
	for _, p := range parts {
		for s, n := range p.ByStatus {
			out.ByStatus[s] += n
		}
		for prov, q := range p.ByProvider {
			storekit.AddOutboxQueue(&out, prov, q.Depth, q.OldestDueAt)
		}
	}
	storekit.FinishOutboxStats(&out, now)
	return out, nil
}

// PurgeEntries purges up to limit ended entries, shard by shard in index
// order, each asked for what the earlier ones left of limit.
func (o *Outbox) PurgeEntries(ctx context.Context, olderThan time.Time, limit int) (int, error) {
	if err := storekit.ValidateContext(ctx); err != nil {
		return 0, err
	}
	if err := storekit.ValidatePurge(olderThan, limit); err != nil {
		return 0, err
	}
	n := 0
	for i, s := range o.shards {
		if n >= limit {
			break
		}
		p, ok := s.(ledger.OutboxPurger)
		if !ok {
			continue
		}
		k, err := p.PurgeEntries(ctx, olderThan, limit-n)
		n += k
		if err != nil {
			return n, wrapShard(i, err)
		}
	}
	return n, nil
}

// ListEntries merges every shard's page after the same cursor, as
// Ledger.List does. It needs every shard.
func (o *Outbox) ListEntries(ctx context.Context, q ledger.OutboxListQuery) (ledger.OutboxPage, error) {
	if err := storekit.ValidateContext(ctx); err != nil {
		return ledger.OutboxPage{}, err
	}
	if _, err := storekit.ValidateOutboxList(q); err != nil {
		return ledger.OutboxPage{}, err
	}
	pages, errs := gather(ctx, o.every(), func(ctx context.Context, i int) (ledger.OutboxPage, error) {
		l, err := capability[ledger.OutboxLister](o.shards[i], "outbox", "list entries")
		if err != nil {
			return ledger.OutboxPage{}, err
		}
		return l.ListEntries(ctx, q)
	})
	if err := all(errs); err != nil {
		return ledger.OutboxPage{}, err
	}
	merged := []ledger.OutboxEntry{}
	more := false
	for _, p := range pages {
		merged = append(merged, p.Entries...)
		more = more || p.Next != ""
	}
	slices.SortFunc(merged, func(a, b ledger.OutboxEntry) int { return compareStrings(string(a.ID), string(b.ID)) })
	if len(merged) > q.Limit {
		merged, more = merged[:q.Limit], true
	}
	page := ledger.OutboxPage{Entries: merged}
	if more && len(merged) > 0 {
		page.Next = storekit.EncodeOutboxCursor(merged[len(merged)-1].ID)
	}
	return page, nil
}

// TakeLead, RenewLead, ReleaseLead and GetLead keep leads on shard 0, as
// the Ledger's do.
func (o *Outbox) TakeLead(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (ledger.LeadResult, error) {
	e, err := electorOf(o.shards[0])
	if err != nil {
		return ledger.LeadResult{}, err
	}
	return e.TakeLead(ctx, name, holder, now, ttl)
}

// RenewLead renews a lead on shard 0.
func (o *Outbox) RenewLead(ctx context.Context, lead ledger.Lead, now time.Time, ttl time.Duration) (ledger.LeadResult, error) {
	e, err := electorOf(o.shards[0])
	if err != nil {
		return ledger.LeadResult{}, err
	}
	return e.RenewLead(ctx, lead, now, ttl)
}

// ReleaseLead releases a lead on shard 0.
func (o *Outbox) ReleaseLead(ctx context.Context, lead ledger.Lead, now time.Time) (ledger.LeadResult, error) {
	e, err := electorOf(o.shards[0])
	if err != nil {
		return ledger.LeadResult{}, err
	}
	return e.ReleaseLead(ctx, lead, now)
}

// GetLead reads a lead from shard 0.
func (o *Outbox) GetLead(ctx context.Context, name string) (ledger.Lead, error) {
	e, err := electorOf(o.shards[0])
	if err != nil {
		return ledger.Lead{}, err
	}
	return e.GetLead(ctx, name)
}
