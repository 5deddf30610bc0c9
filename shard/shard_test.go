package shard_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/memstore"
	"github.com/leaseledger/ledger/shard"
	"github.com/leaseledger/ledger/storekit"
)

var t0 = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)

var (
	ownerA = ledger.Owner{Agent: "agent-a", Incarnation: "boot-1"}
	ownerB = ledger.Owner{Agent: "agent-b", Incarnation: "boot-1"}
)

// placed puts target "t<i>-..." on shard i: the tests read where a
// delivery lives from its target's name.
func placed(target ledger.Target) int {
	return int(target[1] - '0')
}

// newLedger is a sharded ledger over n memstores placed by placed,
// returning the stores too.
func newLedger(t *testing.T, n int, opts ...shard.Option) (*shard.Ledger, []*memstore.Store) {
	t.Helper()
	stores := make([]*memstore.Store, n)
	ls := make([]ledger.Ledger, n)
	for i := range stores {
		stores[i] = memstore.New()
		ls[i] = stores[i]
	}
	l, err := shard.New(ls, append([]shard.Option{shard.WithPlacement(placed)}, opts...)...)
	require.NoError(t, err)
	return l, stores
}

func enqueue(t *testing.T, l ledger.Ledger, id ledger.DeliveryID, target ledger.Target, now time.Time) ledger.DeliveryResult {
	t.Helper()
	res, err := l.Enqueue(t.Context(), ledger.EnqueueRequest{ID: id, Target: target, Payload: []byte(id)}, now)
	require.NoError(t, err)
	return res
}

func TestDeliveriesLiveOnTheirTargetsShard(t *testing.T) {
	l, stores := newLedger(t, 3)
	for _, target := range []ledger.Target{"t0-a", "t1-a", "t2-a"} {
		require.Equal(t, ledger.OutcomeApplied, enqueue(t, l, ledger.DeliveryID("d-"+target), target, t0).Outcome)
	}
	for i, s := range stores {
		d, err := s.Get(t.Context(), ledger.DeliveryID("d-t"+string(rune('0'+i))+"-a"))
		require.NoError(t, err, "shard %d holds its target's delivery", i)
		require.Equal(t, ledger.DeliveryStateOffered, d.State)
	}
	_, err := stores[0].Get(t.Context(), "d-t1-a")
	require.ErrorIs(t, err, ledger.ErrNotFound, "and no other")
}

func TestTokensNameTheirShardAndStayOutOfRecords(t *testing.T) {
	l, stores := newLedger(t, 3)
	enqueue(t, l, "d-1", "t2-a", t0)
	res, err := l.Lease(t.Context(), ledger.LeaseFilter{}, ownerA, t0, time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, res.Leased, 1)
	lease := res.Leased[0].Lease
	require.True(t, strings.HasPrefix(string(lease.Token), "2~"), "the token names shard 2: %q", lease.Token)
	require.Empty(t, res.Leased[0].Delivery.Lease.Token, "the record in the result carries no token")

	d, err := l.Get(t.Context(), "d-1")
	require.NoError(t, err)
	require.Empty(t, d.Lease.Token, "a record read back carries no token")
	inner, err := stores[2].Get(t.Context(), "d-1")
	require.NoError(t, err)
	require.Empty(t, inner.Lease.Token)

	// The shard part is the store's own token: only the grantee has it.
	forged := lease
	forged.Token = "2~" + storekit.NewToken()
	out, err := l.Acknowledge(t.Context(), forged, "", t0)
	require.NoError(t, err)
	require.Equal(t, ledger.OutcomeLeaseLost, out.Outcome)
	// The index only routes: the store's part is the capability, so a
	// token sent to the wrong shard is found by ID and judged there.
	wrongShard := lease
	wrongShard.Token = "0" + lease.Token[1:]
	out, err = l.Acknowledge(t.Context(), wrongShard, "", t0)
	require.NoError(t, err)
	require.Equal(t, ledger.OutcomeApplied, out.Outcome)
}

