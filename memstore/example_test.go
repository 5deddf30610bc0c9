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

// A delivery that failed for good is sent again as a new one linked to it;
// the original keeps its end, and a second redrive answers the same new
// delivery.
func ExampleStore_Redrive() {
	ctx := context.Background()
	store := memstore.New()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	_, _ = store.Enqueue(ctx, ledger.EnqueueRequest{ID: "order-42", Target: "host-1"}, now)
	lr, _ := store.Lease(ctx, ledger.LeaseFilter{}, ledger.Owner{Agent: "host-1", Incarnation: "1"}, now, time.Minute, 1)
	_, _ = store.MarkFailed(ctx, lr.Leased[0].Lease, ledger.FailureReason{Message: "mailbox full", Permanent: true}, now)

	res, _ := store.Redrive(ctx, ledger.RedriveRequest{ID: "order-42"}, now.Add(time.Hour))
	fmt.Println(res.Outcome, res.Original.State, res.Redriven.ID, res.Redriven.State)
	again, _ := store.Redrive(ctx, ledger.RedriveRequest{ID: "order-42"}, now.Add(2*time.Hour))
	fmt.Println(again.Outcome, again.Redriven.ID)
	// Output:
	// applied failed order-42/redrive offered
	// repeated order-42/redrive
}

// A host that is offline should find its latest two notices, not a
// backlog: the third enqueue abandons the oldest with cause queue_bounded.
func ExampleWithTargetQueueBound() {
	ctx := context.Background()
	store := memstore.New(memstore.WithTargetQueueBound("host-1", 2))
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, id := range []ledger.DeliveryID{"n-1", "n-2", "n-3"} {
		res, _ := store.Enqueue(ctx, ledger.EnqueueRequest{ID: id, Target: "host-1"}, now.Add(time.Duration(i)*time.Second))
		fmt.Println(id, res.Abandoned)
	}
	d, _ := store.Get(ctx, "n-1")
	fmt.Println(d.State, d.Cause.Kind)
	// Output:
	// n-1 []
	// n-2 []
	// n-3 [n-1]
	// expired queue_bounded
}
