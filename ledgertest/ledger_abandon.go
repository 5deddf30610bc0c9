package ledgertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// testAbandon checks Ledger.Abandon: one open delivery, in any open state,
// ends as Expired with the caller's cause.
func testAbandon(t *testing.T, newLedger NewLedgerFunc) {
	runLedgerRules(t, newLedger, []ledgerRule{
		{"AnyOpenStateEndsAsExpired", abandonAnyOpenState},
		{"HolderThenGetsEnded", abandonHolderThenGetsEnded},
		{"TerminalIsEnded", abandonTerminalIsEnded},
		{"UnknownIDIsNotFound", abandonUnknownIDIsNotFound},
	})
}

// testExpireCeremony checks Ledger.ExpireCeremony: everything open for one
// ceremony ends as Expired; nothing else moves.
func testExpireCeremony(t *testing.T, newLedger NewLedgerFunc) {
	runLedgerRules(t, newLedger, []ledgerRule{
		{"EndsEveryOpenDeliveryOfTheCeremony", ceremonyEndsEveryOpenDelivery},
		{"HoldersThenGetEnded", ceremonyHoldersThenGetEnded},
		{"UnknownCeremonyChangesNothing", ceremonyUnknownChangesNothing},
	})
}

func abandonAnyOpenState(t *testing.T, f *ledgerFixture) {
	f.acknowledged("d-acked", "host-1", ownerA, t0)
	f.enqueue(req("d-leased", "host-1"), t0)
	f.leaseOne("d-leased", ownerA, t0)
	f.enqueue(req("d-offered", "host-1"), t0)
	now := at(time.Second)
	for i, id := range []ledger.DeliveryID{"d-offered", "d-leased", "d-acked"} {
		cause := ledger.Cause{Kind: ledger.CauseQueueBounded, Detail: "dropped oldest " + string(id)}
		if i == 1 {
			cause.Kind = "caller-defined kind"
		}
		before := f.get(id)
		d := f.applied(before, now)(f.l.Abandon(f.ctx, id, cause, now))
		require.Equal(t, ledger.DeliveryStateExpired, d.State, id)
		require.Equal(t, &cause, d.Cause, id)
		require.Equal(t, now, d.EndedAt, id)
		require.Nil(t, d.Lease, id)
		require.Equal(t, before.Attempts, d.Attempts, id)
		require.Equal(t, before.Ack, d.Ack, id)
	}
}

func abandonHolderThenGetsEnded(t *testing.T, f *ledgerFixture) {
	la := f.acknowledged("d-acked", "host-1", ownerA, t0)
	f.enqueue(req("d-leased", "host-1"), t0)
	ll := f.leaseOne("d-leased", ownerA, t0)
	cause := ledger.Cause{Kind: ledger.CauseBindingRevoked}
	f.applied(f.get("d-leased"), t0)(f.l.Abandon(f.ctx, "d-leased", cause, t0))
	f.applied(f.get("d-acked"), t0)(f.l.Abandon(f.ctx, "d-acked", cause, t0))

	now := at(time.Second)
	leased, acked := f.get("d-leased"), f.get("d-acked")
	f.notApplied(leased, ledger.OutcomeEnded)(f.l.Acknowledge(f.ctx, ll, "", now))
	f.notApplied(leased, ledger.OutcomeEnded)(f.l.MarkFailed(f.ctx, ll, ledger.FailureReason{}, now))
	f.notApplied(leased, ledger.OutcomeEnded)(f.l.Release(f.ctx, ll, now))
	f.notApplied(acked, ledger.OutcomeEnded)(f.l.Acknowledge(f.ctx, la, "", now))
	f.notApplied(acked, ledger.OutcomeEnded)(f.l.MarkProcessed(f.ctx, "d-acked", ownerA, nil, "done", now))
	f.notApplied(acked, ledger.OutcomeEnded)(f.l.MarkFailed(f.ctx, la, ledger.FailureReason{}, now))
	f.notApplied(acked, ledger.OutcomeEnded)(f.l.Release(f.ctx, la, now))
}

func abandonTerminalIsEnded(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	f.applied(f.get("d-1"), t0)(f.l.Abandon(f.ctx, "d-1", ledger.Cause{Kind: ledger.CauseQueueBounded, Detail: "first"}, t0))
	f.notApplied(f.get("d-1"), ledger.OutcomeEnded)(f.l.Abandon(f.ctx, "d-1", ledger.Cause{Kind: ledger.CauseCeremonyEnded, Detail: "second"}, at(time.Second)))
	f.notApplied(f.get("d-1"), ledger.OutcomeEnded)(f.l.Abandon(f.ctx, "d-1", ledger.Cause{Kind: ledger.CauseQueueBounded, Detail: "first"}, at(time.Second)))

	f.acknowledged("d-2", "host-1", ownerA, t0)
	f.process("d-2", ownerA, nil, t0)
	f.notApplied(f.get("d-2"), ledger.OutcomeEnded)(f.l.Abandon(f.ctx, "d-2", ledger.Cause{Kind: ledger.CauseQueueBounded}, at(time.Second)))
}

func abandonUnknownIDIsNotFound(t *testing.T, f *ledgerFixture) {
	f.notApplied(ledger.Delivery{ID: "d-unknown"}, ledger.OutcomeNotFound)(
		f.l.Abandon(f.ctx, "d-unknown", ledger.Cause{Kind: ledger.CauseQueueBounded}, t0))
}

