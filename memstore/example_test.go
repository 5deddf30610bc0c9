package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/memstore"
)

// A store whose deliveries get three attempts unless they say otherwise.
// The lease at ExpiresAt has run out, so the delivery is offered again.
func ExampleNew() {
	ctx := context.Background()
	store := memstore.New(memstore.WithDefaultPolicy(ledger.Policy{MaxAttempts: 3}))
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

	_, _ = store.Enqueue(ctx, ledger.EnqueueRequest{ID: "d1", Target: "host-1"}, now)
	a := ledger.Owner{Agent: "host-1", Incarnation: "1"}
	first, _ := store.Lease(ctx, ledger.LeaseFilter{}, a, now, time.Minute, 1)
	expiry := first.Leased[0].Lease.ExpiresAt
	b := ledger.Owner{Agent: "host-2", Incarnation: "1"}
	second, _ := store.Lease(ctx, ledger.LeaseFilter{}, b, expiry, time.Minute, 1)

	d := second.Leased[0].Delivery
	fmt.Println(d.Policy.MaxAttempts, d.Attempts, d.Lease.Owner)
	// Output: 3 2 host-2/1
}

// The outbox derives the entry ID from the idempotency key, so enqueueing
// the same envelope twice is a repeat.
func ExampleNewOutbox() {
	ctx := context.Background()
	outbox := memstore.NewOutbox()
	env := ledger.Envelope{Provider: "mail", Kind: "welcome", IdempotencyKey: "user-7/welcome"}

	first, _ := outbox.Enqueue(ctx, env)
	again, _ := outbox.Enqueue(ctx, env)
	fmt.Println(first.Outcome, again.Outcome, first.Entry.ID == ledger.OutboxEntryIDFor("user-7/welcome"))
	// Output: applied repeated true
}
