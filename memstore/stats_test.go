package memstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// requireStats checks Stats for every filter over targets and ceremonies
// (none, each one, each pair) at each of nows against the root's Count
// run over every record: the indexes and counts Stats reads must give
// exactly what a scan gives.
func requireStats(t *testing.T, s *Store, targets []ledger.Target, ceremonies []ledger.CeremonyID, nows ...time.Time) {
	t.Helper()
	all := snapshot(s)
	filters := []ledger.StatsFilter{{}}
	for _, tg := range append(targets, "absent") {
		filters = append(filters, ledger.StatsFilter{Target: tg})
		for _, c := range ceremonies {
			if c != "" {
				filters = append(filters, ledger.StatsFilter{Target: tg, Ceremony: c})
			}
		}
	}
	for _, c := range ceremonies {
		if c != "" {
			filters = append(filters, ledger.StatsFilter{Ceremony: c})
		}
	}
	for _, now := range nows {
		for _, f := range filters {
			want := storekit.NewDeliveryStats()
			for i := range all {
				if matches(&all[i], f) {
					storekit.CountDelivery(&want, &all[i], now)
				}
			}
			storekit.FinishDeliveryStats(&want, now)
			got, err := s.Stats(context.Background(), f, now)
			require.NoError(t, err)
			require.Equal(t, want, got, "stats for %+v at %s", f, now)
		}
	}
}

// requireOutboxStats checks OutboxStats at each of nows against the root's
// Count run over every entry.
func requireOutboxStats(t *testing.T, o *Outbox, nows ...time.Time) {
	t.Helper()
	o.mu.Lock()
	all := make([]ledger.OutboxEntry, 0, len(o.entries))
	for _, p := range o.entries {
		all = append(all, p.Clone())
	}
	o.mu.Unlock()
	for _, now := range nows {
		want := storekit.NewOutboxStats()
		for i := range all {
			storekit.CountEntry(&want, &all[i], now)
		}
		storekit.FinishOutboxStats(&want, now)
		got, err := o.OutboxStats(context.Background(), now)
		require.NoError(t, err)
		require.Equal(t, want, got, "outbox stats at %s", now)
	}
}

func TestStatsOfAnEmptyStore(t *testing.T) {
	t.Parallel()
	s := New()
	requireStats(t, s, []ledger.Target{"t"}, []ledger.CeremonyID{"c"}, t0)
	got, err := s.Stats(context.Background(), ledger.StatsFilter{}, t0)
	require.NoError(t, err)
	require.Len(t, got.ByState, len(ledger.DeliveryStates()), "every state is present")
	require.Zero(t, got.Depth)
	o := s.Outbox()
	requireOutboxStats(t, o, t0)
	og, err := o.OutboxStats(context.Background(), t0)
	require.NoError(t, err)
	require.Len(t, og.ByStatus, len(ledger.OutboxStatuses()))
}

// TestStatsDepthSkipsSpentDeliveries checks the one case where a due key
// of an offer index is not offerable: a Leased delivery on its last
// attempt whose lease ran out. Until Expire ends it, it sits in the offer
// indexes; Depth must not count it and the oldest must skip it.
func TestStatsDepthSkipsSpentDeliveries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New()
	owner := ledger.Owner{Agent: "a", Incarnation: "1"}
	for i, id := range []ledger.DeliveryID{"last", "more"} {
		attempts := 1 + i // "last" has one attempt, "more" two
		_, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: id, Target: "t", Ceremony: "c", Policy: ledger.Policy{MaxAttempts: attempts}}, t0)
		require.NoError(t, err)
	}
	res, err := s.Lease(ctx, ledger.LeaseFilter{}, owner, t0, time.Second, 2)
	require.NoError(t, err)
	require.Len(t, res.Leased, 2)
	after := t0.Add(time.Second)
	for _, f := range []ledger.StatsFilter{{}, {Target: "t"}, {Ceremony: "c"}, {Target: "t", Ceremony: "c"}} {
		st, err := s.Stats(ctx, f, after)
		require.NoError(t, err)
		require.Equal(t, int64(1), st.Depth, "only %q is offerable again, filter %+v", "more", f)
		require.Equal(t, after, st.OldestAvailableAt)
	}
	requireStats(t, s, []ledger.Target{"t"}, []ledger.CeremonyID{"c"}, t0, after, after.Add(time.Hour))
	require.NoError(t, checkStore(s))
	_, err = s.Expire(ctx, after)
	require.NoError(t, err)
	requireStats(t, s, []ledger.Target{"t"}, []ledger.CeremonyID{"c"}, after)
	require.NoError(t, checkStore(s))
}

