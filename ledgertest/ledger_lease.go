package ledgertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// testLease checks Ledger.Lease: exclusivity, attempts, sequence numbers,
// order, filters, expiry and the incarnation rule.
func testLease(t *testing.T, newLedger NewLedgerFunc) {
	runLedgerRules(t, newLedger, []ledgerRule{
		{"EmptyLedgerGrantsNothing", leaseEmptyLedgerGrantsNothing},
		{"GrantCountsAnAttempt", leaseGrantCountsAnAttempt},
		{"IsExclusive", leaseIsExclusive},
		{"SeqGrowsByOnePerGrant", leaseSeqGrowsByOnePerGrant},
		{"OldestAvailableFirstThenID", leaseOldestAvailableFirstThenID},
		{"FutureAvailableAtIsOfferedWhenNowReachesIt", leaseFutureAvailableAt},
		{"LimitIsRespected", leaseLimitIsRespected},
		{"FilterByTargets", leaseFilterByTargets},
		{"FilterByCeremony", leaseFilterByCeremony},
		{"UnexpiredLeaseIsNotOffered", leaseUnexpiredLeaseIsNotOffered},
		{"ExpiredLeaseIsOfferableAgain", leaseExpiredLeaseIsOfferableAgain},
		{"UsedUpAttemptsAreNotOffered", leaseUsedUpAttemptsAreNotOffered},
		{"AcknowledgedIsNeverOfferedAgain", leaseAcknowledgedIsNeverOfferedAgain},
		{"TerminalIsNeverOffered", leaseTerminalIsNeverOffered},
		{"IncarnationRule/TakesBackTheOldIncarnationsLeases", leaseIncarnationTakesBack},
		{"IncarnationRule/UsedUpAttemptsFail", leaseIncarnationUsedUpAttemptsFail},
		{"IncarnationRule/TakesBackWhateverTheFilter", leaseIncarnationWhateverTheFilter},
		{"IncarnationRule/SameIncarnationKeepsItsLeases", leaseIncarnationSameKeeps},
	})
}

func leaseEmptyLedgerGrantsNothing(t *testing.T, f *ledgerFixture) {
	res := f.leaseAll(ownerA, t0)
	require.Empty(t, res.Leased)
	require.Empty(t, res.Reclaimed)
	require.False(t, res.Applied())
}

func leaseGrantCountsAnAttempt(t *testing.T, f *ledgerFixture) {
	before := f.enqueue(req("d-1", "host-1"), t0)
	now := at(time.Second)
	res := f.lease(ledger.LeaseFilter{}, ownerA, now, leaseFor, 10)
	require.True(t, res.Applied())
	require.Empty(t, res.Reclaimed)
	require.Len(t, res.Leased, 1)
	l, d := res.Leased[0].Lease, res.Leased[0].Delivery
	require.Equal(t, ledger.Lease{
		DeliveryID: "d-1", Owner: ownerA, Token: l.Token, Seq: 1,
		GrantedAt: now, ExpiresAt: now.Add(leaseFor),
	}, l)
	require.Equal(t, 1, d.Attempts)
	require.Equal(t, int64(1), d.LeaseSeq)
	require.Equal(t, l.ExpiresAt, d.AvailableAt, "a leased delivery is next available when its lease expires")
	require.Equal(t, now, d.UpdatedAt)
	require.Greater(t, d.Version, before.Version)
	require.Nil(t, d.LastFailure)
}

func leaseIsExclusive(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	f.leaseOne("d-1", ownerA, t0)
	require.Empty(t, f.lease(ledger.LeaseFilter{}, ownerB, t0, leaseFor, 10).Leased)
	require.Empty(t, f.lease(ledger.LeaseFilter{}, ownerA, at(time.Second), leaseFor, 10).Leased,
		"not even the holder is granted a delivery it holds")
}

func leaseSeqGrowsByOnePerGrant(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	tokens := map[ledger.Token]bool{}
	grant := func(owner ledger.Owner, now time.Time, wantSeq int64) ledger.Lease {
		t.Helper()
		l := f.leaseOne("d-1", owner, now)
		require.Equal(t, wantSeq, l.Seq)
		require.Equal(t, wantSeq, f.get("d-1").LeaseSeq)
		require.NotEmpty(t, l.Token)
		require.False(t, tokens[l.Token], "every grant gets a fresh token")
		tokens[l.Token] = true
		return l
	}
	l1 := grant(ownerA, t0, 1)
	f.applied(f.get("d-1"), t0)(f.l.Release(f.ctx, l1, t0))
	l2 := grant(ownerA, t0, 2) // released: offerable again at once, same owner
	l3 := grant(ownerB, l2.ExpiresAt, 3)
	f.applied(f.get("d-1"), l3.GrantedAt)(f.l.MarkFailed(f.ctx, l3, ledger.FailureReason{Message: "boom"}, l3.GrantedAt))
	grant(ownerA, at(time.Hour), 4)
}

