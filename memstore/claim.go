package memstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// Compile-time checks that Outbox implements the outbox contracts.
var (
	_ ledger.OutboxStore         = (*Outbox)(nil)
	_ ledger.ClaimStore          = (*Outbox)(nil)
	_ ledger.DueClaimer          = (*Outbox)(nil)
	_ ledger.ClaimCompleter      = (*Outbox)(nil)
	_ ledger.OutboxBatchEnqueuer = (*Outbox)(nil)
)

// Outbox is the in-memory outbox claim store. It is safe for concurrent
// use. Get one with Store.Outbox or NewOutbox.
//
// Claims reduce duplicate selection among cooperating workers; they do not
// make provider delivery exactly-once. A worker that stalls past its claim
// can still be emitting when another worker claims the entry again, so
// providers should deduplicate on (Claim.EntryID, Claim.Seq) or on the
// envelope's idempotency key.
//
// The methods that carry no now stamp their timestamps from the WithClock
// option; claims use ClaimRequest.Now. No decision reads the clock.
type Outbox struct {
	cfg config
	// leads holds the leadership leases, shared with the Store beside
	// this outbox (lead.go).
	leads *leadTable

	mu      sync.Mutex
	entries map[ledger.OutboxEntryID]*entry
	// enqueued counts the entries ever added: the enqueue sequence of the
	// latest one.
	enqueued uint64
	// seqs holds each entry's enqueue sequence. It breaks ties on
	// CreatedAt in the pending index: every entry of one EnqueueBatch
	// shares one clock reading, and entry IDs are hashes of the
	// idempotency keys, so without it a batch would be found and claimed
	// in hash order instead of first in, first out. It never leaves the
	// store (ledger.OutboxEntry has no field for it) and never changes.
	seqs map[ledger.OutboxEntryID]uint64
	// pending holds Pending entries by (CreatedAt, enqueue sequence, ID),
	// claimed or not.
	pending btree[seqKey]
	// scheduled holds RetryScheduled and Deferred entries by
	// (NextAttemptAt, ID), claimed or not.
	scheduled btree[timeKey]
	// counts counts the entries by status (statusCode), for OutboxStats.
	counts [len(outboxStatuses)]int64
}

// entry is an outbox entry as the Outbox keeps it: the record, and its
// history after its creation (see history.go; nil when history is off),
// kept together so that writing the history costs no second lookup.
type entry struct {
	ledger.OutboxEntry
	hist []event
}

// NewOutbox returns the empty Outbox of a new Store configured by opts:
// New(opts...).Outbox().
func NewOutbox(opts ...Option) *Outbox { return New(opts...).Outbox() }

func newOutbox(cfg config, leads *leadTable) *Outbox {
	return &Outbox{
		cfg:     cfg,
		leads:   leads,
		entries: make(map[ledger.OutboxEntryID]*entry),
		seqs:    make(map[ledger.OutboxEntryID]uint64),
	}
}

// Enqueue adds a Pending entry for env, its ID derived from
// env.IdempotencyKey (ledger.OutboxEntryIDFor), CreatedAt from the clock.
// The same envelope again answers OutcomeRepeated, a different one under
// the same key OutcomeConflict, both with the stored entry and nothing
// written. Errors: ErrInvalid, ctx.Err().
func (o *Outbox) Enqueue(ctx context.Context, env ledger.Envelope) (ledger.OutboxResult, error) {
	if err := begin(ctx, storekit.ValidateEnvelope(env, o.cfg.maxPayload)); err != nil {
		return ledger.OutboxResult{}, err
	}
	e := storekit.NewOutboxEntry(env, o.cfg.clock())
	o.mu.Lock()
	r := o.enqueueLocked(env, e)
	o.mu.Unlock()
	r.Entry = handOutEntry(r.Entry)
	return r, nil
}

// EnqueueBatch enqueues envs in order under one lock, answering one result
// per envelope as Enqueue would; an envelope whose key appeared earlier in
// the batch is judged against the earlier one. The new entries share one
// CreatedAt and are found and claimed in the order of envs. It is atomic
// for errors: one invalid envelope (or a batch of 0 or more than
// ledger.MaxLimit) fails the call with ErrInvalid and nothing is written.
func (o *Outbox) EnqueueBatch(ctx context.Context, envs []ledger.Envelope) ([]ledger.OutboxResult, error) {
	if err := begin(ctx, storekit.ValidateEnvelopeBatch(envs, o.cfg.maxPayload)); err != nil {
		return nil, err
	}
	now := o.cfg.clock()
	built := make([]ledger.OutboxEntry, len(envs))
	for i, env := range envs {
		built[i] = storekit.NewOutboxEntry(env, now)
	}
	out := make([]ledger.OutboxResult, len(envs))
	o.mu.Lock()
	for i, env := range envs {
		out[i] = o.enqueueLocked(env, built[i])
	}
	o.mu.Unlock()
	for i := range out {
		out[i].Entry = handOutEntry(out[i].Entry)
	}
	return out, nil
}

