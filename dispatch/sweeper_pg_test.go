package dispatch_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/dispatch"
	"github.com/leaseledger/ledger/internal/pgtest"
	"github.com/leaseledger/ledger/pgstore"
)

// TestPgTwoSweepersOneLeaderAtATime runs two sweepers over one pgstore,
// sweep after sweep, both at the same instant: each sweep is done by
// exactly one of them. Then the leader is killed (it stops without giving
// its lead up): the other takes over once the lead lapses, and every
// acknowledgement that lapsed, before or after the kill, ends as Expired
// by the end: no sweep is lost.
func TestPgTwoSweepersOneLeaderAtATime(t *testing.T) {
	t.Parallel()
	clk := newClock()
	store := newPgStore(t, clk)
	ctx := context.Background()
	sweepers := map[string]*dispatch.Sweeper{}
	for _, name := range []string{"sweeper-a", "sweeper-b"} {
		sweepers[name] = newSweeper(t, store, store.Outbox(),
			append(sweeperOptions(clk, &fakeTimers{}, newCounter(), name), dispatch.WithRetention(time.Hour))...)
	}
	owner := ledger.Owner{Agent: "host", Incarnation: "boot-1"}
	var acked []ledger.DeliveryID
	ackOne := func(tick int) {
		id := ledger.DeliveryID(fmt.Sprintf("d-%03d", tick))
		_, err := store.Enqueue(ctx, ledger.EnqueueRequest{ID: id, Target: "host"}, clk.Now())
		require.NoError(t, err)
		leaseAndAck(t, store, clk, owner, id)
		acked = append(acked, id)
	}
	// sweepBoth runs both sweepers at once and returns who did each job.
	sweepBoth := func(names ...string) map[string]dispatch.SweepStats {
		var mu sync.Mutex
		var wg sync.WaitGroup
		out := map[string]dispatch.SweepStats{}
		errs := map[string]error{}
		for _, name := range names {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := sweepers[name].RunOnce(ctx)
				mu.Lock()
				defer mu.Unlock()
				out[name], errs[name] = st, err
			}()
		}
		wg.Wait()
		for name, err := range errs {
			require.NoError(t, err, name)
		}
		return out
	}

	// Both start at once; which one leads each job is a race, so the
	// first sweep is sweeper-a's alone, to have one leader for all three.
	var leader, follower string
	for tick := range 8 {
		ackOne(tick)
		names := []string{"sweeper-a", "sweeper-b"}
		if tick == 0 {
			names = names[:1]
		}
		got := sweepBoth(names...)
		done := 0
		for name, st := range got {
			done += st.Done
			if st.Done > 0 {
				require.Equal(t, 3, st.Done, "one sweeper does every job (expire and both purges)")
				if leader == "" {
					leader = name
				}
				require.Equal(t, leader, name, "tick %d: the leader keeps its leads", tick)
			}
		}
		require.Equal(t, 3, done, "tick %d: each job done exactly once", tick)
		clk.Advance(dispatch.DefaultSweepInterval)
	}
	for name := range sweepers {
		if name != leader {
			follower = name
		}
	}
	lead, err := store.GetLead(ctx, string(dispatch.SweepExpire))
	require.NoError(t, err)
	require.Equal(t, leader, lead.Holder)
	term := lead.Seq

	// The leader is killed between two sweeps: it never sweeps again and
	// never gives its leads up. Work keeps lapsing. Its leads last three
	// intervals from its last renewal; the follower waits that long, not
	// a sweep more.
	lastRenewal := clk.Now().Add(-dispatch.DefaultSweepInterval)
	takenOver := false
	for tick := 8; tick < 8+3+int(workerPolicy.AckWindow/dispatch.DefaultSweepInterval); tick++ {
		ackOne(tick)
		got := sweepBoth(follower)[follower]
		lapsed := !clk.Now().Before(lastRenewal.Add(3 * dispatch.DefaultSweepInterval))
		if lapsed {
			require.Equal(t, 3, got.Done, "tick %d: the lead lapsed, the follower sweeps", tick)
			takenOver = true
		} else {
			require.Equal(t, 3, got.Skipped, "tick %d: the dead leader's lead still holds", tick)
		}
		clk.Advance(dispatch.DefaultSweepInterval)
	}
	require.True(t, takenOver)
	lead, err = store.GetLead(ctx, string(dispatch.SweepExpire))
	require.NoError(t, err)
	assert.Equal(t, follower, lead.Holder, "the follower took over")
	assert.Equal(t, term+1, lead.Seq, "in a new term")

	// Everything acknowledged more than the window ago has ended.
	sweepBoth(follower)
	for _, id := range acked {
		d, err := store.Get(ctx, id)
		require.NoError(t, err)
		if d.Ack != nil && !clk.Now().Before(d.Ack.Deadline) {
			assert.Equal(t, ledger.DeliveryStateExpired, d.State, "%s lapsed at %s", id, d.Ack.Deadline)
		} else {
			assert.Equal(t, ledger.DeliveryStateAcknowledged, d.State, id)
		}
	}
}

