package pgstore

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaseledger/ledger"
)

// This file is the store's wake-ups: NOTIFY on enqueue (WithNotify) and
// a listener that turns the notifications into signals a poller can wait
// on (Listen). They are hints that shorten a poll wait, never the only
// trigger: a notification can be lost (the listener's connection drops),
// so pollers keep polling at their interval.

// Channel names one of a Store's notification channels.
type Channel int

// The notification channels. Their PostgreSQL names derive from the
// schema (see ChannelName), so stores in different schemas do not wake
// each other.
const (
	// ChannelOutbox is notified when Outbox.Enqueue or EnqueueBatch
	// inserts an entry.
	ChannelOutbox Channel = iota + 1
	// ChannelDeliveries is notified when Store.Enqueue or EnqueueBatch
	// inserts a delivery.
	ChannelDeliveries
)

// maxChannelBytes is the longest channel name PostgreSQL keeps (an
// identifier: NAMEDATALEN-1). pg_notify rejects longer names and LISTEN
// truncates them, so the two would not meet.
const maxChannelBytes = 63

// notifySQL notifies a channel. pg_notify takes the name as text, so it is
// passed as a parameter and never spliced into SQL.
const notifySQL = `SELECT pg_notify($1, '')`

// Listener reconnect backoff: doubling from the first to the last, with
// jitter, so that listeners of many processes do not reconnect in step.
const (
	listenBackoffMin = 100 * time.Millisecond
	listenBackoffMax = 5 * time.Second
)

// DefaultWakeInterval is the least time between two values Listen sends,
// unless WithWakeInterval says otherwise: none, a value soon after every
// notification, for the lowest latency.
//
// At a steady rate of enqueues a notification arrives every few
// milliseconds, and each wakes a loop that claims or leases what that
// enqueue added. Spaced by an interval, one wake takes everything
// enqueued since the last, so fewer claims and group commits carry more
// items each. Measured at 1,000 items/s in enqueues of five (the
// side-by-side comparison's steady run, medians of 3): 10 ms halved the
// outbox's claims, but cut its CPU per item by only 5% and left the
// deliveries' unchanged, while the median latency rose from 4.4 ms to
// 11.8 ms. So spacing is off by default; it pays where notifications
// come far more often than loops can use them.
const DefaultWakeInterval time.Duration = 0

// MaxWakeInterval bounds WithWakeInterval: beyond it a poll interval
// serves as well.
const MaxWakeInterval = time.Second

// WithWakeInterval sets the least time between two values of a channel
// Listen returns (default DefaultWakeInterval); 0 sends one soon after
// every notification. Between 0 and MaxWakeInterval, else New fails with
// ErrInvalid.
func WithWakeInterval(d time.Duration) Option {
	return func(c *config) {
		if d < 0 || d > MaxWakeInterval {
			c.fail(&ledger.InvalidError{Field: "wake interval", Reason: fmt.Sprintf("must be between 0 and %v", MaxWakeInterval)})
			return
		}
		c.wakeInterval = d
	}
}

// WithNotify makes Enqueue and EnqueueBatch of both contracts notify the
// store's channel (ChannelDeliveries or ChannelOutbox) in the transaction
// that inserts, and only when they inserted something: the notification is
// delivered when the work becomes visible, on commit (under WithTx, on the
// caller's commit; never when it rolls back), and an enqueue that only
// answers for existing records notifies nobody. Off by default. Leave it
// off behind PgBouncer in transaction pooling mode, where LISTEN does not
// work (the session that listens is not the one that receives), and where
// no one could Listen anyway.
func WithNotify(on bool) Option {
	return func(c *config) { c.notify = on }
}

// ChannelName returns the PostgreSQL name of ch for this store's schema:
// the schema followed by "_outbox" or "_deliveries". A name that would be
// longer than 63 bytes keeps a prefix of the schema and a hash of all of
// it instead. An unknown ch is ErrInvalid.
func (s *Store) ChannelName(ch Channel) (string, error) {
	var suffix string
	switch ch {
	case ChannelOutbox:
		suffix = "_outbox"
	case ChannelDeliveries:
		suffix = "_deliveries"
	default:
		return "", &ledger.InvalidError{Field: "channel", Reason: "must be ChannelOutbox or ChannelDeliveries"}
	}
	name := s.cfg.schema + suffix
	if len(name) <= maxChannelBytes {
		return name, nil
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(s.cfg.schema)) // never fails
	tag := fmt.Sprintf("_%08x", h.Sum32())
	return s.cfg.schema[:maxChannelBytes-len(tag)-len(suffix)] + tag + suffix, nil
}

// notifyInserted notifies ch in tx when inserted is true and WithNotify is
// on, and returns inserted for the caller's txFunc to return.
func (s *Store) notifyInserted(ctx context.Context, tx pgx.Tx, ch Channel, inserted bool) (bool, error) {
	if !inserted || !s.cfg.notify {
		return inserted, nil
	}
	name, err := s.ChannelName(ch)
	if err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, notifySQL, name); err != nil {
		return false, err
	}
	return true, nil
}