// ceremonyReq is req with a ceremony.
func ceremonyReq(id ledger.DeliveryID, ceremony ledger.CeremonyID) ledger.EnqueueRequest {
	r := req(id, "host-1")
	r.Ceremony = ceremony
	return r
}

// expireCeremony calls ExpireCeremony and requires the changed IDs to be want.
func (f *ledgerFixture) expireCeremony(c ledger.CeremonyID, cause ledger.Cause, now time.Time, want ...ledger.DeliveryID) {
	f.t.Helper()
	res, err := f.l.ExpireCeremony(f.ctx, c, cause, now)
	require.NoError(f.t, err)
	require.Equal(f.t, len(want) > 0, res.Applied())
	if len(want) == 0 {
		require.Empty(f.t, res.Changed)
		return
	}
	require.Equal(f.t, want, res.Changed)
}

// ceremonyFixture enqueues, for ceremony cer-1, one delivery in every state
// (c-offered, c-leased, c-acked, c-processed, c-abandoned), plus o-other in
// cer-2 and o-none without a ceremony. It returns the leases of c-leased
// and c-acked.
func (f *ledgerFixture) ceremonyFixture() (leased, acked ledger.Lease) {
	f.t.Helper()
	for _, id := range []ledger.DeliveryID{"c-acked", "c-processed"} {
		f.enqueue(ceremonyReq(id, "cer-1"), t0)
		l := f.leaseOne(id, ownerA, t0)
		f.applied(f.get(id), t0)(f.l.Acknowledge(f.ctx, l, "", t0))
		if id == "c-acked" {
			acked = l
		}
	}
	f.process("c-processed", ownerA, nil, t0)
	f.enqueue(ceremonyReq("c-leased", "cer-1"), t0)
	leased = f.leaseOne("c-leased", ownerB, t0)
	f.enqueue(ceremonyReq("c-abandoned", "cer-1"), t0)
	f.applied(f.get("c-abandoned"), t0)(f.l.Abandon(f.ctx, "c-abandoned", ledger.Cause{Kind: ledger.CauseQueueBounded}, t0))
	f.enqueue(ceremonyReq("c-offered", "cer-1"), t0)
	f.enqueue(ceremonyReq("o-other", "cer-2"), t0)
	f.enqueue(ceremonyReq("o-none", ""), t0)
	return leased, acked
}

func ceremonyEndsEveryOpenDelivery(t *testing.T, f *ledgerFixture) {
	f.ceremonyFixture()
	untouched := []ledger.Delivery{f.get("c-processed"), f.get("c-abandoned"), f.get("o-other"), f.get("o-none")}
	before := map[ledger.DeliveryID]ledger.Delivery{}
	for _, id := range []ledger.DeliveryID{"c-acked", "c-leased", "c-offered"} {
		before[id] = f.get(id)
	}
	cause := ledger.Cause{Kind: ledger.CauseCeremonyEnded, Detail: "ceremony 1 closed"}
	now := at(time.Second)
	f.expireCeremony("cer-1", cause, now, "c-acked", "c-leased", "c-offered")
	for id, b := range before {
		d := f.requireState(id, ledger.DeliveryStateExpired)
		require.Equal(t, &cause, d.Cause, id)
		require.Equal(t, now, d.EndedAt, id)
		require.Equal(t, now, d.UpdatedAt, id)
		require.Equal(t, b.Version+1, d.Version, id)
		require.Nil(t, d.Lease, id)
	}
	for _, d := range untouched {
		f.requireUnchanged(d)
	}
	f.expireCeremony("cer-1", cause, at(2*time.Second))
}

func ceremonyHoldersThenGetEnded(t *testing.T, f *ledgerFixture) {
	leased, acked := f.ceremonyFixture()
	f.expireCeremony("cer-1", ledger.Cause{Kind: ledger.CauseBindingRevoked}, t0, "c-acked", "c-leased", "c-offered")
	now := at(time.Second)
	f.notApplied(f.get("c-leased"), ledger.OutcomeEnded)(f.l.Acknowledge(f.ctx, leased, "", now))
	f.notApplied(f.get("c-leased"), ledger.OutcomeEnded)(f.l.MarkFailed(f.ctx, leased, ledger.FailureReason{}, now))
	f.notApplied(f.get("c-leased"), ledger.OutcomeEnded)(f.l.Release(f.ctx, leased, now))
	f.notApplied(f.get("c-acked"), ledger.OutcomeEnded)(f.l.MarkProcessed(f.ctx, "c-acked", ownerA, nil, "done", now))
	f.notApplied(f.get("c-acked"), ledger.OutcomeEnded)(f.l.Acknowledge(f.ctx, acked, "", now))
	f.requireNothingOffered(ledger.LeaseFilter{Ceremony: "cer-1"}, at(time.Hour))
}

func ceremonyUnknownChangesNothing(t *testing.T, f *ledgerFixture) {
	f.ceremonyFixture()
	snapshot := f.all()
	f.expireCeremony("cer-unknown", ledger.Cause{Kind: ledger.CauseCeremonyEnded}, at(time.Second))
	require.Equal(t, snapshot, f.all())
}
