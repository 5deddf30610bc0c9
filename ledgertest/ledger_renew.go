package ledgertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// testRenewLease checks Renewer.RenewLease, the lease heartbeat: it moves
// the expiry of the lease in force and nothing else, needs the current
// lease and now before its expiry, and a renewed delivery is neither
// offered to anyone else nor swept before its new expiry. Every store we
// ship implements ledger.Renewer, so a ledger without it fails the group.
func testRenewLease(t *testing.T, newLedger NewLedgerFunc) {
	runLedgerRules(t, newLedger, []ledgerRule{
		{"ExtendsTheLeaseKeepingTokenAndSeq", renewExtendsTheLease},
		{"LastInstantRenews", renewLastInstantRenews},
		{"ExpiredLeaseIsNotRevived", renewExpiredLeaseIsNotRevived},
		{"RenewedLeaseIsNotOfferedUntilTheNewExpiry", renewNotOfferedUntilTheNewExpiry},
		{"RenewedLeaseIsOfferedInItsNewPlace", renewOfferedInItsNewPlace},
		{"RenewedLeaseIsNotSweptUntilTheNewExpiry", renewNotSweptUntilTheNewExpiry},
		{"StaleLeaseIsLeaseLost", renewStaleLeaseIsLeaseLost},
		{"AcknowledgedIsWrongState", renewAcknowledgedIsWrongState},
		{"TerminalIsEnded", renewTerminalIsEnded},
		{"UnknownIsNotFound", renewUnknownIsNotFound},
		{"NotAnAttempt", renewNotAnAttempt},
		{"Precedence", renewPrecedence},
		{"InvalidIsRejected", renewInvalidIsRejected},
		{"CancelledContext", renewCancelledContext},
	})
}

// renewer returns the ledger under test as a ledger.Renewer, failing the
// test when it is not one.
func (f *ledgerFixture) renewer() ledger.Renewer {
	f.t.Helper()
	r, ok := f.l.(ledger.Renewer)
	if !ok {
		f.t.Fatalf("%T does not implement ledger.Renewer", f.l)
	}
	return r
}

// renew calls RenewLease on the ledger under test.
func (f *ledgerFixture) renew(lease ledger.Lease, now time.Time, d time.Duration) (ledger.DeliveryResult, error) {
	f.t.Helper()
	return f.renewer().RenewLease(f.ctx, lease, now, d)
}

// renewed returns lease as the record renewed by RenewLease at now for d
// shows it: the same grant, without its token, expiring at the normalised
// now plus d truncated to microseconds.
func renewed(lease ledger.Lease, now time.Time, d time.Duration) ledger.Lease {
	lease.ExpiresAt = ledger.Normalize(now).Add(d.Truncate(time.Microsecond))
	return withoutToken(lease)
}

func renewExtendsTheLease(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerA, t0)
	// Sub-microsecond parts of now and of the duration are dropped, as
	// everywhere at the API boundary.
	now := at(30*time.Second + 123*time.Nanosecond)
	d := f.applied(f.get("d-1"), now)(f.renew(l, now, 2*time.Minute+456*time.Nanosecond))
	want := renewed(l, now, 2*time.Minute)
	require.Equal(t, &want, d.Lease, "the sequence, owner and grant time stay; only the expiry moves")
	require.Equal(t, want.ExpiresAt, d.AvailableAt, "a Leased delivery is available again at its lease's expiry")
	require.Equal(t, ledger.DeliveryStateLeased, d.State)
	require.Equal(t, l.Seq, d.LeaseSeq, "a renewal is not a grant")
	require.Nil(t, d.EndedLease)

	// The holder keeps working under the lease it was handed: past the
	// old expiry, it renews again and acknowledges with the same value.
	later := l.ExpiresAt.Add(time.Second)
	d = f.applied(d, later)(f.renew(l, later, leaseFor))
	want = renewed(l, later, leaseFor)
	require.Equal(t, &want, d.Lease)
	f.applied(d, later)(f.l.Acknowledge(f.ctx, l, "still mine", later))
}

func renewLastInstantRenews(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerA, t0)
	now := l.ExpiresAt.Add(-time.Microsecond) // the last instant the lease is valid
	d := f.applied(f.get("d-1"), now)(f.renew(l, now, leaseFor))
	want := renewed(l, now, leaseFor)
	require.Equal(t, &want, d.Lease)
}