func (o *Outbox) enqueueLocked(env ledger.Envelope, e ledger.OutboxEntry) ledger.OutboxResult {
	if p, ok := o.entries[e.ID]; ok {
		return ledger.OutboxResult{Outcome: storekit.OutboxEntry(p.OutboxEntry).EnqueueAgain(env), Entry: p.OutboxEntry}
	}
	o.insert(e)
	return ledger.OutboxResult{Outcome: ledger.OutcomeApplied, Entry: e}
}

// insert stores the new entry e, numbered after every entry before it,
// and indexes it. The caller holds o.mu and has checked that e.ID is new.
func (o *Outbox) insert(e ledger.OutboxEntry) {
	p := &entry{OutboxEntry: e}
	o.entries[e.ID] = p
	o.enqueued++
	o.seqs[e.ID] = o.enqueued
	o.reindex(nil, &p.OutboxEntry)
}

// Save writes entry's mutable fields when entry.Version matches the stored
// Version (storekit.OutboxEntry.Save) and returns the stored entry. Errors:
// ErrConflict for a stale Version or an entry that already ended,
// ErrNotFound for an unknown ID, ErrInvalid, ctx.Err().
func (o *Outbox) Save(ctx context.Context, entry ledger.OutboxEntry) (ledger.OutboxEntry, error) {
	if err := begin(ctx, storekit.ValidateSave(entry)); err != nil {
		return ledger.OutboxEntry{}, err
	}
	return o.write(entry.ID, ledger.OpSave, func(e ledger.OutboxEntry, now time.Time) (ledger.OutboxEntry, error) {
		return storekit.OutboxEntry(e).Save(entry, now)
	})
}

// FindByID returns a deep copy of one entry in any status. Errors:
// ErrNotFound, ErrInvalid, ctx.Err().
func (o *Outbox) FindByID(ctx context.Context, id ledger.OutboxEntryID) (ledger.OutboxEntry, error) {
	if err := begin(ctx, storekit.ValidateGet(string(id))); err != nil {
		return ledger.OutboxEntry{}, err
	}
	o.mu.Lock()
	p, ok := o.entries[id]
	var e ledger.OutboxEntry
	if ok {
		e = p.OutboxEntry
	}
	o.mu.Unlock()
	if !ok {
		return ledger.OutboxEntry{}, fmt.Errorf("memstore: find outbox entry %s: %w", id, ledger.ErrNotFound)
	}
	return handOutEntry(e), nil
}

// FindPending returns up to limit Pending entries, claimed or not, oldest
// first: CreatedAt, then enqueue order (entries created at the same instant
// come in the order they were enqueued). Errors: ErrInvalid, ctx.Err().
func (o *Outbox) FindPending(ctx context.Context, limit int) ([]ledger.OutboxEntry, error) {
	if err := begin(ctx, storekit.ValidateFindPending(limit)); err != nil {
		return nil, err
	}
	var out []ledger.OutboxEntry
	o.mu.Lock()
	c := o.pending.first()
	for k, ok := c.next(); ok && len(out) < limit; k, ok = c.next() {
		out = append(out, o.entries[ledger.OutboxEntryID(k.id)].OutboxEntry)
	}
	o.mu.Unlock()
	return handOutEntries(out), nil
}

// FindRetryReady returns up to limit RetryScheduled or Deferred entries
// whose NextAttemptAt is at or before now, claimed or not, earliest first
// (storekit.RetryBefore). Errors: ErrInvalid, ctx.Err().
func (o *Outbox) FindRetryReady(ctx context.Context, now time.Time, limit int) ([]ledger.OutboxEntry, error) {
	if err := begin(ctx, storekit.ValidateFindRetryReady(now, limit)); err != nil {
		return nil, err
	}
	now = ledger.Normalize(now)
	end := now.UnixMicro()
	var out []ledger.OutboxEntry
	o.mu.Lock()
	c := o.scheduled.first()
	for k, ok := c.next(); ok && k.at <= end && len(out) < limit; k, ok = c.next() {
		if p := o.entries[ledger.OutboxEntryID(k.id)]; storekit.OutboxEntry(p.OutboxEntry).RetryReady(now) {
			out = append(out, p.OutboxEntry)
		}
	}
	o.mu.Unlock()
	return handOutEntries(out), nil
}

