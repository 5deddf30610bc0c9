package ledgertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// testAcknowledgeProcessed checks ledger.AckProcessor: one call that
// does what Acknowledge and then MarkProcessed do, with their outcomes,
// records and history, and stops after an acknowledgement that does not
// apply.
func testAcknowledgeProcessed(t *testing.T, newLedger NewLedgerFunc) {
	runLedgerRules(t, newLedger, []ledgerRule{
		{"IsTheTwoCallsInOne", ackProcessedIsTheTwoCalls},
		{"StaleLeaseStopsAtTheAcknowledgement", ackProcessedStaleLeaseStops},
		{"ExpiredLeaseStopsAtTheAcknowledgement", ackProcessedExpiredLeaseStops},
		{"EndedAndUnknownStopAtTheAcknowledgement", ackProcessedEndedAndUnknownStop},
		{"LowerFenceLeavesItAcknowledged", ackProcessedLowerFenceLeavesItAcknowledged},
		{"InvalidCallWritesNothing", ackProcessedInvalidWritesNothing},
	})
}

// ackProcessor returns the ledger as a ledger.AckProcessor. Every ledger
// we ship implements it, so a store without it fails the suite.
func (f *ledgerFixture) ackProcessor() ledger.AckProcessor {
	f.t.Helper()
	p, ok := f.l.(ledger.AckProcessor)
	if !ok {
		f.t.Fatalf("%T does not implement ledger.AckProcessor", f.l)
	}
	return p
}

// ackProcessed calls AcknowledgeProcessed with the action every rule uses.
func (f *ledgerFixture) ackProcessed(lease ledger.Lease, fence *ledger.Fence, now time.Time) (ack, processed ledger.DeliveryResult, err error) {
	f.t.Helper()
	return f.ackProcessor().AcknowledgeProcessed(f.ctx, lease, "seen", fence, "action-"+ledger.ActionRef(lease.DeliveryID), now)
}

// ackProcessedIsTheTwoCalls: two deliveries leased alike end alike, one
// through AcknowledgeProcessed and the other through Acknowledge then
// MarkProcessed at the same now: same outcomes, same records but for
// their IDs, same histories.
func ackProcessedIsTheTwoCalls(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	f.enqueue(req("d-2", "host-1"), t0)
	leases := f.leaseAll(ownerA, t0).Leased
	require.Len(t, leases, 2)
	now := at(time.Second)
	one, two := leases[0].Lease, leases[1].Lease

	before := f.get(one.DeliveryID)
	ack, processed, err := f.ackProcessed(one, ledger.FenceOf(7), now)
	require.NoError(t, err)
	require.Equal(t, ledger.OutcomeApplied, ack.Outcome)
	require.Equal(t, ledger.DeliveryStateAcknowledged, ack.Delivery.State)
	require.Equal(t, before.Version+1, ack.Delivery.Version)
	require.Equal(t, ledger.OutcomeApplied, processed.Outcome)
	require.True(t, processed.Applied())
	require.Equal(t, before.Version+2, processed.Delivery.Version, "two transitions, two versions")
	require.Equal(t, f.get(one.DeliveryID), processed.Delivery, "the second answer carries the record as it now stands")

	a := f.applied(f.get(two.DeliveryID), now)(f.l.Acknowledge(f.ctx, two, "seen", now))
	p := f.applied(a, now)(f.l.MarkProcessed(f.ctx, two.DeliveryID, a.Ack.Owner, ledger.FenceOf(7), "action-"+ledger.ActionRef(one.DeliveryID), now))

	rename := func(d ledger.Delivery) ledger.Delivery {
		d = d.Clone()
		d.ID, d.Payload = "", nil
		if d.Lease != nil {
			d.Lease.DeliveryID = ""
		}
		return d
	}
	require.Equal(t, rename(a), rename(ack.Delivery), "the first answer is Acknowledge's")
	require.Equal(t, rename(p), rename(processed.Delivery), "the second answer is MarkProcessed's")
	if _, ok := f.l.(ledger.Historian); ok {
		require.Equal(t, f.history(two.DeliveryID), f.history(one.DeliveryID), "the same history")
	}
}

