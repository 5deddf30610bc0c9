package ledgertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// testAcknowledge checks Ledger.Acknowledge and the precedence of its
// outcomes: NotFound, Ended, LeaseLost, Repeated, LeaseExpired.
func testAcknowledge(t *testing.T, newLedger NewLedgerFunc) {
	runLedgerRules(t, newLedger, []ledgerRule{
		{"SetsTheAcknowledgement", ackSetsTheAcknowledgement},
		{"UnknownIDIsNotFound", ackUnknownIDIsNotFound},
		{"TerminalIsEnded", ackTerminalIsEnded},
		{"WrongTokenIsLeaseLost", ackWrongTokenIsLeaseLost},
		{"EarlierGrantIsLeaseLost", ackEarlierGrantIsLeaseLost},
		{"HandMadeLeaseIsLeaseLost", ackHandMadeLeaseIsLeaseLost},
		{"LeaseOfAnotherDeliveryIsLeaseLost", ackLeaseOfAnotherDelivery},
		{"SecondAckIsRepeated", ackSecondAckIsRepeated},
		{"AtExpiryIsLeaseExpired", ackAtExpiryIsLeaseExpired},
		{"Precedence", ackPrecedence},
	})
}

func ackSetsTheAcknowledgement(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerA, t0)
	now := l.ExpiresAt.Add(-time.Microsecond) // the last instant the lease is valid
	d := f.applied(f.get("d-1"), now)(f.l.Acknowledge(f.ctx, l, "observed: ok", now))
	require.Equal(t, ledger.DeliveryStateAcknowledged, d.State)
	require.Equal(t, &ledger.Acknowledgement{
		Owner: ownerA, Observation: "observed: ok", At: now, Deadline: now.Add(testPolicy().AckWindow),
	}, d.Ack)
	require.Equal(t, 1, d.Attempts)
	require.True(t, d.EndedAt.IsZero())
}

func ackUnknownIDIsNotFound(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerA, t0)
	l.DeliveryID = "d-unknown"
	f.notApplied(ledger.Delivery{ID: "d-unknown"}, ledger.OutcomeNotFound)(f.l.Acknowledge(f.ctx, l, "", t0))
}

func ackTerminalIsEnded(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerA, t0)
	f.applied(f.get("d-1"), t0)(f.l.Abandon(f.ctx, "d-1", ledger.Cause{Kind: ledger.CauseCeremonyEnded}, t0))
	f.notApplied(f.get("d-1"), ledger.OutcomeEnded)(f.l.Acknowledge(f.ctx, l, "", at(time.Second)))
}

func ackWrongTokenIsLeaseLost(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerA, t0)
	held := f.get("d-1")
	forged := l
	forged.Token = storekit.NewToken()
	f.notApplied(held, ledger.OutcomeLeaseLost)(f.l.Acknowledge(f.ctx, forged, "", t0))
	nextSeq := l
	nextSeq.Seq++
	f.notApplied(held, ledger.OutcomeLeaseLost)(f.l.Acknowledge(f.ctx, nextSeq, "", t0))
}

// ackHandMadeLeaseIsLeaseLost: a lease built by hand, with a sequence
// number no grant has (zero, negative) or with nothing but the ID and a
// guessed token, is a lease that does not match: Acknowledge, Release and
// MarkFailed answer LeaseLost (Ended on a terminal record) and write
// nothing. It is not bad input: its fields are well formed.
func ackHandMadeLeaseIsLeaseLost(t *testing.T, f *ledgerFixture) {
	f.enqueueIDs("host-1", t0, "d-1", "d-ended")
	l := f.leaseOne("d-1", ownerA, t0)
	le := f.leaseOne("d-ended", ownerA, t0)
	f.applied(f.get("d-ended"), t0)(f.l.Abandon(f.ctx, "d-ended", ledger.Cause{Kind: ledger.CauseCeremonyEnded}, t0))
	for _, c := range []struct {
		name string
		make func(ledger.Lease) ledger.Lease
	}{
		{"seq zero", func(l ledger.Lease) ledger.Lease { l.Seq = 0; return l }},
		{"seq negative", func(l ledger.Lease) ledger.Lease { l.Seq = -1; return l }},
		{"ID and a guess", func(l ledger.Lease) ledger.Lease { return ledger.Lease{DeliveryID: l.DeliveryID, Token: "guess"} }},
	} {
		for _, held := range []struct {
			lease ledger.Lease
			want  ledger.Outcome
		}{{l, ledger.OutcomeLeaseLost}, {le, ledger.OutcomeEnded}} {
			bad := c.make(held.lease)
			before := f.get(held.lease.DeliveryID)
			t.Logf("%s on %s", c.name, before.State)
			f.notApplied(before, held.want)(f.l.Acknowledge(f.ctx, bad, "", t0))
			f.notApplied(before, held.want)(f.l.Release(f.ctx, bad, t0))
			f.notApplied(before, held.want)(f.l.MarkFailed(f.ctx, bad, ledger.FailureReason{Message: "timeout"}, t0))
		}
	}
}

