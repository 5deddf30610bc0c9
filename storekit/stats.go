package storekit

import (
	"time"

	"github.com/leaseledger/ledger"
)

// NewDeliveryStats returns stats with every state present and zero, and
// ByTarget empty.
func NewDeliveryStats() ledger.DeliveryStats {
	s := ledger.DeliveryStats{ByState: make(map[ledger.DeliveryState]int64), ByCause: make(map[ledger.CauseKind]int64),
		ByTarget: make(map[ledger.Target]ledger.TargetQueueStats)}
	for _, st := range ledger.DeliveryStates() {
		s.ByState[st] = 0
	}
	return s
}

// NewOutboxStats returns stats with every status present and zero, and
// ByProvider empty.
func NewOutboxStats() ledger.OutboxStats {
	s := ledger.OutboxStats{ByStatus: make(map[ledger.OutboxStatus]int64), ByProvider: make(map[string]ledger.ProviderQueueStats)}
	for _, st := range ledger.OutboxStatuses() {
		s.ByStatus[st] = 0
	}
	return s
}

// CountDelivery adds d to s as seen at now, the way every store counts: d counts
// in its state, in its cause when Expired, and in Depth when Lease could
// hand it out at now.
func CountDelivery(s *ledger.DeliveryStats, d *ledger.Delivery, now time.Time) {
	s.ByState[d.State]++
	if d.State == ledger.DeliveryStateExpired && d.Cause != nil {
		s.ByCause[d.Cause.Kind]++
	}
	if Delivery(*d).Offerable(now) {
		AddDeliveryQueue(s, d.Target, 1, d.AvailableAt)
	}
}

// AddDeliveryQueue counts n offerable deliveries of target, the oldest of them
// available since oldest, in Depth, OldestAvailableAt and ByTarget: what
// CountDelivery does for one, for a store that counts the queue by target in
// bulk. An n below 1 adds nothing.
func AddDeliveryQueue(s *ledger.DeliveryStats, target ledger.Target, n int64, oldest time.Time) {
	if n < 1 {
		return
	}
	s.Depth += n
	s.OldestAvailableAt = earliest(s.OldestAvailableAt, oldest)
	if s.ByTarget == nil {
		s.ByTarget = make(map[ledger.Target]ledger.TargetQueueStats)
	}
	q := s.ByTarget[target]
	q.Depth += n
	q.OldestAvailableAt = earliest(q.OldestAvailableAt, oldest)
	s.ByTarget[target] = q
}

// FinishDeliveryStats sets Lag of s, overall and per target, from the oldest times and now.
func FinishDeliveryStats(s *ledger.DeliveryStats, now time.Time) {
	now = ledger.Normalize(now)
	s.Lag = lag(s.OldestAvailableAt, now)
	for t, q := range s.ByTarget {
		q.Lag = lag(q.OldestAvailableAt, now)
		s.ByTarget[t] = q
	}
}

// CountEntry adds e to s as seen at now.
func CountEntry(s *ledger.OutboxStats, e *ledger.OutboxEntry, now time.Time) {
	s.ByStatus[e.Status]++
	if due, ok := OutboxEntry(*e).DueAt(now); ok {
		AddOutboxQueue(s, e.Envelope.Provider, 1, due)
	}
}

// AddOutboxQueue counts n due entries of provider, the oldest of them due since
// oldest, in Depth, OldestDueAt and ByProvider: what Count does for one,
// for a store that counts the queue by provider in bulk. An n below 1
// adds nothing.
func AddOutboxQueue(s *ledger.OutboxStats, provider string, n int64, oldest time.Time) {
	if n < 1 {
		return
	}
	s.Depth += n
	s.OldestDueAt = earliest(s.OldestDueAt, oldest)
	if s.ByProvider == nil {
		s.ByProvider = make(map[string]ledger.ProviderQueueStats)
	}
	q := s.ByProvider[provider]
	q.Depth += n
	q.OldestDueAt = earliest(q.OldestDueAt, oldest)
	s.ByProvider[provider] = q
}

// FinishOutboxStats sets Lag of s, overall and per provider, from the oldest times and
// now.
func FinishOutboxStats(s *ledger.OutboxStats, now time.Time) {
	now = ledger.Normalize(now)
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
// could: see ledger.OutboxStats.OldestDueAt.
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