func renewExpiredLeaseIsNotRevived(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerA, t0)
	held := f.get("d-1")
	f.notApplied(held, ledger.OutcomeLeaseExpired)(f.renew(l, l.ExpiresAt, leaseFor))
	f.notApplied(held, ledger.OutcomeLeaseExpired)(f.renew(l, l.ExpiresAt.Add(time.Hour), leaseFor))
	// The work is offered at the old expiry, as if no renewal was tried.
	lb := f.leaseOne("d-1", ownerB, l.ExpiresAt)
	require.Equal(t, l.Seq+1, lb.Seq)
}

func renewNotOfferedUntilTheNewExpiry(t *testing.T, f *ledgerFixture) {
	r := req("d-1", "host-1")
	r.Ceremony = "cer-1"
	f.enqueue(r, t0)
	l := f.leaseOne("d-1", ownerA, t0)
	now := at(30 * time.Second)
	d := f.applied(f.get("d-1"), now)(f.renew(l, now, 2*time.Minute))
	newExpiry := d.Lease.ExpiresAt
	require.True(t, newExpiry.After(l.ExpiresAt))

	// Every way of asking for work must agree, whichever index it reads.
	filters := []ledger.LeaseFilter{
		{},
		{Targets: []ledger.Target{"host-1"}},
		{Targets: []ledger.Target{"host-1", "host-2"}},
		{Ceremony: "cer-1"},
		{Targets: []ledger.Target{"host-1"}, Ceremony: "cer-1"},
	}
	for _, filter := range filters {
		f.requireNothingOffered(filter, l.ExpiresAt)
		f.requireNothingOffered(filter, newExpiry.Add(-time.Microsecond))
	}
	f.requireUnchanged(d)

	lb := f.leaseOne("d-1", ownerB, newExpiry)
	require.Equal(t, l.Seq+1, lb.Seq)
	got := f.get("d-1")
	require.Equal(t, 2, got.Attempts)
	require.NotNil(t, got.LastFailure)
	require.Equal(t, ledger.FailureLeaseExpired, got.LastFailure.Kind)
	require.Equal(t, ownerA, got.LastFailure.Owner)
	require.Equal(t, newExpiry, got.LastFailure.At, "the renewed lease ran out at its new expiry")
	// Once that lease runs out too, the delivery is offered once, not once
	// per expiry it ever had.
	require.Equal(t, []ledger.DeliveryID{"d-1"}, f.leaseIDs(ledger.LeaseFilter{}, ownerB, lb.ExpiresAt, ledger.MaxLimit))
}

func renewOfferedInItsNewPlace(t *testing.T, f *ledgerFixture) {
	// Lease hands work out oldest AvailableAt first. Of two deliveries
	// leased together, the first by ID is renewed, which moves it behind
	// the other whichever index the filter reads. Each filter gets its own
	// pair, ended afterwards so that the next pair is alone.
	filters := []ledger.LeaseFilter{
		{},
		{Targets: []ledger.Target{"host-1"}},
		{Targets: []ledger.Target{"host-1", "host-2"}},
		{Ceremony: "cer-1"},
	}
	for i, filter := range filters {
		base := at(time.Duration(i) * 24 * time.Hour)
		first, second := ledger.DeliveryID(fmt.Sprintf("d-%d-a", i)), ledger.DeliveryID(fmt.Sprintf("d-%d-b", i))
		for _, id := range []ledger.DeliveryID{first, second} {
			r := req(id, "host-1")
			r.Ceremony = "cer-1"
			f.enqueue(r, base)
		}
		res := f.lease(ledger.LeaseFilter{}, ownerA, base, leaseFor, 2)
		require.Len(t, res.Leased, 2)
		require.Equal(t, first, res.Leased[0].Lease.DeliveryID)
		now := base.Add(30 * time.Second)
		f.applied(f.get(first), now)(f.renew(res.Leased[0].Lease, now, leaseFor))
		late := base.Add(time.Hour) // both leases have run out
		require.Equal(t, []ledger.DeliveryID{second, first}, f.leaseIDs(filter, ownerB, late, 2), "filter %+v", filter)
		for _, id := range []ledger.DeliveryID{first, second} {
			f.applied(f.get(id), late)(f.l.Abandon(f.ctx, id, ledger.Cause{Kind: ledger.CauseQueueBounded}, late))
		}
	}
}

