package pgstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/memstore"
	"github.com/leaseledger/ledger/pgstore"
)

// TestSameRedrivesAndBoundsAsMemstore runs one script of redrives and
// bounded enqueues against memstore and pgstore, configured alike, and
// requires equal answers at every step, as TestSameRecordsAsMemstore does
// for the other calls: redrive by ID and by filter, its repeats and
// refusals, queue bounds abandoning at enqueue, at batch enqueue and at
// redrive, and then every record's history and the stats.
func TestSameRedrivesAndBoundsAsMemstore(t *testing.T) {
	ctx := testContext(t)
	clock := t0
	clk := func() time.Time { return clock }
	pg, _ := newStore(t, pgstore.WithClock(clk), pgstore.WithTargetQueueBound("hb", 2))
	mem := memstore.New(memstore.WithClock(clk), memstore.WithTargetQueueBound("hb", 2))
	sides := []*side{
		{l: mem, b: mem, o: mem.Outbox(), ob: mem.Outbox()},
		{l: pg, b: pg, o: pg.Outbox(), ob: pg.Outbox()},
	}
	for _, s := range sides {
		s.leases = map[ledger.DeliveryID]ledger.Lease{}
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
	redriver := func(s *side) ledger.Redriver { return s.l.(ledger.Redriver) }
	redrive := func(id, newID ledger.DeliveryID, now time.Time) func(s *side) (any, error) {
		return func(s *side) (any, error) {
			return redriver(s).Redrive(ctx, ledger.RedriveRequest{ID: id, NewID: newID}, now)
		}
	}
	at := func(d time.Duration) time.Time { return t0.Add(d + 123*time.Nanosecond) }
	once := ledger.Policy{MaxAttempts: 1}

	step("enqueue batch over the bound", func(s *side) (any, error) {
		return s.b.EnqueueBatch(ctx, []ledger.EnqueueRequest{
			{ID: "a", Target: "h1", Payload: []byte("pa"), Policy: once},
			{ID: "b", Target: "h1", Ceremony: "c1", Policy: once},
			{ID: "c", Target: "hb"}, {ID: "d", Target: "hb"}, {ID: "e", Target: "hb"},
		}, at(0))
	})
	step("enqueue over the bound", func(s *side) (any, error) {
		return s.l.Enqueue(ctx, ledger.EnqueueRequest{ID: "f", Target: "hb"}, at(time.Second))
	})
	step("lease h1", func(s *side) (any, error) {
		lr, err := s.l.Lease(ctx, ledger.LeaseFilter{Targets: []ledger.Target{"h1"}}, ledger.Owner{Agent: "a", Incarnation: "1"}, at(2*time.Second), time.Minute, 10)
		for _, ld := range lr.Leased {
			s.leases[ld.Delivery.ID] = ld.Lease
		}
		return lr, err
	})
	step("fail a", func(s *side) (any, error) {
		return s.l.MarkFailed(ctx, s.leases["a"], ledger.FailureReason{Message: "gone", Permanent: true}, at(3*time.Second))
	})
	step("expire b", func(s *side) (any, error) { return s.l.Expire(ctx, at(time.Hour)) })
	step("abandon e", func(s *side) (any, error) {
		return s.l.Abandon(ctx, "e", ledger.Cause{Kind: "operator", Detail: "stop"}, at(time.Hour))
	})
	step("redrive a", redrive("a", "", at(2*time.Hour)))
	step("redrive a again", redrive("a", "", at(3*time.Hour)))
	step("redrive a as another", redrive("a", "a-other", at(3*time.Hour)))
	step("redrive e into the bounded queue", redrive("e", "", at(3*time.Hour)))
	step("redrive c over the bound", redrive("c", "c-again", at(4*time.Hour)))
	step("redrive open", redrive("f", "", at(4*time.Hour)))
	step("redrive unknown", redrive("unknown", "", at(4*time.Hour)))
	step("redrive matching, first batch", func(s *side) (any, error) {
		return redriver(s).RedriveMatching(ctx, ledger.RedriveQuery{Limit: 2}, at(5*time.Hour))
	})
	step("redrive matching, the rest", func(s *side) (any, error) {
		var all []ledger.RedriveBatch
		// A pass pages with the time it started as its cutoff, so that it
		// never chases what its own redrives end.
		q := ledger.RedriveQuery{Limit: 2, EndedBefore: at(6 * time.Hour)}
		for i := 0; ; i++ {
			b, err := redriver(s).RedriveMatching(ctx, q, at(6*time.Hour+time.Duration(i)*time.Minute))
			if err != nil {
				return nil, err
			}
			all = append(all, mask(b).(ledger.RedriveBatch))
			if b.Next == "" {
				return all, nil
			}
			q.Cursor = b.Next
		}
	})
	step("list", func(s *side) (any, error) {
		p, err := s.l.List(ctx, ledger.ListQuery{Limit: ledger.MaxLimit})
		return []ledger.Page{p}, err
	})

	// The outbox.
	env := func(key string) ledger.Envelope {
		return ledger.Envelope{Provider: "mail", Kind: "notice", Payload: []byte(key), IdempotencyKey: key}
	}
	id := ledger.OutboxEntryIDFor
	clock = t0.Add(time.Second)
	step("outbox enqueue", func(s *side) (any, error) {
		return s.ob.EnqueueBatch(ctx, []ledger.Envelope{env("k1"), env("k2"), env("k3"), env("k4")})
	})
	clock = t0.Add(2 * time.Second)
	step("dead letter k1", func(s *side) (any, error) {
		return s.o.MarkDeadLettered(ctx, id("k1"), ledger.EmissionError{Code: "550"}, "no mailbox")
	})
	step("fail k2", func(s *side) (any, error) {
		return s.o.MarkFailed(ctx, id("k2"), ledger.EmissionError{Message: "x"}, nil)
	})
	step("deliver k3", func(s *side) (any, error) { return s.o.MarkDelivered(ctx, id("k3"), ledger.EmissionResult{}) })
	clock = t0.Add(3 * time.Second)
	entry := func(entryID ledger.OutboxEntryID, key string) func(s *side) (any, error) {
		return func(s *side) (any, error) {
			return s.o.(ledger.OutboxRedriver).RedriveEntry(ctx, ledger.RedriveEntryRequest{ID: entryID, IdempotencyKey: key})
		}
	}
	step("redrive k1", entry(id("k1"), ""))
	step("redrive k1 again", entry(id("k1"), ""))
	step("redrive k1 as another", entry(id("k1"), "other"))
	step("redrive delivered", entry(id("k3"), ""))
	step("redrive pending", entry(id("k4"), ""))
	step("redrive unknown entry", entry(id("unknown"), ""))
	clock = t0.Add(4 * time.Second)
	step("redrive entries matching", func(s *side) (any, error) {
		return s.o.(ledger.OutboxRedriver).RedriveEntriesMatching(ctx, ledger.RedriveEntryQuery{Limit: 5})
	})

	// Every record's history, and the stats.
	page, err := mem.List(ctx, ledger.ListQuery{Limit: ledger.MaxLimit})
	require.NoError(t, err)
	require.Len(t, page.Deliveries, 14)
	for _, d := range page.Deliveries {
		step("history "+string(d.ID), func(s *side) (any, error) { return s.l.(ledger.Historian).History(ctx, d.ID) })
	}
	for _, key := range []string{"k1", "k1/redrive", "k2", "k2/redrive", "k3", "k4"} {
		step("entry history "+key, func(s *side) (any, error) { return s.o.(ledger.OutboxHistorian).EntryHistory(ctx, id(key)) })
	}
	for _, f := range []ledger.StatsFilter{{}, {Target: "hb"}, {Target: "h1"}} {
		step("stats", func(s *side) (any, error) { return s.l.(ledger.StatsReporter).Stats(ctx, f, at(7*time.Hour)) })
	}
	step("outbox stats", func(s *side) (any, error) { return s.o.(ledger.OutboxStatsReporter).OutboxStats(ctx, at(7*time.Hour)) })
}
