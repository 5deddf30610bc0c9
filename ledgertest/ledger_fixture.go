package ledgertest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// ledgerRule is one rule of an operation group: a test body run against a
// fresh ledger.
type ledgerRule struct {
	name string
	run  func(t *testing.T, f *ledgerFixture)
}

// runLedgerRules runs each rule as a parallel subtest named after it, each
// against its own fresh ledger.
func runLedgerRules(t *testing.T, newLedger NewLedgerFunc, rules []ledgerRule) {
	t.Helper()
	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			r.run(t, newLedgerFixture(t, newLedger))
		})
	}
}

// ledgerFixture wraps the ledger under test with the calls the rules make
// over and over, each asserting that the call itself did not fail.
type ledgerFixture struct {
	t   *testing.T
	l   ledger.Ledger
	ctx context.Context
}

func newLedgerFixture(t *testing.T, newLedger NewLedgerFunc) *ledgerFixture {
	l := newLedger(t)
	require.NotNil(t, l, "NewLedgerFunc returned nil")
	return &ledgerFixture{t: t, l: l, ctx: t.Context()}
}

// Fixed values the rules share. The policy is explicit so that no rule
// depends on the store's defaults.
var (
	ownerA  = ledger.Owner{Agent: "agent-a", Incarnation: "boot-1"}
	ownerA2 = ledger.Owner{Agent: "agent-a", Incarnation: "boot-2"}
	ownerB  = ledger.Owner{Agent: "agent-b", Incarnation: "boot-1"}
)

// testPolicy is the resolved policy most rules enqueue with.
func testPolicy() ledger.Policy {
	return ledger.Policy{MaxAttempts: 3, BackoffBase: 10 * time.Second, BackoffMax: time.Minute, AckWindow: 10 * time.Minute}
}

const leaseFor = time.Minute

// req returns an enqueue request for id on target with testPolicy.
func req(id ledger.DeliveryID, target ledger.Target) ledger.EnqueueRequest {
	return ledger.EnqueueRequest{ID: id, Target: target, Payload: []byte("payload of " + string(id)), Policy: testPolicy()}
}

// enqueue enqueues r at now and requires OutcomeApplied.
func (f *ledgerFixture) enqueue(r ledger.EnqueueRequest, now time.Time) ledger.Delivery {
	f.t.Helper()
	res, err := f.l.Enqueue(f.ctx, r, now)
	require.NoError(f.t, err)
	require.Equal(f.t, ledger.OutcomeApplied, res.Outcome, "enqueue %s", r.ID)
	return res.Delivery
}

// enqueueIDs enqueues req(id, target) for each id at now.
func (f *ledgerFixture) enqueueIDs(target ledger.Target, now time.Time, ids ...ledger.DeliveryID) {
	f.t.Helper()
	for _, id := range ids {
		f.enqueue(req(id, target), now)
	}
}

// lease calls Lease and requires no error; every granted record must agree
// with its lease and with Get.
func (f *ledgerFixture) lease(filter ledger.LeaseFilter, owner ledger.Owner, now time.Time, d time.Duration, limit int) ledger.LeaseResult {
	f.t.Helper()
	res, err := f.l.Lease(f.ctx, filter, owner, now, d, limit)
	require.NoError(f.t, err)
	require.LessOrEqual(f.t, len(res.Leased), limit, "Lease granted more than limit")
	require.Equal(f.t, len(res.Leased) > 0 || len(res.Reclaimed) > 0, res.Applied())
	for _, ld := range res.Leased {
		require.Equal(f.t, ld.Delivery.ID, ld.Lease.DeliveryID)
		require.Equal(f.t, owner, ld.Lease.Owner)
		require.Equal(f.t, ledger.DeliveryStateLeased, ld.Delivery.State)
		require.NotNil(f.t, ld.Delivery.Lease)
		requireNoToken(f.t, ld.Delivery)
		require.Equal(f.t, withoutToken(ld.Lease), *ld.Delivery.Lease, "the record shows the grant, without its token")
		require.Equal(f.t, ld.Lease.Seq, ld.Delivery.LeaseSeq)
		require.Equal(f.t, ledger.Normalize(now), ld.Lease.GrantedAt)
		require.Equal(f.t, ledger.Normalize(now).Add(d.Truncate(time.Microsecond)), ld.Lease.ExpiresAt)
		require.NotEmpty(f.t, ld.Lease.Token)
		require.Equal(f.t, f.get(ld.Delivery.ID), ld.Delivery, "Lease must return the record as it now stands")
	}
	return res
}

// leaseAll leases everything offerable to owner at now (limit MaxLimit).
func (f *ledgerFixture) leaseAll(owner ledger.Owner, now time.Time) ledger.LeaseResult {
	f.t.Helper()
	return f.lease(ledger.LeaseFilter{}, owner, now, leaseFor, ledger.MaxLimit)
}

// leaseIDs leases everything offerable to owner at now and returns the IDs
// granted, in the order granted.
func (f *ledgerFixture) leaseIDs(filter ledger.LeaseFilter, owner ledger.Owner, now time.Time, limit int) []ledger.DeliveryID {
	f.t.Helper()
	var ids []ledger.DeliveryID
	for _, ld := range f.lease(filter, owner, now, leaseFor, limit).Leased {
		ids = append(ids, ld.Delivery.ID)
	}
	return ids
}

// leaseOne leases exactly one delivery, which must be id, to owner at now.
func (f *ledgerFixture) leaseOne(id ledger.DeliveryID, owner ledger.Owner, now time.Time) ledger.Lease {
	f.t.Helper()
	res := f.lease(ledger.LeaseFilter{}, owner, now, leaseFor, 1)
	require.Len(f.t, res.Leased, 1, "expected %s to be offerable at %s", id, now)
	require.Equal(f.t, id, res.Leased[0].Delivery.ID)
	return res.Leased[0].Lease
}