func leaseOldestAvailableFirstThenID(t *testing.T, f *ledgerFixture) {
	// Enqueued out of order; "D-z" sorts before "d-b" in byte order.
	for _, e := range []struct {
		id    ledger.DeliveryID
		avail time.Duration
	}{{"d-c", 10 * time.Minute}, {"d-e", 2 * time.Hour}, {"d-a", 30 * time.Minute}, {"d-d", 0}, {"d-b", 10 * time.Minute}, {"D-z", 10 * time.Minute}} {
		r := req(e.id, "host-1")
		r.AvailableAt = at(e.avail)
		f.enqueue(r, t0)
	}
	// Leases last a day, so nothing granted here is offered again below.
	leased := func(now time.Time, limit int) []ledger.DeliveryID {
		return deliveryIDs(leasedDeliveries(f.lease(ledger.LeaseFilter{}, ownerA, now, 24*time.Hour, limit)))
	}
	require.Equal(t, []ledger.DeliveryID{"d-d", "D-z"}, leased(at(time.Hour), 2))
	require.Equal(t, []ledger.DeliveryID{"d-b", "d-c", "d-a"}, leased(at(time.Hour), 10))
	require.Equal(t, []ledger.DeliveryID{"d-e"}, leased(at(2*time.Hour), 10))
}

func leaseFutureAvailableAt(t *testing.T, f *ledgerFixture) {
	r := req("d-1", "host-1")
	r.AvailableAt = at(10 * time.Second)
	f.enqueue(r, t0)
	f.requireNothingOffered(ledger.LeaseFilter{}, t0)
	f.requireNothingOffered(ledger.LeaseFilter{}, at(10*time.Second-time.Microsecond))
	f.leaseOne("d-1", ownerA, at(10*time.Second))
}

func leaseLimitIsRespected(t *testing.T, f *ledgerFixture) {
	f.enqueueIDs("host-1", t0, "d-1", "d-2", "d-3", "d-4", "d-5")
	require.Equal(t, []ledger.DeliveryID{"d-1", "d-2"}, f.leaseIDs(ledger.LeaseFilter{}, ownerA, t0, 2))
	require.Equal(t, []ledger.DeliveryID{"d-3"}, f.leaseIDs(ledger.LeaseFilter{}, ownerB, t0, 1))
	require.Equal(t, []ledger.DeliveryID{"d-4", "d-5"}, f.leaseIDs(ledger.LeaseFilter{}, ownerB, t0, ledger.MaxLimit))
}

func leaseFilterByTargets(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	f.enqueue(req("d-2", "host-2"), t0)
	f.enqueue(req("d-3", "host-3"), t0)
	f.enqueue(req("d-4", "host-1"), t0)
	require.Empty(t, f.leaseIDs(ledger.LeaseFilter{Targets: []ledger.Target{"host-9"}}, ownerA, t0, 10))
	require.Equal(t, []ledger.DeliveryID{"d-1", "d-3", "d-4"},
		f.leaseIDs(ledger.LeaseFilter{Targets: []ledger.Target{"host-3", "host-1"}}, ownerA, t0, 10))
	require.Equal(t, []ledger.DeliveryID{"d-2"}, f.leaseIDs(ledger.LeaseFilter{Targets: []ledger.Target{"host-2"}}, ownerA, t0, 10))
}

func leaseFilterByCeremony(t *testing.T, f *ledgerFixture) {
	for _, e := range []struct {
		id       ledger.DeliveryID
		target   ledger.Target
		ceremony ledger.CeremonyID
	}{{"d-1", "host-1", "cer-1"}, {"d-2", "host-1", "cer-2"}, {"d-3", "host-1", ""}, {"d-4", "host-2", "cer-2"}, {"d-5", "host-1", "cer-1"}} {
		r := req(e.id, e.target)
		r.Ceremony = e.ceremony
		f.enqueue(r, t0)
	}
	require.Equal(t, []ledger.DeliveryID{"d-2"},
		f.leaseIDs(ledger.LeaseFilter{Targets: []ledger.Target{"host-1"}, Ceremony: "cer-2"}, ownerA, t0, 10))
	require.Equal(t, []ledger.DeliveryID{"d-1", "d-5"}, f.leaseIDs(ledger.LeaseFilter{Ceremony: "cer-1"}, ownerA, t0, 10))
	require.Equal(t, []ledger.DeliveryID{"d-3", "d-4"}, f.leaseIDs(ledger.LeaseFilter{}, ownerA, t0, 10),
		"an empty filter matches every target and ceremony, the empty ceremony included")
}

