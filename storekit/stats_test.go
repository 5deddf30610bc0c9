package storekit

import (
	"testing"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewStatsHaveEveryStateAtZero(t *testing.T) {
	d := NewDeliveryStats()
	require.Len(t, d.ByState, len(ledger.DeliveryStates()))
	for _, st := range ledger.DeliveryStates() {
		n, ok := d.ByState[st]
		assert.True(t, ok, "%s present", st)
		assert.Zero(t, n)
	}
	assert.NotNil(t, d.ByCause)
	assert.Empty(t, d.ByCause)
	o := NewOutboxStats()
	require.Len(t, o.ByStatus, len(ledger.OutboxStatuses()))
	for _, st := range ledger.OutboxStatuses() {
		_, ok := o.ByStatus[st]
		assert.True(t, ok, "%s present", st)
	}
}

// statsDeliveries returns deliveries in every situation Count tells apart,
// all enqueued at t0 with two attempts.
func statsDeliveries(t *testing.T) map[string]ledger.Delivery {
	t.Helper()
	policy := ledger.Policy{MaxAttempts: 2, AckWindow: time.Minute}
	mk := func(id ledger.DeliveryID, avail time.Time) ledger.Delivery {
		return NewDelivery(ledger.EnqueueRequest{ID: id, Target: "host-1", Policy: policy, AvailableAt: avail}, ledger.DefaultPolicy(), t0)
	}
	leased, lease := Delivery(mk("leased", time.Time{})).Grant(ownerA, "tok", t0, time.Minute)
	// On its last attempt: once its lease runs out it is not offerable.
	spent, _ := Delivery(mk("spent", time.Time{})).Grant(ownerA, "tok", t0, time.Minute)
	spent.Attempts = spent.Policy.MaxAttempts
	acked, o := Delivery(leased).Acknowledge(lease, "", t0)
	require.Equal(t, ledger.OutcomeApplied, o)
	expired, o := Delivery(mk("expired", time.Time{})).Abandon(ledger.Cause{Kind: ledger.CauseQueueBounded}, t0)
	require.Equal(t, ledger.OutcomeApplied, o)
	failed, o := Delivery(leased).MarkFailed(lease, ledger.FailureReason{Permanent: true}, t0)
	require.Equal(t, ledger.OutcomeApplied, o)
	return map[string]ledger.Delivery{
		"now":     mk("now", t0),
		"later":   mk("later", t0.Add(time.Hour)),
		"leased":  leased,
		"spent":   spent,
		"acked":   acked,
		"expired": expired,
		"failed":  failed,
	}
}

func TestDeliveryStatsCount(t *testing.T) {
	all := statsDeliveries(t)
	for _, c := range []struct {
		name   string
		now    time.Time
		depth  int64
		oldest time.Time
	}{
		{"NothingDueBeforeTheFirstOffer", t0.Add(-time.Second), 0, time.Time{}},
		{"OfferedNow", t0, 1, t0},
		{"LeasesHeld", t0.Add(59 * time.Second), 1, t0},
		{"ExpiredLeaseIsOfferableButNotTheSpentOne", t0.Add(time.Minute), 2, t0},
		{"ScheduledLaterComesDue", t0.Add(time.Hour), 3, t0},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := NewDeliveryStats()
			for _, d := range all {
				CountDelivery(&s, &d, c.now)
			}
			FinishDeliveryStats(&s, c.now)
			assert.Equal(t, map[ledger.DeliveryState]int64{
				ledger.DeliveryStateOffered: 2, ledger.DeliveryStateLeased: 2, ledger.DeliveryStateAcknowledged: 1,
				ledger.DeliveryStateProcessed: 0, ledger.DeliveryStateFailed: 1, ledger.DeliveryStateExpired: 1,
			}, s.ByState)
			assert.Equal(t, map[ledger.CauseKind]int64{ledger.CauseQueueBounded: 1}, s.ByCause)
			assert.Equal(t, c.depth, s.Depth)
			assert.Equal(t, c.oldest, s.OldestAvailableAt)
			if c.depth == 0 {
				assert.Zero(t, s.Lag, "no lag when nothing is due")
			} else {
				assert.Equal(t, c.now.Sub(c.oldest), s.Lag)
			}
		})
	}
}

func TestDeliveryStatsOldestIsTheEarliest(t *testing.T) {
	all := statsDeliveries(t)
	now := t0.Add(2 * time.Hour)
	s := NewDeliveryStats()
	// Counted latest first: the oldest must still win.
	for _, name := range []string{"later", "leased", "now"} {
		d := all[name]
		CountDelivery(&s, &d, now)
	}
	FinishDeliveryStats(&s, now)
	assert.Equal(t, int64(3), s.Depth)
	assert.Equal(t, t0, s.OldestAvailableAt)
	assert.Equal(t, 2*time.Hour, s.Lag)
}

