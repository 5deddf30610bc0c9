package storekit

import (
	"time"

	"github.com/leaseledger/ledger"
)

// ValidateTakeLead checks the arguments of ledger.Elector.TakeLead.
func ValidateTakeLead(name, holder string, now time.Time, ttl time.Duration) error {
	return first(ValidateName("lead name", name), ValidateName("lead holder", holder),
		ValidateTime("now", now), ValidateDuration("lead ttl", ttl))
}

// ValidateRenewLead checks the arguments of ledger.Elector.RenewLead.
func ValidateRenewLead(lead ledger.Lead, now time.Time, ttl time.Duration) error {
	return first(validateLeadArg(lead), ValidateTime("now", now), ValidateDuration("lead ttl", ttl))
}

// ValidateReleaseLead checks the arguments of ledger.Elector.ReleaseLead.
func ValidateReleaseLead(lead ledger.Lead, now time.Time) error {
	return first(validateLeadArg(lead), ValidateTime("now", now))
}

// ValidateGetLead checks the name given to ledger.Elector.GetLead.
func ValidateGetLead(name string) error { return ValidateName("lead name", name) }

// validateLeadArg checks a lead passed back to RenewLead or ReleaseLead.
// Seq is not checked, as in ValidateLeaseArg: a term the lead never had is
// a term that is not current (LeaseLost).
func validateLeadArg(l ledger.Lead) error {
	return first(ValidateName("lead name", l.Name), ValidateName("lead token", string(l.Token)),
		validateOptionalName("lead holder", l.Holder))
}

// Take is the state machine of ledger.Elector.TakeLead on the lead as stored (the
// zero Lead with only Name set for one never taken): holder takes a new
// term with token at now for ttl, or, when the lead is held at now, the
// lead is unchanged and the outcome is ledger.OutcomeWrongOwner.
func (l Lead) Take(holder string, token ledger.Token, now time.Time, ttl time.Duration) (ledger.Lead, ledger.Outcome) {
	now = ledger.Normalize(now)
	if ledger.Lead(l).HeldAt(now) {
		return ledger.Lead(l), ledger.OutcomeWrongOwner
	}
	l.Holder = holder
	l.Token = token
	l.Seq++
	l.TakenAt = now
	l.ExpiresAt = now.Add(ttl.Truncate(time.Microsecond))
	return ledger.Lead(l), ledger.OutcomeApplied
}

// Renew is the state machine of ledger.Elector.RenewLead on the stored lead l
// (with its token): the expiry moves to now+ttl when held is l's current
// term and l has not lapsed at now.
func (l Lead) Renew(held ledger.Lead, now time.Time, ttl time.Duration) (ledger.Lead, ledger.Outcome) {
	now = ledger.Normalize(now)
	if o := l.termOutcome(held, now); o != "" {
		return ledger.Lead(l), o
	}
	l.ExpiresAt = now.Add(ttl.Truncate(time.Microsecond))
	return ledger.Lead(l), ledger.OutcomeApplied
}

// Release is the state machine of ledger.Elector.ReleaseLead on the stored lead
// l: the lead lapses at now when held is its current term and it has not
// lapsed yet.
func (l Lead) Release(held ledger.Lead, now time.Time) (ledger.Lead, ledger.Outcome) {
	now = ledger.Normalize(now)
	if o := l.termOutcome(held, now); o != "" {
		return ledger.Lead(l), o
	}
	l.ExpiresAt = now
	return ledger.Lead(l), ledger.OutcomeApplied
}

// termOutcome is what a call made under held answers on the stored lead l
// before it can apply: LeaseLost for another term, LeaseExpired for a
// lapsed one, "" when held is the term in force at now.
func (l Lead) termOutcome(held ledger.Lead, now time.Time) ledger.Outcome {
	switch {
	case l.Seq != held.Seq || l.Token != held.Token || l.Seq == 0:
		return ledger.OutcomeLeaseLost
	case !now.Before(l.ExpiresAt):
		return ledger.OutcomeLeaseExpired
	}
	return ""
}
