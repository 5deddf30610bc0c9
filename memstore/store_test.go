package memstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOptions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ZeroPolicyFieldsFallBackToDefault", func(t *testing.T) {
		s := New(WithDefaultPolicy(ledger.Policy{MaxAttempts: 9}))
		r, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: "d", Target: "t"}, t0)
		require.NoError(t, err)
		want := ledger.DefaultPolicy()
		want.MaxAttempts = 9
		assert.Equal(t, want, r.Delivery.Policy)
	})
	t.Run("InvalidValuesAreIgnored", func(t *testing.T) {
		s := New(
			WithDefaultPolicy(ledger.Policy{MaxAttempts: 9}),
			WithDefaultPolicy(ledger.Policy{MaxAttempts: -1}),
			WithMaxPayload(0), WithMaxPayload(-5), WithMaxPayload(ledger.MaxPayloadLimit+1), WithClock(nil), nil,
		)
		r, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: "d", Target: "t", Payload: make([]byte, ledger.DefaultMaxPayload)}, t0)
		require.NoError(t, err)
		assert.Equal(t, 9, r.Delivery.Policy.MaxAttempts)
		_, err = s.Enqueue(ctx, ledger.EnqueueRequest{ID: "d2", Target: "t", Payload: make([]byte, ledger.DefaultMaxPayload+1)}, t0)
		require.ErrorIs(t, err, ledger.ErrInvalid, "a limit past ledger.MaxPayloadLimit is ignored, as pgstore refuses it")
		_, err = s.Outbox().Enqueue(ctx, ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: "k"})
		require.NoError(t, err, "a nil clock falls back to time.Now")
	})
	t.Run("MaxPayloadAppliesToBothContracts", func(t *testing.T) {
		s := New(WithMaxPayload(4))
		_, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: "d", Target: "t", Payload: []byte("12345")}, t0)
		require.ErrorIs(t, err, ledger.ErrInvalid)
		_, err = s.Outbox().Enqueue(ctx, ledger.Envelope{Provider: "p", Kind: "k", Payload: []byte("12345"), IdempotencyKey: "k"})
		require.ErrorIs(t, err, ledger.ErrInvalid)
		_, err = s.Enqueue(ctx, ledger.EnqueueRequest{ID: "d", Target: "t", Payload: []byte("1234")}, t0)
		require.NoError(t, err)
	})
	t.Run("ClockStampsOutboxOnly", func(t *testing.T) {
		stamp := t0.Add(42*time.Second + 1234*time.Nanosecond)
		s := New(WithClock(func() time.Time { return stamp }))
		r, err := s.Outbox().Enqueue(ctx, ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: "k"})
		require.NoError(t, err)
		assert.Equal(t, ledger.Normalize(stamp), r.Entry.CreatedAt)
		d, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: "d", Target: "t"}, t0)
		require.NoError(t, err)
		assert.Equal(t, t0, d.Delivery.CreatedAt, "the ledger uses the caller's now")
	})
}

func TestRejectedCallsWriteNothing(t *testing.T) {
	t.Parallel()
	s := New()
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	owner := ledger.Owner{Agent: "a", Incarnation: "1"}
	_, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: "d1", Target: "t"}, t0)
	require.NoError(t, err)

	_, err = s.Enqueue(cancelled, ledger.EnqueueRequest{ID: "d2", Target: "t"}, t0)
	require.ErrorIs(t, err, context.Canceled)
	//nolint:staticcheck // a nil context is the malformed call under test
	_, err = s.Enqueue(nil, ledger.EnqueueRequest{ID: "d2", Target: "t"}, t0)
	require.ErrorIs(t, err, ledger.ErrInvalid)
	_, err = s.Lease(cancelled, ledger.LeaseFilter{}, owner, t0, time.Minute, 1)
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.Lease(ctx, ledger.LeaseFilter{}, owner, time.Time{}, time.Minute, 1)
	require.ErrorIs(t, err, ledger.ErrInvalid)
	_, err = s.EnqueueBatch(ctx, []ledger.EnqueueRequest{{ID: "d3", Target: "t"}, {ID: "d4"}}, t0)
	require.ErrorIs(t, err, ledger.ErrInvalid)
	_, err = s.Expire(cancelled, t0.Add(time.Hour))
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.Get(ctx, "")
	require.ErrorIs(t, err, ledger.ErrInvalid)
	_, err = s.List(ctx, ledger.ListQuery{Limit: 1, Cursor: "not a cursor"})
	require.ErrorIs(t, err, ledger.ErrInvalid)

	page, err := s.List(ctx, ledger.ListQuery{Limit: 10})
	require.NoError(t, err)
	require.Len(t, page.Deliveries, 1, "only d1 was written")
	assert.Equal(t, int64(1), page.Deliveries[0].Version)
	assert.Equal(t, ledger.DeliveryStateOffered, page.Deliveries[0].State)
	require.NoError(t, checkStore(s))
}

