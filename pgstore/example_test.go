package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/dispatch"
	"github.com/leaseledger/ledger/internal/pgtest"
	"github.com/leaseledger/ledger/pgstore"
)

// The examples below run against the tests' throwaway PostgreSQL; a
// program passes the URL of its own database, for example
// os.Getenv("LEDGER_DATABASE_URL"). Each uses a schema of its own, which
// dropExampleSchema removes afterwards.

// databaseURL is the URL of the tests' database.
func databaseURL() string {
	url, err := pgtest.URL()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return "postgres://no-test-database.invalid/"
	}
	return url
}

// dropExampleSchema drops an example's schema, with everything in it.
func dropExampleSchema(pool *pgxpool.Pool, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
}

// New makes a store on a pool, and Migrate creates or upgrades its
// schema: call it at start-up, from every process if you like.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, databaseURL())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	defer dropExampleSchema(pool, "example_new")

	store, err := pgstore.New(pool, pgstore.WithSchema("example_new"))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := store.Migrate(ctx); err != nil { // idempotent; safe from many processes at once
		fmt.Println(err)
		return
	}

	now := time.Now()
	if _, err := store.Enqueue(ctx, ledger.EnqueueRequest{ID: "order-42", Target: "host-1", Payload: []byte("ship it")}, now); err != nil {
		fmt.Println(err)
		return
	}
	host := ledger.Owner{Agent: "host-1", Incarnation: "boot-1"}
	res, err := store.Lease(ctx, ledger.LeaseFilter{Targets: []ledger.Target{"host-1"}}, host, now, time.Minute, 10)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, l := range res.Leased {
		fmt.Printf("%s: %s, attempt %d\n", l.Delivery.ID, l.Delivery.State, l.Delivery.Attempts)
	}
	// Output:
	// order-42: leased, attempt 1
}

// WithTx enqueues in the caller's transaction: the e-mail of an order is
// sent exactly when the order commits.
func ExampleStore_WithTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, databaseURL())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	defer dropExampleSchema(pool, "example_withtx")
	store, err := pgstore.New(pool, pgstore.WithSchema("example_withtx"))
	if err == nil {
		err = store.Migrate(ctx)
	}
	if err == nil {
		_, err = pool.Exec(ctx, "CREATE TABLE example_withtx.orders (id text PRIMARY KEY)")
	}
	if err != nil {
		fmt.Println(err)
		return
	}

	placeOrder := func(id string, paid bool) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(ctx) }() // a no-op once committed
		if _, err := tx.Exec(ctx, "INSERT INTO example_withtx.orders (id) VALUES ($1)", id); err != nil {
			return err
		}
		env := ledger.Envelope{Provider: "mail", Kind: "receipt", IdempotencyKey: id}
		if _, err := store.WithTx(tx).Outbox().Enqueue(ctx, env); err != nil {
			return err
		}
		if !paid {
			return errors.New("payment declined") // rolled back: no order, no e-mail
		}
		return tx.Commit(ctx)
	}
	fmt.Println("order-1:", placeOrder("order-1", true))
	fmt.Println("order-2:", placeOrder("order-2", false))

	pending, err := store.Outbox().FindPending(ctx, 10)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, e := range pending {
		fmt.Println("to send:", e.Envelope.Kind, "for", e.Envelope.IdempotencyKey)
	}
	// Output:
	// order-1: <nil>
	// order-2: payment declined
	// to send: receipt for order-1
}

// With WithNotify, every enqueue notifies the schema's channel when it
// commits; Listen turns that into wake-ups for dispatch.WithWake, so a
// dispatcher that polls only once an hour still emits at once.
func ExampleStore_Listen() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool, err := pgxpool.New(ctx, databaseURL())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	defer dropExampleSchema(pool, "example_listen")
	store, err := pgstore.New(pool, pgstore.WithSchema("example_listen"), pgstore.WithNotify(true))
	if err == nil {
		err = store.Migrate(ctx)
	}
	if err != nil {
		fmt.Println(err)
		return
	}

	wake, err := store.Listen(ctx, pgstore.ChannelOutbox)
	if err != nil {
		fmt.Println(err)
		return
	}
	emitted := make(chan string, 1)
	emitter := dispatch.EmitterFunc(func(ctx context.Context, e ledger.OutboxEntry) (ledger.EmissionResult, error) {
		emitted <- e.Envelope.IdempotencyKey
		return ledger.EmissionResult{ProviderRef: "sent"}, nil
	})
	d, err := dispatch.NewDispatcher(store.Outbox(), emitter,
		dispatch.WithWake(wake),
		dispatch.WithPollInterval(time.Hour),
		dispatch.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()

	if _, err := store.Outbox().Enqueue(ctx, ledger.Envelope{Provider: "mail", Kind: "welcome", IdempotencyKey: "user-7/welcome"}); err != nil {
		fmt.Println(err)
		return
	}
	select {
	case key := <-emitted:
		fmt.Println("emitted", key)
	case <-time.After(time.Minute):
		fmt.Println("no wake-up within a minute")
	}

	cancel()
	<-done
	for range wake { // closed once the listener has let its connection go
	}
	// Output:
	// emitted user-7/welcome
}
