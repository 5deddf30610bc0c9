package memstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// snapshot returns copies of every record, in ID order.
func snapshot(s *Store) []ledger.Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ledger.Delivery, 0, len(s.records))
	for _, p := range s.recs {
		out = append(out, p.Clone())
	}
	slices.SortFunc(out, func(a, b ledger.Delivery) int { return compareIDs(a.ID, b.ID) })
	return out
}

func compareIDs(a, b ledger.DeliveryID) int { return idKey(a).compare(idKey(b)) }

// modelLease is what Lease must do, computed by brute force over every
// record with the root functions: reclaim, then filter, order and cut.
func modelLease(all []ledger.Delivery, f ledger.LeaseFilter, owner ledger.Owner, now time.Time, limit int) (leased, reclaimed []ledger.DeliveryID) {
	var cands []ledger.Delivery
	for _, d := range all {
		if storekit.Delivery(d).HeldByOtherIncarnation(owner) {
			reclaimed = append(reclaimed, d.ID)
			d = storekit.Delivery(d).Reclaim(owner, now)
		}
		if (len(f.Targets) == 0 || slices.Contains(f.Targets, d.Target)) &&
			(f.Ceremony == "" || f.Ceremony == d.Ceremony) && storekit.Delivery(d).Offerable(now) {
			cands = append(cands, d)
		}
	}
	slices.SortFunc(cands, func(a, b ledger.Delivery) int {
		if storekit.OfferedBefore(a, b) {
			return -1
		}
		return 1
	})
	for i := 0; i < len(cands) && i < limit; i++ {
		leased = append(leased, cands[i].ID)
	}
	return leased, reclaimed
}

func idsOf(ls []ledger.LeasedDelivery) []ledger.DeliveryID {
	var out []ledger.DeliveryID
	for _, l := range ls {
		out = append(out, l.Delivery.ID)
	}
	return out
}

// TestStoreMatchesModel drives random operations of every kind and checks
// after each one that the indexes agree with the records, and that Lease,
// Expire, ExpireCeremony and Supersede chose exactly the records a brute
// force scan with the root functions chooses, in the same order.
func TestStoreMatchesModel(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 40; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			runModel(t, seed)
		})
	}
}

