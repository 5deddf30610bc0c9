package ledgertest

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// testTokens checks that a lease token is a capability only the grantee
// holds: it comes back in the Lease that Lease returns, and in no record
// a store hands out (Get, List, the record inside any result), nor in any
// JSON. A lease rebuilt from a record someone read cannot act, and the
// store still recognises the grantee's own repeated calls.
func testTokens(t *testing.T, newLedger NewLedgerFunc) {
	runLedgerRules(t, newLedger, []ledgerRule{
		{"OnlyTheGranteesLeaseCarriesTheToken", tokensOnlyTheGrantee},
		{"NoResultCarriesAToken", tokensNoResult},
		{"LeaseRebuiltFromARecordCannotAct", tokensRebuiltLeaseCannotAct},
		{"JSONCarriesNoToken", tokensJSON},
		{"RepeatUnderAnEndedLeaseIsStillRecognised", tokensEndedLeaseRepeat},
	})
}

func tokensOnlyTheGrantee(t *testing.T, f *ledgerFixture) {
	f.enqueueIDs("host-1", t0, "d-1", "d-2")
	res, err := f.l.Lease(f.ctx, ledger.LeaseFilter{}, ownerA, t0, leaseFor, 2)
	require.NoError(t, err)
	require.Len(t, res.Leased, 2)
	for _, ld := range res.Leased {
		require.NotEmpty(t, ld.Lease.Token, "the grantee's lease carries the token")
		require.NotNil(t, ld.Delivery.Lease)
		require.Empty(t, ld.Delivery.Lease.Token, "the record beside it does not")
		require.Equal(t, ld.Lease.Seq, ld.Delivery.Lease.Seq, "it shows the sequence number")
		require.Equal(t, ld.Lease.Owner, ld.Delivery.Lease.Owner, "it shows who holds the lease")
		require.Equal(t, ld.Lease.ExpiresAt, ld.Delivery.Lease.ExpiresAt, "it shows until when")
		d := f.get(ld.Delivery.ID)
		require.Empty(t, d.Lease.Token, "Get shows no token")
		require.Equal(t, withoutToken(ld.Lease), *d.Lease)
	}
	for _, d := range f.all() {
		require.NotNil(t, d.Lease)
		require.Empty(t, d.Lease.Token, "List shows no token")
	}
}

func tokensNoResult(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerA, t0)
	noToken := func(what string) func(ledger.DeliveryResult, error) {
		return func(res ledger.DeliveryResult, err error) {
			t.Helper()
			require.NoError(t, err, what)
			requireNoToken(t, res.Delivery)
		}
	}
	// A repeated enqueue answers with the record as it stands, lease and all.
	noToken("repeated Enqueue")(f.l.Enqueue(f.ctx, req("d-1", "host-1"), at(time.Second)))
	noToken("RecordActivation")(f.l.RecordActivation(f.ctx, "d-1", ledger.Activation{Result: ledger.ActivationDelivered}, at(time.Second)))
	if r, ok := f.l.(ledger.Renewer); ok {
		noToken("RenewLease")(r.RenewLease(f.ctx, l, at(2*time.Second), leaseFor))
	}
	noToken("Release")(f.l.Release(f.ctx, l, at(3*time.Second)))
	noToken("repeated Release")(f.l.Release(f.ctx, l, at(3*time.Second)))
	l = f.leaseOne("d-1", ownerA, at(4*time.Second))
	noToken("Acknowledge")(f.l.Acknowledge(f.ctx, l, "seen", at(5*time.Second)))
	noToken("repeated Acknowledge")(f.l.Acknowledge(f.ctx, l, "seen", at(5*time.Second)))
	noToken("MarkProcessed")(f.l.MarkProcessed(f.ctx, "d-1", ownerA, nil, "done", at(6*time.Second)))

	f.enqueue(req("d-2", "host-1"), t0)
	l2 := f.leaseOne("d-2", ownerB, at(7*time.Second))
	noToken("MarkFailed")(f.l.MarkFailed(f.ctx, l2, ledger.FailureReason{Message: "no"}, at(8*time.Second)))
	noToken("repeated MarkFailed")(f.l.MarkFailed(f.ctx, l2, ledger.FailureReason{Message: "no"}, at(8*time.Second)))
	noToken("Abandon")(f.l.Abandon(f.ctx, "d-2", ledger.Cause{Kind: ledger.CauseQueueBounded}, at(9*time.Second)))
	if b, ok := f.l.(ledger.BatchEnqueuer); ok {
		rs, err := b.EnqueueBatch(f.ctx, []ledger.EnqueueRequest{req("d-1", "host-1")}, at(10*time.Second))
		require.NoError(t, err)
		for _, r := range rs {
			requireNoToken(t, r.Delivery)
		}
	}
}

