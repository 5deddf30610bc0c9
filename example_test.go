package ledger_test

import (
	"context"
	"fmt"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/memstore"
)

// A host agent leases a delivery, acknowledges it, and the integrator marks
// it processed under a fence. The record stays, ended, for an operator.
func ExampleLedger() {
	ctx := context.Background()
	store := memstore.New()
	now := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)

	_, _ = store.Enqueue(ctx, ledger.EnqueueRequest{ID: "order-42", Target: "host-1", Payload: []byte("ship it")}, now)

	host := ledger.Owner{Agent: "host-1", Incarnation: "boot-7"}
	leased, _ := store.Lease(ctx, ledger.LeaseFilter{Targets: []ledger.Target{"host-1"}}, host, now, time.Minute, 10)
	lease := leased.Leased[0].Lease

	ack, _ := store.Acknowledge(ctx, lease, "received", now.Add(time.Second))
	done, _ := store.MarkProcessed(ctx, "order-42", host, ledger.FenceOf(1), "shipment-9", now.Add(2*time.Second))
	late, _ := store.Acknowledge(ctx, lease, "received", now.Add(3*time.Second))

	fmt.Println(ack.Outcome, done.Outcome, done.Delivery.State, late.Outcome)
	// Output: applied applied processed ended
}

// Two workers race for one outbox entry: the claim goes to one of them, and
// a completion under a lost claim is an outcome, not an error.
func ExampleClaimStore() {
	ctx := context.Background()
	outbox := memstore.NewOutbox()
	now := time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)

	_, _ = outbox.Enqueue(ctx, ledger.Envelope{Provider: "mail", Kind: "welcome", Payload: []byte("hi"), IdempotencyKey: "user-7/welcome"})

	claims, _ := outbox.ClaimPending(ctx, ledger.ClaimRequest{Worker: "w1", Now: now, LeaseDuration: time.Minute, Limit: 10})
	others, _ := outbox.ClaimPending(ctx, ledger.ClaimRequest{Worker: "w2", Now: now, LeaseDuration: time.Minute, Limit: 10})
	claim := claims[0].Claim

	res, _ := outbox.MarkClaimDelivered(ctx, claim, ledger.EmissionResult{ProviderRef: "msg-1"})
	again, _ := outbox.MarkClaimDelivered(ctx, claim, ledger.EmissionResult{ProviderRef: "msg-1"})

	fmt.Println(len(claims), len(others), res.Outcome, res.Entry.Status, again.Outcome)
	// Output: 1 0 applied delivered ended
}
