package ledgertest_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/ledgertest"
)

// These tests feed the delivery ledger's invariant checkers
// (ledger_invariants.go) hand-made logs and records.

var (
	invOwnerA = ledger.Owner{Agent: "agent-a", Incarnation: "1"}
	invOwnerB = ledger.Owner{Agent: "agent-b", Incarnation: "1"}
)

// invLease returns grant seq of delivery id to owner, held on [from, to)
// in µs after invT0.
func invLease(id string, seq int64, owner ledger.Owner, from, to int) ledgertest.Grant {
	return ledgertest.Grant{Lease: ledger.Lease{
		DeliveryID: ledger.DeliveryID(id),
		Owner:      owner,
		Token:      ledger.Token(fmt.Sprintf("%s-%d", id, seq)),
		Seq:        seq,
		GrantedAt:  invAt(from),
		ExpiresAt:  invAt(to),
	}}
}

// invEnded returns g ended by its holder at µs at.
func invEnded(g ledgertest.Grant, at int) ledgertest.Grant {
	g.EndedAt = invAt(at)
	return g
}

func TestCheckNoOverlappingLeases(t *testing.T) {
	a1 := invLease("a", 1, invOwnerA, 0, 10)
	for _, tc := range []struct {
		name   string
		grants []ledgertest.Grant
		wantN  int
	}{
		{"Empty", nil, 0},
		{"DisjointGrants", []ledgertest.Grant{a1, invLease("a", 2, invOwnerB, 10, 20), invLease("a", 3, invOwnerA, 25, 30)}, 0},
		{"OverlappingGrants", []ledgertest.Grant{a1, invLease("a", 2, invOwnerB, 9, 20)}, 1},
		{"OutOfOrderLog", []ledgertest.Grant{invLease("a", 2, invOwnerB, 9, 20), a1}, 1},
		{"OtherDeliveriesMayOverlap", []ledgertest.Grant{a1, invLease("b", 1, invOwnerB, 5, 15)}, 0},
		{"EndedGrantFreesTheDelivery", []ledgertest.Grant{invEnded(a1, 4), invLease("a", 2, invOwnerB, 4, 14)}, 0},
		{"GrantBeforeTheEndOverlaps", []ledgertest.Grant{invEnded(a1, 4), invLease("a", 2, invOwnerB, 3, 14)}, 1},
		{"LateEndDoesNotExtendTheGrant", []ledgertest.Grant{invEnded(a1, 15), invLease("a", 2, invOwnerB, 10, 20)}, 0},
		{"SeqGrantedTwice", []ledgertest.Grant{a1, func() ledgertest.Grant { g := a1; g.Lease.Token = "other"; return g }()}, 1},
		{"TokenGrantedTwice", []ledgertest.Grant{a1, func() ledgertest.Grant {
			g := invLease("b", 1, invOwnerB, 0, 10)
			g.Lease.Token = a1.Lease.Token
			return g
		}()}, 1},
		{"EmptyLease", []ledgertest.Grant{invLease("a", 1, invOwnerA, 5, 5)}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := ledgertest.CheckNoOverlappingLeases(tc.grants)
			if tc.wantN == 0 {
				require.NoError(t, err)
				return
			}
			assert.Equal(t, tc.wantN, invJoined(err))
		})
	}
}

func TestCheckLeaseSeq(t *testing.T) {
	t.Parallel()
	grants := []ledgertest.Grant{invLease("a", 2, invOwnerB, 10, 20), invLease("a", 1, invOwnerA, 0, 10)}
	d := func(id string, seq int64) ledger.Delivery {
		return ledger.Delivery{ID: ledger.DeliveryID(id), LeaseSeq: seq}
	}
	require.NoError(t, ledgertest.CheckLeaseSeq([]ledger.Delivery{d("a", 2), d("b", 0)}, grants))
	assert.Equal(t, 1, invJoined(ledgertest.CheckLeaseSeq([]ledger.Delivery{d("a", 3)}, grants)), "a grant missing from the log")
	assert.Equal(t, 1, invJoined(ledgertest.CheckLeaseSeq([]ledger.Delivery{d("a", 1)}, grants)), "more grants than LeaseSeq")
	gap := []ledgertest.Grant{invLease("a", 1, invOwnerA, 0, 10), invLease("a", 3, invOwnerB, 10, 20)}
	assert.Equal(t, 1, invJoined(ledgertest.CheckLeaseSeq([]ledger.Delivery{d("a", 2)}, gap)), "a gap in the sequence")
}

func TestCheckAllTerminal(t *testing.T) {
	t.Parallel()
	ended := func(id string, s ledger.DeliveryState) ledger.Delivery {
		return ledger.Delivery{ID: ledger.DeliveryID(id), State: s, EndedAt: invT0}
	}
	all := []ledger.Delivery{
		ended("a", ledger.DeliveryStateProcessed),
		ended("b", ledger.DeliveryStateFailed),
		ended("c", ledger.DeliveryStateExpired),
	}
	require.NoError(t, ledgertest.CheckAllTerminal(all))
	open := append(all[:len(all):len(all)],
		ledger.Delivery{ID: "d", State: ledger.DeliveryStateOffered},
		ledger.Delivery{ID: "e", State: ledger.DeliveryStateAcknowledged},
		ledger.Delivery{ID: "f", State: ledger.DeliveryStateProcessed},
	)
	assert.Equal(t, 3, invJoined(ledgertest.CheckAllTerminal(open)))
}