func TestEnqueueAgainWritesNothing(t *testing.T) {
	t.Parallel()
	s := New()
	ctx := context.Background()
	req := ledger.EnqueueRequest{ID: "d", Target: "t", Payload: []byte("a")}
	_, err := s.Enqueue(ctx, req, t0)
	require.NoError(t, err)
	rs, err := s.EnqueueBatch(ctx, []ledger.EnqueueRequest{
		req,
		{ID: "d", Target: "t", Payload: []byte("b")},
		{ID: "e", Target: "t"},
		{ID: "e", Target: "u"},
	}, t0.Add(time.Second))
	require.NoError(t, err)
	outcomes := []ledger.Outcome{rs[0].Outcome, rs[1].Outcome, rs[2].Outcome, rs[3].Outcome}
	assert.Equal(t, []ledger.Outcome{ledger.OutcomeRepeated, ledger.OutcomeConflict, ledger.OutcomeApplied, ledger.OutcomeConflict}, outcomes)
	assert.Equal(t, []byte("a"), rs[1].Delivery.Payload, "a conflict returns the stored record")
	d, err := s.Get(ctx, "d")
	require.NoError(t, err)
	assert.Equal(t, int64(1), d.Version)
	assert.Equal(t, t0, d.UpdatedAt)
}

// TestLeaseDoesNotScan counts index node visits: leasing one delivery out
// of many costs about the same as out of few, for every kind of filter.
func TestLeaseDoesNotScan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Most records belong to one target and ceremony and come first in
	// offer order; a few on other targets and ceremonies come last, so an
	// implementation that walked a shared index and filtered would visit
	// nearly every node to reach them.
	build := func(n int) *Store {
		s := New()
		for i := 0; i < n; i += ledger.MaxLimit {
			batch := make([]ledger.EnqueueRequest, 0, ledger.MaxLimit)
			for j := i; j < i+ledger.MaxLimit && j < n; j++ {
				tg, cer := ledger.Target("bulk"), ledger.CeremonyID("cb")
				if j >= n-12 {
					tg, cer = ledger.Target(fmt.Sprint("t", j%4)), ledger.CeremonyID(fmt.Sprint("c", j%3))
				}
				batch = append(batch, ledger.EnqueueRequest{
					ID:          ledger.DeliveryID(fmt.Sprintf("d%07d", j)),
					Target:      tg,
					Ceremony:    cer,
					AvailableAt: t0.Add(time.Duration(j) * time.Microsecond),
				})
			}
			_, err := s.EnqueueBatch(ctx, batch, t0)
			require.NoError(t, err)
		}
		return s
	}
	filters := []ledger.LeaseFilter{
		{},
		{Targets: []ledger.Target{"t1"}},
		{Targets: []ledger.Target{"t1", "t2", "absent"}},
		{Ceremony: "c2"},
		{Ceremony: "c2", Targets: []ledger.Target{"t1", "t2"}},
	}
	cost := func(s *Store, f ledger.LeaseFilter) int {
		owner := ledger.Owner{Agent: "a", Incarnation: "1"}
		now := t0.Add(time.Hour)
		before := s.visits()
		for range 10 {
			r, err := s.Lease(ctx, f, owner, now, time.Minute, 1)
			require.NoError(t, err)
			require.Len(t, r.Leased, 1)
			_, err = s.Release(ctx, r.Leased[0].Lease, now)
			require.NoError(t, err)
		}
		return s.visits() - before
	}
	small, big := build(1_000), build(200_000)
	for _, f := range filters {
		cs, cb := cost(small, f), cost(big, f)
		// 200x the records: a scan would cost ~200x; O(log n) costs a
		// few more levels.
		assert.LessOrEqual(t, cb, 3*cs, "filter %+v: %d visits at 1k, %d at 200k", f, cs, cb)
		t.Logf("filter %+v: %d visits at 1k, %d at 200k", f, cs, cb)
	}
}

