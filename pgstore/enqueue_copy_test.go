package pgstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/internal/pgtest"
	"github.com/leaseledger/ledger/pgstore"
)

// deadlockStore returns a migrated store in a fresh schema on a pool of
// its own, whose connections find deadlocks after 20ms instead of the
// server's second, with the pool, the schema and a context for the test.
func deadlockStore(t *testing.T, opts ...pgstore.Option) (*pgstore.Store, *pgxpool.Pool, string, context.Context) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.DSN(t))
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["deadlock_timeout"] = "20ms"
	cfg.MaxConns = 12
	ctx := testContext(t)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	schema := pgtest.Schema(t, pool)
	s, err := pgstore.New(pool, append([]pgstore.Option{pgstore.WithSchema(schema)}, opts...)...)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	return s, pool, schema, ctx
}

// TestEnqueueBatchCopiesRaceForKeys: large batches (copied in one trip,
// the outbox's in envelope order) that share new keys, each in an order
// of its own, run at once. Two such copies can deadlock; the server ends
// one, and that call takes the careful path. Whatever happened, every key
// names one entry, exactly one call answers it Applied and the others
// Repeated, and each answer carries the stored entry. The server's
// deadlock_timeout is short here (deadlockStore).
func TestEnqueueBatchCopiesRaceForKeys(t *testing.T) {
	s, pool, schema, ctx := deadlockStore(t, pgstore.WithNotify(true))
	o := s.Outbox()

	const keys, callers, size, rounds = 800, 8, 600, 3
	applied := make(map[string]int)
	var mu sync.Mutex
	for round := range rounds {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for c := range callers {
			rng := rand.New(rand.NewPCG(uint64(round), uint64(c)))
			envs := make([]ledger.Envelope, size)
			for i, k := range rng.Perm(keys)[:size] {
				envs[i] = ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: fmt.Sprintf("r%d-k%d", round, k)}
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				rs, err := o.EnqueueBatch(ctx, envs)
				if !assertNoError(t, err) {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				for i, r := range rs {
					key := envs[i].IdempotencyKey
					switch r.Outcome {
					case ledger.OutcomeApplied:
						applied[key]++
					case ledger.OutcomeRepeated:
						applied[key] += 0 // seen, perhaps applied by another call
					default:
						t.Errorf("enqueue %s: outcome %s", key, r.Outcome)
					}
					if r.Entry.ID != ledger.OutboxEntryIDFor(key) || r.Entry.Envelope.IdempotencyKey != key {
						t.Errorf("enqueue %s answered with entry %s (key %s)", key, r.Entry.ID, r.Entry.Envelope.IdempotencyKey)
					}
				}
			}()
		}
		close(start)
		wg.Wait()
	}
	for key, n := range applied {
		require.Equal(t, 1, n, "calls that applied key %s", key)
		e, err := o.FindByID(ctx, ledger.OutboxEntryIDFor(key))
		require.NoError(t, err)
		require.Equal(t, ledger.OutboxStatusPending, e.Status, key)
	}
	var stored int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "outbox_entries"}.Sanitize()).Scan(&stored))
	require.Equal(t, len(applied), stored, "entries stored")
}

// assertNoError reports err as a test error (from any goroutine) and
// whether there was none.
func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

// TestEnqueueBatchCopyDeadlock makes a large batch's copy deadlock with
// another enqueue, for certain: a transaction holds key "b" (enqueued and
// not committed), the batch copies "a" first and waits for "b", and the
// transaction then enqueues "a". The server ends one of the two. Either
// the transaction fails with the deadlock, and the batch applies every
// key once it is rolled back; or the batch's copy was ended, the call
// took the careful path, and it answers "a" and "b" Repeated, the keys
// the transaction committed. Every key is stored once either way.
func TestEnqueueBatchCopyDeadlock(t *testing.T) {
	s, pool, schema, ctx := deadlockStore(t)
	env := func(key string) ledger.Envelope {
		return ledger.Envelope{Provider: "p", Kind: "k", IdempotencyKey: key}
	}

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var holder int
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_catalog.pg_backend_pid()").Scan(&holder))
	_, err = s.Outbox().WithTx(tx).Enqueue(ctx, env("b"))
	require.NoError(t, err)

	envs := []ledger.Envelope{env("a")}
	for i := range 150 {
		envs = append(envs, env(fmt.Sprintf("k%d", i)))
	}
	envs = append(envs, env("b"))
	type answer struct {
		rs  []ledger.OutboxResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		rs, err := s.Outbox().EnqueueBatch(ctx, envs)
		done <- answer{rs, err}
	}()
	// The batch waits for the transaction's lock on "b".
	for {
		var waiting bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_catalog.pg_stat_activity
			WHERE $1::int = ANY (pg_catalog.pg_blocking_pids(pid)))`, holder).Scan(&waiting))
		if waiting {
			break
		}
		require.NoError(t, ctx.Err())
	}
	_, txErr := s.Outbox().WithTx(tx).Enqueue(ctx, env("a"))
	if txErr != nil {
		require.ErrorContains(t, txErr, "deadlock", "the transaction was ended")
		require.NoError(t, tx.Rollback(ctx))
	} else {
		require.NoError(t, tx.Commit(ctx))
	}
	got := <-done
	require.NoError(t, got.err)
	require.Len(t, got.rs, len(envs))
	for i, r := range got.rs {
		want := ledger.OutcomeApplied
		if txErr == nil && (envs[i].IdempotencyKey == "a" || envs[i].IdempotencyKey == "b") {
			want = ledger.OutcomeRepeated
		}
		require.Equal(t, want, r.Outcome, "enqueue %s", envs[i].IdempotencyKey)
		require.Equal(t, ledger.OutboxEntryIDFor(envs[i].IdempotencyKey), r.Entry.ID)
	}
	var stored int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "outbox_entries"}.Sanitize()).Scan(&stored))
	require.Equal(t, len(envs), stored)
}
