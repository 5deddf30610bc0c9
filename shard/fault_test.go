package shard_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/dispatch"
	"github.com/leaseledger/ledger/internal/pgcluster"
	"github.com/leaseledger/ledger/ledgertest"
	"github.com/leaseledger/ledger/pgstore"
	"github.com/leaseledger/ledger/shard"
)

// TestWorkersDrainThroughAShardThatGoesDown drains a ledger spread over
// three PostgreSQL servers with two dispatch Workers, stops one server in
// the middle (an immediate shutdown) and starts it again. While it is
// down the Workers keep processing the other shards' work; once it is back
// they pick its work up again with no restart. At the end every delivery
// is processed, none twice under one grant, and every record is
// consistent.
func TestWorkersDrainThroughAShardThatGoesDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL server of its own")
	}
	urls := serverURLs(t)
	// The server that goes down commits synchronously, so that what it
	// acknowledged survives the immediate shutdown.
	victim, err := startCluster(pgcluster.Options{Settings: map[string]string{"synchronous_commit": "on"}})
	require.NoError(t, err)
	// The test's clock is years from the servers': not a skew to warn of.
	quiet := pgstore.WithoutSkewCheck()
	stores := []*pgstore.Store{pgStore(t, urls[0], quiet), pgStore(t, victim.DSN(), quiet), pgStore(t, urls[1], quiet)}

	targets := []ledger.Target{"t0-a", "t0-b", "t1-a", "t1-b", "t2-a", "t2-b"}
	var reports sync.Map // shard -> *atomic.Int64, failures reported
	l, err := shard.New([]ledger.Ledger{stores[0], stores[1], stores[2]}, shard.WithPlacement(placed),
		shard.WithErrorFunc(func(e *shard.ShardError) {
			n, _ := reports.LoadOrStore(e.Shard, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
		}))
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var (
		mu    sync.Mutex
		clock = t0
	)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }

	const perTarget = 30
	var all []ledger.DeliveryID
	for _, target := range targets {
		for i := range perTarget {
			id := ledger.DeliveryID(fmt.Sprintf("%s-%03d", target, i))
			all = append(all, id)
			res, err := l.Enqueue(ctx, ledger.EnqueueRequest{ID: id, Target: target, Payload: []byte(id),
				Policy: ledger.Policy{MaxAttempts: 50}}, now())
			require.NoError(t, err)
			require.Equal(t, ledger.OutcomeApplied, res.Outcome)
		}
	}

	type grant struct {
		id  ledger.DeliveryID
		seq int64
	}
	var (
		handledMu sync.Mutex
		handled   = map[grant]int{}
	)
	handler := dispatch.HandlerFunc(func(ctx context.Context, d ledger.Delivery) (dispatch.Decision, error) {
		handledMu.Lock()
		handled[grant{d.ID, d.LeaseSeq}]++
		handledMu.Unlock()
		return dispatch.Processed("done"), nil
	})
	const leaseFor = time.Minute
	var workers []*dispatch.Worker
	for _, agent := range []string{"agent-1", "agent-2"} {
		w, err := dispatch.NewWorker(l, agent, targets, handler, dispatch.WithClock(now),
			dispatch.WithLogger(slog.New(slog.DiscardHandler)), dispatch.WithoutSweeper(),
			dispatch.WithLeaseDuration(leaseFor), dispatch.WithBatchSize(6))
		require.NoError(t, err)
		workers = append(workers, w)
	}
	// cycle runs every Worker once, concurrently, and returns what they
	// processed.
	cycle := func() (processed, storeErrors int) {
		var wg sync.WaitGroup
		var cmu sync.Mutex
		for _, w := range workers {
			wg.Go(func() {
				st, _ := w.RunOnce(ctx)
				cmu.Lock()
				processed += st.Processed
				storeErrors += st.StoreErrors
				cmu.Unlock()
			})
		}
		wg.Wait()
		advance(time.Second)
		return processed, storeErrors
	}

	// Drain a third, then take shard 1's server down.
	done := 0
	for done < len(all)/3 {
		n, _ := cycle()
		done += n
	}
	require.NoError(t, victim.Crash())
	downDone, downErrors := 0, 0
	for range 10 {
		n, e := cycle()
		downDone, downErrors = downDone+n, downErrors+e
	}
	require.Positive(t, downDone, "the other shards' work goes on while one is down")
	_, reported := reports.Load(1)
	require.True(t, reported || downErrors > 0, "the down shard's failures are seen")

	restart, stop := context.WithTimeout(ctx, time.Minute)
	require.NoError(t, victim.Restart(restart))
	stop()
	// Leases granted before the crash, whose completions failed, run
	// out; the same Workers, never restarted, take the work up again.
	advance(leaseFor)
	for range 200 {
		if remaining(t, ctx, l) == 0 {
			break
		}
		cycle()
	}
	require.Zero(t, remaining(t, ctx, l), "every delivery is processed once the shard is back")

	var records []ledger.Delivery
	for _, id := range all {
		d, err := l.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, ledger.DeliveryStateProcessed, d.State, id)
		records = append(records, d)
	}
	require.NoError(t, ledgertest.CheckRecords(records))
	handledMu.Lock()
	defer handledMu.Unlock()
	for g, n := range handled {
		require.Equal(t, 1, n, "delivery %s was handed out twice under grant %d", g.id, g.seq)
	}
}

// remaining counts the deliveries not yet processed.
func remaining(t *testing.T, ctx context.Context, l *shard.Ledger) int {
	t.Helper()
	stats, err := l.Stats(ctx, ledger.StatsFilter{}, t0)
	if err != nil {
		return -1
	}
	n := 0
	for s, c := range stats.ByState {
		if s != ledger.DeliveryStateProcessed {
			n += int(c)
		}
	}
	return n
}