func TestFinishNormalisesNow(t *testing.T) {
	d := statsDeliveries(t)["now"]
	now := t0.Add(time.Second + 999*time.Nanosecond).In(time.FixedZone("east", 3600))
	s := NewDeliveryStats()
	CountDelivery(&s, &d, now)
	FinishDeliveryStats(&s, now)
	assert.Equal(t, time.Second, s.Lag, "the lag is counted in whole microseconds, whatever the zone")
	// At the oldest instant itself, nothing has waited yet.
	s = NewDeliveryStats()
	CountDelivery(&s, &d, t0)
	FinishDeliveryStats(&s, t0)
	assert.Equal(t, int64(1), s.Depth)
	assert.Zero(t, s.Lag)
}

func TestOutboxEntryDueAt(t *testing.T) {
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	pending := newEntry() // created at t0
	claimed, claim := OutboxEntry(pending).Grant("w1", "tok", at(time.Second), time.Minute)
	next := at(time.Hour)
	retry, o := OutboxEntry(claimed).MarkClaimFailed(claim, ledger.EmissionError{Message: "busy"}, &next, at(2*time.Second))
	require.Equal(t, ledger.OutcomeApplied, o)
	retryClaimed, _ := OutboxEntry(retry).Grant("w1", "tok-2", next, time.Minute)
	deferredIn := pending
	deferredIn.Status, deferredIn.NextAttemptAt = ledger.OutboxStatusDeferred, at(30*time.Minute)
	deferred, err := OutboxEntry(pending).Save(deferredIn, t0)
	require.NoError(t, err)
	ended, err := OutboxEntry(pending).MarkDelivered(ledger.EmissionResult{}, t0)
	require.NoError(t, err)
	early := pending
	early.CreatedAt = at(5 * time.Minute) // created later than the claim below runs out
	earlyClaimed, _ := OutboxEntry(early).Grant("w1", "tok-3", t0, time.Minute)

	for _, c := range []struct {
		name string
		e    ledger.OutboxEntry
		now  time.Time
		due  time.Time
		ok   bool
	}{
		{"PendingIsDueFromItsCreation", pending, t0, t0, true},
		{"PendingIsDueEvenBeforeItsCreation", pending, at(-time.Hour), t0, true},
		{"ClaimInForce", claimed, at(time.Second), time.Time{}, false},
		{"ClaimRunOutIsDueFromItsExpiry", claimed, at(time.Hour), claim.ExpiresAt, true},
		{"ClaimRunOutBeforeTheCreation", earlyClaimed, at(time.Hour), at(5 * time.Minute), true},
		{"RetryNotYet", retry, next.Add(-time.Microsecond), time.Time{}, false},
		{"RetryDue", retry, next, next, true},
		{"RetryClaimInForce", retryClaimed, next, time.Time{}, false},
		{"RetryClaimRunOut", retryClaimed, next.Add(time.Hour), next.Add(time.Minute), true},
		{"DeferredDue", deferred, at(30 * time.Minute), at(30 * time.Minute), true},
		{"Ended", ended, at(time.Hour), time.Time{}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			due, ok := OutboxEntry(c.e).DueAt(c.now)
			assert.Equal(t, c.ok, ok)
			assert.Equal(t, c.due, due)
			s := NewOutboxStats()
			CountEntry(&s, &c.e, c.now)
			FinishOutboxStats(&s, c.now)
			assert.Equal(t, int64(1), s.ByStatus[c.e.Status])
			if !c.ok {
				assert.Zero(t, s.Depth)
				assert.True(t, s.OldestDueAt.IsZero())
				assert.Zero(t, s.Lag, "no lag when nothing is due")
				return
			}
			assert.Equal(t, int64(1), s.Depth)
			assert.Equal(t, c.due, s.OldestDueAt)
			want := time.Duration(0)
			if c.now.After(c.due) {
				want = c.now.Sub(c.due)
			}
			assert.Equal(t, want, s.Lag)
		})
	}
}

func TestOutboxStatsOldestIsTheEarliest(t *testing.T) {
	a := newEntry()
	b := NewOutboxEntry(ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: "k2"}, t0.Add(time.Minute))
	now := t0.Add(time.Hour)
	s := NewOutboxStats()
	CountEntry(&s, &b, now)
	CountEntry(&s, &a, now)
	FinishOutboxStats(&s, now)
	assert.Equal(t, int64(2), s.Depth)
	assert.Equal(t, t0, s.OldestDueAt)
	assert.Equal(t, time.Hour, s.Lag)
	assert.Equal(t, int64(2), s.ByStatus[ledger.OutboxStatusPending])
}

