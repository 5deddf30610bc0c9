package ledgertest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

// testListEnded checks ledger.EndedLister: the deliveries that ended in a
// window, latest first, bounded by the limit, each as Get shows its end. A
// store that does not implement EndedLister skips the group.
func testListEnded(t *testing.T, newLedger NewLedgerFunc) {
	runLedgerRules(t, newLedger, []ledgerRule{
		{"EmptyLedgerIsEmpty", endedEmptyLedger},
		{"WindowLatestFirstAsGetShows", endedWindowLatestFirst},
		{"LimitKeepsTheLatest", endedLimitKeepsTheLatest},
		{"TiesAreByIDGreatestFirst", endedTiesByID},
		{"InvalidIsRejected", endedInvalid},
	})
}

// endedLister returns f's ledger as an EndedLister, skipping the test when
// it is not one.
func (f *ledgerFixture) endedLister() ledger.EndedLister {
	f.t.Helper()
	l, ok := f.l.(ledger.EndedLister)
	if !ok {
		f.t.Skipf("%T does not implement ledger.EndedLister: it is optional", f.l)
	}
	return l
}

// ended calls ListEnded and requires no error.
func (f *ledgerFixture) ended(q ledger.EndedQuery) []ledger.DeliveryEnd {
	f.t.Helper()
	got, err := f.endedLister().ListEnded(f.ctx, q)
	require.NoError(f.t, err, "ListEnded %+v", q)
	require.LessOrEqual(f.t, len(got), q.Limit)
	for i := range got {
		got[i].EndedAt = ledger.Normalize(got[i].EndedAt)
	}
	return got
}

// endAt ends id at now in turn as Processed, Failed or Expired (by n
// modulo 3) and returns how it ended, as Get shows it.
func (f *ledgerFixture) endAt(id ledger.DeliveryID, n int, now time.Time) ledger.DeliveryEnd {
	f.t.Helper()
	switch n % 3 {
	case 0:
		f.acknowledged(id, "host-1", ownerA, now)
		f.process(id, ownerA, nil, now)
	case 1:
		f.enqueue(req(id, "host-2"), now)
		l := f.leaseOne(id, ownerA, now)
		f.applied(f.get(id), now)(f.l.MarkFailed(f.ctx, l, ledger.FailureReason{Message: "broken", Permanent: true}, now))
	default:
		f.enqueue(req(id, "host-3"), now)
		f.applied(f.get(id), now)(f.l.Abandon(f.ctx, id, ledger.Cause{Kind: ledger.CauseQueueBounded, Detail: "full"}, now))
	}
	end, ok := f.get(id).End()
	require.True(f.t, ok, "%s must have ended", id)
	require.Equal(f.t, ledger.Normalize(now), end.EndedAt)
	return end
}

func endedEmptyLedger(t *testing.T, f *ledgerFixture) {
	f.enqueue(req("open-1", "host-1"), t0)
	got := f.ended(ledger.EndedQuery{Since: t0.Add(-time.Hour), Until: t0.Add(time.Hour), Limit: 10})
	require.Empty(t, got, "open deliveries have not ended")
}

func endedWindowLatestFirst(t *testing.T, f *ledgerFixture) {
	var ends []ledger.DeliveryEnd
	for i := range 9 {
		ends = append(ends, f.endAt(ledger.DeliveryID(fmt.Sprintf("end-%d", i)), i, at(time.Duration(i)*time.Minute)))
	}
	f.enqueue(req("still-open", "host-1"), at(time.Minute))
	slices.Reverse(ends)

	all := f.ended(ledger.EndedQuery{Since: t0, Until: at(time.Hour), Limit: ledger.MaxEndedLimit})
	require.Equal(t, ends, all, "every ending, latest first, as Get shows it")
	require.Equal(t, ledger.CauseQueueBounded, all[0].Cause, "an expired delivery's cause kind")
	require.Empty(t, all[1].Cause, "no cause but for an expired delivery")

	// [Since, Until): an ending at Since is in, one at Until is out.
	got := f.ended(ledger.EndedQuery{Since: at(2 * time.Minute), Until: at(5 * time.Minute), Limit: 100})
	require.Equal(t, ends[4:7], got)
	require.Empty(t, f.ended(ledger.EndedQuery{Since: at(9 * time.Minute), Until: at(time.Hour), Limit: 100}))
}

func endedLimitKeepsTheLatest(t *testing.T, f *ledgerFixture) {
	var ends []ledger.DeliveryEnd
	for i := range 6 {
		ends = append(ends, f.endAt(ledger.DeliveryID(fmt.Sprintf("end-%d", i)), i, at(time.Duration(i)*time.Second)))
	}
	slices.Reverse(ends)
	got := f.ended(ledger.EndedQuery{Since: t0, Until: at(time.Minute), Limit: 4})
	require.Equal(t, ends[:4], got, "the limit keeps the latest endings")
}

func endedTiesByID(t *testing.T, f *ledgerFixture) {
	for _, id := range []ledger.DeliveryID{"tie-b", "tie-c", "tie-a"} {
		f.endAt(id, 2, t0)
	}
	got := f.ended(ledger.EndedQuery{Since: t0, Until: at(time.Second), Limit: 2})
	ids := make([]ledger.DeliveryID, len(got))
	for i, e := range got {
		ids[i] = e.ID
	}
	require.Equal(t, []ledger.DeliveryID{"tie-c", "tie-b"}, ids)
}

func endedInvalid(t *testing.T, f *ledgerFixture) {
	l := f.endedLister()
	for _, q := range []ledger.EndedQuery{
		{Until: at(time.Hour), Limit: 10},
		{Since: t0, Limit: 10},
		{Since: at(time.Hour), Until: t0, Limit: 10},
		{Since: t0, Until: t0, Limit: 10},
		{Since: t0, Until: at(time.Hour), Limit: 0},
		{Since: t0, Until: at(time.Hour), Limit: ledger.MaxEndedLimit + 1},
	} {
		_, err := l.ListEnded(f.ctx, q)
		requireInvalid(t, err)
	}
	ok := ledger.EndedQuery{Since: t0, Until: at(time.Hour), Limit: 10}
	_, err := l.ListEnded(nilContext(), ok)
	requireInvalid(t, err)
	_, err = l.ListEnded(cancelledContext(t), ok)
	require.ErrorIs(t, err, context.Canceled)
}