func renewNotSweptUntilTheNewExpiry(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerA, t0)
	now := at(30 * time.Second)
	d := f.applied(f.get("d-1"), now)(f.renew(l, now, 2*time.Minute))
	newExpiry := d.Lease.ExpiresAt

	res, err := f.l.Expire(f.ctx, l.ExpiresAt)
	require.NoError(t, err)
	require.Empty(t, res.Changed, "the old expiry no longer applies")
	res, err = f.l.Expire(f.ctx, newExpiry.Add(-time.Microsecond))
	require.NoError(t, err)
	require.Empty(t, res.Changed)
	f.requireUnchanged(d)

	res, err = f.l.Expire(f.ctx, newExpiry)
	require.NoError(t, err)
	require.Equal(t, []ledger.DeliveryID{"d-1"}, res.Changed)
	got := f.requireState("d-1", ledger.DeliveryStateOffered)
	require.Equal(t, newExpiry, got.AvailableAt)
	f.notApplied(got, ledger.OutcomeLeaseLost)(f.renew(l, newExpiry, leaseFor))
}

func renewStaleLeaseIsLeaseLost(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l1 := f.leaseOne("d-1", ownerA, t0)
	l2 := f.leaseOne("d-1", ownerB, l1.ExpiresAt)
	held := f.get("d-1")
	now := l1.ExpiresAt.Add(time.Second) // within the current lease
	f.notApplied(held, ledger.OutcomeLeaseLost)(f.renew(l1, now, leaseFor))

	forged := l2
	forged.Token = storekit.NewToken()
	f.notApplied(held, ledger.OutcomeLeaseLost)(f.renew(forged, now, leaseFor))
	nextSeq := l2
	nextSeq.Seq++
	f.notApplied(held, ledger.OutcomeLeaseLost)(f.renew(nextSeq, now, leaseFor))
	mixed := l2
	mixed.Token = l1.Token
	f.notApplied(held, ledger.OutcomeLeaseLost)(f.renew(mixed, now, leaseFor))

	// A lease given back is not renewed either, not even as a repeat.
	f.applied(held, now)(f.l.Release(f.ctx, l2, now))
	f.notApplied(f.get("d-1"), ledger.OutcomeLeaseLost)(f.renew(l2, now, leaseFor))

	// Nor is a lease of another delivery.
	f.enqueue(req("d-2", "host-2"), t0)
	other := l2
	other.DeliveryID = "d-2"
	f.notApplied(f.get("d-2"), ledger.OutcomeLeaseLost)(f.renew(other, now, leaseFor))
}

func renewAcknowledgedIsWrongState(t *testing.T, f *ledgerFixture) {
	l := f.acknowledged("d-1", "host-1", ownerA, t0)
	acked := f.get("d-1")
	f.notApplied(acked, ledger.OutcomeWrongState)(f.renew(l, at(time.Second), leaseFor))
	// The acknowledgement deadline governs it, not the lease: even past
	// the lease's expiry the answer is the same.
	f.notApplied(acked, ledger.OutcomeWrongState)(f.renew(l, l.ExpiresAt, leaseFor))
}

func renewTerminalIsEnded(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-abandoned", "host-1"), t0)
	la := f.leaseOne("d-abandoned", ownerA, t0)
	f.applied(f.get("d-abandoned"), t0)(f.l.Abandon(f.ctx, "d-abandoned", ledger.Cause{Kind: ledger.CauseCeremonyEnded}, t0))
	f.notApplied(f.get("d-abandoned"), ledger.OutcomeEnded)(f.renew(la, at(time.Second), leaseFor))

	lp := f.acknowledged("d-processed", "host-1", ownerA, t0)
	f.applied(f.get("d-processed"), t0)(f.l.MarkProcessed(f.ctx, "d-processed", ownerA, nil, "done", t0))
	f.notApplied(f.get("d-processed"), ledger.OutcomeEnded)(f.renew(lp, at(time.Second), leaseFor))

	r := req("d-failed", "host-1")
	f.enqueue(r, t0)
	lf := f.leaseOne("d-failed", ownerA, t0)
	f.applied(f.get("d-failed"), t0)(f.l.MarkFailed(f.ctx, lf, ledger.FailureReason{Message: "bad", Permanent: true}, t0))
	f.notApplied(f.get("d-failed"), ledger.OutcomeEnded)(f.renew(lf, at(time.Second), leaseFor))
}

func renewUnknownIsNotFound(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerA, t0)
	held := f.get("d-1")
	l.DeliveryID = "d-unknown"
	f.notApplied(ledger.Delivery{ID: "d-unknown"}, ledger.OutcomeNotFound)(f.renew(l, at(time.Second), leaseFor))
	f.requireUnchanged(held)
}

