package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// The checker must be able to fail: these tests feed it hand-made
// histories with known faults.

func at(us int) time.Time { return t0.Add(time.Duration(us) * time.Microsecond) }

// selfHistory is a small run: "lost" and "held" are enqueued; "held" is
// leased by a for 100µs at 10 and by b at secondAt, then its attempts run
// out and a sweep fails it. "lost" never shows up in the store.
func selfHistory(secondAt int) ([]call, finalState) {
	a := ledger.Owner{Agent: "a", Incarnation: "1"}
	b := ledger.Owner{Agent: "b", Incarnation: "1"}
	calls := []call{
		{Proc: "p", N: 1, Status: statusOK, Fn: fnEnqueue, Kind: kindDelivery, Now: at(0), Invoked: 1, Returned: 2,
			IDs: []string{"lost", "held"}, Outcomes: []ledger.Outcome{ledger.OutcomeApplied, ledger.OutcomeApplied}},
		{Proc: "a", N: 1, Status: statusOK, Fn: fnGrant, Kind: kindDelivery, Owner: a, Now: at(10), Invoked: 3, Returned: 4,
			Grants: []grant{{ID: "held", Seq: 1, Token: "t1", Owner: a, At: at(10), Expires: at(110), Version: 2}}},
		{Proc: "b", N: 1, Status: statusOK, Fn: fnGrant, Kind: kindDelivery, Owner: b, Now: at(secondAt), Invoked: 5, Returned: 6,
			Grants: []grant{{ID: "held", Seq: 2, Token: "t2", Owner: b, At: at(secondAt), Expires: at(secondAt + 100), Version: 3}}},
		{Proc: "p", N: 2, Status: statusOK, Fn: fnExpire, Kind: kindDelivery, Now: at(500), Invoked: 7, Returned: 8,
			Changed: []string{"held"}},
	}
	final := finalState{deliveries: map[string]ledger.Delivery{
		"held": {ID: "held", Target: "host-0", Policy: ledger.Policy{MaxAttempts: 2}, State: ledger.DeliveryStateFailed,
			Attempts: 2, LeaseSeq: 2, EndedAt: at(500), Version: 4,
			LastFailure: &ledger.Failure{Kind: ledger.FailureLeaseExpired, Owner: ledger.Owner{Agent: "b", Incarnation: "1"}}},
	}}
	return calls, final
}

func TestCheckerFindsLostAndDoubleHeldItems(t *testing.T) {
	calls, final := selfHistory(50)
	rep := check(calls, final, checkOptions{})
	assert.Equal(t, 1, rep.lost, "lost items")
	require.Len(t, rep.violations[invTerminal], 1, rep.failure(invTerminal))
	assert.Contains(t, rep.violations[invTerminal][0], "delivery lost")
	require.Len(t, rep.violations[invExclusive], 1, rep.failure(invExclusive))
	assert.Contains(t, rep.violations[invExclusive][0], "delivery held: seq 2 granted to b/1")
	for _, inv := range invariants() {
		if inv != invTerminal && inv != invExclusive {
			assert.Empty(t, rep.violations[inv], rep.failure(inv))
		}
	}
	assert.Equal(t, 1, rep.duplicated, "held went to two holders")

	// The same history with the second grant at the first one's expiry,
	// and "lost" never enqueued, is clean.
	calls, final = selfHistory(110)
	calls[0].IDs, calls[0].Outcomes = calls[0].IDs[1:], calls[0].Outcomes[1:]
	rep = check(calls, final, checkOptions{})
	for _, inv := range invariants() {
		assert.Empty(t, rep.violations[inv], rep.failure(inv))
	}
	assert.Zero(t, rep.lost)
}

func TestCheckerFindsStaleFenceAndInvisibleCalls(t *testing.T) {
	o := ledger.Owner{Agent: "a", Incarnation: "1"}
	fence := func(v int64) *int64 { return &v }
	lease := func(id string, seq int64, tok ledger.Token) *grant {
		return &grant{ID: id, Seq: seq, Token: tok, Owner: o, At: at(10), Expires: at(1000)}
	}
	calls := []call{
		{Proc: "p", N: 1, Status: statusOK, Fn: fnEnqueue, Kind: kindDelivery, Invoked: 1, Returned: 2,
			IDs: []string{"x", "y"}, Outcomes: []ledger.Outcome{ledger.OutcomeApplied, ledger.OutcomeApplied}},
		{Proc: "a", N: 1, Status: statusOK, Fn: fnGrant, Kind: kindDelivery, Owner: o, Now: at(10), Invoked: 3, Returned: 4,
			Grants: []grant{*lease("x", 1, "tx"), *lease("y", 1, "ty")}},
		{Proc: "a", N: 2, Status: statusOK, Fn: fnAck, Kind: kindDelivery, Owner: o, Now: at(20), Invoked: 5, Returned: 6, Under: lease("x", 1, "tx"), Outcome: ledger.OutcomeApplied, Version: 3},
		{Proc: "a", N: 3, Status: statusOK, Fn: fnAck, Kind: kindDelivery, Owner: o, Now: at(20), Invoked: 7, Returned: 8, Under: lease("y", 1, "ty"), Outcome: ledger.OutcomeApplied, Version: 3},
		// x is processed with fence 9, then y with the stale fence 3.
		{Proc: "a", N: 4, Status: statusOK, Fn: fnProcess, Kind: kindDelivery, Owner: o, Now: at(30), Invoked: 9, Returned: 10,
			Item: "x", Target: "host-0", Fence: fence(9), Action: "act-x", Outcome: ledger.OutcomeApplied, Version: 4},
		{Proc: "a", N: 5, Status: statusOK, Fn: fnProcess, Kind: kindDelivery, Owner: o, Now: at(40), Invoked: 11, Returned: 12,
			Item: "y", Target: "host-0", Fence: fence(3), Action: "act-y", Outcome: ledger.OutcomeApplied, Version: 4},
	}
	processed := func(id, action string) ledger.Delivery {
		return ledger.Delivery{ID: ledger.DeliveryID(id), Target: "host-0", Policy: ledger.Policy{MaxAttempts: 2}, State: ledger.DeliveryStateProcessed,
			Attempts: 1, LeaseSeq: 1, EndedAt: at(30), Version: 4,
			Ack: &ledger.Acknowledgement{Owner: o}, Processing: &ledger.Processing{Action: ledger.ActionRef(action)}}
	}
	// The store lost y's processing: the record says it is only acknowledged.
	y := processed("y", "act-y")
	y.State, y.Processing, y.EndedAt, y.Version = ledger.DeliveryStateAcknowledged, nil, time.Time{}, 3
	final := finalState{deliveries: map[string]ledger.Delivery{"x": processed("x", "act-x"), "y": y}}
	rep := check(calls, final, checkOptions{crashedAt: 13})

	require.Len(t, rep.violations[invFences], 1, rep.failure(invFences))
	assert.Contains(t, rep.violations[invFences][0], "processed delivery y with fence 3")
	require.NotEmpty(t, rep.violations[invVisible], rep.failure(invVisible))
	assert.True(t, strings.Contains(strings.Join(rep.violations[invVisible], "\n"), "delivery y: a#5 process answered ok applied"),
		rep.failure(invVisible))
	assert.Contains(t, rep.failure(invVisible), "returned before the server crash")
	assert.NotEmpty(t, rep.violations[invTerminal], "y is still open")
	assert.NotEmpty(t, rep.violations[invNoWrite], "y's version does not count its processing")
}