func TestSameIDUnderATargetOnAnotherShardIsConflict(t *testing.T) {
	l, _ := newLedger(t, 3)
	enqueue(t, l, "d-1", "t0-a", t0)
	res := enqueue(t, l, "d-1", "t1-a", t0.Add(time.Second))
	require.Equal(t, ledger.OutcomeConflict, res.Outcome)
	require.Equal(t, ledger.Target("t0-a"), res.Delivery.Target, "the conflict carries the stored record")
	require.Equal(t, ledger.OutcomeRepeated, enqueue(t, l, "d-1", "t0-a", t0.Add(time.Second)).Outcome)

	// Without the look-up, the rule holds within a shard only.
	unchecked, _ := newLedger(t, 3, shard.WithoutIDCheck())
	enqueue(t, unchecked, "d-1", "t0-a", t0)
	require.Equal(t, ledger.OutcomeApplied, enqueue(t, unchecked, "d-1", "t1-a", t0).Outcome)
}

func TestLeaseTakesFromEveryShard(t *testing.T) {
	l, _ := newLedger(t, 3)
	// Shard 0 holds the oldest work by far; the others' is newer.
	for i := range 5 {
		for s, target := range []ledger.Target{"t0-a", "t1-a", "t2-a"} {
			id := ledger.DeliveryID(string(target) + "-" + string(rune('a'+i)))
			enqueue(t, l, id, target, t0.Add(time.Duration(s)*time.Hour+time.Duration(i)*time.Second))
		}
	}
	now := t0.Add(3 * time.Hour)
	got := map[ledger.Target]int{}
	for range 3 {
		res, err := l.Lease(t.Context(), ledger.LeaseFilter{}, ownerA, now, time.Minute, 2)
		require.NoError(t, err)
		require.Len(t, byTarget(res), 1, "a shard with enough work answers the whole limit: %v", byTarget(res))
		for k, n := range byTarget(res) {
			got[k] += n
		}
	}
	require.Equal(t, map[ledger.Target]int{"t0-a": 2, "t1-a": 2, "t2-a": 2}, got, "consecutive leases take from each shard in turn")

	// A shard with too little leaves the rest to the others: 3 left on
	// each, 7 asked for, so whichever shard is asked first, all three
	// give.
	res, err := l.Lease(t.Context(), ledger.LeaseFilter{}, ownerA, now, time.Minute, 7)
	require.NoError(t, err)
	require.Len(t, res.Leased, 7)
	require.Len(t, byTarget(res), 3, "%v", byTarget(res))
	for k, n := range byTarget(res) {
		got[k] += n
	}

	// A filter asks only the shards of its targets, and takes all they
	// have left, even when the first one it asks is empty.
	res, err = l.Lease(t.Context(), ledger.LeaseFilter{Targets: []ledger.Target{"t0-a", "t1-a"}}, ownerA, now, time.Minute, 6)
	require.NoError(t, err)
	require.Equal(t, map[ledger.Target]int{"t0-a": 5 - got["t0-a"], "t1-a": 5 - got["t1-a"]}, withZeros(byTarget(res), "t0-a", "t1-a"))
}

// withZeros is m with the targets it lacks at zero.
func withZeros(m map[ledger.Target]int, targets ...ledger.Target) map[ledger.Target]int {
	for _, k := range targets {
		m[k] += 0
	}
	return m
}

func byTarget(res ledger.LeaseResult) map[ledger.Target]int {
	out := map[ledger.Target]int{}
	for _, g := range res.Leased {
		out[g.Delivery.Target]++
	}
	return out
}

func TestIncarnationRuleReachesShardsALeaseDoesNotAsk(t *testing.T) {
	l, _ := newLedger(t, 3)
	enqueue(t, l, "d-1", "t1-a", t0)
	res, err := l.Lease(t.Context(), ledger.LeaseFilter{}, ownerA, t0, time.Hour, 1)
	require.NoError(t, err)
	require.Len(t, res.Leased, 1)

	reborn := ledger.Owner{Agent: ownerA.Agent, Incarnation: "boot-2"}
	res, err = l.Lease(t.Context(), ledger.LeaseFilter{Targets: []ledger.Target{"t0-a"}}, reborn, t0.Add(time.Second), time.Hour, 1)
	require.NoError(t, err)
	require.Equal(t, []ledger.DeliveryID{"d-1"}, res.Reclaimed, "the old incarnation's lease on shard 1 is taken back")
	d, err := l.Get(t.Context(), "d-1")
	require.NoError(t, err)
	require.Equal(t, ledger.DeliveryStateOffered, d.State)
}