func runModel(t *testing.T, seed uint64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 42))
	s := New(WithDefaultPolicy(ledger.Policy{MaxAttempts: 3, BackoffBase: time.Millisecond, BackoffMax: 8 * time.Millisecond, AckWindow: 30 * time.Millisecond}))
	targets := []ledger.Target{"t1", "t2", "t3", "t4"}
	ceremonies := []ledger.CeremonyID{"", "c1", "c2"}
	now := t0
	next := 0
	enqueue := func() {
		next++
		req := ledger.EnqueueRequest{
			ID:          ledger.DeliveryID(fmt.Sprintf("d%03d", rng.IntN(1000))),
			Target:      targets[rng.IntN(len(targets))],
			Ceremony:    ceremonies[rng.IntN(len(ceremonies))],
			Payload:     []byte{byte(next)},
			Policy:      ledger.Policy{MaxAttempts: rng.IntN(4)},
			AvailableAt: now.Add(time.Duration(rng.IntN(40)) * time.Millisecond),
		}
		_, err := s.Enqueue(ctx, req, now)
		require.NoError(t, err)
	}
	for range 40 {
		enqueue()
	}
	var held []ledger.Lease
	var acked []ledger.Lease
	incarnation := map[string]string{"a1": "i1", "a2": "i1", "a3": "i1"}
	pickLease := func(ls *[]ledger.Lease) (ledger.Lease, bool) {
		if len(*ls) == 0 {
			return ledger.Lease{}, false
		}
		i := rng.IntN(len(*ls))
		l := (*ls)[i]
		*ls = slices.Delete(*ls, i, i+1)
		return l, true
	}
	for step := range 400 {
		now = now.Add(time.Duration(rng.IntN(6)) * time.Millisecond)
		before := snapshot(s)
		switch op := rng.IntN(14); op {
		case 0, 1, 2, 3:
			var f ledger.LeaseFilter
			switch rng.IntN(5) {
			case 1:
				f.Targets = []ledger.Target{targets[rng.IntN(4)]}
			case 2:
				f.Targets = []ledger.Target{targets[rng.IntN(4)], targets[rng.IntN(4)], "absent"}
			case 3:
				f.Ceremony = ceremonies[1+rng.IntN(2)]
			case 4:
				f.Ceremony = ceremonies[1+rng.IntN(2)]
				f.Targets = []ledger.Target{targets[rng.IntN(4)], targets[rng.IntN(4)]}
			}
			agent := fmt.Sprint("a", 1+rng.IntN(3))
			if rng.IntN(10) == 0 {
				incarnation[agent] += "+"
			}
			owner := ledger.Owner{Agent: agent, Incarnation: incarnation[agent]}
			limit := 1 + rng.IntN(5)
			wantLeased, wantReclaimed := modelLease(before, f, owner, now, limit)
			res, err := s.Lease(ctx, f, owner, now, time.Duration(1+rng.IntN(20))*time.Millisecond, limit)
			require.NoError(t, err)
			require.Equal(t, wantReclaimed, res.Reclaimed, "step %d reclaimed", step)
			require.Equal(t, wantLeased, idsOf(res.Leased), "step %d leased with %+v", step, f)
			for _, l := range res.Leased {
				held = append(held, l.Lease)
			}
		case 4:
			if l, ok := pickLease(&held); ok {
				r, err := s.Acknowledge(ctx, l, "seen", now)
				require.NoError(t, err)
				if r.Applied() {
					acked = append(acked, l)
				}
			}
		case 5:
			if l, ok := pickLease(&acked); ok {
				_, err := s.MarkProcessed(ctx, l.DeliveryID, l.Owner, ledger.FenceOf(int64(rng.IntN(5))), "done", now)
				require.NoError(t, err)
			}
		case 6:
			if l, ok := pickLease(&held); ok {
				_, err := s.MarkFailed(ctx, l, ledger.FailureReason{Message: "x", Permanent: rng.IntN(4) == 0}, now)
				require.NoError(t, err)
			}
		case 7:
			if l, ok := pickLease(&held); ok {
				_, err := s.Release(ctx, l, now)
				require.NoError(t, err)
			}
		case 8:
			var want []ledger.DeliveryID
			for _, d := range before {
				if storekit.Delivery(d).Expirable(now) {
					want = append(want, d.ID)
				}
			}
			res, err := s.Expire(ctx, now)
			require.NoError(t, err)
			require.Equal(t, want, res.Changed, "step %d expire", step)
		case 9:
			c := ceremonies[1+rng.IntN(2)]
			var want []ledger.DeliveryID
			for _, d := range before {
				if d.Ceremony == c && !d.State.Terminal() {
					want = append(want, d.ID)
				}
			}
			res, err := s.ExpireCeremony(ctx, c, ledger.Cause{Kind: ledger.CauseCeremonyEnded}, now)
			require.NoError(t, err)
			require.Equal(t, want, res.Changed, "step %d expire ceremony", step)
		case 10:
			prev, repl := targets[rng.IntN(4)], targets[rng.IntN(4)]
			if prev == repl {
				continue
			}
			mode := []ledger.FollowMode{ledger.Follow, ledger.LeaveBehind}[rng.IntN(2)]
			var want []ledger.DeliveryID
			for _, d := range before {
				if d.Target == prev && storekit.Delivery(d).Supersedable() {
					want = append(want, d.ID)
				}
			}
			res, err := s.Supersede(ctx, prev, repl, mode, now)
			require.NoError(t, err)
			got := res.Moved
			if mode == ledger.LeaveBehind {
				got = res.Ended
			}
			require.Equal(t, want, got, "step %d supersede", step)
		case 11:
			if len(before) > 0 {
				_, err := s.Abandon(ctx, before[rng.IntN(len(before))].ID, ledger.Cause{Kind: ledger.CauseQueueBounded}, now)
				require.NoError(t, err)
			}
		case 12:
			if len(before) > 0 {
				_, err := s.RecordActivation(ctx, before[rng.IntN(len(before))].ID, ledger.Activation{Result: ledger.ActivationDelivered}, now)
				require.NoError(t, err)
			}
		default:
			enqueue()
		}
		require.NoError(t, checkStore(s), "step %d", step)
		if step%25 == 0 {
			requireStats(t, s, targets, ceremonies, now.Add(-5*time.Millisecond), now, now.Add(20*time.Millisecond))
		}
	}
}