func ackEarlierGrantIsLeaseLost(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l1 := f.leaseOne("d-1", ownerA, t0)
	f.applied(f.get("d-1"), t0)(f.l.Release(f.ctx, l1, t0))
	l2 := f.leaseOne("d-1", ownerA, t0)
	held := f.get("d-1")
	f.notApplied(held, ledger.OutcomeLeaseLost)(f.l.Acknowledge(f.ctx, l1, "", t0))
	// The earlier grant's token with the current sequence number is still
	// not the grant in force.
	mixed := l2
	mixed.Token = l1.Token
	f.notApplied(held, ledger.OutcomeLeaseLost)(f.l.Acknowledge(f.ctx, mixed, "", t0))
}

func ackLeaseOfAnotherDelivery(t *testing.T, f *ledgerFixture) {
	f.enqueueIDs("host-1", t0, "d-1", "d-2")
	l1 := f.leaseOne("d-1", ownerA, t0)
	f.leaseOne("d-2", ownerA, t0)
	wrong := l1
	wrong.DeliveryID = "d-2"
	f.notApplied(f.get("d-2"), ledger.OutcomeLeaseLost)(f.l.Acknowledge(f.ctx, wrong, "", t0))
	f.requireState("d-1", ledger.DeliveryStateLeased)

	// And of a delivery that is only offered.
	f.enqueue(req("d-3", "host-1"), t0)
	wrong.DeliveryID = "d-3"
	f.notApplied(f.get("d-3"), ledger.OutcomeLeaseLost)(f.l.Acknowledge(f.ctx, wrong, "", t0))
}

func ackSecondAckIsRepeated(t *testing.T, f *ledgerFixture) {
	l := f.acknowledged("d-1", "host-1", ownerA, t0)
	acked := f.get("d-1")
	f.notApplied(acked, ledger.OutcomeRepeated)(f.l.Acknowledge(f.ctx, l, "seen", at(time.Second)))
	f.notApplied(acked, ledger.OutcomeRepeated)(f.l.Acknowledge(f.ctx, l, "a different observation", at(2*time.Second)))
}

func ackAtExpiryIsLeaseExpired(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerA, t0)
	held := f.get("d-1")
	f.notApplied(held, ledger.OutcomeLeaseExpired)(f.l.Acknowledge(f.ctx, l, "", l.ExpiresAt))
	f.notApplied(held, ledger.OutcomeLeaseExpired)(f.l.Acknowledge(f.ctx, l, "", l.ExpiresAt.Add(time.Hour)))
}

func ackPrecedence(t *testing.T, f *ledgerFixture) {
	// Ended beats LeaseLost and LeaseExpired: a forged token on an ended
	// record, after its lease ran out.
	f.enqueue(req("d-ended", "host-1"), t0)
	le := f.leaseOne("d-ended", ownerA, t0)
	f.applied(f.get("d-ended"), t0)(f.l.Abandon(f.ctx, "d-ended", ledger.Cause{Kind: ledger.CauseQueueBounded}, t0))
	forged := le
	forged.Token = storekit.NewToken()
	f.notApplied(f.get("d-ended"), ledger.OutcomeEnded)(f.l.Acknowledge(f.ctx, forged, "", le.ExpiresAt))

	// Ended beats Repeated: acknowledged, processed, acknowledged again.
	lp := f.acknowledged("d-processed", "host-1", ownerA, t0)
	f.applied(f.get("d-processed"), t0)(f.l.MarkProcessed(f.ctx, "d-processed", ownerA, nil, "done", t0))
	f.notApplied(f.get("d-processed"), ledger.OutcomeEnded)(f.l.Acknowledge(f.ctx, lp, "seen", t0))

	// LeaseLost beats Repeated: a forged token on an acknowledged record.
	la := f.acknowledged("d-acked", "host-1", ownerA, t0)
	forged = la
	forged.Token = storekit.NewToken()
	f.notApplied(f.get("d-acked"), ledger.OutcomeLeaseLost)(f.l.Acknowledge(f.ctx, forged, "seen", t0))

	// Repeated beats LeaseExpired: the same acknowledgement after the lease ran out.
	f.notApplied(f.get("d-acked"), ledger.OutcomeRepeated)(f.l.Acknowledge(f.ctx, la, "seen", la.ExpiresAt))

	// LeaseLost beats LeaseExpired: a forged token on a lease that ran out
	// and that nobody took over.
	f.enqueue(req("d-leased", "host-1"), t0)
	ll := f.leaseOne("d-leased", ownerA, t0)
	forged = ll
	forged.Token = storekit.NewToken()
	f.notApplied(f.get("d-leased"), ledger.OutcomeLeaseLost)(f.l.Acknowledge(f.ctx, forged, "", ll.ExpiresAt))

	// NotFound beats everything: an unknown ID with a lease that ran out.
	forged.DeliveryID = "d-unknown"
	f.notApplied(ledger.Delivery{ID: "d-unknown"}, ledger.OutcomeNotFound)(f.l.Acknowledge(f.ctx, forged, "", ll.ExpiresAt))
}