// TestTalliesFollowPurgeAndSupersede checks the counts per group as
// records leave a target (Supersede) and the store (PurgeDeliveries): a
// group whose last record left is dropped.
func TestTalliesFollowPurgeAndSupersede(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New()
	for i := range 6 {
		_, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: ledger.DeliveryID(fmt.Sprint("d", i)), Target: "old", Ceremony: "c"}, t0)
		require.NoError(t, err)
	}
	_, err := s.Supersede(ctx, "old", "new", ledger.Follow, t0)
	require.NoError(t, err)
	require.NoError(t, checkStore(s))
	require.NotContains(t, s.counts.byTarget, ledger.Target("old"))
	_, err = s.ExpireCeremony(ctx, "c", ledger.Cause{Kind: "mine"}, t0)
	require.NoError(t, err)
	requireStats(t, s, []ledger.Target{"old", "new"}, []ledger.CeremonyID{"c"}, t0)
	n, err := s.PurgeDeliveries(ctx, t0.Add(time.Second), 4)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	require.NoError(t, checkStore(s))
	requireStats(t, s, []ledger.Target{"new"}, []ledger.CeremonyID{"c"}, t0)
	_, err = s.PurgeDeliveries(ctx, t0.Add(time.Second), 4)
	require.NoError(t, err)
	require.NoError(t, checkStore(s))
	require.Empty(t, s.counts.byTarget)
	require.Empty(t, s.counts.byCeremony)
	require.Empty(t, s.counts.byPair)
	require.Empty(t, s.counts.all.causes, "a cause kind whose records are gone is dropped")
}

func TestStatsValidation(t *testing.T) {
	t.Parallel()
	s := New()
	_, err := s.Stats(context.Background(), ledger.StatsFilter{}, time.Time{})
	require.ErrorIs(t, err, ledger.ErrInvalid)
	_, err = s.Stats(context.Background(), ledger.StatsFilter{Target: "bad\n"}, t0)
	require.ErrorIs(t, err, ledger.ErrInvalid)
	_, err = s.Outbox().OutboxStats(context.Background(), time.Time{})
	require.ErrorIs(t, err, ledger.ErrInvalid)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = s.Stats(ctx, ledger.StatsFilter{}, t0)
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.Outbox().OutboxStats(ctx, t0)
	require.ErrorIs(t, err, context.Canceled)
}

// TestCountWhileMatchesAWalk checks the node-at-a-time count against a
// key-by-key count, on trees of every shape the splits make.
func TestCountWhileMatchesAWalk(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 5))
	for _, n := range []int{0, 1, 30, 31, 32, 500, 5000} {
		var tr btree[slotKey]
		var ats []int64
		for i := range n {
			at := rng.Int64N(int64(n) + 1)
			if tr.insert(slotKey{at: at, slot: uint32(i)}) {
				ats = append(ats, at)
			}
		}
		// Delete some keys so that merged and rotated nodes are counted too.
		for i := 0; i < n; i += 3 {
			c := tr.first()
			if k, ok := c.next(); ok && tr.delete(k) {
				ats = slices.Delete(ats, slices.Index(ats, k.at), slices.Index(ats, k.at)+1)
			}
		}
		for _, end := range []int64{-1, 0, 1, int64(n) / 2, int64(n), int64(n) + 1} {
			want := 0
			for _, at := range ats {
				if at <= end {
					want++
				}
			}
			got := tr.countWhile(func(k slotKey) bool { return k.at <= end })
			require.Equal(t, want, got, "n=%d end=%d", n, end)
		}
	}
}
