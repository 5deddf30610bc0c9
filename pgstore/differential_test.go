package pgstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/memstore"
	"github.com/leaseledger/ledger/pgstore"
)

// side is one store of the differential test, with the leases and claims
// it handed out (tokens differ between the stores).
type side struct {
	l      ledger.Ledger
	b      ledger.BatchEnqueuer
	o      ledger.ClaimStore
	ob     ledger.OutboxBatchEnqueuer
	leases map[ledger.DeliveryID]ledger.Lease
	claims map[ledger.OutboxEntryID]ledger.Claim
}

// TestSameRecordsAsMemstore runs one script of calls against memstore and
// pgstore and requires equal answers, records included, at every step:
// only the random tokens are masked. At the end it compares every
// record's history and the stats.
func TestSameRecordsAsMemstore(t *testing.T) {
	ctx := testContext(t)
	clock := t0
	clk := func() time.Time { return clock }
	pg, _ := newStore(t, pgstore.WithClock(clk))
	mem := memstore.New(memstore.WithClock(clk))
	sides := []*side{
		{l: mem, b: mem, o: mem.Outbox(), ob: mem.Outbox()},
		{l: pg, b: pg, o: pg.Outbox(), ob: pg.Outbox()},
	}
	for _, s := range sides {
		s.leases = map[ledger.DeliveryID]ledger.Lease{}
		s.claims = map[ledger.OutboxEntryID]ledger.Claim{}
	}
	step := func(name string, f func(s *side) (any, error)) {
		t.Helper()
		var got [2]any
		for i, s := range sides {
			r, err := f(s)
			require.NoError(t, err, "%s (side %d)", name, i)
			got[i] = mask(r)
		}
		require.Equal(t, got[0], got[1], name)
	}
	remember := func(s *side, lr ledger.LeaseResult) ledger.LeaseResult {
		for _, ld := range lr.Leased {
			s.leases[ld.Delivery.ID] = ld.Lease
		}
		return lr
	}
	lease := func(filter ledger.LeaseFilter, owner ledger.Owner, now time.Time, limit int) func(s *side) (any, error) {
		return func(s *side) (any, error) {
			lr, err := s.l.Lease(ctx, filter, owner, now, time.Minute, limit)
			return remember(s, lr), err
		}
	}
	a1 := ledger.Owner{Agent: "agent-a", Incarnation: "boot-1"}
	a2 := ledger.Owner{Agent: "agent-a", Incarnation: "boot-2"}
	b1 := ledger.Owner{Agent: "agent-b", Incarnation: "boot-1"}
	policy := ledger.Policy{MaxAttempts: 2, BackoffBase: 1500 * time.Microsecond, AckWindow: 90 * time.Second}

	step("enqueue batch", func(s *side) (any, error) {
		return s.b.EnqueueBatch(ctx, []ledger.EnqueueRequest{
			{ID: "a", Target: "h1", Ceremony: "c1", Payload: []byte("pa")},
			{ID: "b", Target: "h1", Policy: policy},
			{ID: "c", Target: "h2", Ceremony: "c1", Payload: []byte{}},
			{ID: "d", Target: "h1", Policy: ledger.Policy{MaxAttempts: 1}},
			{ID: "e", Target: "h2", AvailableAt: t0.Add(time.Hour)},
			{ID: "a", Target: "h1", Ceremony: "c1", Payload: []byte("pa")},
			{ID: "a", Target: "h1", Payload: []byte("other")},
			{ID: "f", Target: "h3", Ceremony: "c2"},
			{ID: "g", Target: "h3"},
		}, t0.Add(123456789*time.Nanosecond))
	})
	step("enqueue again", func(s *side) (any, error) {
		return s.l.Enqueue(ctx, ledger.EnqueueRequest{ID: "b", Target: "h1", Policy: policy}, t0.Add(time.Second))
	})
	step("lease h1 by a1", lease(ledger.LeaseFilter{Targets: []ledger.Target{"h1"}}, a1, t0.Add(time.Second), 2))
	step("lease c1 by b1", lease(ledger.LeaseFilter{Ceremony: "c1"}, b1, t0.Add(2*time.Second), 5))
	step("lease all by a2 (reclaims a1)", lease(ledger.LeaseFilter{}, a2, t0.Add(3*time.Second), 3))
	step("stale acknowledge by a1", func(s *side) (any, error) {
		l := s.leases["a"]
		l.Token = "stale"
		return s.l.Acknowledge(ctx, l, "late", t0.Add(4*time.Second))
	})
	for _, id := range []ledger.DeliveryID{"a", "b", "c", "d", "f", "g"} {
		step("acknowledge "+string(id), func(s *side) (any, error) {
			return s.l.Acknowledge(ctx, s.leases[id], "got "+string(id), t0.Add(4*time.Second))
		})
	}
	step("activation", func(s *side) (any, error) {
		return s.l.RecordActivation(ctx, "e", ledger.Activation{Result: ledger.ActivationUnreachable, Detail: "asleep"}, t0.Add(5*time.Second))
	})
	step("processed with fence", func(s *side) (any, error) {
		return s.l.MarkProcessed(ctx, "b", s.leases["b"].Owner, ledger.FenceOf(10), "act-b", t0.Add(6*time.Second))
	})
	step("lower fence rejected", func(s *side) (any, error) {
		return s.l.MarkProcessed(ctx, "d", s.leases["d"].Owner, ledger.FenceOf(9), "act-d", t0.Add(6*time.Second))
	})
	step("processed without fence", func(s *side) (any, error) {
		return s.l.MarkProcessed(ctx, "d", s.leases["d"].Owner, nil, "act-d", t0.Add(6*time.Second))
	})
	step("processed repeated", func(s *side) (any, error) {
		return s.l.MarkProcessed(ctx, "d", s.leases["d"].Owner, nil, "act-d", t0.Add(7*time.Second))
	})
	step("abandon", func(s *side) (any, error) {
		return s.l.Abandon(ctx, "g", ledger.Cause{Kind: ledger.CauseQueueBounded, Detail: "full"}, t0.Add(8*time.Second))
	})
	step("expire acknowledgements", func(s *side) (any, error) { return s.l.Expire(ctx, t0.Add(10*time.Minute)) })
	step("enqueue more", func(s *side) (any, error) {
		return s.b.EnqueueBatch(ctx, []ledger.EnqueueRequest{
			{ID: "h", Target: "h4", Ceremony: "c3", Policy: policy},
			{ID: "i", Target: "h4", Ceremony: "c3"},
			{ID: "j", Target: "h4"},
			{ID: "k", Target: "h5", Ceremony: "c3"},
		}, t0.Add(11*time.Minute))
	})
	step("lease h4", lease(ledger.LeaseFilter{Targets: []ledger.Target{"h4", "h5"}}, b1, t0.Add(11*time.Minute), 10))
	step("mark failed h", func(s *side) (any, error) {
		return s.l.MarkFailed(ctx, s.leases["h"], ledger.FailureReason{Message: "boom"}, t0.Add(11*time.Minute+time.Second))
	})
	step("mark failed repeated", func(s *side) (any, error) {
		return s.l.MarkFailed(ctx, s.leases["h"], ledger.FailureReason{Message: "boom"}, t0.Add(11*time.Minute+2*time.Second))
	})
	step("release i", func(s *side) (any, error) {
		return s.l.Release(ctx, s.leases["i"], t0.Add(11*time.Minute+time.Second))
	})
	step("supersede follow", func(s *side) (any, error) {
		return s.l.Supersede(ctx, "h4", "h6", ledger.Follow, t0.Add(12*time.Minute))
	})
	step("take over an expired lease", lease(ledger.LeaseFilter{Targets: []ledger.Target{"h5"}}, a1, t0.Add(15*time.Minute), 10))
	step("expire leases", func(s *side) (any, error) { return s.l.Expire(ctx, t0.Add(20*time.Minute)) })
	step("supersede leave behind", func(s *side) (any, error) {
		return s.l.Supersede(ctx, "h6", "h7", ledger.LeaveBehind, t0.Add(21*time.Minute))
	})
	step("expire ceremony", func(s *side) (any, error) {
		return s.l.ExpireCeremony(ctx, "c3", ledger.Cause{Kind: ledger.CauseCeremonyEnded}, t0.Add(22*time.Minute))
	})
	for _, q := range []ledger.ListQuery{
		{Limit: 3},
		{Limit: 2, States: []ledger.DeliveryState{ledger.DeliveryStateExpired, ledger.DeliveryStateOffered}},
		{Limit: 5, Targets: []ledger.Target{"h1", "h2"}},
		{Limit: 5, Ceremony: "c1"},
	} {
		step("list", func(s *side) (any, error) {
			q := q // each side pages from the start
			var all []ledger.Page
			for {
				p, err := s.l.List(ctx, q)
				if err != nil {
					return nil, err
				}
				all = append(all, p)
				if p.Next == "" {
					return all, nil
				}
				q.Cursor = p.Next
			}
		})
	}

	// The outbox.
	rememberClaims := func(s *side, cs []ledger.ClaimedEntry) []ledger.ClaimedEntry {
		for _, c := range cs {
			s.claims[c.Entry.ID] = c.Claim
		}
		return cs
	}
	env := func(key string) ledger.Envelope {
		return ledger.Envelope{Provider: "mail", Kind: "notice", Payload: []byte(key), IdempotencyKey: key}
	}
	id := func(key string) ledger.OutboxEntryID { return ledger.OutboxEntryIDFor(key) }
	clock = t0.Add(time.Second)
	step("outbox enqueue batch", func(s *side) (any, error) {
		return s.ob.EnqueueBatch(ctx, []ledger.Envelope{env("k1"), env("k2"), env("k3"), env("k1"), {Provider: "x", Kind: "y", IdempotencyKey: "k2"}})
	})
	clock = t0.Add(2 * time.Second)
	step("outbox enqueue", func(s *side) (any, error) { return s.o.Enqueue(ctx, env("k4")) })
	step("find pending", func(s *side) (any, error) { return s.o.FindPending(ctx, 10) })
	step("claim pending", func(s *side) (any, error) {
		cs, err := s.o.ClaimPending(ctx, ledger.ClaimRequest{Worker: "w1", Now: t0.Add(time.Minute), LeaseDuration: time.Minute, Limit: 3})
		return rememberClaims(s, cs), err
	})
	clock = t0.Add(3 * time.Second)
	retryAt := t0.Add(5 * time.Minute)
	step("claim failed", func(s *side) (any, error) {
		return s.o.MarkClaimFailed(ctx, s.claims[id("k1")], ledger.EmissionError{Code: "503", Message: "later"}, &retryAt)
	})
	step("claim failed repeated", func(s *side) (any, error) {
		return s.o.MarkClaimFailed(ctx, s.claims[id("k1")], ledger.EmissionError{Code: "503", Message: "later"}, &retryAt)
	})
	step("claim delivered", func(s *side) (any, error) {
		return s.o.MarkClaimDelivered(ctx, s.claims[id("k2")], ledger.EmissionResult{ProviderRef: "ref-2"})
	})
	step("release claim", func(s *side) (any, error) { return s.o.ReleaseClaim(ctx, s.claims[id("k3")], "shutting down") })
	step("find retry ready", func(s *side) (any, error) { return s.o.FindRetryReady(ctx, retryAt, 10) })
	step("claim retry ready", func(s *side) (any, error) {
		cs, err := s.o.ClaimRetryReady(ctx, ledger.ClaimRequest{Worker: "w2", Now: retryAt, LeaseDuration: time.Minute, Limit: 3})
		return rememberClaims(s, cs), err
	})
	step("save claim deferred", func(s *side) (any, error) {
		e, err := s.o.FindByID(ctx, id("k1"))
		if err != nil {
			return nil, err
		}
		e.Status = ledger.OutboxStatusDeferred
		e.NextAttemptAt = t0.Add(time.Hour + 1234*time.Nanosecond)
		return s.o.SaveClaim(ctx, s.claims[id("k1")], e)
	})
	clock = t0.Add(4 * time.Second)
	step("base mark failed", func(s *side) (any, error) {
		return s.o.MarkFailed(ctx, id("k3"), ledger.EmissionError{Message: "no"}, nil)
	})
	step("base mark delivered repeated", func(s *side) (any, error) {
		return s.o.MarkDelivered(ctx, id("k2"), ledger.EmissionResult{})
	})
	step("save", func(s *side) (any, error) {
		e, err := s.o.FindByID(ctx, id("k4"))
		if err != nil {
			return nil, err
		}
		e.Attempts = 3
		e.LastError = &ledger.EmissionError{}
		return s.o.Save(ctx, e)
	})
	step("dead letter", func(s *side) (any, error) {
		return s.o.MarkDeadLettered(ctx, id("k4"), ledger.EmissionError{Code: "400"}, "bad address")
	})
	for _, key := range []string{"k1", "k2", "k3", "k4"} {
		step("find "+key, func(s *side) (any, error) { return s.o.FindByID(ctx, id(key)) })
	}

	// Every record's history, and the stats, after all of the above.
	for _, d := range []ledger.DeliveryID{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "unknown"} {
		step("history "+string(d), func(s *side) (any, error) {
			ts, err := s.l.(ledger.Historian).History(ctx, d)
			return []any{ts, errClass(err)}, nil
		})
	}
	for _, key := range []string{"k1", "k2", "k3", "k4", "unknown"} {
		step("entry history "+key, func(s *side) (any, error) {
			ts, err := s.o.(ledger.OutboxHistorian).EntryHistory(ctx, id(key))
			return []any{ts, errClass(err)}, nil
		})
	}
	for _, f := range []ledger.StatsFilter{{}, {Target: "h1"}, {Target: "h7"}, {Ceremony: "c3"}, {Target: "h2", Ceremony: "c1"}} {
		for _, now := range []time.Time{t0, t0.Add(22 * time.Minute), t0.Add(time.Hour)} {
			step(fmt.Sprintf("stats %+v", f), func(s *side) (any, error) { return s.l.(ledger.StatsReporter).Stats(ctx, f, now) })
		}
	}
	for _, now := range []time.Time{t0, retryAt, t0.Add(2 * time.Hour)} {
		step("outbox stats", func(s *side) (any, error) { return s.o.(ledger.OutboxStatsReporter).OutboxStats(ctx, now) })
	}
}
