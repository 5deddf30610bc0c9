package ledgertest_test

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/memstore"
	"github.com/leaseledger/ledger/storekit"
)

// This file holds deliberately broken stores: memstore with one guarantee
// taken away by a wrapper. The suite must fail against each of them (see
// selftest_test.go).

// doubleGrantOutbox hands every claim out twice: a claim call returns its
// own grants and also the grants of the call before it, which are still in
// force and belong to another caller.
type doubleGrantOutbox struct {
	*memstore.Outbox
	mu   sync.Mutex
	last []ledger.ClaimedEntry
}

func (o *doubleGrantOutbox) again(got []ledger.ClaimedEntry, err error) ([]ledger.ClaimedEntry, error) {
	if err != nil {
		return got, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	prev := o.last
	o.last = got
	return append(got, prev...), nil
}

func (o *doubleGrantOutbox) ClaimPending(ctx context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	return o.again(o.Outbox.ClaimPending(ctx, req))
}

func (o *doubleGrantOutbox) ClaimRetryReady(ctx context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	return o.again(o.Outbox.ClaimRetryReady(ctx, req))
}

// forgetAttemptOutbox does not count the attempts of claims: every entry it
// returns from a claim or a read has one attempt less per claim granted.
type forgetAttemptOutbox struct {
	*memstore.Outbox
}

func forgetClaimAttempts(e ledger.OutboxEntry) ledger.OutboxEntry {
	e.Attempts = max(0, e.Attempts-int(e.ClaimSeq))
	return e
}

func (o forgetAttemptOutbox) forget(got []ledger.ClaimedEntry, err error) ([]ledger.ClaimedEntry, error) {
	for i := range got {
		got[i].Entry = forgetClaimAttempts(got[i].Entry)
	}
	return got, err
}

func (o forgetAttemptOutbox) ClaimPending(ctx context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	return o.forget(o.Outbox.ClaimPending(ctx, req))
}

func (o forgetAttemptOutbox) ClaimRetryReady(ctx context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	return o.forget(o.Outbox.ClaimRetryReady(ctx, req))
}

func (o forgetAttemptOutbox) FindByID(ctx context.Context, id ledger.OutboxEntryID) (ledger.OutboxEntry, error) {
	e, err := o.Outbox.FindByID(ctx, id)
	return forgetClaimAttempts(e), err
}

// staleTokenOutbox accepts any claim on an entry: it swaps the caller's
// token and sequence for those of the latest claim it granted before it
// completes. (Entries handed out carry no token, so it keeps its own.)
type staleTokenOutbox struct {
	*memstore.Outbox
	mu     sync.Mutex
	latest map[ledger.OutboxEntryID]ledger.Claim
}

func newStaleTokenOutbox() *staleTokenOutbox {
	return &staleTokenOutbox{Outbox: memstore.NewOutbox(), latest: map[ledger.OutboxEntryID]ledger.Claim{}}
}

func (o *staleTokenOutbox) remember(got []ledger.ClaimedEntry, err error) ([]ledger.ClaimedEntry, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, ce := range got {
		o.latest[ce.Claim.EntryID] = ce.Claim
	}
	return got, err
}

func (o *staleTokenOutbox) ClaimPending(ctx context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	return o.remember(o.Outbox.ClaimPending(ctx, req))
}

func (o *staleTokenOutbox) ClaimRetryReady(ctx context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	return o.remember(o.Outbox.ClaimRetryReady(ctx, req))
}

func (o *staleTokenOutbox) current(c ledger.Claim) ledger.Claim {
	o.mu.Lock()
	defer o.mu.Unlock()
	if l, ok := o.latest[c.EntryID]; ok {
		c.Token, c.Seq = l.Token, l.Seq
	}
	return c
}

func (o *staleTokenOutbox) MarkClaimDelivered(ctx context.Context, c ledger.Claim, r ledger.EmissionResult) (ledger.OutboxResult, error) {
	return o.Outbox.MarkClaimDelivered(ctx, o.current(c), r)
}

func (o *staleTokenOutbox) MarkClaimFailed(ctx context.Context, c ledger.Claim, e ledger.EmissionError, next *time.Time) (ledger.OutboxResult, error) {
	return o.Outbox.MarkClaimFailed(ctx, o.current(c), e, next)
}

func (o *staleTokenOutbox) MarkClaimDeadLettered(ctx context.Context, c ledger.Claim, e ledger.EmissionError, reason string) (ledger.OutboxResult, error) {
	return o.Outbox.MarkClaimDeadLettered(ctx, o.current(c), e, reason)
}

func (o *staleTokenOutbox) ReleaseClaim(ctx context.Context, c ledger.Claim, reason string) (ledger.OutboxResult, error) {
	return o.Outbox.ReleaseClaim(ctx, o.current(c), reason)
}

func (o *staleTokenOutbox) SaveClaim(ctx context.Context, c ledger.Claim, e ledger.OutboxEntry) (ledger.OutboxResult, error) {
	return o.Outbox.SaveClaim(ctx, o.current(c), e)
}

// leakyTokenOutbox hands its claim tokens out with the entries FindByID
// returns, as a store that forgot to redact its reads would.
type leakyTokenOutbox struct {
	*staleTokenOutbox
}

func (o leakyTokenOutbox) FindByID(ctx context.Context, id ledger.OutboxEntryID) (ledger.OutboxEntry, error) {
	e, err := o.Outbox.FindByID(ctx, id)
	if e.Claim != nil {
		c := o.current(*e.Claim)
		if c.Seq == e.Claim.Seq {
			e.Claim = &c
		}
	}
	return e, err
}

// Completions go to memstore unchanged: only the reads leak.
func (o leakyTokenOutbox) MarkClaimDelivered(ctx context.Context, c ledger.Claim, r ledger.EmissionResult) (ledger.OutboxResult, error) {
	return o.Outbox.MarkClaimDelivered(ctx, c, r)
}

func (o leakyTokenOutbox) MarkClaimFailed(ctx context.Context, c ledger.Claim, e ledger.EmissionError, next *time.Time) (ledger.OutboxResult, error) {
	return o.Outbox.MarkClaimFailed(ctx, c, e, next)
}

func (o leakyTokenOutbox) MarkClaimDeadLettered(ctx context.Context, c ledger.Claim, e ledger.EmissionError, reason string) (ledger.OutboxResult, error) {
	return o.Outbox.MarkClaimDeadLettered(ctx, c, e, reason)
}

func (o leakyTokenOutbox) ReleaseClaim(ctx context.Context, c ledger.Claim, reason string) (ledger.OutboxResult, error) {
	return o.Outbox.ReleaseClaim(ctx, c, reason)
}

func (o leakyTokenOutbox) SaveClaim(ctx context.Context, c ledger.Claim, e ledger.OutboxEntry) (ledger.OutboxResult, error) {
	return o.Outbox.SaveClaim(ctx, c, e)
}

// lenientSaveOutbox stores an Attempts past ledger.MaxCount as the bound
// instead of refusing it, as a store that clamped input would.
type lenientSaveOutbox struct {
	*memstore.Outbox
}

func (o lenientSaveOutbox) Save(ctx context.Context, e ledger.OutboxEntry) (ledger.OutboxEntry, error) {
	e.Attempts = min(e.Attempts, ledger.MaxCount)
	return o.Outbox.Save(ctx, e)
}

// doubleGrantLedger hands every lease out twice: a Lease call returns its
// own grants and also the grants of the call before it.
type doubleGrantLedger struct {
	*memstore.Store
	mu   sync.Mutex
	last []ledger.LeasedDelivery
}

func (l *doubleGrantLedger) Lease(ctx context.Context, f ledger.LeaseFilter, o ledger.Owner, now time.Time, d time.Duration, limit int) (ledger.LeaseResult, error) {
	res, err := l.Store.Lease(ctx, f, o, now, d, limit)
	if err != nil {
		return res, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	prev := l.last
	l.last = res.Leased
	res.Leased = append(res.Leased, prev...)
	return res, nil
}

// forgetAttemptLedger does not count the attempts of leases: every delivery
// it returns from a lease or a read has one attempt less per grant.
type forgetAttemptLedger struct {
	*memstore.Store
}

func forgetLeaseAttempts(d ledger.Delivery) ledger.Delivery {
	d.Attempts = max(0, d.Attempts-int(d.LeaseSeq))
	return d
}

func (l forgetAttemptLedger) Lease(ctx context.Context, f ledger.LeaseFilter, o ledger.Owner, now time.Time, d time.Duration, limit int) (ledger.LeaseResult, error) {
	res, err := l.Store.Lease(ctx, f, o, now, d, limit)
	for i := range res.Leased {
		res.Leased[i].Delivery = forgetLeaseAttempts(res.Leased[i].Delivery)
	}
	return res, err
}

func (l forgetAttemptLedger) Get(ctx context.Context, id ledger.DeliveryID) (ledger.Delivery, error) {
	d, err := l.Store.Get(ctx, id)
	return forgetLeaseAttempts(d), err
}

// staleTokenLedger accepts any lease on a delivery: it swaps the caller's
// token and sequence for those of the latest lease it granted before it
// acts. (Records handed out carry no token, so it keeps its own.)
type staleTokenLedger struct {
	*memstore.Store
	mu     sync.Mutex
	latest map[ledger.DeliveryID]ledger.Lease
}

func newStaleTokenLedger() *staleTokenLedger {
	return &staleTokenLedger{Store: memstore.New(), latest: map[ledger.DeliveryID]ledger.Lease{}}
}

func (l *staleTokenLedger) Lease(ctx context.Context, f ledger.LeaseFilter, o ledger.Owner, now time.Time, d time.Duration, limit int) (ledger.LeaseResult, error) {
	res, err := l.Store.Lease(ctx, f, o, now, d, limit)
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ld := range res.Leased {
		l.latest[ld.Lease.DeliveryID] = ld.Lease
	}
	return res, err
}

func (l *staleTokenLedger) current(lease ledger.Lease) ledger.Lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	if g, ok := l.latest[lease.DeliveryID]; ok {
		lease.Token, lease.Seq = g.Token, g.Seq
	}
	return lease
}

func (l *staleTokenLedger) Acknowledge(ctx context.Context, lease ledger.Lease, observation string, now time.Time) (ledger.DeliveryResult, error) {
	return l.Store.Acknowledge(ctx, l.current(lease), observation, now)
}

func (l *staleTokenLedger) MarkFailed(ctx context.Context, lease ledger.Lease, reason ledger.FailureReason, now time.Time) (ledger.DeliveryResult, error) {
	return l.Store.MarkFailed(ctx, l.current(lease), reason, now)
}

func (l *staleTokenLedger) Release(ctx context.Context, lease ledger.Lease, now time.Time) (ledger.DeliveryResult, error) {
	return l.Store.Release(ctx, l.current(lease), now)
}

// leakyTokenLedger hands its lease tokens out with the records Get
// returns, as a store that forgot to redact its reads would.
type leakyTokenLedger struct {
	*staleTokenLedger
}

func (l leakyTokenLedger) Get(ctx context.Context, id ledger.DeliveryID) (ledger.Delivery, error) {
	d, err := l.Store.Get(ctx, id)
	if d.Lease != nil {
		g := l.current(*d.Lease)
		if g.Seq == d.Lease.Seq {
			d.Lease = &g
		}
	}
	return d, err
}

// Transitions go to memstore unchanged: only the reads leak.
func (l leakyTokenLedger) Acknowledge(ctx context.Context, lease ledger.Lease, observation string, now time.Time) (ledger.DeliveryResult, error) {
	return l.Store.Acknowledge(ctx, lease, observation, now)
}

func (l leakyTokenLedger) MarkFailed(ctx context.Context, lease ledger.Lease, reason ledger.FailureReason, now time.Time) (ledger.DeliveryResult, error) {
	return l.Store.MarkFailed(ctx, lease, reason, now)
}

func (l leakyTokenLedger) Release(ctx context.Context, lease ledger.Lease, now time.Time) (ledger.DeliveryResult, error) {
	return l.Store.Release(ctx, lease, now)
}

// doubleLeadLedger lets a take of a held lead apply: it answers Applied
// with a term of its own making, so two holders lead at once.
type doubleLeadLedger struct {
	*memstore.Store
}

func (l doubleLeadLedger) TakeLead(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (ledger.LeadResult, error) {
	res, err := l.Store.TakeLead(ctx, name, holder, now, ttl)
	if err != nil || res.Outcome != ledger.OutcomeWrongOwner {
		return res, err
	}
	now = ledger.Normalize(now)
	return ledger.LeadResult{Outcome: ledger.OutcomeApplied, Lead: ledger.Lead{
		Name: name, Holder: holder, Token: storekit.NewToken(), Seq: res.Lead.Seq + 1, TakenAt: now, ExpiresAt: now.Add(ttl),
	}}, nil
}

// staleLeadLedger renews a lead whatever term the caller presents: a
// holder whose term ended believes it still leads.
type staleLeadLedger struct {
	*memstore.Store
}

func (l staleLeadLedger) RenewLead(ctx context.Context, lead ledger.Lead, now time.Time, ttl time.Duration) (ledger.LeadResult, error) {
	res, err := l.Store.RenewLead(ctx, lead, now, ttl)
	if err != nil || res.Outcome != ledger.OutcomeLeaseLost {
		return res, err
	}
	lead.ExpiresAt = ledger.Normalize(now).Add(ttl)
	return ledger.LeadResult{Outcome: ledger.OutcomeApplied, Lead: lead}, nil
}

// metadataContentLedger takes metadata for enqueue content: an enqueue of
// an existing ID with other metadata answers Conflict.
type metadataContentLedger struct {
	*memstore.Store
}

func (l metadataContentLedger) Enqueue(ctx context.Context, r ledger.EnqueueRequest, now time.Time) (ledger.DeliveryResult, error) {
	res, err := l.Store.Enqueue(ctx, r, now)
	if err == nil && res.Outcome == ledger.OutcomeRepeated && !maps.Equal(res.Delivery.Metadata, r.Metadata) {
		res.Outcome = ledger.OutcomeConflict
	}
	return res, err
}

// forgetMetadataOutbox loses the metadata of the entries its claims
// return.
type forgetMetadataOutbox struct {
	*memstore.Outbox
}

func (o forgetMetadataOutbox) forget(got []ledger.ClaimedEntry, err error) ([]ledger.ClaimedEntry, error) {
	for i := range got {
		got[i].Entry.Envelope.Metadata = nil
	}
	return got, err
}

func (o forgetMetadataOutbox) ClaimPending(ctx context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	return o.forget(o.Outbox.ClaimPending(ctx, req))
}

func (o forgetMetadataOutbox) ClaimRetryReady(ctx context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	return o.forget(o.Outbox.ClaimRetryReady(ctx, req))
}

// wholeQueueLedger breaks the queue down by target without its filter:
// ByTarget shows every target's queue whatever the filter.
type wholeQueueLedger struct {
	*memstore.Store
}

func (l wholeQueueLedger) Stats(ctx context.Context, f ledger.StatsFilter, now time.Time) (ledger.DeliveryStats, error) {
	st, err := l.Store.Stats(ctx, f, now)
	if err != nil {
		return st, err
	}
	all, err := l.Store.Stats(ctx, ledger.StatsFilter{}, now)
	st.ByTarget = all.ByTarget
	return st, err
}

// oneProviderOutbox counts the whole queue under the provider "": the
// breakdown by provider is lost, the totals are right.
type oneProviderOutbox struct {
	*memstore.Outbox
}

func (o oneProviderOutbox) OutboxStats(ctx context.Context, now time.Time) (ledger.OutboxStats, error) {
	st, err := o.Outbox.OutboxStats(ctx, now)
	if err != nil || st.Depth == 0 {
		return st, err
	}
	st.ByProvider = map[string]ledger.ProviderQueueStats{"": {Depth: st.Depth, OldestDueAt: st.OldestDueAt, Lag: st.Lag}}
	return st, nil
}

// keyIgnoredOutbox forgets the IdempotencyKey filter of its operators'
// reads and redrives: a lookup by key answers every entry.
type keyIgnoredOutbox struct {
	*memstore.Outbox
}

func (o keyIgnoredOutbox) ListEntries(ctx context.Context, q ledger.OutboxListQuery) (ledger.OutboxPage, error) {
	q.IdempotencyKey = ""
	return o.Outbox.ListEntries(ctx, q)
}

func (o keyIgnoredOutbox) RedriveEntriesMatching(ctx context.Context, q ledger.RedriveEntryQuery) (ledger.RedriveEntryBatch, error) {
	q.IdempotencyKey = ""
	return o.Outbox.RedriveEntriesMatching(ctx, q)
}
