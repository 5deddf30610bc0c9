package ledgertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// testRecordActivation checks Ledger.RecordActivation: it needs no lease,
// never changes the state, and a reached host still has to lease the work.
func testRecordActivation(t *testing.T, newLedger NewLedgerFunc) {
	runLedgerRules(t, newLedger, []ledgerRule{
		{"CountsWithoutChangingTheState", activationCountsWithoutChangingTheState},
		{"DeliveredStaysOfferable", activationDeliveredStaysOfferable},
		{"LeaseStaysInForce", activationLeaseStaysInForce},
		{"TerminalIsEnded", activationTerminalIsEnded},
		{"UnknownIDIsNotFound", activationUnknownIDIsNotFound},
	})
}

// activate records a and requires it to apply without changing the state.
func (f *ledgerFixture) activate(id ledger.DeliveryID, a ledger.Activation, now time.Time) ledger.Delivery {
	f.t.Helper()
	before := f.get(id)
	d := f.applied(before, now)(f.l.RecordActivation(f.ctx, id, a, now))
	require.Equal(f.t, before.State, d.State, "an activation never changes the state")
	require.Equal(f.t, before.Attempts, d.Attempts)
	require.Equal(f.t, before.Lease, d.Lease)
	require.Equal(f.t, before.AvailableAt, d.AvailableAt)
	require.Equal(f.t, before.Activations+1, d.Activations)
	require.Equal(f.t, &a, d.LastActivation)
	require.Equal(f.t, ledger.Normalize(now), d.LastActivationAt)
	return d
}

func activationCountsWithoutChangingTheState(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	f.activate("d-1", ledger.Activation{Result: ledger.ActivationUnreachable, Detail: "no route"}, t0)
	f.activate("d-1", ledger.Activation{Result: ledger.ActivationFailed}, at(time.Second))
	l := f.leaseOne("d-1", ownerA, at(2*time.Second))
	f.activate("d-1", ledger.Activation{Result: ledger.ActivationDelivered, Detail: "woken"}, at(3*time.Second))
	f.applied(f.get("d-1"), at(4*time.Second))(f.l.Acknowledge(f.ctx, l, "", at(4*time.Second)))
	d := f.activate("d-1", ledger.Activation{Result: ledger.ActivationDelivered}, at(5*time.Second))
	require.Equal(t, 4, d.Activations)
	require.Equal(t, ledger.DeliveryStateAcknowledged, d.State)
}

func activationDeliveredStaysOfferable(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	f.activate("d-1", ledger.Activation{Result: ledger.ActivationDelivered}, t0)
	f.leaseOne("d-1", ownerA, t0)
}

func activationLeaseStaysInForce(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerA, t0)
	f.activate("d-1", ledger.Activation{Result: ledger.ActivationDelivered}, t0)
	f.requireNothingOffered(ledger.LeaseFilter{}, at(time.Second))
	f.applied(f.get("d-1"), at(time.Second))(f.l.Acknowledge(f.ctx, l, "", at(time.Second)))
}

func activationTerminalIsEnded(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	f.applied(f.get("d-1"), t0)(f.l.Abandon(f.ctx, "d-1", ledger.Cause{Kind: ledger.CauseQueueBounded}, t0))
	f.notApplied(f.get("d-1"), ledger.OutcomeEnded)(f.l.RecordActivation(f.ctx, "d-1", ledger.Activation{Result: ledger.ActivationDelivered}, at(time.Second)))

	f.acknowledged("d-2", "host-1", ownerA, t0)
	f.process("d-2", ownerA, nil, t0)
	f.notApplied(f.get("d-2"), ledger.OutcomeEnded)(f.l.RecordActivation(f.ctx, "d-2", ledger.Activation{Result: ledger.ActivationFailed}, at(time.Second)))
}

func activationUnknownIDIsNotFound(t *testing.T, f *ledgerFixture) {
	f.notApplied(ledger.Delivery{ID: "d-unknown"}, ledger.OutcomeNotFound)(
		f.l.RecordActivation(f.ctx, "d-unknown", ledger.Activation{Result: ledger.ActivationDelivered}, t0))
}