func TestValidateStats(t *testing.T) {
	assert.NoError(t, ValidateStats(ledger.StatsFilter{}, t0))
	assert.NoError(t, ValidateStats(ledger.StatsFilter{Target: "host-1", Ceremony: "cer-1"}, t0))
	for _, c := range []struct {
		f   ledger.StatsFilter
		now time.Time
	}{
		{ledger.StatsFilter{}, time.Time{}},
		{ledger.StatsFilter{Target: "bad\n"}, t0},
		{ledger.StatsFilter{Ceremony: "bad\xff"}, t0},
		{ledger.StatsFilter{}, MaxTime().Add(time.Second)},
	} {
		err := ValidateStats(c.f, c.now)
		assert.ErrorIs(t, err, ledger.ErrInvalid, "%+v at %s", c.f, c.now)
	}
	assert.NoError(t, ValidateOutboxStats(t0))
	assert.ErrorIs(t, ValidateOutboxStats(time.Time{}), ledger.ErrInvalid)
}

func TestDeliveryStatsByTarget(t *testing.T) {
	all := statsDeliveries(t) // on host-1
	other := NewDelivery(ledger.EnqueueRequest{ID: "other", Target: "host-2", AvailableAt: t0.Add(30 * time.Minute)}, ledger.DefaultPolicy(), t0)
	now := t0.Add(time.Hour)
	s := NewDeliveryStats()
	for _, d := range all {
		CountDelivery(&s, &d, now)
	}
	CountDelivery(&s, &other, now)
	FinishDeliveryStats(&s, now)
	assert.Equal(t, map[ledger.Target]ledger.TargetQueueStats{
		"host-1": {Depth: 3, OldestAvailableAt: t0, Lag: time.Hour},
		"host-2": {Depth: 1, OldestAvailableAt: t0.Add(30 * time.Minute), Lag: 30 * time.Minute},
	}, s.ByTarget, "the ended, held and spent deliveries are not counted")
	assert.Equal(t, int64(4), s.Depth)

	// Before host-2's delivery is due, host-2 has no entry at all.
	s = NewDeliveryStats()
	CountDelivery(&s, &other, t0)
	FinishDeliveryStats(&s, t0)
	assert.Empty(t, s.ByTarget)
	assert.NotNil(t, s.ByTarget)

	// AddQueue is Count in bulk, and ignores an empty group.
	s = NewDeliveryStats()
	AddDeliveryQueue(&s, "host-1", 2, t0.Add(time.Minute))
	AddDeliveryQueue(&s, "host-2", 0, t0)
	AddDeliveryQueue(&s, "host-3", 1, t0)
	FinishDeliveryStats(&s, t0.Add(time.Minute))
	assert.Equal(t, int64(3), s.Depth)
	assert.Equal(t, t0, s.OldestAvailableAt)
	assert.Equal(t, map[ledger.Target]ledger.TargetQueueStats{
		"host-1": {Depth: 2, OldestAvailableAt: t0.Add(time.Minute)},
		"host-3": {Depth: 1, OldestAvailableAt: t0, Lag: time.Minute},
	}, s.ByTarget)
}

func TestOutboxStatsByProvider(t *testing.T) {
	a := newEntry()
	b := NewOutboxEntry(ledger.Envelope{Provider: "sms", Kind: "k", IdempotencyKey: "k2"}, t0.Add(time.Minute))
	c := NewOutboxEntry(ledger.Envelope{Provider: "sms", Kind: "k", IdempotencyKey: "k3"}, t0.Add(2*time.Minute))
	claimed, _ := OutboxEntry(c).Grant("w1", "tok", t0.Add(2*time.Minute), time.Hour)
	ended, err := OutboxEntry(a).MarkDelivered(ledger.EmissionResult{}, t0)
	require.NoError(t, err)
	now := t0.Add(time.Hour)
	s := NewOutboxStats()
	for _, e := range []ledger.OutboxEntry{a, b, claimed, ended} {
		CountEntry(&s, &e, now)
	}
	FinishOutboxStats(&s, now)
	assert.Equal(t, map[string]ledger.ProviderQueueStats{
		a.Envelope.Provider: {Depth: 1, OldestDueAt: t0, Lag: time.Hour},
		"sms":               {Depth: 1, OldestDueAt: t0.Add(time.Minute), Lag: 59 * time.Minute},
	}, s.ByProvider, "the claimed and the ended entries are not counted")
	assert.Equal(t, int64(2), s.Depth)
}