// TestPgWorkerSweepsItsOwnLapsedWork: on PostgreSQL too, a Worker with
// nothing but its handler ends the delivery whose fence was rejected and
// the one whose holder died on its last attempt.
func TestPgWorkerSweepsItsOwnLapsedWork(t *testing.T) {
	t.Parallel()
	clk := newClock()
	workerSweepsItsOwnLapsedWork(t, clk, newPgStore(t, clk))
}

// TestPgLoopsStopOnAnUnmigratedSchema: on a schema that was never
// migrated, Run returns pgstore.ErrNotMigrated at once instead of logging
// "relation does not exist" every poll, and Ready says the same.
func TestPgLoopsStopOnAnUnmigratedSchema(t *testing.T) {
	t.Parallel()
	clk := newClock()
	pool := pgtest.Pool(t)
	store, err := pgstore.New(pool, pgstore.WithSchema(pgtest.Schema(t, pool)), pgstore.WithoutSkewCheck())
	require.NoError(t, err)
	w := newWorker(t, store, "agent", answer(newHandlerCalls(), dispatch.Decision{}, nil), workerOptions(clk, &fakeTimers{}, newCounter())...)
	d, err := dispatch.NewDispatcher(store.Outbox(), dispatch.EmitterFunc(
		func(context.Context, ledger.OutboxEntry) (ledger.EmissionResult, error) {
			return ledger.EmissionResult{}, nil
		}),
		baseOptions(clk, &fakeTimers{}, newCounter())...)
	require.NoError(t, err)
	s := newSweeper(t, store, nil, sweeperOptions(clk, &fakeTimers{}, newCounter(), "sweeper")...)
	for name, loop := range map[string]struct {
		run, ready func(context.Context) error
	}{"worker": {w.Run, w.Ready}, "dispatcher": {d.Run, d.Ready}, "sweeper": {s.Run, s.Ready}} {
		require.ErrorIs(t, loop.ready(ctx(t)), pgstore.ErrNotMigrated, "%s: ready before Run", name)
		done := make(chan error, 1)
		go func() { done <- loop.run(ctx(t)) }()
		err := receive(t, done, name+" Run")
		require.ErrorIs(t, err, pgstore.ErrNotMigrated, name)
		require.ErrorIs(t, loop.ready(ctx(t)), pgstore.ErrNotMigrated, "%s: ready after Run", name)
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), waitLimit)
	t.Cleanup(cancel)
	return c
}

// TestPgReadyTellsADeadDatabaseFromAnIdleQueue: over a migrated pgstore,
// Ready is nil for every loop whether or not there is work; when the
// database cannot be reached (the pool closed under the loops, or a
// server that is not there) it is an error matching ErrNotReady, never
// taken for a missing schema.
func TestPgReadyTellsADeadDatabaseFromAnIdleQueue(t *testing.T) {
	t.Parallel()
	clk := newClock()
	migrated := newPgStore(t, clk)
	loops := func(pool *pgxpool.Pool) map[string]func(context.Context) error {
		store, err := pgstore.New(pool, pgstore.WithSchema(migrated.Schema()), pgstore.WithClock(clk.Now), pgstore.WithoutSkewCheck())
		require.NoError(t, err)
		w := newWorker(t, store, "agent", answer(newHandlerCalls(), dispatch.Decision{}, nil), workerOptions(clk, &fakeTimers{}, newCounter())...)
		d, err := dispatch.NewDispatcher(store.Outbox(), dispatch.EmitterFunc(
			func(context.Context, ledger.OutboxEntry) (ledger.EmissionResult, error) {
				return ledger.EmissionResult{}, nil
			}),
			baseOptions(clk, &fakeTimers{}, newCounter())...)
		require.NoError(t, err)
		s := newSweeper(t, store, nil, sweeperOptions(clk, &fakeTimers{}, newCounter(), "sweeper")...)
		return map[string]func(context.Context) error{"worker": w.Ready, "dispatcher": d.Ready, "sweeper": s.Ready}
	}

	pool := pgtest.Pool(t)
	live := loops(pool)
	for name, ready := range live {
		require.NoError(t, ready(ctx(t)), "%s: an idle queue is ready", name)
	}
	offer(t, migrated, clk, "host", 1)
	enqueue(t, migrated.Outbox(), "e", 1)
	for name, ready := range live {
		require.NoError(t, ready(ctx(t)), "%s: a queue with work is ready", name)
	}

	// The database goes away under the loops.
	pool.Close()
	for name, ready := range live {
		err := ready(ctx(t))
		require.ErrorIs(t, err, dispatch.ErrNotReady, name)
		assert.NotErrorIs(t, err, pgstore.ErrNotMigrated, name)
	}

	// A server that is not there at all: nothing listens on port 1.
	cfg, err := pgxpool.ParseConfig(pgtest.DSN(t))
	require.NoError(t, err)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = "127.0.0.1", 1
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	cfg.ConnConfig.Fallbacks = nil
	gone, err := pgxpool.NewWithConfig(ctx(t), cfg)
	require.NoError(t, err, "a pool connects lazily")
	t.Cleanup(gone.Close)
	for name, ready := range loops(gone) {
		err := ready(ctx(t))
		require.ErrorIs(t, err, dispatch.ErrNotReady, name)
		assert.NotErrorIs(t, err, pgstore.ErrNotMigrated, name)
	}
}