func leaseUnexpiredLeaseIsNotOffered(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerA, t0)
	held := f.get("d-1")
	f.requireNothingOffered(ledger.LeaseFilter{}, l.ExpiresAt.Add(-time.Microsecond))
	f.requireUnchanged(held)
}

func leaseExpiredLeaseIsOfferableAgain(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l1 := f.leaseOne("d-1", ownerA, t0)
	// The lease is valid on [GrantedAt, ExpiresAt): at ExpiresAt it is over.
	l2 := f.leaseOne("d-1", ownerB, l1.ExpiresAt)
	require.Equal(t, int64(2), l2.Seq)
	d := f.get("d-1")
	require.Equal(t, 2, d.Attempts, "the expired attempt stays counted")
	require.NotNil(t, d.LastFailure)
	require.Equal(t, ledger.FailureLeaseExpired, d.LastFailure.Kind)
	require.Equal(t, ownerA, d.LastFailure.Owner)
	f.notApplied(d, ledger.OutcomeLeaseLost)(f.l.Acknowledge(f.ctx, l1, "late", l1.ExpiresAt))
}

func leaseUsedUpAttemptsAreNotOffered(t *testing.T, f *ledgerFixture) {
	r := req("d-1", "host-1")
	r.Policy.MaxAttempts = 2
	f.enqueue(r, t0)
	l1 := f.leaseOne("d-1", ownerA, t0)
	l2 := f.leaseOne("d-1", ownerA, l1.ExpiresAt)
	held := f.get("d-1")
	require.Equal(t, 2, held.Attempts)
	f.requireNothingOffered(ledger.LeaseFilter{}, l2.ExpiresAt)
	f.requireNothingOffered(ledger.LeaseFilter{}, at(24*time.Hour))
	f.requireUnchanged(held)
}

func leaseAcknowledgedIsNeverOfferedAgain(t *testing.T, f *ledgerFixture) {
	l := f.acknowledged("d-1", "host-1", ownerA, t0)
	acked := f.get("d-1")
	f.requireNothingOffered(ledger.LeaseFilter{}, l.ExpiresAt)
	f.requireNothingOffered(ledger.LeaseFilter{}, acked.Ack.Deadline.Add(-time.Microsecond))
	f.requireUnchanged(acked)
}

func leaseTerminalIsNeverOffered(t *testing.T, f *ledgerFixture) {
	f.acknowledged("d-processed", "host-1", ownerA, t0)
	f.applied(f.get("d-processed"), t0)(f.l.MarkProcessed(f.ctx, "d-processed", ownerA, nil, "done", t0))

	f.enqueue(req("d-failed", "host-1"), t0)
	lf := f.leaseOne("d-failed", ownerA, t0)
	f.applied(f.get("d-failed"), t0)(f.l.MarkFailed(f.ctx, lf, ledger.FailureReason{Message: "no", Permanent: true}, t0))

	f.enqueue(req("d-expired", "host-1"), t0)
	f.applied(f.get("d-expired"), t0)(f.l.Abandon(f.ctx, "d-expired", ledger.Cause{Kind: ledger.CauseQueueBounded}, t0))

	for _, now := range []time.Time{t0, at(time.Hour), at(365 * 24 * time.Hour)} {
		f.requireNothingOffered(ledger.LeaseFilter{}, now)
	}
}