// Listen listens on ch and returns a channel that receives a value soon
// after each committed notification, for dispatch.WithWake. The channel has
// a buffer of one and is never blocked on: notifications that arrive while
// a value is still waiting in it are coalesced into that one. With a wake
// interval (WithWakeInterval), two values are at least that far apart:
// notifications that arrive within it are coalesced into the next value,
// sent when it ends.
//
// Give one channel to all the loops of a process that poll this store
// (dispatch.WithWake on each): a value wakes one idle loop, which claims
// or leases everything the notifications since the last value announced.
//
// Listen holds one dedicated connection, taken out of the pool (so the
// pool may open another in its place), for as long as ctx lasts. When the
// connection drops it reconnects with backoff, and sends a value once it
// listens again, since notifications sent in between are lost. When ctx
// is cancelled it closes the connection and then the channel.
//
// Listen hears any store on the same database and schema that enqueues
// with WithNotify. It fails with ErrInvalid for an unknown ch or a store
// returned by WithTx (a listener needs a connection of its own), and with
// a wrapped store error when it cannot connect or LISTEN the first time.
// It does not work through PgBouncer in transaction pooling mode.
func (s *Store) Listen(ctx context.Context, ch Channel) (<-chan struct{}, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	name, err := s.ChannelName(ch)
	if err != nil {
		return nil, err
	}
	pool, ok := s.db.(*pgxpool.Pool)
	if !ok {
		return nil, &ledger.InvalidError{Field: "store", Reason: "Listen needs the store's pool, not a caller's transaction"}
	}
	conn, err := listen(ctx, pool, name)
	if err != nil {
		return nil, wrap(ctx, "listen", err)
	}
	out := make(chan struct{}, 1)
	if s.cfg.wakeInterval == 0 {
		go listenLoop(ctx, pool, name, conn, out)
		return out, nil
	}
	heard := make(chan struct{}, 1)
	go listenLoop(ctx, pool, name, conn, heard)
	go space(heard, out, s.cfg.wakeInterval, func(d time.Duration) bool { return sleep(ctx, d) })
	return out, nil
}

// listen takes a connection out of pool and runs LISTEN on it.
func listen(ctx context.Context, pool *pgxpool.Pool, name string) (*pgx.Conn, error) {
	pc, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	// Hijacked, the connection never goes back to the pool, so no other
	// caller ever gets a session that is still listening.
	conn := pc.Hijack()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{name}.Sanitize()); err != nil {
		closeConn(ctx, conn)
		return nil, err
	}
	return conn, nil
}

// listenLoop signals out for every notification on conn, reconnecting when
// conn fails, until ctx ends; it then closes the connection and out.
func listenLoop(ctx context.Context, pool *pgxpool.Pool, name string, conn *pgx.Conn, out chan<- struct{}) {
	defer close(out)
	for {
		forward(ctx, conn, out)
		closeConn(ctx, conn)
		if conn = reconnect(ctx, pool, name); conn == nil {
			return
		}
		signal(out) // notifications sent while disconnected are lost
	}
}

// forward signals out for each notification on conn until conn fails or
// ctx ends. Why it failed does not matter: the caller reconnects or stops.
func forward(ctx context.Context, conn *pgx.Conn, out chan<- struct{}) {
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return
		}
		signal(out)
	}
}

// space passes the values of in on to out, at least every apart: after a
// value it waits every (wait reports false when the listener stops), and
// what in received meanwhile, coalesced by its buffer of one, goes on as
// one value once the wait is over. It closes out when in is closed.
func space(in <-chan struct{}, out chan<- struct{}, every time.Duration, wait func(time.Duration) bool) {
	defer close(out)
	for range in {
		signal(out)
		if every > 0 && !wait(every) {
			break
		}
	}
	for range in { // until listenLoop, which stops with the same ctx, closes it
	}
}

// reconnect listens again on a new connection, retrying with backoff; it
// returns nil once ctx has ended.
func reconnect(ctx context.Context, pool *pgxpool.Pool, name string) *pgx.Conn {
	for n := 0; ; n++ {
		if !sleep(ctx, listenBackoff(n)) {
			return nil
		}
		if conn, err := listen(ctx, pool, name); err == nil {
			return conn
		}
	}
}

// signal sends on out unless a signal is already waiting there.
func signal(out chan<- struct{}) {
	select {
	case out <- struct{}{}:
	default:
	}
}

// closeConn closes conn, bounded even when ctx is done.
func closeConn(ctx context.Context, conn *pgx.Conn) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = conn.Close(cctx)
}

// listenBackoff is the wait before reconnect attempt n+1.
func listenBackoff(n int) time.Duration {
	d := listenBackoffMin << min(n, 6)
	d = min(d, listenBackoffMax)
	return d/2 + rand.N(d/2+1)
}

// sleep waits d; it reports false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	if ctx.Err() != nil {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