// MarkDelivered ends the entry as Delivered, ignoring any claim
// (storekit.OutboxEntry.MarkDelivered). An entry already Delivered comes back
// unchanged. Errors: ErrConflict when it ended otherwise, ErrNotFound,
// ErrInvalid, ctx.Err().
func (o *Outbox) MarkDelivered(ctx context.Context, id ledger.OutboxEntryID, result ledger.EmissionResult) (ledger.OutboxEntry, error) {
	if err := begin(ctx, storekit.ValidateMarkDelivered(id, result)); err != nil {
		return ledger.OutboxEntry{}, err
	}
	return o.write(id, ledger.OpMarkDelivered, func(e ledger.OutboxEntry, now time.Time) (ledger.OutboxEntry, error) {
		return storekit.OutboxEntry(e).MarkDelivered(result, now)
	})
}

// MarkFailed records a failed emission: RetryScheduled at nextRetry (a past
// time means due now), or Failed for good when nextRetry is nil. Errors as
// MarkDelivered; ErrInvalid for a zero nextRetry.
func (o *Outbox) MarkFailed(ctx context.Context, id ledger.OutboxEntryID, emissionErr ledger.EmissionError, nextRetry *time.Time) (ledger.OutboxEntry, error) {
	if err := begin(ctx, storekit.ValidateMarkEntryFailed(id, emissionErr, nextRetry)); err != nil {
		return ledger.OutboxEntry{}, err
	}
	return o.write(id, ledger.OpMarkFailed, func(e ledger.OutboxEntry, now time.Time) (ledger.OutboxEntry, error) {
		return storekit.OutboxEntry(e).MarkFailed(emissionErr, nextRetry, now)
	})
}

// MarkDeadLettered ends the entry as DeadLettered with reason. Errors as
// MarkDelivered.
func (o *Outbox) MarkDeadLettered(ctx context.Context, id ledger.OutboxEntryID, emissionErr ledger.EmissionError, reason string) (ledger.OutboxEntry, error) {
	if err := begin(ctx, storekit.ValidateMarkDeadLettered(id, emissionErr, reason)); err != nil {
		return ledger.OutboxEntry{}, err
	}
	return o.write(id, ledger.OpMarkDeadLettered, func(e ledger.OutboxEntry, now time.Time) (ledger.OutboxEntry, error) {
		return storekit.OutboxEntry(e).MarkDeadLettered(emissionErr, reason, now)
	})
}

// write runs one base-contract transition, op, stamped with the clock, and
// stores the result when it changed the entry. The base contract's calls
// act for nobody in particular, so their history entries name no actor.
func (o *Outbox) write(id ledger.OutboxEntryID, op ledger.Operation, step func(ledger.OutboxEntry, time.Time) (ledger.OutboxEntry, error)) (ledger.OutboxEntry, error) {
	now := o.cfg.clock()
	o.mu.Lock()
	p, ok := o.entries[id]
	if !ok {
		o.mu.Unlock()
		return ledger.OutboxEntry{}, fmt.Errorf("memstore: %s outbox entry %s: %w", op, id, ledger.ErrNotFound)
	}
	e, err := step(p.OutboxEntry, now)
	if err != nil {
		o.mu.Unlock()
		return ledger.OutboxEntry{}, fmt.Errorf("memstore: %s outbox entry %s: %w", op, id, err)
	}
	if e.Version != p.Version {
		o.replace(p, e, change{op: op})
	}
	o.mu.Unlock()
	return handOutEntry(e), nil
}

// ClaimPending claims up to req.Limit Pending entries that are unclaimed or
// whose claim expired at req.Now, oldest first (CreatedAt, then enqueue
// order), each under a new token until req.Now+req.LeaseDuration. It walks
// the pending index in order, skipping entries whose claim is still in
// force, so a call costs more with every claim in force ahead of what it
// claims: claiming ten entries and marking them delivered takes about 45
// µs with no claim in force ahead, and 1.15 ms with 10,000 ahead
// (BenchmarkClaimInForceAhead). That keeps an expired claim claimable at its place in the order
// at no cost, which matters most after a worker holding many claims dies.
// Errors: ErrInvalid, ctx.Err().
func (o *Outbox) ClaimPending(ctx context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	if err := begin(ctx, storekit.ValidateClaimRequest(req)); err != nil {
		return nil, err
	}
	now := ledger.Normalize(req.Now)
	o.mu.Lock()
	out := o.grant(o.pickPending(now, req.Limit), req, now)
	o.mu.Unlock()
	return handOutClaimed(out), nil
}

