package storekit_test

import (
	"fmt"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// A store's Enqueue, Lease and Acknowledge, for one delivery held in a
// variable: each call is checked, then the state machine decides, and the
// store keeps what comes back only when it applied.
func Example() {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	owner := ledger.Owner{Agent: "agent-1", Incarnation: "boot-1"}

	// Enqueue: check the request, then build the record it stores.
	req := ledger.EnqueueRequest{ID: "d-1", Target: "host-1", Payload: []byte("hello")}
	if err := storekit.ValidateEnqueue(req, t0, ledger.DefaultMaxPayload); err != nil {
		fmt.Println(err)
		return
	}
	stored := storekit.NewDelivery(req, ledger.DefaultPolicy(), t0)
	history := []ledger.Transition{storekit.DeliveryCreation(&stored)}

	// Lease: the store picks what is offerable (in SQL, a database store),
	// the state machine grants it under a token the store draws.
	if !storekit.Delivery(stored).Offerable(t0) {
		return
	}
	next, lease := storekit.Delivery(stored).Grant(owner, storekit.NewToken(), t0, time.Minute)
	history = append(history, storekit.DeliveryTransition(ledger.OpLease, &stored, &next, owner.String()))
	stored = next

	// Acknowledge: the holder of the lease acknowledges; a repeat changes
	// nothing, and a store writes nothing for it.
	for range 2 {
		now := t0.Add(time.Second)
		if err := storekit.ValidateAcknowledge(lease, "seen", now); err != nil {
			fmt.Println(err)
			return
		}
		next, outcome := storekit.Delivery(stored).Acknowledge(lease, "seen", now)
		fmt.Println("acknowledge:", outcome)
		if outcome == ledger.OutcomeApplied {
			history = append(history, storekit.DeliveryTransition(ledger.OpAcknowledge, &stored, &next, owner.String()))
			stored = next
		}
	}

	// A malformed call is an error, before any record is read.
	err := storekit.ValidateAcknowledge(ledger.Lease{}, "", t0)
	fmt.Println("empty lease:", err)

	fmt.Println("state:", stored.State, "attempts:", stored.Attempts)
	for _, h := range history {
		fmt.Printf("history: %s %q -> %q\n", h.Op, h.From, h.To)
	}
	// Output:
	// acknowledge: applied
	// acknowledge: repeated
	// empty lease: ledger: invalid lease delivery id: must not be empty
	// state: acknowledged attempts: 1
	// history: enqueue "" -> "offered"
	// history: lease "offered" -> "leased"
	// history: acknowledge "leased" -> "acknowledged"
}
