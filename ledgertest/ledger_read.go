package ledgertest

import (
	"encoding/base64"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// testGet checks Ledger.Get.
func testGet(t *testing.T, newLedger NewLedgerFunc) {
	runLedgerRules(t, newLedger, []ledgerRule{
		{"AnyState", getAnyState},
		{"UnknownIsErrNotFound", getUnknownIsErrNotFound},
		{"ReturnsACopy", getReturnsACopy},
	})
}

// testList checks Ledger.List: filters, ID order and paging.
func testList(t *testing.T, newLedger NewLedgerFunc) {
	runLedgerRules(t, newLedger, []ledgerRule{
		{"EmptyLedgerIsOneEmptyPage", listEmptyLedger},
		{"IDOrderIsByteOrder", listIDOrderIsByteOrder},
		{"Filters", listFilters},
		{"PagingVisitsEveryRecordOnce", listPagingVisitsEveryRecordOnce},
		{"NextIsEmptyOnAFullLastPage", listNextIsEmptyOnAFullLastPage},
		{"PagingWithAFilter", listPagingWithAFilter},
		{"InsertsWhilePaging", listInsertsWhilePaging},
		{"MalformedCursorIsInvalid", listMalformedCursorIsInvalid},
		{"LimitBounds", listLimitBounds},
	})
}

// everyState enqueues one delivery per state, named after it, and returns
// their IDs by state.
func (f *ledgerFixture) everyState() map[ledger.DeliveryState]ledger.DeliveryID {
	f.t.Helper()
	f.acknowledged("st-acknowledged", "host-1", ownerA, t0)
	f.acknowledged("st-processed", "host-2", ownerA, t0)
	f.process("st-processed", ownerA, nil, t0)
	f.enqueue(req("st-failed", "host-1"), t0)
	lf := f.leaseOne("st-failed", ownerA, t0)
	f.applied(f.get("st-failed"), t0)(f.l.MarkFailed(f.ctx, lf, ledger.FailureReason{Permanent: true}, t0))
	f.enqueue(req("st-leased", "host-2"), t0)
	f.leaseOne("st-leased", ownerA, t0)
	f.enqueue(req("st-expired", "host-1"), t0)
	f.applied(f.get("st-expired"), t0)(f.l.Abandon(f.ctx, "st-expired", ledger.Cause{Kind: ledger.CauseQueueBounded}, t0))
	r := req("st-offered", "host-2")
	r.Ceremony = "cer-1"
	f.enqueue(r, t0)
	out := map[ledger.DeliveryState]ledger.DeliveryID{}
	for _, s := range ledger.DeliveryStates() {
		out[s] = ledger.DeliveryID("st-" + string(s))
	}
	return out
}

func getAnyState(t *testing.T, f *ledgerFixture) {
	for state, id := range f.everyState() {
		f.requireState(id, state)
	}
}

func getUnknownIsErrNotFound(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("d-1", "host-1"), t0)
	_, err := f.l.Get(f.ctx, "d-2")
	require.ErrorIs(t, err, ledger.ErrNotFound)
	require.NotErrorIs(t, err, ledger.ErrInvalid)
}

func getReturnsACopy(t *testing.T, f *ledgerFixture) {
	f.acknowledged("d-1", "host-1", ownerA, t0)
	want := f.get("d-1")
	got := f.get("d-1")
	got.Lease.Token = "changed"
	got.Ack.Observation = "changed"
	got.Payload[0] = 'X'
	require.Equal(t, want, f.get("d-1"), "changing a returned record must not change the stored one")
}

// page calls List and requires no error.
func (f *ledgerFixture) page(q ledger.ListQuery) ledger.Page {
	f.t.Helper()
	p, err := f.l.List(f.ctx, q)
	require.NoError(f.t, err)
	require.LessOrEqual(f.t, len(p.Deliveries), q.Limit)
	return p
}

func listEmptyLedger(t *testing.T, f *ledgerFixture) {
	p := f.page(ledger.ListQuery{Limit: 10})
	require.Empty(t, p.Deliveries)
	require.Empty(t, p.Next)
}

