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