// ClaimRetryReady claims like ClaimPending, from RetryScheduled and
// Deferred entries whose NextAttemptAt has come, earliest first (then ID).
// Errors: ErrInvalid, ctx.Err().
func (o *Outbox) ClaimRetryReady(ctx context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	if err := begin(ctx, storekit.ValidateClaimRequest(req)); err != nil {
		return nil, err
	}
	now := ledger.Normalize(req.Now)
	o.mu.Lock()
	out := o.grant(o.pickRetryReady(now, req.Limit), req, now)
	o.mu.Unlock()
	return handOutClaimed(out), nil
}

// ClaimDue claims what ClaimRetryReady and then ClaimPending would (see
// ledger.DueClaimer), under one lock. Errors: ErrInvalid, ctx.Err().
func (o *Outbox) ClaimDue(ctx context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	if err := begin(ctx, storekit.ValidateClaimRequest(req)); err != nil {
		return nil, err
	}
	now := ledger.Normalize(req.Now)
	o.mu.Lock()
	picks := o.pickRetryReady(now, req.Limit)
	picks = append(picks, o.pickPending(now, req.Limit-len(picks))...)
	out := o.grant(picks, req, now)
	o.mu.Unlock()
	return handOutClaimed(out), nil
}

// pickPending returns up to limit claimable Pending entries in delivery
// order. The caller holds o.mu.
func (o *Outbox) pickPending(now time.Time, limit int) []*entry {
	var picks []*entry
	c := o.pending.first()
	for k, ok := c.next(); ok && len(picks) < limit; k, ok = c.next() {
		if p := o.entries[ledger.OutboxEntryID(k.id)]; storekit.OutboxEntry(p.OutboxEntry).PendingClaimable(now) {
			picks = append(picks, p)
		}
	}
	return picks
}

// pickRetryReady returns up to limit claimable retry-ready entries,
// earliest due first. The caller holds o.mu.
func (o *Outbox) pickRetryReady(now time.Time, limit int) []*entry {
	var picks []*entry
	end := now.UnixMicro()
	c := o.scheduled.first()
	for k, ok := c.next(); ok && k.at <= end && len(picks) < limit; k, ok = c.next() {
		if p := o.entries[ledger.OutboxEntryID(k.id)]; storekit.OutboxEntry(p.OutboxEntry).RetryClaimable(now) {
			picks = append(picks, p)
		}
	}
	return picks
}

