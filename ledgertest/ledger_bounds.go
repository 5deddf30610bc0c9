package ledgertest

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// testBounds checks the numeric bounds of the delivery ledger at the bound
// and one past it: a policy's attempts and durations, a lease's duration,
// a fence and a lease's sequence number; and that times computed from
// accepted values (a deadline or a backoff past storekit.MaxTime) are kept.
// Past a bound the call is ErrInvalid naming the field, and nothing is
// written.
func testBounds(t *testing.T, newLedger NewLedgerFunc) {
	runLedgerRules(t, newLedger, []ledgerRule{
		{"MaxAttemptsAtTheLimitIsKept", boundsMaxAttempts},
		{"PolicyDurationsAtTheLimitAreKept", boundsPolicyDurations},
		{"LeaseDurationAtTheLimitIsGranted", boundsLeaseDuration},
		{"FenceAtTheInt64BoundIsAccepted", boundsFence},
		{"LeaseSeqAtTheInt64BoundsIsLeaseLost", boundsLeaseSeq},
		{"TimesPastMaxTimeAreKept", boundsTimesPastMaxTime},
	})
}

// requireInvalidField asserts that err is ErrInvalid naming field.
func requireInvalidField(t *testing.T, err error, field string) {
	t.Helper()
	requireInvalid(t, err)
	var inv *ledger.InvalidError
	require.ErrorAs(t, err, &inv)
	require.Equal(t, field, inv.Field)
}

func boundsMaxAttempts(t *testing.T, f *ledgerFixture) {
	r := req("d-1", "host-1")
	r.Policy.MaxAttempts = ledger.MaxAttemptsLimit
	d := f.enqueue(r, t0)
	require.Equal(t, ledger.MaxAttemptsLimit, d.Policy.MaxAttempts)
	require.Equal(t, d, f.get("d-1"))

	r = req("d-2", "host-1")
	r.Policy.MaxAttempts = ledger.MaxAttemptsLimit + 1
	_, err := f.l.Enqueue(f.ctx, r, t0)
	requireInvalidField(t, err, "policy max attempts")
	f.requireAbsent("d-2")
}

func boundsPolicyDurations(t *testing.T, f *ledgerFixture) {
	r := req("d-1", "host-1")
	r.Policy.BackoffBase, r.Policy.BackoffMax, r.Policy.AckWindow = ledger.MaxPolicyDuration, ledger.MaxPolicyDuration, ledger.MaxPolicyDuration
	d := f.enqueue(r, t0)
	require.Equal(t, r.Policy, d.Policy)
	require.Equal(t, d, f.get("d-1"))

	for field, set := range map[string]func(*ledger.Policy, time.Duration){
		"policy backoff base": func(p *ledger.Policy, v time.Duration) { p.BackoffBase = v },
		"policy backoff max":  func(p *ledger.Policy, v time.Duration) { p.BackoffMax = v },
		"policy ack window":   func(p *ledger.Policy, v time.Duration) { p.AckWindow = v },
	} {
		r := req("d-2", "host-1")
		set(&r.Policy, ledger.MaxPolicyDuration+time.Microsecond)
		_, err := f.l.Enqueue(f.ctx, r, t0)
		requireInvalidField(t, err, field)
		f.requireAbsent("d-2")
	}
}

func boundsLeaseDuration(t *testing.T, f *ledgerFixture) {
	f.enqueueIDs("host-1", t0, "d-1", "d-2")
	before := f.all()
	_, err := f.l.Lease(f.ctx, ledger.LeaseFilter{}, ownerA, t0, ledger.MaxLeaseDuration+time.Microsecond, 1)
	requireInvalidField(t, err, "lease duration")
	require.Equal(t, before, f.all(), "a rejected call writes nothing")
	res := f.lease(ledger.LeaseFilter{}, ownerA, t0, ledger.MaxLeaseDuration, 1)
	require.Len(t, res.Leased, 1)
	require.Equal(t, t0.Add(ledger.MaxLeaseDuration), res.Leased[0].Lease.ExpiresAt)
}

func boundsFence(t *testing.T, f *ledgerFixture) {
	f.acknowledged("d-1", "host-1", ownerA, t0)
	f.acknowledged("d-2", "host-1", ownerA, t0)
	f.acknowledged("d-3", "host-1", ownerA, t0)
	d := f.process("d-1", ownerA, ledger.FenceOf(math.MaxInt64), at(time.Second))
	require.Equal(t, ledger.FenceOf(math.MaxInt64), d.Processing.Fence)
	f.processedExpect(ledger.OutcomeFenceRejected, "d-2", ownerA, ledger.FenceOf(math.MaxInt64-1), at(2*time.Second))
	f.process("d-3", ownerA, ledger.FenceOf(math.MaxInt64), at(3*time.Second))
}

func boundsLeaseSeq(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerA, t0)
	held := f.get("d-1")
	for _, seq := range []int64{math.MaxInt64, math.MinInt64} {
		forged := l
		forged.Seq = seq
		f.notApplied(held, ledger.OutcomeLeaseLost)(f.l.Acknowledge(f.ctx, forged, "", at(time.Second)))
		f.notApplied(held, ledger.OutcomeLeaseLost)(f.l.Release(f.ctx, forged, at(time.Second)))
	}
}

// boundsTimesPastMaxTime drives every computed time past storekit.MaxTime:
// a lease of MaxLeaseDuration, an acknowledgement window and a backoff of
// MaxPolicyDuration, all from a now of MaxTime. Both stores must keep them.
func boundsTimesPastMaxTime(t *testing.T, f *ledgerFixture) {
	now := storekit.MaxTime()
	p := ledger.Policy{MaxAttempts: 2, BackoffBase: ledger.MaxPolicyDuration, BackoffMax: ledger.MaxPolicyDuration, AckWindow: ledger.MaxPolicyDuration}
	for _, id := range []ledger.DeliveryID{"d-1", "d-2"} {
		r := req(id, "host-1")
		r.Policy = p
		f.enqueue(r, now)
	}
	res := f.lease(ledger.LeaseFilter{}, ownerA, now, ledger.MaxLeaseDuration, 2)
	require.Len(t, res.Leased, 2)
	acked := f.applied(f.get("d-1"), now)(f.l.Acknowledge(f.ctx, res.Leased[0].Lease, "", now))
	require.Equal(t, now.Add(ledger.MaxPolicyDuration), acked.Ack.Deadline)
	failed := f.applied(f.get("d-2"), now)(f.l.MarkFailed(f.ctx, res.Leased[1].Lease, ledger.FailureReason{Message: "later"}, now))
	require.Equal(t, now.Add(p.Backoff("d-2", 1)), failed.AvailableAt)
	f.expire(now)
}