func listIDOrderIsByteOrder(t *testing.T, f *ledgerFixture) {
	in := []ledger.DeliveryID{"b", "a", "B", "aa", "a-1", "é", "z", "Z", "0", "~", "a b", "ab"}
	for _, id := range in {
		f.enqueue(req(id, "host-1"), t0)
	}
	want := slices.Clone(in)
	slices.Sort(want) // Go compares strings byte by byte
	got := f.page(ledger.ListQuery{Limit: ledger.MaxLimit})
	require.Equal(t, want, deliveryIDs(got.Deliveries))
	require.Empty(t, got.Next)
	for _, d := range got.Deliveries {
		require.Equal(t, f.get(d.ID), d, "List returns the records as Get does")
	}

	// The records are copies: changing them changes nothing stored.
	first := got.Deliveries[0]
	before := f.get(first.ID)
	first.Payload[0] = 'X'
	require.Equal(t, before, f.get(first.ID), "List must return copies")
}

func listFilters(t *testing.T, f *ledgerFixture) {
	byState := f.everyState()
	list := func(q ledger.ListQuery) []ledger.DeliveryID {
		q.Limit = ledger.MaxLimit
		return deliveryIDs(f.list(q))
	}
	require.Len(t, list(ledger.ListQuery{}), len(ledger.DeliveryStates()))
	require.Equal(t, []ledger.DeliveryID{"st-acknowledged", "st-expired", "st-failed"},
		list(ledger.ListQuery{Targets: []ledger.Target{"host-1"}}))
	require.Len(t, list(ledger.ListQuery{Targets: []ledger.Target{"host-1", "host-2"}}), len(ledger.DeliveryStates()))
	require.Empty(t, list(ledger.ListQuery{Targets: []ledger.Target{"host-9"}}))
	require.Equal(t, []ledger.DeliveryID{"st-offered"}, list(ledger.ListQuery{Ceremony: "cer-1"}))
	require.Empty(t, list(ledger.ListQuery{Ceremony: "cer-1", Targets: []ledger.Target{"host-1"}}))
	for state, id := range byState {
		require.Equal(t, []ledger.DeliveryID{id}, list(ledger.ListQuery{States: []ledger.DeliveryState{state}}), state)
	}
	require.Equal(t, []ledger.DeliveryID{"st-acknowledged", "st-leased", "st-offered"},
		list(ledger.ListQuery{States: []ledger.DeliveryState{ledger.DeliveryStateOffered, ledger.DeliveryStateLeased, ledger.DeliveryStateAcknowledged}}))
	require.Equal(t, []ledger.DeliveryID{"st-processed"},
		list(ledger.ListQuery{Targets: []ledger.Target{"host-2"}, States: []ledger.DeliveryState{ledger.DeliveryStateProcessed, ledger.DeliveryStateFailed}}))
	// Open states with the other filters, which a store may serve from
	// its indexes of open records.
	open := []ledger.DeliveryState{ledger.DeliveryStateOffered, ledger.DeliveryStateLeased, ledger.DeliveryStateAcknowledged}
	require.Equal(t, []ledger.DeliveryID{"st-acknowledged"}, list(ledger.ListQuery{Targets: []ledger.Target{"host-1"}, States: open}))
	require.Equal(t, []ledger.DeliveryID{"st-offered"}, list(ledger.ListQuery{Ceremony: "cer-1", States: open}))
	require.Empty(t, list(ledger.ListQuery{Ceremony: "cer-1", States: []ledger.DeliveryState{ledger.DeliveryStateLeased}}))
	require.Equal(t, []ledger.DeliveryID{"st-leased", "st-processed"},
		list(ledger.ListQuery{Targets: []ledger.Target{"host-2"}, States: []ledger.DeliveryState{ledger.DeliveryStateLeased, ledger.DeliveryStateProcessed}}))
}

// manyIDs returns n IDs prefix-00, prefix-01, ...
func manyIDs(prefix string, n int) []ledger.DeliveryID {
	out := make([]ledger.DeliveryID, n)
	for i := range out {
		out[i] = ledger.DeliveryID(fmt.Sprintf("%s-%02d", prefix, i))
	}
	return out
}

func listPagingVisitsEveryRecordOnce(t *testing.T, f *ledgerFixture) {
	want := manyIDs("m", 25)
	f.enqueueIDs("host-1", t0, want...)
	var got []ledger.DeliveryID
	q := ledger.ListQuery{Limit: 7}
	var sizes []int
	for {
		p := f.page(q)
		sizes = append(sizes, len(p.Deliveries))
		got = append(got, deliveryIDs(p.Deliveries)...)
		if p.Next == "" {
			break
		}
		require.Less(t, len(sizes), 10, "paging does not end")
		q.Cursor = p.Next
	}
	require.Equal(t, want, got)
	require.Equal(t, []int{7, 7, 7, 4}, sizes)
}