// CompleteClaims applies each of cs as the call its Op names would, one
// after another (see ledger.ClaimCompleter). Errors: ErrInvalid, before
// anything is written; ctx.Err().
func (o *Outbox) CompleteClaims(ctx context.Context, cs []ledger.ClaimCompletion) ([]ledger.OutboxResult, error) {
	if err := begin(ctx, storekit.ValidateClaimCompletions(cs)); err != nil {
		return nil, err
	}
	out := make([]ledger.OutboxResult, len(cs))
	for i, c := range cs {
		var err error
		switch c.Op {
		case ledger.OpMarkDelivered:
			out[i], err = o.MarkClaimDelivered(ctx, c.Claim, c.Result)
		case ledger.OpMarkFailed:
			out[i], err = o.MarkClaimFailed(ctx, c.Claim, c.Error, c.NextRetry)
		case ledger.OpMarkDeadLettered:
			out[i], err = o.MarkClaimDeadLettered(ctx, c.Claim, c.Error, c.Reason)
		case ledger.OpSaveClaim:
			out[i], err = o.SaveClaim(ctx, c.Claim, c.Entry)
		case ledger.OpReleaseClaim:
			out[i], err = o.ReleaseClaim(ctx, c.Claim, c.Reason)
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// grant claims each of picks for req.Worker. The caller holds o.mu.
func (o *Outbox) grant(picks []*entry, req ledger.ClaimRequest, now time.Time) []ledger.ClaimedEntry {
	if len(picks) == 0 {
		return nil
	}
	out := make([]ledger.ClaimedEntry, 0, len(picks))
	for _, p := range picks {
		e, c := storekit.OutboxEntry(p.OutboxEntry).Grant(req.Worker, storekit.NewToken(), now, req.LeaseDuration)
		o.replace(p, e, change{op: ledger.OpClaim, worker: req.Worker})
		out = append(out, ledger.ClaimedEntry{Claim: c, Entry: e})
	}
	return out
}

// MarkClaimDelivered ends the claimed entry as Delivered. Outcomes, first
// match wins: NotFound, Ended, LeaseLost, Repeated, Applied. Errors:
// ErrInvalid, ctx.Err().
func (o *Outbox) MarkClaimDelivered(ctx context.Context, claim ledger.Claim, result ledger.EmissionResult) (ledger.OutboxResult, error) {
	if err := begin(ctx, storekit.ValidateMarkClaimDelivered(claim, result)); err != nil {
		return ledger.OutboxResult{}, err
	}
	return o.complete(claim.EntryID, change{op: ledger.OpMarkDelivered}, func(e ledger.OutboxEntry, now time.Time) (ledger.OutboxEntry, ledger.Outcome) {
		return storekit.OutboxEntry(e).MarkClaimDelivered(claim, result, now)
	}), nil
}

// MarkClaimFailed records a failed emission under the claim: RetryScheduled
// at nextRetry, or Failed when nextRetry is nil. Outcomes as
// MarkClaimDelivered. Errors: ErrInvalid (also for a zero nextRetry),
// ctx.Err().
func (o *Outbox) MarkClaimFailed(ctx context.Context, claim ledger.Claim, emissionErr ledger.EmissionError, nextRetry *time.Time) (ledger.OutboxResult, error) {
	if err := begin(ctx, storekit.ValidateMarkClaimFailed(claim, emissionErr, nextRetry)); err != nil {
		return ledger.OutboxResult{}, err
	}
	return o.complete(claim.EntryID, change{op: ledger.OpMarkFailed}, func(e ledger.OutboxEntry, now time.Time) (ledger.OutboxEntry, ledger.Outcome) {
		return storekit.OutboxEntry(e).MarkClaimFailed(claim, emissionErr, nextRetry, now)
	}), nil
}

// MarkClaimDeadLettered ends the claimed entry as DeadLettered with reason.
// Outcomes as MarkClaimDelivered. Errors: ErrInvalid, ctx.Err().
func (o *Outbox) MarkClaimDeadLettered(ctx context.Context, claim ledger.Claim, emissionErr ledger.EmissionError, reason string) (ledger.OutboxResult, error) {
	if err := begin(ctx, storekit.ValidateMarkClaimDeadLettered(claim, emissionErr, reason)); err != nil {
		return ledger.OutboxResult{}, err
	}
	return o.complete(claim.EntryID, change{op: ledger.OpMarkDeadLettered}, func(e ledger.OutboxEntry, now time.Time) (ledger.OutboxEntry, ledger.Outcome) {
		return storekit.OutboxEntry(e).MarkClaimDeadLettered(claim, emissionErr, reason, now)
	}), nil
}

// ReleaseClaim gives the claim back without changing the status and
// without counting the attempt. reason is checked as free text; the entry
// does not keep it, its history entry does. Outcomes as MarkClaimDelivered.
// Errors: ErrInvalid, ctx.Err().
func (o *Outbox) ReleaseClaim(ctx context.Context, claim ledger.Claim, reason string) (ledger.OutboxResult, error) {
	if err := begin(ctx, storekit.ValidateReleaseClaim(claim, reason)); err != nil {
		return ledger.OutboxResult{}, err
	}
	return o.complete(claim.EntryID, change{op: ledger.OpReleaseClaim, reason: reason}, func(e ledger.OutboxEntry, now time.Time) (ledger.OutboxEntry, ledger.Outcome) {
		return storekit.OutboxEntry(e).ReleaseClaim(claim, now)
	}), nil
}

// SaveClaim writes a provider-directed transition from entry's mutable
// fields, except Attempts, and ends the claim; entry.Version is not
// checked, the claim token is the guard. Outcomes as MarkClaimDelivered.
// Errors: ErrInvalid (also when entry.ID is not claim.EntryID, since the
// call would otherwise write one entry's fields onto another), ctx.Err().
func (o *Outbox) SaveClaim(ctx context.Context, claim ledger.Claim, entry ledger.OutboxEntry) (ledger.OutboxResult, error) {
	if err := begin(ctx, storekit.ValidateSaveClaim(claim, entry)); err != nil {
		return ledger.OutboxResult{}, err
	}
	return o.complete(claim.EntryID, change{op: ledger.OpSaveClaim}, func(e ledger.OutboxEntry, now time.Time) (ledger.OutboxEntry, ledger.Outcome) {
		return storekit.OutboxEntry(e).SaveClaim(claim, entry, now)
	}), nil
}

// complete runs one claim completion, stamped with the clock, and stores
// the result when it applied, recorded as c made by the worker of the
// claim it ended.
func (o *Outbox) complete(id ledger.OutboxEntryID, c change, step func(ledger.OutboxEntry, time.Time) (ledger.OutboxEntry, ledger.Outcome)) ledger.OutboxResult {
	now := o.cfg.clock()
	o.mu.Lock()
	p, ok := o.entries[id]
	if !ok {
		o.mu.Unlock()
		return ledger.OutboxResult{Outcome: ledger.OutcomeNotFound}
	}
	e, out := step(p.OutboxEntry, now)
	if out == ledger.OutcomeApplied {
		// An applied completion was made under the claim in force.
		c.worker = p.Claim.Worker
		o.replace(p, e, c)
	} else {
		e = p.OutboxEntry
	}
	o.mu.Unlock()
	return ledger.OutboxResult{Outcome: out, Entry: handOutEntry(e)}
}

// replace overwrites the entry at p with e, the result of c, moving it
// between indexes and counts and writing its history entry first. Every
// transition that writes goes through here. The caller holds o.mu.
func (o *Outbox) replace(p *entry, e ledger.OutboxEntry, c change) {
	o.recordEntry(p, c, &e)
	o.reindex(&p.OutboxEntry, &e)
	p.OutboxEntry = e
}

// unindex takes an entry that is going away out of every index and count.
// The caller holds o.mu.
func (o *Outbox) unindex(p *ledger.OutboxEntry) {
	o.counts[statusCode(string(p.Status))]--
	if p.Status == ledger.OutboxStatusPending {
		o.pending.delete(o.pendingKey(p))
	}
	if p.Status.Scheduled() {
		o.scheduled.delete(entryKey(p.NextAttemptAt, p.ID))
	}
}

// reindex moves an entry from the index entries and counts of old (nil for
// a new entry) to those of e.
func (o *Outbox) reindex(old, e *ledger.OutboxEntry) {
	if old == nil || old.Status != e.Status {
		if old != nil {
			o.counts[statusCode(string(old.Status))]--
		}
		o.counts[statusCode(string(e.Status))]++
	}
	wasPending := old != nil && old.Status == ledger.OutboxStatusPending
	if isPending := e.Status == ledger.OutboxStatusPending; wasPending != isPending {
		if wasPending {
			o.pending.delete(o.pendingKey(old))
		} else {
			o.pending.insert(o.pendingKey(e))
		}
	}
	wasScheduled := old != nil && old.Status.Scheduled()
	if isScheduled := e.Status.Scheduled(); wasScheduled != isScheduled ||
		(wasScheduled && !old.NextAttemptAt.Equal(e.NextAttemptAt)) {
		if wasScheduled {
			o.scheduled.delete(entryKey(old.NextAttemptAt, old.ID))
		}
		if isScheduled {
			o.scheduled.insert(entryKey(e.NextAttemptAt, e.ID))
		}
	}
}

// pendingKey is e's key in the pending index. CreatedAt and the enqueue
// sequence never change, so an entry keeps its place while it stays
// Pending, and gets it back if a Save makes it Pending again. The caller
// holds o.mu.
func (o *Outbox) pendingKey(e *ledger.OutboxEntry) seqKey {
	return seqKey{at: e.CreatedAt.UnixMicro(), seq: o.seqs[e.ID], id: string(e.ID)}
}

func entryKey(t time.Time, id ledger.OutboxEntryID) timeKey {
	return timeKey{at: t.UnixMicro(), id: string(id)}
}

func handOutEntries(es []ledger.OutboxEntry) []ledger.OutboxEntry {
	for i := range es {
		es[i] = handOutEntry(es[i])
	}
	return es
}

func handOutClaimed(cs []ledger.ClaimedEntry) []ledger.ClaimedEntry {
	for i := range cs {
		cs[i].Entry = handOutEntry(cs[i].Entry)
	}
	return cs
}