// TestCheckerAccountsForEveryItem: the store's records are counted
// against the plan. An item nobody logged an enqueue of is allowed only
// as many times over as killed processes can have lost, and a record more
// than the history accounts for fails the run.
func TestCheckerAccountsForEveryItem(t *testing.T) {
	e0, e1 := string(ledger.OutboxEntryIDFor(entryKey(0))), string(ledger.OutboxEntryIDFor(entryKey(1)))
	calls := []call{
		{Proc: "p", N: 1, Status: statusOK, Fn: fnEnqueue, Kind: kindDelivery, Now: at(0), Invoked: 1, Returned: 2,
			IDs: []string{string(deliveryID(0))}, Outcomes: []ledger.Outcome{ledger.OutcomeApplied}},
		{Proc: "p", N: 2, Status: statusOK, Fn: fnEnqueue, Kind: kindEntry, Invoked: 3, Returned: 4,
			IDs: []string{e0, e1}, Outcomes: []ledger.Outcome{ledger.OutcomeApplied, ledger.OutcomeApplied}},
	}
	final := func(storedEntries int) finalState {
		return finalState{
			deliveries:       map[string]ledger.Delivery{string(deliveryID(0)): {ID: deliveryID(0), State: ledger.DeliveryStateOffered, Version: 1}},
			entries:          map[string]ledger.OutboxEntry{e0: {ID: ledger.OutboxEntryID(e0)}, e1: {ID: ledger.OutboxEntryID(e1)}},
			storedDeliveries: 1, storedEntries: storedEntries,
		}
	}
	// d000001 was planned but never logged: a killed process may explain it.
	rep := check(calls, final(2), checkOptions{planned: 2, kills: 1})
	assert.Empty(t, rep.violations[invCount], rep.failure(invCount))
	assert.Equal(t, 1, rep.accounts[kindDelivery].untried)

	rep = check(calls, final(2), checkOptions{planned: 2})
	require.Len(t, rep.violations[invCount], 1, rep.failure(invCount))
	assert.Contains(t, rep.violations[invCount][0], "never enqueued")

	// The store counts three entries where the history accounts for two.
	rep = check(calls, final(3), checkOptions{planned: 2, kills: 1})
	require.Len(t, rep.violations[invCount], 1, rep.failure(invCount))
	assert.Contains(t, rep.violations[invCount][0], "the store holds 3 records")
}

// TestCheckerExplainsEveryEnd: a terminal record must be the work of a
// call that may have ended it, at the time it says; its version counting
// one transition, as a silent end that bumps nothing leaves it, does not
// make it so.
func TestCheckerExplainsEveryEnd(t *testing.T) {
	calls := []call{
		{Proc: "p", N: 1, Status: statusOK, Fn: fnEnqueue, Kind: kindDelivery, Now: at(0), Invoked: 1, Returned: 2,
			IDs: []string{"quiet"}, Outcomes: []ledger.Outcome{ledger.OutcomeApplied}},
		{Proc: "p", N: 2, Status: statusOK, Fn: fnExpire, Kind: kindDelivery, Now: at(100), Invoked: 3, Returned: 4},
	}
	ended := ledger.Delivery{ID: "quiet", Policy: ledger.Policy{MaxAttempts: 2}, State: ledger.DeliveryStateExpired,
		Cause: &ledger.Cause{Kind: ledger.CauseAcknowledgementLapsed}, EndedAt: at(100), Version: 1}
	rep := check(calls, finalState{deliveries: map[string]ledger.Delivery{"quiet": ended}}, checkOptions{})
	require.Len(t, rep.violations[invExplained], 1, rep.failure(invExplained))
	assert.Contains(t, rep.violations[invExplained][0], "delivery quiet")
	for _, inv := range invariants() {
		if inv != invExplained {
			assert.Empty(t, rep.violations[inv], "only the end goes unexplained: %s", rep.failure(inv))
		}
	}
}