func TestLeaseSkipsExhaustedWithoutRemoving(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New()
	owner := ledger.Owner{Agent: "a", Incarnation: "1"}
	_, err := s.EnqueueBatch(ctx, []ledger.EnqueueRequest{
		{ID: "a", Target: "t", Policy: ledger.Policy{MaxAttempts: 1}},
		{ID: "b", Target: "t", AvailableAt: t0.Add(time.Millisecond)},
	}, t0)
	require.NoError(t, err)
	r, err := s.Lease(ctx, ledger.LeaseFilter{}, owner, t0, time.Second, 1)
	require.NoError(t, err)
	require.Equal(t, []ledger.DeliveryID{"a"}, idsOf(r.Leased))

	// a's lease ran out with its only attempt used: not offerable, but it
	// stays a candidate until Expire ends it.
	later := t0.Add(2 * time.Second)
	r, err = s.Lease(ctx, ledger.LeaseFilter{Targets: []ledger.Target{"t"}}, owner, later, time.Second, 5)
	require.NoError(t, err)
	assert.Equal(t, []ledger.DeliveryID{"b"}, idsOf(r.Leased))
	require.NoError(t, checkStore(s))

	sw, err := s.Expire(ctx, later)
	require.NoError(t, err)
	assert.Equal(t, []ledger.DeliveryID{"a"}, sw.Changed)
	d, err := s.Get(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, ledger.DeliveryStateFailed, d.State)
	require.NoError(t, checkStore(s))
}

func TestIncarnationRule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New()
	old := ledger.Owner{Agent: "host", Incarnation: "boot-1"}
	other := ledger.Owner{Agent: "other", Incarnation: "boot-1"}
	var reqs []ledger.EnqueueRequest
	for _, id := range []ledger.DeliveryID{"c", "a", "b", "d"} {
		reqs = append(reqs, ledger.EnqueueRequest{ID: id, Target: ledger.Target("t-" + id)})
	}
	_, err := s.EnqueueBatch(ctx, reqs, t0)
	require.NoError(t, err)
	r, err := s.Lease(ctx, ledger.LeaseFilter{Targets: []ledger.Target{"t-c", "t-a", "t-b"}}, old, t0, time.Hour, 10)
	require.NoError(t, err)
	require.Len(t, r.Leased, 3)
	_, err = s.Lease(ctx, ledger.LeaseFilter{}, other, t0, time.Hour, 10)
	require.NoError(t, err)

	// The agent comes back as boot-2, long before its leases run out.
	now := t0.Add(time.Minute)
	renewed := ledger.Owner{Agent: "host", Incarnation: "boot-2"}
	r2, err := s.Lease(ctx, ledger.LeaseFilter{Targets: []ledger.Target{"t-b"}}, renewed, now, time.Hour, 10)
	require.NoError(t, err)
	assert.Equal(t, []ledger.DeliveryID{"a", "b", "c"}, r2.Reclaimed, "ID order")
	assert.Equal(t, []ledger.DeliveryID{"b"}, idsOf(r2.Leased), "granted again in the same call")
	assert.Equal(t, 2, r2.Leased[0].Delivery.Attempts, "the reclaimed attempt stays counted")

	a, err := s.Get(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, ledger.DeliveryStateOffered, a.State)
	assert.Equal(t, now, a.AvailableAt)
	assert.Equal(t, ledger.FailureReclaimed, a.LastFailure.Kind)
	d, err := s.Get(ctx, "d")
	require.NoError(t, err)
	assert.Equal(t, other, d.Lease.Owner, "other agents keep their leases")

	// The old incarnation's lease is lost.
	ack, err := s.Acknowledge(ctx, r.Leased[0].Lease, "", now)
	require.NoError(t, err)
	assert.Equal(t, ledger.OutcomeLeaseLost, ack.Outcome)
	require.NoError(t, checkStore(s))

	// Leasing again as boot-2 reclaims nothing.
	r3, err := s.Lease(ctx, ledger.LeaseFilter{}, renewed, now, time.Hour, 1)
	require.NoError(t, err)
	assert.Empty(t, r3.Reclaimed)
}