func TestListPagesAcrossShardsInIDOrder(t *testing.T) {
	l, _ := newLedger(t, 3)
	var want []ledger.DeliveryID
	for i := range 20 {
		target := ledger.Target("t" + string(rune('0'+i%3)) + "-a")
		id := ledger.DeliveryID("d-" + string(rune('a'+(i*7)%20)))
		enqueue(t, l, id, target, t0)
		want = append(want, id)
	}
	var got []ledger.DeliveryID
	q := ledger.ListQuery{Limit: 3}
	for {
		page, err := l.List(t.Context(), q)
		require.NoError(t, err)
		for _, d := range page.Deliveries {
			got = append(got, d.ID)
		}
		if page.Next == "" {
			break
		}
		q.Cursor = page.Next
	}
	require.ElementsMatch(t, want, got)
	require.IsNonDecreasing(t, got)
}

func TestAddShardPlacesNewTargetsWithoutMovingOthers(t *testing.T) {
	l, stores := newLedger(t, 2)
	enqueue(t, l, "old-1", "t1-a", t0)
	extra := memstore.New()
	require.Equal(t, 2, l.AddShard(extra))
	// placed already sends "t2-..." to shard 2; nothing else moved.
	enqueue(t, l, "new-1", "t2-a", t0)
	_, err := extra.Get(t.Context(), "new-1")
	require.NoError(t, err)
	_, err = stores[1].Get(t.Context(), "old-1")
	require.NoError(t, err)
	res, err := l.Lease(t.Context(), ledger.LeaseFilter{}, ownerA, t0, time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, res.Leased, 2, "work on the new shard is leased with the rest")
}

func TestMoveTakesATargetsOpenWorkToItsNewShard(t *testing.T) {
	l, stores := newLedger(t, 3)
	for _, id := range []ledger.DeliveryID{"m-1", "m-2", "m-3", "m-4"} {
		enqueue(t, l, id, "t0-move", t0)
	}
	// A worker holds m-1 when the move starts.
	res, err := l.Lease(t.Context(), ledger.LeaseFilter{Targets: []ledger.Target{"t0-move"}}, ownerA, t0, time.Minute, 1)
	require.NoError(t, err)
	held := res.Leased[0].Lease
	require.Equal(t, ledger.DeliveryID("m-1"), held.DeliveryID)

	// The placement changes: the target now lives on shard 2.
	l.Place(shard.Pinned(map[ledger.Target]int{"t0-move": 2}, placed))
	now := t0.Add(time.Second)
	moved, err := l.Move(t.Context(), "t0-move", 0, now)
	require.NoError(t, err)
	require.Equal(t, []ledger.DeliveryID{"m-2", "m-3", "m-4"}, moved.Moved)
	require.Equal(t, 1, moved.Remaining, "the held delivery stays with its holder")
	for _, id := range moved.Moved {
		d, err := stores[2].Get(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, ledger.DeliveryStateOffered, d.State)
		src, err := stores[0].Get(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, ledger.DeliveryStateExpired, src.State)
		require.Equal(t, shard.CauseMoved, src.Cause.Kind)
		got, err := l.Get(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, ledger.DeliveryStateOffered, got.State, "Get finds the open copy")
		require.Equal(t, ledger.OutcomeRepeated, enqueue(t, l, id, "t0-move", now).Outcome, "a producer's retry is a repeat")
	}

	// The holder finishes on the old shard; nobody else got m-1.
	ack, done, err := l.AcknowledgeProcessed(t.Context(), held, "", nil, "done", now)
	require.NoError(t, err)
	require.Equal(t, ledger.OutcomeApplied, ack.Outcome)
	require.Equal(t, ledger.OutcomeApplied, done.Outcome)
	again, err := l.Move(t.Context(), "t0-move", 0, now)
	require.NoError(t, err)
	require.Empty(t, again.Moved)
	require.Zero(t, again.Remaining)

	// Every moved delivery is leased once, from the new shard.
	res, err = l.Lease(t.Context(), ledger.LeaseFilter{Targets: []ledger.Target{"t0-move"}}, ownerB, now, time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, res.Leased, 3)
	for _, g := range res.Leased {
		require.True(t, strings.HasPrefix(string(g.Lease.Token), "2~"))
	}
}

