package pgstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/pgstore"
)

// sentinelPayload marks the notification a test sends after an action
// that must not notify: notifications reach a listener in commit order,
// so if the action had notified, its notification would come first.
const sentinelPayload = "sentinel"

// rawListen returns a connection of its own that listens on name and
// reports every notification with its payload, closed when the test ends.
func rawListen(t *testing.T, pool *pgxpool.Pool, name string) *pgx.Conn {
	t.Helper()
	ctx := testContext(t)
	pc, err := pool.Acquire(ctx)
	require.NoError(t, err)
	conn := pc.Hijack()
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{name}.Sanitize())
	require.NoError(t, err)
	return conn
}

// nextNotification waits, bounded, for conn's next notification.
func nextNotification(t *testing.T, conn *pgx.Conn) *pgconn.Notification {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	n, err := conn.WaitForNotification(ctx)
	require.NoError(t, err)
	return n
}

// requireNoNotification checks that conn has received nothing on name
// before a sentinel sent now.
func requireNoNotification(t *testing.T, pool *pgxpool.Pool, conn *pgx.Conn, name string) {
	t.Helper()
	_, err := pool.Exec(testContext(t), "SELECT pg_notify($1, $2)", name, sentinelPayload)
	require.NoError(t, err)
	n := nextNotification(t, conn)
	assert.Equal(t, name, n.Channel)
	assert.Equal(t, sentinelPayload, n.Payload, "a notification came before the sentinel")
}

// waitLimit bounds every wait for a notification or a goroutine.
const waitLimit = 10 * time.Second

// enqueueOp enqueues one record under key through one of the four enqueue
// methods, and returns the outcome for key.
type enqueueOp struct {
	ch  pgstore.Channel
	run func(ctx context.Context, s *pgstore.Store, key string) (ledger.Outcome, error)
}

var enqueueOps = map[string]enqueueOp{
	"Enqueue": {pgstore.ChannelDeliveries, func(ctx context.Context, s *pgstore.Store, key string) (ledger.Outcome, error) {
		r, err := s.Enqueue(ctx, ledger.EnqueueRequest{ID: ledger.DeliveryID(key), Target: "host"}, t0)
		return r.Outcome, err
	}},
	"EnqueueBatch": {pgstore.ChannelDeliveries, func(ctx context.Context, s *pgstore.Store, key string) (ledger.Outcome, error) {
		rs, err := s.EnqueueBatch(ctx, []ledger.EnqueueRequest{{ID: ledger.DeliveryID(key), Target: "host"}}, t0)
		if err != nil {
			return "", err
		}
		return rs[0].Outcome, nil
	}},
	"OutboxEnqueue": {pgstore.ChannelOutbox, func(ctx context.Context, s *pgstore.Store, key string) (ledger.Outcome, error) {
		r, err := s.Outbox().Enqueue(ctx, notifyEnvelope(key))
		return r.Outcome, err
	}},
	"OutboxEnqueueBatch": {pgstore.ChannelOutbox, func(ctx context.Context, s *pgstore.Store, key string) (ledger.Outcome, error) {
		rs, err := s.Outbox().EnqueueBatch(ctx, []ledger.Envelope{notifyEnvelope(key)})
		if err != nil {
			return "", err
		}
		return rs[0].Outcome, nil
	}},
}

func notifyEnvelope(key string) ledger.Envelope {
	return ledger.Envelope{Provider: "mail", Kind: "welcome", Payload: []byte(key), IdempotencyKey: key}
}

func TestEnqueueNotifiesWhenWorkBecomesVisible(t *testing.T) {
	t.Parallel()
	for name, op := range enqueueOps {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, pool := newStore(t, pgstore.WithNotify(true))
			ctx := testContext(t)
			channel, err := s.ChannelName(op.ch)
			require.NoError(t, err)
			conn := rawListen(t, pool, channel)

			out, err := op.run(ctx, s, "k1")
			require.NoError(t, err)
			require.Equal(t, ledger.OutcomeApplied, out)
			n := nextNotification(t, conn)
			assert.Equal(t, channel, n.Channel)
			assert.Empty(t, n.Payload)

			// Nothing inserted: no notification.
			out, err = op.run(ctx, s, "k1")
			require.NoError(t, err)
			require.Equal(t, ledger.OutcomeRepeated, out)
			requireNoNotification(t, pool, conn, channel)

			// Rolled back with the caller's transaction: no notification.
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			out, err = op.run(ctx, s.WithTx(tx), "k2")
			require.NoError(t, err)
			require.Equal(t, ledger.OutcomeApplied, out)
			require.NoError(t, tx.Rollback(ctx))
			requireNoNotification(t, pool, conn, channel)

			// Committed by the caller: notified on the commit, not before.
			tx, err = pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			out, err = op.run(ctx, s.WithTx(tx), "k3")
			require.NoError(t, err)
			require.Equal(t, ledger.OutcomeApplied, out)
			requireNoNotification(t, pool, conn, channel)
			require.NoError(t, tx.Commit(ctx))
			n = nextNotification(t, conn)
			assert.Equal(t, channel, n.Channel)
			assert.Empty(t, n.Payload)
		})
	}
}

func TestEnqueueDoesNotNotifyByDefault(t *testing.T) {
	t.Parallel()
	for name, op := range enqueueOps {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, pool := newStore(t)
			channel, err := s.ChannelName(op.ch)
			require.NoError(t, err)
			conn := rawListen(t, pool, channel)
			out, err := op.run(testContext(t), s, "k1")
			require.NoError(t, err)
			require.Equal(t, ledger.OutcomeApplied, out)
			requireNoNotification(t, pool, conn, channel)
		})
	}
}