func TestFenceOnlyMovesWhenApplied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New()
	owner := ledger.Owner{Agent: "a", Incarnation: "1"}
	intruder := ledger.Owner{Agent: "b", Incarnation: "1"}
	_, err := s.EnqueueBatch(ctx, []ledger.EnqueueRequest{{ID: "d1", Target: "t"}, {ID: "d2", Target: "t"}}, t0)
	require.NoError(t, err)
	r, err := s.Lease(ctx, ledger.LeaseFilter{}, owner, t0, time.Hour, 2)
	require.NoError(t, err)
	for _, l := range r.Leased {
		_, err = s.Acknowledge(ctx, l.Lease, "", t0)
		require.NoError(t, err)
	}
	// A wrong owner with a high fence does not apply, so it must not
	// raise the target's high-water mark.
	pr, err := s.MarkProcessed(ctx, "d1", intruder, ledger.FenceOf(100), "x", t0)
	require.NoError(t, err)
	assert.Equal(t, ledger.OutcomeWrongOwner, pr.Outcome)
	pr, err = s.MarkProcessed(ctx, "d1", owner, ledger.FenceOf(5), "x", t0)
	require.NoError(t, err)
	assert.Equal(t, ledger.OutcomeApplied, pr.Outcome)
	pr, err = s.MarkProcessed(ctx, "d2", owner, ledger.FenceOf(4), "x", t0)
	require.NoError(t, err)
	assert.Equal(t, ledger.OutcomeFenceRejected, pr.Outcome)
	pr, err = s.MarkProcessed(ctx, "d2", owner, ledger.FenceOf(5), "x", t0)
	require.NoError(t, err)
	assert.Equal(t, ledger.OutcomeApplied, pr.Outcome, "an equal fence is accepted")
}

func TestListPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New()
	var reqs []ledger.EnqueueRequest
	for i := 24; i >= 0; i-- { // enqueued out of ID order
		reqs = append(reqs, ledger.EnqueueRequest{
			ID:       ledger.DeliveryID(fmt.Sprintf("d%02d", i)),
			Target:   ledger.Target(fmt.Sprint("t", i%2)),
			Ceremony: ledger.CeremonyID(fmt.Sprint("c", i%3)),
		})
	}
	_, err := s.EnqueueBatch(ctx, reqs, t0)
	require.NoError(t, err)
	_, err = s.Abandon(ctx, "d06", ledger.Cause{Kind: ledger.CauseQueueBounded}, t0)
	require.NoError(t, err)

	q := ledger.ListQuery{Targets: []ledger.Target{"t0"}, Ceremony: "c0", States: []ledger.DeliveryState{ledger.DeliveryStateOffered}, Limit: 2}
	// t0 and c0: IDs divisible by 6; d06 is expired.
	want := []ledger.DeliveryID{"d00", "d12", "d18", "d24"}
	var got []ledger.DeliveryID
	pages := 0
	for {
		page, err := s.List(ctx, q)
		require.NoError(t, err)
		pages++
		for _, d := range page.Deliveries {
			got = append(got, d.ID)
		}
		if page.Next == "" {
			break
		}
		q.Cursor = page.Next
	}
	assert.Equal(t, want, got)
	assert.Equal(t, 2, pages, "no empty last page: Next is set only when more match")

	all, err := s.List(ctx, ledger.ListQuery{Limit: 25})
	require.NoError(t, err)
	assert.Len(t, all.Deliveries, 25)
	assert.Empty(t, all.Next)
	assert.Equal(t, ledger.DeliveryID("d00"), all.Deliveries[0].ID)
	assert.Equal(t, ledger.DeliveryID("d24"), all.Deliveries[24].ID)

	// A cursor past a record that is not in the store still resumes in order.
	page, err := s.List(ctx, ledger.ListQuery{Limit: 2, Cursor: storekit.EncodeCursor("d105")})
	require.NoError(t, err)
	assert.Equal(t, []ledger.DeliveryID{"d11", "d12"}, []ledger.DeliveryID{page.Deliveries[0].ID, page.Deliveries[1].ID})
}