func listNextIsEmptyOnAFullLastPage(t *testing.T, f *ledgerFixture) {
	f.enqueueIDs("host-1", t0, manyIDs("m", 6)...)
	p1 := f.page(ledger.ListQuery{Limit: 3})
	require.NotEmpty(t, p1.Next)
	p2 := f.page(ledger.ListQuery{Limit: 3, Cursor: p1.Next})
	require.Len(t, p2.Deliveries, 3)
	require.Empty(t, p2.Next, "a page that holds the last record is the last page")
	all := f.page(ledger.ListQuery{Limit: 6})
	require.Len(t, all.Deliveries, 6)
	require.Empty(t, all.Next)
}

func listPagingWithAFilter(t *testing.T, f *ledgerFixture) {
	ids := manyIDs("m", 20)
	var want []ledger.DeliveryID
	for i, id := range ids {
		target := ledger.Target("host-1")
		if i%3 == 0 {
			target = "host-2"
			want = append(want, id)
		}
		f.enqueue(req(id, target), t0)
	}
	got := deliveryIDs(f.list(ledger.ListQuery{Targets: []ledger.Target{"host-2"}, Limit: 2}))
	require.Equal(t, want, got)
}

func listInsertsWhilePaging(t *testing.T, f *ledgerFixture) {
	existing := manyIDs("m", 30)
	f.enqueueIDs("host-1", t0, existing...)
	seen := map[ledger.DeliveryID]int{}
	var insertedAfter, insertedBefore []ledger.DeliveryID
	q := ledger.ListQuery{Limit: 7}
	for round := 0; ; round++ {
		require.Less(t, round, 20, "paging does not end")
		p := f.page(q)
		for _, d := range p.Deliveries {
			seen[d.ID]++
		}
		if p.Next == "" {
			break
		}
		q.Cursor = p.Next
		last := p.Deliveries[len(p.Deliveries)-1].ID
		// One new record sorting before the cursor and two after it.
		before := ledger.DeliveryID(fmt.Sprintf("a-%02d", round))
		justAfter := last + "-x"
		farAfter := ledger.DeliveryID(fmt.Sprintf("z-%02d", round))
		f.enqueueIDs("host-1", at(time.Second), before, justAfter, farAfter)
		insertedBefore = append(insertedBefore, before)
		insertedAfter = append(insertedAfter, justAfter, farAfter)
	}
	for _, id := range existing {
		require.Equal(t, 1, seen[id], "record %s present before paging must be listed exactly once", id)
	}
	for _, id := range insertedAfter {
		require.Equal(t, 1, seen[id], "record %s inserted after the cursor must be listed once", id)
	}
	for _, id := range insertedBefore {
		require.Zero(t, seen[id], "record %s inserted before the cursor must not be listed", id)
	}
	for id, n := range seen {
		require.Equal(t, 1, n, "record %s listed %d times", id, n)
	}
}

func listMalformedCursorIsInvalid(t *testing.T, f *ledgerFixture) {
	f.enqueueIDs("host-1", t0, manyIDs("m", 3)...)
	for _, c := range []string{
		"!!not base64!!",
		base64.RawURLEncoding.EncodeToString([]byte("m-01")),
		base64.StdEncoding.EncodeToString([]byte("garbage cursor")),
		"m-01",
	} {
		_, err := f.l.List(f.ctx, ledger.ListQuery{Limit: 10, Cursor: c})
		requireInvalid(t, err)
	}
}

func listLimitBounds(t *testing.T, f *ledgerFixture) {
	f.enqueueIDs("host-1", t0, manyIDs("m", 3)...)
	for _, n := range []int{0, -1, ledger.MaxLimit + 1} {
		_, err := f.l.List(f.ctx, ledger.ListQuery{Limit: n})
		requireInvalid(t, err)
	}
	p := f.page(ledger.ListQuery{Limit: 1})
	require.Len(t, p.Deliveries, 1)
	require.NotEmpty(t, p.Next)
	require.Len(t, f.page(ledger.ListQuery{Limit: ledger.MaxLimit}).Deliveries, 3)
}