// requireNothingOffered asserts that Lease hands nothing out at now.
func (f *ledgerFixture) requireNothingOffered(filter ledger.LeaseFilter, now time.Time) {
	f.t.Helper()
	res := f.lease(filter, ownerB, now, leaseFor, ledger.MaxLimit)
	require.Empty(f.t, res.Leased, "nothing should be offerable at %s", now)
}

// acknowledged enqueues id, leases it to owner at now and acknowledges it
// at now; it returns the lease.
func (f *ledgerFixture) acknowledged(id ledger.DeliveryID, target ledger.Target, owner ledger.Owner, now time.Time) ledger.Lease {
	f.t.Helper()
	f.enqueue(req(id, target), now)
	l := f.leaseOne(id, owner, now)
	f.applied(f.get(id), now)(f.l.Acknowledge(f.ctx, l, "seen", now))
	return l
}

// get returns the stored record of id.
func (f *ledgerFixture) get(id ledger.DeliveryID) ledger.Delivery {
	f.t.Helper()
	d, err := f.l.Get(f.ctx, id)
	require.NoError(f.t, err, "Get %s", id)
	requireNoToken(f.t, d)
	return d
}

// requireAbsent asserts that Get answers ErrNotFound for id.
func (f *ledgerFixture) requireAbsent(id ledger.DeliveryID) {
	f.t.Helper()
	_, err := f.l.Get(f.ctx, id)
	require.ErrorIs(f.t, err, ledger.ErrNotFound, "Get %s", id)
}

// all returns every record in the ledger, in ID order, through List.
func (f *ledgerFixture) all() []ledger.Delivery {
	f.t.Helper()
	return f.list(ledger.ListQuery{Limit: ledger.MaxLimit})
}

// list follows q's pages to the end and returns every record.
func (f *ledgerFixture) list(q ledger.ListQuery) []ledger.Delivery {
	f.t.Helper()
	var out []ledger.Delivery
	for range 10_000 {
		p, err := f.l.List(f.ctx, q)
		require.NoError(f.t, err)
		for _, d := range p.Deliveries {
			requireNoToken(f.t, d)
		}
		out = append(out, p.Deliveries...)
		if p.Next == "" {
			return out
		}
		q.Cursor = p.Next
	}
	f.t.Fatal("List never reached its last page")
	return nil
}

// applied returns a checker for a call on the record before: it must answer
// OutcomeApplied at now, bump Version by one, stamp UpdatedAt with now and
// return the record as Get now sees it.
//
//	f.applied(before, now)(f.l.Acknowledge(ctx, lease, "", now))
func (f *ledgerFixture) applied(before ledger.Delivery, now time.Time) func(ledger.DeliveryResult, error) ledger.Delivery {
	return func(res ledger.DeliveryResult, err error) ledger.Delivery {
		f.t.Helper()
		require.NoError(f.t, err)
		require.Equal(f.t, ledger.OutcomeApplied, res.Outcome)
		require.True(f.t, res.Applied(), "Applied() must agree with OutcomeApplied")
		require.Equal(f.t, before.Version+1, res.Delivery.Version, "an applied transition bumps Version by one")
		require.Equal(f.t, ledger.Normalize(now), res.Delivery.UpdatedAt, "an applied transition stamps UpdatedAt")
		require.Equal(f.t, f.get(res.Delivery.ID), res.Delivery, "the result must carry the record as it now stands")
		return res.Delivery
	}
}

// notApplied returns a checker for a call on the record before that must
// answer want, write nothing and carry the record as it stands. For
// OutcomeNotFound the record must be the zero Delivery and Get must still
// answer ErrNotFound for before.ID.
func (f *ledgerFixture) notApplied(before ledger.Delivery, want ledger.Outcome) func(ledger.DeliveryResult, error) {
	return func(res ledger.DeliveryResult, err error) {
		f.t.Helper()
		require.NoError(f.t, err)
		require.Equal(f.t, want, res.Outcome)
		require.False(f.t, res.Applied(), "Applied() must be false for %s", want)
		if want == ledger.OutcomeNotFound {
			require.Equal(f.t, ledger.Delivery{}, res.Delivery, "NotFound carries the zero Delivery")
			f.requireAbsent(before.ID)
			return
		}
		require.Equal(f.t, before, res.Delivery, "a call that does not apply returns the record as it stands")
		require.Equal(f.t, before, f.get(before.ID), "a call that does not apply writes nothing")
	}
}

// requireUnchanged asserts that before is still exactly what Get returns.
func (f *ledgerFixture) requireUnchanged(before ledger.Delivery) {
	f.t.Helper()
	require.Equal(f.t, before, f.get(before.ID), "record %s must be untouched", before.ID)
}

// requireState asserts the stored state of id and returns the record.
func (f *ledgerFixture) requireState(id ledger.DeliveryID, want ledger.DeliveryState) ledger.Delivery {
	f.t.Helper()
	d := f.get(id)
	require.Equal(f.t, want, d.State, "state of %s", id)
	assert.Equal(f.t, want.Terminal(), !d.EndedAt.IsZero(), "EndedAt is set exactly when the state is terminal")
	return d
}

// deliveryIDs returns the IDs of ds in order.
func deliveryIDs(ds []ledger.Delivery) []ledger.DeliveryID {
	out := make([]ledger.DeliveryID, 0, len(ds))
	for _, d := range ds {
		out = append(out, d.ID)
	}
	return out
}