func TestChannelName(t *testing.T) {
	t.Parallel()
	named := func(schema string, ch pgstore.Channel) string {
		t.Helper()
		s, err := pgstore.New(&pgxpool.Pool{}, pgstore.WithSchema(schema))
		require.NoError(t, err)
		name, err := s.ChannelName(ch)
		require.NoError(t, err)
		return name
	}
	assert.Equal(t, "leaseledger_outbox", named(pgstore.DefaultSchema, pgstore.ChannelOutbox))
	assert.Equal(t, "leaseledger_deliveries", named(pgstore.DefaultSchema, pgstore.ChannelDeliveries))

	// A long schema still gives names PostgreSQL keeps whole, distinct
	// for schemas that share the prefix that is kept.
	long1, long2 := strings.Repeat("s", 62)+"1", strings.Repeat("s", 62)+"2"
	for _, ch := range []pgstore.Channel{pgstore.ChannelOutbox, pgstore.ChannelDeliveries} {
		a, b := named(long1, ch), named(long2, ch)
		assert.LessOrEqual(t, len(a), 63)
		assert.LessOrEqual(t, len(b), 63)
		assert.NotEqual(t, a, b)
		assert.Equal(t, a, named(long1, ch), "the name is stable")
	}
	assert.NotEqual(t, named(long1, pgstore.ChannelOutbox), named(long1, pgstore.ChannelDeliveries))

	s, err := pgstore.New(&pgxpool.Pool{})
	require.NoError(t, err)
	_, err = s.ChannelName(pgstore.Channel(0))
	require.ErrorIs(t, err, ledger.ErrInvalid)
}

// listenerBackends counts the sessions listening on channel.
func listenerBackends(t *testing.T, pool *pgxpool.Pool, channel string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(testContext(t),
		`SELECT count(*) FROM pg_stat_activity WHERE query = $1 AND pid <> pg_backend_pid()`,
		"LISTEN "+pgx.Identifier{channel}.Sanitize()).Scan(&n))
	return n
}

// receiveSignal waits, bounded, for a signal on ch.
func receiveSignal(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case _, ok := <-ch:
		require.True(t, ok, "the channel closed while waiting for "+what)
	case <-time.After(waitLimit):
		require.FailNow(t, "timed out waiting for "+what)
	}
}

// requireClosed waits, bounded, for ch to be closed, discarding signals.
func requireClosed(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			require.FailNow(t, "the listener's channel was not closed")
		}
	}
}

func TestListenSignalsCommittedEnqueuesAndEndsOnCancel(t *testing.T) {
	t.Parallel()
	s, pool := newStore(t, pgstore.WithNotify(true))
	channel, err := s.ChannelName(pgstore.ChannelOutbox)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	wake, err := s.Listen(ctx, pgstore.ChannelOutbox)
	require.NoError(t, err)
	require.Equal(t, 1, listenerBackends(t, pool, channel), "Listen returns once it listens")
	require.Empty(t, wake, "no signal before any enqueue")

	// Several notifications coalesce into the one buffered signal.
	for _, key := range []string{"k1", "k2", "k3"} {
		_, err = s.Outbox().Enqueue(ctx, notifyEnvelope(key))
		require.NoError(t, err)
	}
	receiveSignal(t, wake, "the enqueue's signal")

	cancel()
	requireClosed(t, wake)
	require.Eventually(t, func() bool { return listenerBackends(t, pool, channel) == 0 },
		waitLimit, 10*time.Millisecond, "the listening connection is closed")
}

func TestListenReconnectsAfterTheConnectionDrops(t *testing.T) {
	t.Parallel()
	s, pool := newStore(t, pgstore.WithNotify(true))
	channel, err := s.ChannelName(pgstore.ChannelDeliveries)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	wake, err := s.Listen(ctx, pgstore.ChannelDeliveries)
	require.NoError(t, err)

	var killed int
	require.NoError(t, pool.QueryRow(ctx,
		`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query = $1`,
		"LISTEN "+pgx.Identifier{channel}.Sanitize()).Scan(&killed))
	require.Equal(t, 1, killed)

	// Once it listens again it signals, for what it may have missed; then
	// it signals new enqueues as before.
	receiveSignal(t, wake, "the reconnection's signal")
	require.Equal(t, 1, listenerBackends(t, pool, channel))
	_, err = s.Enqueue(ctx, ledger.EnqueueRequest{ID: "d1", Target: "host"}, t0)
	require.NoError(t, err)
	receiveSignal(t, wake, "the enqueue's signal")

	cancel()
	requireClosed(t, wake)
}

func TestListenRejects(t *testing.T) {
	t.Parallel()
	s, pool := newStore(t)
	ctx := testContext(t)

	_, err := s.Listen(ctx, pgstore.Channel(42))
	require.ErrorIs(t, err, ledger.ErrInvalid)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = s.WithTx(tx).Listen(ctx, pgstore.ChannelOutbox)
	require.ErrorIs(t, err, ledger.ErrInvalid)

	//nolint:staticcheck // a nil context is what is being rejected
	_, err = s.Listen(nil, pgstore.ChannelOutbox)
	require.ErrorIs(t, err, ledger.ErrInvalid)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = s.Listen(cancelled, pgstore.ChannelOutbox)
	require.ErrorIs(t, err, context.Canceled)
}
