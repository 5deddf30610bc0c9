package ledger

import (
	"context"
	"time"
)

// StatsFilter narrows DeliveryStats to one target, one ceremony or both.
// An empty field does not filter.
type StatsFilter struct {
	Target   Target     `json:"target,omitempty"`
	Ceremony CeremonyID `json:"ceremony,omitempty"`
}

// DeliveryStats counts deliveries for an operator's dashboard.
type DeliveryStats struct {
	// ByState counts deliveries in each state; every state is present,
	// zero included.
	ByState map[DeliveryState]int64 `json:"by_state"`
	// ByCause counts Expired deliveries by the kind of their cause.
	ByCause map[CauseKind]int64 `json:"by_cause"`
	// Depth counts the deliveries Lease could hand out at now: the queue
	// depth.
	Depth int64 `json:"depth"`
	// OldestAvailableAt is the AvailableAt of the oldest delivery counted
	// in Depth; zero when Depth is 0.
	OldestAvailableAt time.Time `json:"oldest_available_at,omitzero"`
	// Lag is now minus OldestAvailableAt: how long the oldest offerable
	// delivery has waited. Zero when Depth is 0.
	Lag time.Duration `json:"lag_ns"`
	// ByTarget breaks Depth down by target: one entry per target with at
	// least one delivery counted in Depth, none for the others, so that
	// the entries' depths add up to Depth and the oldest of their
	// OldestAvailableAt is OldestAvailableAt. Under a filter it holds the
	// matching deliveries only. Never nil in a store's answer.
	ByTarget map[Target]TargetQueueStats `json:"by_target"`
}

// TargetQueueStats is the queue of one target, as DeliveryStats counts
// the whole queue: its fields mean what the same fields of
// DeliveryStats mean, for the target's deliveries alone.
type TargetQueueStats struct {
	// Depth counts the target's deliveries Lease could hand out at now;
	// at least 1 in DeliveryStats.ByTarget.
	Depth int64 `json:"depth"`
	// OldestAvailableAt is the AvailableAt of the oldest of them.
	OldestAvailableAt time.Time `json:"oldest_available_at,omitzero"`
	// Lag is now minus OldestAvailableAt, zero when that is not past.
	Lag time.Duration `json:"lag_ns"`
}

// OutboxStats counts outbox entries.
type OutboxStats struct {
	// ByStatus counts entries in each status; every status is present,
	// zero included.
	ByStatus map[OutboxStatus]int64 `json:"by_status"`
	// Depth counts the entries ClaimPending or ClaimRetryReady could hand
	// out at now.
	Depth int64 `json:"depth"`
	// OldestDueAt is when the oldest entry counted in Depth became due:
	// its CreatedAt when pending, its NextAttemptAt when a retry is
	// scheduled, its claim's expiry when a claim on it ran out, whichever
	// is latest. Zero when Depth is 0.
	OldestDueAt time.Time `json:"oldest_due_at,omitzero"`
	// Lag is now minus OldestDueAt; zero when Depth is 0.
	Lag time.Duration `json:"lag_ns"`
	// ByProvider breaks Depth down by the entries' Envelope.Provider: one
	// entry per provider with at least one entry counted in Depth, none
	// for the others, so that the entries' depths add up to Depth and
	// the oldest of their OldestDueAt is OldestDueAt. Never nil in a
	// store's answer.
	ByProvider map[string]ProviderQueueStats `json:"by_provider"`
}

// ProviderQueueStats is the queue of one provider, as OutboxStats counts
// the whole outbox: its fields mean what the same fields of OutboxStats
// mean, for the provider's entries alone.
type ProviderQueueStats struct {
	// Depth counts the provider's entries the claims could hand out at
	// now; at least 1 in OutboxStats.ByProvider.
	Depth int64 `json:"depth"`
	// OldestDueAt is when the oldest of them became due.
	OldestDueAt time.Time `json:"oldest_due_at,omitzero"`
	// Lag is now minus OldestDueAt, zero when that is not past.
	Lag time.Duration `json:"lag_ns"`
}

// StatsReporter is implemented by ledgers that count their deliveries
// cheaply enough to be asked every few seconds on a table of millions of
// records. Detect it with a type assertion.
type StatsReporter interface {
	Stats(ctx context.Context, filter StatsFilter, now time.Time) (DeliveryStats, error)
}

// OutboxStatsReporter is StatsReporter for outbox entries.
type OutboxStatsReporter interface {
	OutboxStats(ctx context.Context, now time.Time) (OutboxStats, error)
}

// NewDeliveryStats returns stats with every state present and zero, and
// ByTarget empty.
func NewDeliveryStats() DeliveryStats {
	s := DeliveryStats{ByState: make(map[DeliveryState]int64), ByCause: make(map[CauseKind]int64),
		ByTarget: make(map[Target]TargetQueueStats)}
	for _, st := range DeliveryStates() {
		s.ByState[st] = 0
	}
	return s
}