func TestMoveAfterAMoveThatDiedLosesNothing(t *testing.T) {
	l, stores := newLedger(t, 3)
	enqueue(t, l, "m-1", "t0-move", t0)
	l.Place(shard.Pinned(map[ledger.Target]int{"t0-move": 1}, placed))
	// A Move that died after enqueueing the copy, before abandoning the
	// source: the source is held by a mover incarnation, the copy exists.
	dead := ledger.Owner{Agent: "leaseledger.shard.move", Incarnation: "dead"}
	_, err := stores[0].Lease(t.Context(), ledger.LeaseFilter{}, dead, t0, time.Hour, 10)
	require.NoError(t, err)
	enqueue(t, stores[1], "m-1", "t0-move", t0)

	moved, err := l.Move(t.Context(), "t0-move", 0, t0.Add(time.Second))
	require.NoError(t, err)
	require.Equal(t, []ledger.DeliveryID{"m-1"}, moved.Moved)
	require.Zero(t, moved.Remaining)
	src, err := stores[0].Get(t.Context(), "m-1")
	require.NoError(t, err)
	require.Equal(t, ledger.DeliveryStateExpired, src.State)
	dst, err := stores[1].Get(t.Context(), "m-1")
	require.NoError(t, err)
	require.Equal(t, ledger.DeliveryStateOffered, dst.State)
}

func TestFollowAcrossShardsIsLeasedForTheReplacement(t *testing.T) {
	l, _ := newLedger(t, 3)
	enqueue(t, l, "f-1", "t0-old", t0)
	_, err := l.Supersede(t.Context(), "t0-old", "t1-new", ledger.Follow, t0)
	require.NoError(t, err)
	res, err := l.Lease(t.Context(), ledger.LeaseFilter{Targets: []ledger.Target{"t1-new"}}, ownerA, t0, time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, res.Leased, 1)
	require.Equal(t, ledger.Target("t1-new"), res.Leased[0].Delivery.Target)
}

// downStore is a memstore that fails every call while down.
type downStore struct {
	*memstore.Store
	down atomic.Bool
}

var errDown = errors.New("shard unreachable")

func (s *downStore) Lease(ctx context.Context, f ledger.LeaseFilter, o ledger.Owner, now time.Time, d time.Duration, limit int) (ledger.LeaseResult, error) {
	if s.down.Load() {
		return ledger.LeaseResult{}, errDown
	}
	return s.Store.Lease(ctx, f, o, now, d, limit)
}

func (s *downStore) Acknowledge(ctx context.Context, l ledger.Lease, obs string, now time.Time) (ledger.DeliveryResult, error) {
	if s.down.Load() {
		return ledger.DeliveryResult{}, errDown
	}
	return s.Store.Acknowledge(ctx, l, obs, now)
}

func (s *downStore) Get(ctx context.Context, id ledger.DeliveryID) (ledger.Delivery, error) {
	if s.down.Load() {
		return ledger.Delivery{}, errDown
	}
	return s.Store.Get(ctx, id)
}

func (s *downStore) Expire(ctx context.Context, now time.Time) (ledger.SweepResult, error) {
	if s.down.Load() {
		return ledger.SweepResult{}, errDown
	}
	return s.Store.Expire(ctx, now)
}