func TestGetUnknownIsNotFound(t *testing.T) {
	t.Parallel()
	s := New()
	_, err := s.Get(context.Background(), "nope")
	require.True(t, errors.Is(err, ledger.ErrNotFound))
	r, err := s.Acknowledge(context.Background(), ledger.Lease{DeliveryID: "nope", Token: "t", Seq: 1}, "", t0)
	require.NoError(t, err)
	assert.Equal(t, ledger.OutcomeNotFound, r.Outcome)
	assert.Zero(t, r.Delivery.ID)
}

func TestEphemeralNamesDoNotAccumulate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New()
	for round := range 5 {
		var reqs []ledger.EnqueueRequest
		for i := range 400 {
			reqs = append(reqs, ledger.EnqueueRequest{
				ID:       ledger.DeliveryID(fmt.Sprintf("r%d-%03d", round, i)),
				Target:   ledger.Target(fmt.Sprintf("t%d-%03d", round, i)),
				Ceremony: ledger.CeremonyID(fmt.Sprintf("c%d-%03d", round, i)),
			})
		}
		_, err := s.EnqueueBatch(ctx, reqs, t0)
		require.NoError(t, err)
		for _, r := range reqs {
			_, err := s.ExpireCeremony(ctx, r.Ceremony, ledger.Cause{Kind: ledger.CauseCeremonyEnded}, t0)
			require.NoError(t, err)
		}
		require.NoError(t, checkStore(s))
	}
	// 2,000 targets and ceremonies came and went; at most a bounded tail
	// of emptied indexes is left.
	assert.LessOrEqual(t, len(s.byTarget.m), 400)
	assert.LessOrEqual(t, len(s.byCeremony.m), 400)
	assert.LessOrEqual(t, len(s.open.m), 400)

	// Agents that lease once and go away do not accumulate either.
	_, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: "x", Target: "t"}, t0)
	require.NoError(t, err)
	for i := range 1000 {
		r, err := s.Lease(ctx, ledger.LeaseFilter{}, ledger.Owner{Agent: fmt.Sprint("agent", i), Incarnation: "1"}, t0, time.Minute, 1)
		require.NoError(t, err)
		require.Len(t, r.Leased, 1)
		_, err = s.Release(ctx, r.Leased[0].Lease, t0)
		require.NoError(t, err)
	}
	require.NoError(t, checkStore(s))
	assert.LessOrEqual(t, len(s.holders.agents), 200)
}

func TestIncarnationRuleWithPrefixNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New()
	var reqs []ledger.EnqueueRequest
	for i := range 6 {
		reqs = append(reqs, ledger.EnqueueRequest{ID: ledger.DeliveryID(fmt.Sprint("d", i)), Target: "t"})
	}
	_, err := s.EnqueueBatch(ctx, reqs, t0)
	require.NoError(t, err)
	// Incarnations that prefix each other, and an agent that prefixes
	// another agent.
	for i, o := range []ledger.Owner{{Agent: "a", Incarnation: "1"}, {Agent: "a", Incarnation: "10"}, {Agent: "a", Incarnation: "2"}, {Agent: "ab", Incarnation: "1"}} {
		r, err := s.Lease(ctx, ledger.LeaseFilter{}, o, t0.Add(time.Duration(i)*time.Millisecond), time.Hour, 1)
		require.NoError(t, err)
		require.Len(t, r.Leased, 1)
	}
	// Each lease by a new incarnation of "a" took back the previous ones.
	r, err := s.Lease(ctx, ledger.LeaseFilter{}, ledger.Owner{Agent: "a", Incarnation: "10"}, t0.Add(time.Second), time.Hour, 1)
	require.NoError(t, err)
	assert.Equal(t, []ledger.DeliveryID{"d2"}, r.Reclaimed, "only incarnation 2 still held one")
	d3, err := s.Get(ctx, "d3")
	require.NoError(t, err)
	assert.Equal(t, ledger.Owner{Agent: "ab", Incarnation: "1"}, d3.Lease.Owner)
	require.NoError(t, checkStore(s))
}
