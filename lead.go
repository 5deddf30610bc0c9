package ledger

import (
	"context"
	"time"
)

// Elector is implemented by stores that keep named leadership leases
// ("leads"), so that of many processes running the same periodic work (a
// sweeper: dispatch.Sweeper) one does it at a time. Detect it with a type
// assertion; both stores implement it, memstore for single-process hosts
// and tests, pgstore in a table of its own.
//
// A lead is row state, like every lease in this library: no session or
// advisory lock is held between calls, so it works behind PgBouncer in
// transaction pooling mode, and a holder that dies simply stops renewing;
// its lead lapses at ExpiresAt and the next TakeLead takes it over. Each
// take starts a new term: Seq grows by one and a new Token is drawn, so a
// holder that stalled past its expiry and comes back finds its renewal
// refused (OutcomeLeaseLost once someone else took the lead), and can use
// Seq as a fencing token where its work needs one.
//
// Time is passed in, as everywhere in this library, and the caller's clock
// is trusted: a holder whose clock runs slow may believe it still leads
// after its lead lapsed. Leadership therefore bounds duplicate work; it is
// not a lock to build correctness on. The work a sweeper does is safe to
// run twice.
type Elector interface {
	// TakeLead makes holder the holder of the lead name until now+ttl,
	// when nobody holds it at now (never taken, lapsed or released):
	// OutcomeApplied, with a new term (Seq one more) and a new Token in
	// the returned Lead. When the lead is held at now, by anyone,
	// including this holder under an earlier take (use RenewLead to keep
	// a lead), it answers OutcomeWrongOwner with the lead as it stands
	// and writes nothing. Two concurrent takes never both apply.
	TakeLead(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (LeadResult, error)

	// RenewLead moves the expiry of the lead in force to now+ttl, keeping
	// its term, token and holder. It needs the current term (the token and
	// Seq of lead) and now before its expiry: a lead that ran out is not
	// revived, since another holder may already be entitled to it.
	// Outcomes, first match wins: NotFound (no lead of that name),
	// LeaseLost (another term is current: the lead was taken over or
	// given up and taken again), LeaseExpired, then Applied.
	RenewLead(ctx context.Context, lead Lead, now time.Time, ttl time.Duration) (LeadResult, error)

	// ReleaseLead gives the lead up at now, so that another holder can
	// take it at once instead of waiting for it to lapse: the lead's
	// expiry becomes now. Outcomes as RenewLead: NotFound, LeaseLost,
	// LeaseExpired (it had already run out, or was given up before), then
	// Applied.
	ReleaseLead(ctx context.Context, lead Lead, now time.Time) (LeadResult, error)

	// GetLead returns the lead name as it stands, without its token, or
	// ErrNotFound when it was never taken.
	GetLead(ctx context.Context, name string) (Lead, error)
}

// Lead is one term of a named leadership lease.
//
// A lead is held on the half-open interval [TakenAt, ExpiresAt): at
// now == ExpiresAt it has lapsed. A released lead keeps its holder and
// term, with ExpiresAt set to the time it was given up, so an operator
// can read who led last.
type Lead struct {
	// Name names the work the lead is for (for example
	// "dispatch.sweeper.expire").
	Name string `json:"name"`
	// Holder names who holds the lead, or held it last.
	Holder string `json:"holder"`
	// Token is the secret of the current term. Only the Lead returned to
	// its taker (TakeLead, RenewLead applied) carries it; a lead read back
	// never does.
	Token Token `json:"token,omitempty"`
	// Seq is the term: one more with every take.
	Seq       int64     `json:"seq"`
	TakenAt   time.Time `json:"taken_at,omitzero"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// HeldAt reports whether the lead is held at now: taken, and now before
// its expiry.
func (l Lead) HeldAt(now time.Time) bool { return l.Seq > 0 && Normalize(now).Before(l.ExpiresAt) }

// Public returns the lead without its token, as reads show it.
func (l Lead) Public() Lead {
	l.Token = ""
	return l
}

// LeadResult is the answer of TakeLead, RenewLead and ReleaseLead. Lead is
// the lead as it now stands, also when the call did not apply (the zero
// Lead for OutcomeNotFound); it carries the token only when this call
// made or kept the caller the holder.
type LeadResult struct {
	Outcome Outcome
	Lead    Lead
}

// Applied reports whether this call applied the durable transition.
func (r LeadResult) Applied() bool { return r.Outcome == OutcomeApplied }