func leaseIncarnationTakesBack(t *testing.T, f *ledgerFixture) {
	f.enqueueIDs("host-1", t0, "d-1", "d-2", "d-3", "d-4")
	a1 := f.leaseOne("d-1", ownerA, t0)
	a2 := f.leaseOne("d-2", ownerA, t0)
	f.leaseOne("d-3", ownerB, t0)
	a4 := f.leaseOne("d-4", ownerA, t0)
	f.applied(f.get("d-4"), t0)(f.l.Acknowledge(f.ctx, a4, "seen", t0))
	otherAgent, acked := f.get("d-3"), f.get("d-4")

	// ownerA2 is a new incarnation of ownerA's agent: leasing takes back
	// d-1 and d-2 at once, and this same call may grant them again.
	now := at(time.Second)
	res := f.lease(ledger.LeaseFilter{}, ownerA2, now, leaseFor, 1)
	require.True(t, res.Applied())
	require.Equal(t, []ledger.DeliveryID{"d-1", "d-2"}, res.Reclaimed, "reclaimed, in ID order")
	require.Len(t, res.Leased, 1)
	regranted := res.Leased[0].Delivery
	require.Equal(t, ledger.DeliveryID("d-1"), regranted.ID, "reclaimed work is available at once, ties by ID")
	require.Equal(t, 2, regranted.Attempts, "the reclaimed attempt stays counted")
	require.Equal(t, int64(2), regranted.LeaseSeq)

	d2 := f.requireState("d-2", ledger.DeliveryStateOffered)
	require.Equal(t, 1, d2.Attempts, "the reclaimed attempt stays counted")
	require.Nil(t, d2.Lease)
	require.Equal(t, now, d2.AvailableAt)
	require.NotNil(t, d2.LastFailure)
	require.Equal(t, ledger.FailureReclaimed, d2.LastFailure.Kind)
	require.Equal(t, ownerA, d2.LastFailure.Owner)
	require.Equal(t, now, d2.LastFailure.At)

	// The old incarnation has lost its leases.
	d1 := f.get("d-1")
	f.notApplied(d1, ledger.OutcomeLeaseLost)(f.l.Acknowledge(f.ctx, a1, "late", now))
	f.notApplied(d2, ledger.OutcomeLeaseLost)(f.l.Acknowledge(f.ctx, a2, "late", now))
	f.notApplied(d2, ledger.OutcomeLeaseLost)(f.l.MarkFailed(f.ctx, a2, ledger.FailureReason{Message: "late"}, now))
	f.notApplied(d2, ledger.OutcomeLeaseLost)(f.l.Release(f.ctx, a2, now))

	// Another agent's lease and the old incarnation's acknowledged work
	// are untouched; the acknowledging owner still closes its work.
	f.requireUnchanged(otherAgent)
	f.requireUnchanged(acked)
	f.applied(acked, now)(f.l.MarkProcessed(f.ctx, "d-4", ownerA, nil, "done", now))
}

func leaseIncarnationUsedUpAttemptsFail(t *testing.T, f *ledgerFixture) {
	r := req("d-1", "host-1")
	r.Policy.MaxAttempts = 1
	f.enqueue(r, t0)
	f.leaseOne("d-1", ownerA, t0)
	now := at(time.Second)
	res := f.lease(ledger.LeaseFilter{}, ownerA2, now, leaseFor, 10)
	require.Equal(t, []ledger.DeliveryID{"d-1"}, res.Reclaimed)
	require.Empty(t, res.Leased)
	d := f.requireState("d-1", ledger.DeliveryStateFailed)
	require.Equal(t, 1, d.Attempts)
	require.Equal(t, now, d.EndedAt)
	require.NotNil(t, d.LastFailure)
	require.Equal(t, ledger.FailureReclaimed, d.LastFailure.Kind)
	require.Nil(t, d.Lease)
}

func leaseIncarnationWhateverTheFilter(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	f.leaseOne("d-1", ownerA, t0)
	res := f.lease(ledger.LeaseFilter{Targets: []ledger.Target{"host-2"}}, ownerA2, at(time.Second), leaseFor, 10)
	require.Equal(t, []ledger.DeliveryID{"d-1"}, res.Reclaimed,
		"every lease of the agent's other incarnations is taken back, not only those the filter matches")
	require.Empty(t, res.Leased)
	require.True(t, res.Applied())
	f.requireState("d-1", ledger.DeliveryStateOffered)
}

func leaseIncarnationSameKeeps(t *testing.T, f *ledgerFixture) {
	f.enqueueIDs("host-1", t0, "d-1", "d-2")
	f.leaseOne("d-1", ownerA, t0)
	held := f.get("d-1")
	res := f.lease(ledger.LeaseFilter{}, ownerA, at(time.Second), leaseFor, 10)
	require.Empty(t, res.Reclaimed)
	require.Equal(t, []ledger.DeliveryID{"d-2"}, deliveryIDs(leasedDeliveries(res)))
	f.requireUnchanged(held)
}

// leasedDeliveries returns the records of res.Leased.
func leasedDeliveries(res ledger.LeaseResult) []ledger.Delivery {
	out := make([]ledger.Delivery, 0, len(res.Leased))
	for _, ld := range res.Leased {
		out = append(out, ld.Delivery)
	}
	return out
}