func renewNotAnAttempt(t *testing.T, f *ledgerFixture) {
	r := req("d-1", "host-1")
	r.Policy.MaxAttempts = 2
	f.enqueue(r, t0)
	l := f.leaseOne("d-1", ownerA, t0)
	now := t0
	for range 5 {
		now = now.Add(30 * time.Second)
		d := f.applied(f.get("d-1"), now)(f.renew(l, now, leaseFor))
		require.Equal(t, 1, d.Attempts, "a renewal does not count an attempt")
		require.Equal(t, l.Seq, d.LeaseSeq)
	}
	// The second, and last, attempt is still there to be granted.
	expiry := f.get("d-1").Lease.ExpiresAt
	lb := f.leaseOne("d-1", ownerB, expiry)
	require.Equal(t, 2, f.get("d-1").Attempts)
	require.Equal(t, l.Seq+1, lb.Seq)
}

func renewPrecedence(t *testing.T, f *ledgerFixture) {
	// Ended beats LeaseLost and LeaseExpired: a forged token on an ended
	// record, after its lease ran out.
	f.enqueue(req("d-ended", "host-1"), t0)
	le := f.leaseOne("d-ended", ownerA, t0)
	f.applied(f.get("d-ended"), t0)(f.l.Abandon(f.ctx, "d-ended", ledger.Cause{Kind: ledger.CauseQueueBounded}, t0))
	forged := le
	forged.Token = storekit.NewToken()
	f.notApplied(f.get("d-ended"), ledger.OutcomeEnded)(f.renew(forged, le.ExpiresAt, leaseFor))

	// LeaseLost beats WrongState: a forged token on an acknowledged record.
	la := f.acknowledged("d-acked", "host-1", ownerA, t0)
	forged = la
	forged.Token = storekit.NewToken()
	f.notApplied(f.get("d-acked"), ledger.OutcomeLeaseLost)(f.renew(forged, at(time.Second), leaseFor))

	// LeaseLost beats LeaseExpired: a forged token on a lease that ran out
	// and that nobody took over.
	f.enqueue(req("d-leased", "host-1"), t0)
	ll := f.leaseOne("d-leased", ownerA, t0)
	forged = ll
	forged.Token = storekit.NewToken()
	f.notApplied(f.get("d-leased"), ledger.OutcomeLeaseLost)(f.renew(forged, ll.ExpiresAt, leaseFor))

	// NotFound beats everything: an unknown ID with a lease that ran out.
	forged.DeliveryID = "d-unknown"
	f.notApplied(ledger.Delivery{ID: "d-unknown"}, ledger.OutcomeNotFound)(f.renew(forged, ll.ExpiresAt, leaseFor))
}

// renewInvalidCases returns the malformed calls of RenewLease: a malformed
// lease, now or context (leaseArgCases), and a malformed duration. Every
// case uses the seed's live lease, so a store that skipped validation
// would apply it.
func renewInvalidCases() []invalidCase {
	call := func(ctx context.Context, l ledger.Ledger, lease ledger.Lease, now time.Time, d time.Duration) error {
		r, ok := l.(ledger.Renewer)
		if !ok {
			return fmt.Errorf("%T does not implement ledger.Renewer", l)
		}
		_, err := r.RenewLease(ctx, lease, now, d)
		return err
	}
	cases := leaseArgCases(func(ctx context.Context, l ledger.Ledger, lease ledger.Lease, _ string, now time.Time) error {
		return call(ctx, l, lease, now, leaseFor)
	}, "")
	for _, d := range []struct {
		name  string
		value time.Duration
	}{
		{"zero", 0},
		{"negative", -time.Second},
		{"below a microsecond", 999 * time.Nanosecond},
		{"over max", ledger.MaxLeaseDuration + time.Microsecond},
	} {
		cases = append(cases, invalidCase{"duration/" + d.name, func(ctx context.Context, l ledger.Ledger, s validationSeed) error {
			return call(ctx, l, s.leased, at(time.Second), d.value)
		}})
	}
	return cases
}

func renewInvalidIsRejected(t *testing.T, f *ledgerFixture) {
	f.renewer()
	runInvalidCases(t, f, renewInvalidCases())
}

func renewCancelledContext(t *testing.T, f *ledgerFixture) {
	r := f.renewer()
	seed := f.seedValidation()
	before := f.all()
	ctx, cancel := context.WithCancel(f.ctx)
	cancel()
	_, err := r.RenewLease(ctx, seed.leased, at(time.Second), leaseFor)
	require.Error(t, err)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, before, f.all(), "a cancelled call writes nothing")
}