// NewOutboxStats returns stats with every status present and zero, and
// ByProvider empty.
func NewOutboxStats() OutboxStats {
	s := OutboxStats{ByStatus: make(map[OutboxStatus]int64), ByProvider: make(map[string]ProviderQueueStats)}
	for _, st := range OutboxStatuses() {
		s.ByStatus[st] = 0
	}
	return s
}

// Count adds d to s as seen at now, the way every store counts: d counts
// in its state, in its cause when Expired, and in Depth when Lease could
// hand it out at now.
func (s *DeliveryStats) Count(d *Delivery, now time.Time) {
	s.ByState[d.State]++
	if d.State == DeliveryStateExpired && d.Cause != nil {
		s.ByCause[d.Cause.Kind]++
	}
	if d.Offerable(now) {
		s.AddQueue(d.Target, 1, d.AvailableAt)
	}
}

// AddQueue counts n offerable deliveries of target, the oldest of them
// available since oldest, in Depth, OldestAvailableAt and ByTarget: what
// Count does for one, for a store that counts the queue by target in
// bulk. An n below 1 adds nothing.
func (s *DeliveryStats) AddQueue(target Target, n int64, oldest time.Time) {
	if n < 1 {
		return
	}
	s.Depth += n
	s.OldestAvailableAt = earliest(s.OldestAvailableAt, oldest)
	if s.ByTarget == nil {
		s.ByTarget = make(map[Target]TargetQueueStats)
	}
	q := s.ByTarget[target]
	q.Depth += n
	q.OldestAvailableAt = earliest(q.OldestAvailableAt, oldest)
	s.ByTarget[target] = q
}

// Finish sets Lag, overall and per target, from the oldest times and now.
func (s *DeliveryStats) Finish(now time.Time) {
	now = Normalize(now)
	s.Lag = lag(s.OldestAvailableAt, now)
	for t, q := range s.ByTarget {
		q.Lag = lag(q.OldestAvailableAt, now)
		s.ByTarget[t] = q
	}
}

// Count adds e to s as seen at now.
func (s *OutboxStats) Count(e *OutboxEntry, now time.Time) {
	s.ByStatus[e.Status]++
	if due, ok := e.DueAt(now); ok {
		s.AddQueue(e.Envelope.Provider, 1, due)
	}
}

// AddQueue counts n due entries of provider, the oldest of them due since
// oldest, in Depth, OldestDueAt and ByProvider: what Count does for one,
// for a store that counts the queue by provider in bulk. An n below 1
// adds nothing.
func (s *OutboxStats) AddQueue(provider string, n int64, oldest time.Time) {
	if n < 1 {
		return
	}
	s.Depth += n
	s.OldestDueAt = earliest(s.OldestDueAt, oldest)
	if s.ByProvider == nil {
		s.ByProvider = make(map[string]ProviderQueueStats)
	}
	q := s.ByProvider[provider]
	q.Depth += n
	q.OldestDueAt = earliest(q.OldestDueAt, oldest)
	s.ByProvider[provider] = q
}

// Finish sets Lag, overall and per provider, from the oldest times and
// now.
func (s *OutboxStats) Finish(now time.Time) {
	now = Normalize(now)
	s.Lag = lag(s.OldestDueAt, now)
	for p, q := range s.ByProvider {
		q.Lag = lag(q.OldestDueAt, now)
		s.ByProvider[p] = q
	}
}

// earliest returns the earlier of a and b, a zero one standing for none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// DueAt reports whether a claim at now could hand e out, and since when it
// could: see OutboxStats.OldestDueAt.
func (e OutboxEntry) DueAt(now time.Time) (time.Time, bool) {
	var due time.Time
	switch {
	case e.PendingClaimable(now):
		due = e.CreatedAt
	case e.RetryClaimable(now):
		due = e.NextAttemptAt
	default:
		return time.Time{}, false
	}
	if e.Claim != nil && e.Claim.ExpiresAt.After(due) {
		due = e.Claim.ExpiresAt
	}
	return due, true
}

func lag(oldest, now time.Time) time.Duration {
	if oldest.IsZero() || !now.After(oldest) {
		return 0
	}
	return now.Sub(oldest)
}

// ValidateStats checks the arguments of Stats.
func ValidateStats(f StatsFilter, now time.Time) error {
	return first(optionalName("target", string(f.Target)), optionalName("ceremony", string(f.Ceremony)), ValidateTime("now", now))
}

// ValidateOutboxStats checks the argument of OutboxStats.
func ValidateOutboxStats(now time.Time) error { return ValidateTime("now", now) }

func optionalName(field, s string) error {
	if s == "" {
		return nil
	}
	return ValidateName(field, s)
}
