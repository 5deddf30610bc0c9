package memstore

import (
	"context"
	"sync"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// Compile-time checks that both stores keep leads.
var (
	_ ledger.Elector = (*Store)(nil)
	_ ledger.Elector = (*Outbox)(nil)
)

// leadTable holds the leads of a Store and of the Outbox beside it (one
// table, as in pgstore, so that a sweeper finds the same lead through
// either). It has its own lock: a lead call never waits for a sweep.
type leadTable struct {
	mu    sync.Mutex
	leads map[string]ledger.Lead
}

func newLeadTable() *leadTable { return &leadTable{leads: make(map[string]ledger.Lead)} }

// TakeLead makes holder the holder of the lead name until now+ttl when
// nobody holds it at now (storekit.Lead.Take): Applied, with a new term and
// token. A lead held at now answers WrongOwner and writes nothing.
// Errors: ErrInvalid, ctx.Err().
func (s *Store) TakeLead(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (ledger.LeadResult, error) {
	return s.leads.take(ctx, name, holder, now, ttl)
}

// RenewLead moves the expiry of the lead in force to now+ttl
// (storekit.Lead.Renew). Outcomes: Applied, NotFound, LeaseLost,
// LeaseExpired. Errors: ErrInvalid, ctx.Err().
func (s *Store) RenewLead(ctx context.Context, lead ledger.Lead, now time.Time, ttl time.Duration) (ledger.LeadResult, error) {
	return s.leads.renew(ctx, lead, now, ttl)
}

// ReleaseLead gives the lead up at now (storekit.Lead.Release). Outcomes:
// Applied, NotFound, LeaseLost, LeaseExpired. Errors: ErrInvalid,
// ctx.Err().
func (s *Store) ReleaseLead(ctx context.Context, lead ledger.Lead, now time.Time) (ledger.LeadResult, error) {
	return s.leads.release(ctx, lead, now)
}

// GetLead returns the lead name without its token, or ErrNotFound.
func (s *Store) GetLead(ctx context.Context, name string) (ledger.Lead, error) {
	return s.leads.get(ctx, name)
}

// TakeLead is Store.TakeLead on the lead table shared with the Store this
// outbox lives beside.
func (o *Outbox) TakeLead(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (ledger.LeadResult, error) {
	return o.leads.take(ctx, name, holder, now, ttl)
}

// RenewLead is Store.RenewLead on the shared lead table.
func (o *Outbox) RenewLead(ctx context.Context, lead ledger.Lead, now time.Time, ttl time.Duration) (ledger.LeadResult, error) {
	return o.leads.renew(ctx, lead, now, ttl)
}

// ReleaseLead is Store.ReleaseLead on the shared lead table.
func (o *Outbox) ReleaseLead(ctx context.Context, lead ledger.Lead, now time.Time) (ledger.LeadResult, error) {
	return o.leads.release(ctx, lead, now)
}

// GetLead is Store.GetLead on the shared lead table.
func (o *Outbox) GetLead(ctx context.Context, name string) (ledger.Lead, error) {
	return o.leads.get(ctx, name)
}

func (t *leadTable) take(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (ledger.LeadResult, error) {
	if err := begin(ctx, storekit.ValidateTakeLead(name, holder, now, ttl)); err != nil {
		return ledger.LeadResult{}, err
	}
	token := storekit.NewToken()
	t.mu.Lock()
	defer t.mu.Unlock()
	cur, ok := t.leads[name]
	if !ok {
		cur = ledger.Lead{Name: name}
	}
	next, out := storekit.Lead(cur).Take(holder, token, now, ttl)
	if out != ledger.OutcomeApplied {
		return ledger.LeadResult{Outcome: out, Lead: cur.Public()}, nil
	}
	t.leads[name] = next
	return ledger.LeadResult{Outcome: out, Lead: next}, nil
}

func (t *leadTable) renew(ctx context.Context, lead ledger.Lead, now time.Time, ttl time.Duration) (ledger.LeadResult, error) {
	if err := begin(ctx, storekit.ValidateRenewLead(lead, now, ttl)); err != nil {
		return ledger.LeadResult{}, err
	}
	return t.apply(lead.Name, func(cur ledger.Lead) (ledger.Lead, ledger.Outcome) { return storekit.Lead(cur).Renew(lead, now, ttl) }), nil
}

func (t *leadTable) release(ctx context.Context, lead ledger.Lead, now time.Time) (ledger.LeadResult, error) {
	if err := begin(ctx, storekit.ValidateReleaseLead(lead, now)); err != nil {
		return ledger.LeadResult{}, err
	}
	res := t.apply(lead.Name, func(cur ledger.Lead) (ledger.Lead, ledger.Outcome) { return storekit.Lead(cur).Release(lead, now) })
	res.Lead = res.Lead.Public() // a lead given up is no capability any more
	return res, nil
}

// apply runs a transition on the stored lead name: NotFound when there is
// none, the lead unchanged (without its token) when the transition does
// not apply.
func (t *leadTable) apply(name string, step func(ledger.Lead) (ledger.Lead, ledger.Outcome)) ledger.LeadResult {
	t.mu.Lock()
	defer t.mu.Unlock()
	cur, ok := t.leads[name]
	if !ok {
		return ledger.LeadResult{Outcome: ledger.OutcomeNotFound}
	}
	next, out := step(cur)
	if out != ledger.OutcomeApplied {
		return ledger.LeadResult{Outcome: out, Lead: cur.Public()}
	}
	t.leads[name] = next
	return ledger.LeadResult{Outcome: out, Lead: next}
}

func (t *leadTable) get(ctx context.Context, name string) (ledger.Lead, error) {
	if err := begin(ctx, storekit.ValidateGetLead(name)); err != nil {
		return ledger.Lead{}, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	l, ok := t.leads[name]
	if !ok {
		return ledger.Lead{}, ledger.ErrNotFound
	}
	return l.Public(), nil
}