// ackProcessedStaleLeaseStops: a lease taken over answers LeaseLost at
// the acknowledgement, nothing more is tried, and nothing is written.
func ackProcessedStaleLeaseStops(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	old := f.leaseOne("d-1", ownerA, t0)
	f.leaseOne("d-1", ownerB, old.ExpiresAt)
	before := f.get("d-1")
	ack, processed, err := f.ackProcessed(old, nil, old.ExpiresAt)
	f.notApplied(before, ledger.OutcomeLeaseLost)(ack, err)
	require.Equal(t, ledger.DeliveryResult{}, processed, "nothing tried after an acknowledgement that did not apply")
}

// ackProcessedExpiredLeaseStops: an expired lease answers LeaseExpired.
func ackProcessedExpiredLeaseStops(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	lease := f.leaseOne("d-1", ownerA, t0)
	before := f.get("d-1")
	ack, processed, err := f.ackProcessed(lease, nil, lease.ExpiresAt)
	f.notApplied(before, ledger.OutcomeLeaseExpired)(ack, err)
	require.Equal(t, ledger.DeliveryResult{}, processed)
}

// ackProcessedEndedAndUnknownStop: a processed delivery answers Ended (the
// call made again), an unknown one NotFound.
func ackProcessedEndedAndUnknownStop(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	lease := f.leaseOne("d-1", ownerA, t0)
	_, processed, err := f.ackProcessed(lease, nil, at(time.Second))
	require.NoError(t, err)
	require.True(t, processed.Applied())
	done := f.get("d-1")
	ack, processed, err := f.ackProcessed(lease, nil, at(2*time.Second))
	f.notApplied(done, ledger.OutcomeEnded)(ack, err)
	require.Equal(t, ledger.DeliveryResult{}, processed)

	ghost := lease
	ghost.DeliveryID = "d-unknown"
	ack, processed, err = f.ackProcessed(ghost, nil, at(time.Second))
	f.notApplied(ledger.Delivery{ID: "d-unknown"}, ledger.OutcomeNotFound)(ack, err)
	require.Equal(t, ledger.DeliveryResult{}, processed)
}

// ackProcessedLowerFenceLeavesItAcknowledged: the acknowledgement applies,
// the processing is FenceRejected and writes nothing, and the delivery
// stays acknowledged, as after the two calls.
func ackProcessedLowerFenceLeavesItAcknowledged(t *testing.T, f *ledgerFixture) {
	f.acknowledged("d-0", "host-1", ownerA, t0)
	f.process("d-0", ownerA, ledger.FenceOf(9), t0)
	f.enqueue(req("d-1", "host-1"), t0)
	lease := f.leaseOne("d-1", ownerA, t0)
	leased := f.get("d-1")
	now := at(time.Second)
	ack, processed, err := f.ackProcessed(lease, ledger.FenceOf(8), now)
	require.NoError(t, err)
	acked := f.applied(leased, now)(ack, nil)
	require.Equal(t, ledger.DeliveryStateAcknowledged, acked.State)
	f.notApplied(acked, ledger.OutcomeFenceRejected)(processed, nil)
}

// ackProcessedInvalidWritesNothing: a malformed call is ErrInvalid and
// writes nothing.
func ackProcessedInvalidWritesNothing(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	lease := f.leaseOne("d-1", ownerA, t0)
	before := f.get("d-1")
	for name, call := range map[string]func() error{
		"empty action": func() error {
			_, _, err := f.ackProcessor().AcknowledgeProcessed(f.ctx, lease, "seen", nil, "", at(time.Second))
			return err
		},
		"negative fence": func() error {
			_, _, err := f.ackProcessed(lease, ledger.FenceOf(-1), at(time.Second))
			return err
		},
		"zero now": func() error {
			_, _, err := f.ackProcessed(lease, nil, time.Time{})
			return err
		},
	} {
		require.ErrorIs(t, call(), ledger.ErrInvalid, name)
		f.requireUnchanged(before)
	}
}
