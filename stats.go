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

// NewDeliveryStats returns stats with every state present and zero.
func NewDeliveryStats() DeliveryStats {
	s := DeliveryStats{ByState: make(map[DeliveryState]int64), ByCause: make(map[CauseKind]int64)}
	for _, st := range DeliveryStates() {
		s.ByState[st] = 0
	}
	return s
}

// NewOutboxStats returns stats with every status present and zero.
func NewOutboxStats() OutboxStats {
	s := OutboxStats{ByStatus: make(map[OutboxStatus]int64)}
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
		s.Depth++
		if s.OldestAvailableAt.IsZero() || d.AvailableAt.Before(s.OldestAvailableAt) {
			s.OldestAvailableAt = d.AvailableAt
		}
	}
}

// Finish sets Lag from OldestAvailableAt and now.
func (s *DeliveryStats) Finish(now time.Time) {
	s.Lag = lag(s.OldestAvailableAt, Normalize(now))
}

// Count adds e to s as seen at now.
func (s *OutboxStats) Count(e *OutboxEntry, now time.Time) {
	s.ByStatus[e.Status]++
	if due, ok := e.DueAt(now); ok {
		s.Depth++
		if s.OldestDueAt.IsZero() || due.Before(s.OldestDueAt) {
			s.OldestDueAt = due
		}
	}
}

// Finish sets Lag from OldestDueAt and now.
func (s *OutboxStats) Finish(now time.Time) {
	s.Lag = lag(s.OldestDueAt, Normalize(now))
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