func TestADownShardFailsOnlyTheCallsThatNeedIt(t *testing.T) {
	stores := []*downStore{{Store: memstore.New()}, {Store: memstore.New()}, {Store: memstore.New()}}
	var mu sync.Mutex
	var reported []int
	l, err := shard.New([]ledger.Ledger{stores[0], stores[1], stores[2]}, shard.WithPlacement(placed),
		shard.WithErrorFunc(func(e *shard.ShardError) { mu.Lock(); reported = append(reported, e.Shard); mu.Unlock() }))
	require.NoError(t, err)
	for _, target := range []ledger.Target{"t0-a", "t1-a", "t2-a"} {
		enqueue(t, l, ledger.DeliveryID("d-"+target), target, t0)
	}
	held, err := l.Lease(t.Context(), ledger.LeaseFilter{Targets: []ledger.Target{"t1-a"}}, ownerA, t0, time.Minute, 1)
	require.NoError(t, err)
	stores[1].down.Store(true)

	res, err := l.Lease(t.Context(), ledger.LeaseFilter{}, ownerB, t0, time.Minute, 10)
	require.NoError(t, err, "the other shards answer")
	require.Equal(t, map[ledger.Target]int{"t0-a": 1, "t2-a": 1}, byTarget(res))
	require.Contains(t, reported, 1, "the failure is reported")
	for _, g := range res.Leased {
		out, err := l.Acknowledge(t.Context(), g.Lease, "", t0)
		require.NoError(t, err)
		require.Equal(t, ledger.OutcomeApplied, out.Outcome)
	}
	_, err = l.Acknowledge(t.Context(), held.Leased[0].Lease, "", t0)
	require.ErrorIs(t, err, errDown, "a call that needs the down shard fails")
	var se *shard.ShardError
	require.ErrorAs(t, err, &se)
	require.Equal(t, 1, se.Shard)
	_, err = l.Lease(t.Context(), ledger.LeaseFilter{Targets: []ledger.Target{"t1-a"}}, ownerB, t0, time.Minute, 1)
	require.ErrorIs(t, err, errDown, "a lease that needs only the down shard fails")

	stores[1].down.Store(false)
	out, err := l.Acknowledge(t.Context(), held.Leased[0].Lease, "", t0)
	require.NoError(t, err)
	require.Equal(t, ledger.OutcomeApplied, out.Outcome, "back up, the shard answers again")
}

// TestHashIsStable pins Hash's answers: a change to the hash would move
// every target of a running ledger to another shard, away from its open
// work, so it must never change.
func TestHashIsStable(t *testing.T) {
	h := shard.Hash(3)
	got := map[ledger.Target]int{}
	for _, target := range []ledger.Target{"host-1", "host-2", "host-3", "host-4", "host-old", "host-new"} {
		got[target] = h(target)
	}
	require.Equal(t, map[ledger.Target]int{
		"host-1": 0, "host-2": 0, "host-3": 0, "host-4": 2, "host-old": 1, "host-new": 0,
	}, got)
	require.Equal(t, 5, shard.Hash(16)("tenant-42/host-7"))
}

func TestAPlacementOutOfRangeIsAnError(t *testing.T) {
	l, err := shard.New([]ledger.Ledger{memstore.New(), memstore.New()},
		shard.WithPlacement(func(ledger.Target) int { return 2 }))
	require.NoError(t, err)
	_, err = l.Enqueue(t.Context(), ledger.EnqueueRequest{ID: "d-1", Target: "t"}, t0)
	require.Error(t, err)
	_, err = l.Lease(t.Context(), ledger.LeaseFilter{Targets: []ledger.Target{"t"}}, ownerA, t0, time.Minute, 1)
	require.Error(t, err)
	_, err = shard.New(nil)
	require.ErrorIs(t, err, shard.ErrNoShards)
}

// TestIncarnationRuleWaitsForADownShard: a shard that was down when an
// agent's new incarnation first leased has not seen it, so the next lease
// takes the old incarnation's leases back there.
func TestIncarnationRuleWaitsForADownShard(t *testing.T) {
	stores := []*downStore{{Store: memstore.New()}, {Store: memstore.New()}}
	l, err := shard.New([]ledger.Ledger{stores[0], stores[1]}, shard.WithPlacement(placed))
	require.NoError(t, err)
	enqueue(t, l, "d-1", "t1-a", t0)
	res, err := l.Lease(t.Context(), ledger.LeaseFilter{}, ownerA, t0, time.Hour, 1)
	require.NoError(t, err)
	require.Len(t, res.Leased, 1)

	reborn := ledger.Owner{Agent: ownerA.Agent, Incarnation: "boot-2"}
	only0 := ledger.LeaseFilter{Targets: []ledger.Target{"t0-a"}}
	stores[1].down.Store(true)
	res, err = l.Lease(t.Context(), only0, reborn, t0.Add(time.Second), time.Hour, 1)
	require.NoError(t, err)
	require.Empty(t, res.Reclaimed, "shard 1 cannot answer")
	stores[1].down.Store(false)
	res, err = l.Lease(t.Context(), only0, reborn, t0.Add(2*time.Second), time.Hour, 1)
	require.NoError(t, err)
	require.Equal(t, []ledger.DeliveryID{"d-1"}, res.Reclaimed, "back up, shard 1 takes the old lease back")
}