func TestCheckAttempts(t *testing.T) {
	t.Parallel()
	released := invEnded(invLease("a", 1, invOwnerA, 0, 10), 5)
	released.AttemptReturned = true
	grants := []ledgertest.Grant{released, invLease("a", 2, invOwnerB, 10, 20), invLease("a", 3, invOwnerA, 20, 30)}
	d := func(attempts, maxAttempts int) ledger.Delivery {
		return ledger.Delivery{ID: "a", Attempts: attempts, Policy: ledger.Policy{MaxAttempts: maxAttempts}}
	}
	require.NoError(t, ledgertest.CheckAttempts([]ledger.Delivery{d(2, 5)}, grants))
	assert.Equal(t, 1, invJoined(ledgertest.CheckAttempts([]ledger.Delivery{d(1, 5)}, grants)), "an attempt not counted")
	assert.Equal(t, 1, invJoined(ledgertest.CheckAttempts([]ledger.Delivery{d(3, 5)}, grants)), "a release not given back")
	assert.Equal(t, 1, invJoined(ledgertest.CheckAttempts([]ledger.Delivery{d(2, 1)}, grants)), "attempts past the policy")
}

func TestCheckProcessedByAcknowledger(t *testing.T) {
	t.Parallel()
	first := invLease("a", 1, invOwnerA, 0, 10)
	last := invLease("a", 2, invOwnerB, 10, 20)
	last.Acknowledged, last.Processed = true, true
	processed := ledger.Delivery{
		ID:         "a",
		State:      ledger.DeliveryStateProcessed,
		LeaseSeq:   2,
		Ack:        &ledger.Acknowledgement{Owner: invOwnerB, At: invAt(12)},
		Processing: &ledger.Processing{Action: "done", At: invAt(15)},
	}
	require.NoError(t, ledgertest.CheckProcessedByAcknowledger([]ledger.Delivery{processed}, []ledgertest.Grant{first, last}))

	wrongOwner := processed
	wrongOwner.Ack = &ledger.Acknowledgement{Owner: invOwnerA}
	assert.Error(t, ledgertest.CheckProcessedByAcknowledger([]ledger.Delivery{wrongOwner}, []ledgertest.Grant{first, last}))

	notAcked := last
	notAcked.Acknowledged = false
	assert.Error(t, ledgertest.CheckProcessedByAcknowledger([]ledger.Delivery{processed}, []ledgertest.Grant{first, notAcked}))

	twice := first
	twice.Acknowledged, twice.Processed = true, true
	assert.Error(t, ledgertest.CheckProcessedByAcknowledger([]ledger.Delivery{processed}, []ledgertest.Grant{twice, last}))

	open := processed
	open.State, open.Processing = ledger.DeliveryStateOffered, nil
	assert.Error(t, ledgertest.CheckProcessedByAcknowledger([]ledger.Delivery{open}, []ledgertest.Grant{first, last}))
}

func TestCheckRecords(t *testing.T) {
	t.Parallel()
	policy := ledger.Policy{MaxAttempts: 3}
	lease := &ledger.Lease{DeliveryID: "a", Owner: invOwnerA, Token: "t", Seq: 1, GrantedAt: invT0, ExpiresAt: invAt(10)}
	good := []ledger.Delivery{
		{ID: "a", State: ledger.DeliveryStateLeased, Lease: lease, LeaseSeq: 1, AvailableAt: invAt(10), Attempts: 1, Policy: policy, Version: 2},
		{ID: "b", State: ledger.DeliveryStateOffered, Policy: policy, Version: 1},
		{ID: "c", State: ledger.DeliveryStateFailed, EndedAt: invT0, LastFailure: &ledger.Failure{Kind: ledger.FailureReported}, Policy: policy, Version: 3},
		{ID: "d", State: ledger.DeliveryStateExpired, EndedAt: invT0, Cause: &ledger.Cause{Kind: ledger.CauseSuperseded}, Policy: policy, Version: 3},
	}
	require.NoError(t, ledgertest.CheckRecords(good))
	for _, bad := range []struct {
		name   string
		change func(*ledger.Delivery)
	}{
		{"LeasedWithoutLease", func(d *ledger.Delivery) { d.Lease = nil }},
		{"LeaseSeqDisagrees", func(d *ledger.Delivery) { d.LeaseSeq = 2 }},
		{"AvailableAtDisagrees", func(d *ledger.Delivery) { d.AvailableAt = invAt(11) }},
		{"OpenWithEndedAt", func(d *ledger.Delivery) { d.EndedAt = invT0 }},
		{"AttemptsPastPolicy", func(d *ledger.Delivery) { d.Attempts = 4 }},
		{"VersionZero", func(d *ledger.Delivery) { d.Version = 0 }},
	} {
		d := good[0]
		bad.change(&d)
		assert.Error(t, ledgertest.CheckRecords([]ledger.Delivery{d}), bad.name)
	}
	terminal := good[2]
	terminal.EndedAt = time.Time{}
	assert.Error(t, ledgertest.CheckRecords([]ledger.Delivery{terminal}), "terminal without EndedAt")
}