func tokensRebuiltLeaseCannotAct(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerA, t0)
	held := f.get("d-1")
	// What anyone who can read the ledger could build: the lease as the
	// record shows it.
	rebuilt := *held.Lease
	for name, call := range map[string]func() (ledger.DeliveryResult, error){
		"Acknowledge": func() (ledger.DeliveryResult, error) {
			return f.l.Acknowledge(f.ctx, rebuilt, "forged", at(time.Second))
		},
		"MarkFailed": func() (ledger.DeliveryResult, error) {
			return f.l.MarkFailed(f.ctx, rebuilt, ledger.FailureReason{Message: "forged", Permanent: true}, at(time.Second))
		},
		"Release": func() (ledger.DeliveryResult, error) { return f.l.Release(f.ctx, rebuilt, at(time.Second)) },
	} {
		res, err := call()
		if err != nil {
			require.ErrorIs(t, err, ledger.ErrInvalid, "%s under a rebuilt lease", name)
		} else {
			require.False(t, res.Applied(), "%s under a rebuilt lease must not apply", name)
		}
		f.requireUnchanged(held)
	}
	// The grantee's own lease still acts.
	f.applied(held, at(2*time.Second))(f.l.Acknowledge(f.ctx, l, "mine", at(2*time.Second)))
}

func tokensJSON(t *testing.T, f *ledgerFixture) {
	f.enqueueIDs("host-1", t0, "d-1", "d-2")
	res := f.lease(ledger.LeaseFilter{}, ownerA, t0, leaseFor, 2)
	require.Len(t, res.Leased, 2)
	l1, l2 := res.Leased[0].Lease, res.Leased[1].Lease
	released, err := f.l.Release(f.ctx, l2, at(time.Second))
	require.NoError(t, err)
	page, err := f.l.List(f.ctx, ledger.ListQuery{Limit: 10})
	require.NoError(t, err)
	values := []any{res, l1, f.get("d-1"), released, page}
	if h, ok := f.l.(ledger.Historian); ok {
		hist, err := h.History(f.ctx, "d-2")
		require.NoError(t, err)
		values = append(values, hist)
	}
	for _, v := range values {
		raw, err := json.Marshal(v)
		require.NoError(t, err)
		for _, tok := range []ledger.Token{l1.Token, l2.Token} {
			require.NotContains(t, string(raw), string(tok), "JSON never carries a token: %s", raw)
		}
	}
}

func tokensEndedLeaseRepeat(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	l := f.leaseOne("d-1", ownerA, t0)
	f.applied(f.get("d-1"), at(time.Second))(f.l.Release(f.ctx, l, at(time.Second)))
	d := f.get("d-1")
	require.NotNil(t, d.EndedLease, "the record shows how its lease ended")
	require.Equal(t, l.Seq, d.EndedLease.Seq)
	require.Equal(t, ledger.OpRelease, d.EndedLease.Op)
	require.Empty(t, d.EndedLease.Token, "but not its token")
	// The store kept the token: the grantee's repeat is recognised.
	f.notApplied(d, ledger.OutcomeRepeated)(f.l.Release(f.ctx, l, at(2*time.Second)))
	// A lease rebuilt from the ended grant is not.
	rebuilt := ledger.Lease{DeliveryID: d.ID, Owner: l.Owner, Token: d.EndedLease.Token, Seq: d.EndedLease.Seq}
	res, err := f.l.Release(f.ctx, rebuilt, at(2*time.Second))
	if err == nil {
		require.NotEqual(t, ledger.OutcomeRepeated, res.Outcome, "an ended lease rebuilt from a record is not the grantee's")
		require.False(t, res.Applied())
	} else {
		require.True(t, errors.Is(err, ledger.ErrInvalid), "%v", err)
	}
	f.requireUnchanged(d)
}
