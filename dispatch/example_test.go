package dispatch_test

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/dispatch"
	"github.com/leaseledger/ledger/memstore"
)

func ExampleDispatcher() {
	ctx := context.Background()
	now := func() time.Time { return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) }
	store := memstore.NewOutbox(memstore.WithClock(now))
	for _, key := range []string{"order-1", "order-2"} {
		if _, err := store.Enqueue(ctx, ledger.Envelope{Provider: "mail", Kind: "receipt", IdempotencyKey: key}); err != nil {
			fmt.Println(err)
			return
		}
	}

	var mu sync.Mutex
	var sent []string
	emitter := dispatch.EmitterFunc(func(ctx context.Context, e ledger.OutboxEntry) (ledger.EmissionResult, error) {
		// A real emitter calls the provider here, passing
		// e.Envelope.IdempotencyKey so that the provider can drop repeats.
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, e.Envelope.IdempotencyKey)
		return ledger.EmissionResult{ProviderRef: "msg-" + e.Envelope.IdempotencyKey}, nil
	})
	d, err := dispatch.NewDispatcher(store, emitter,
		dispatch.WithWorker("example"),
		dispatch.WithClock(now),
		dispatch.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println(err)
		return
	}

	// Production code calls d.Run(ctx); one cycle shows what it does.
	stats, err := d.RunOnce(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	sort.Strings(sent)
	fmt.Println("sent:", sent)
	fmt.Println("claimed:", stats.Claimed, "delivered:", stats.Delivered)
	e, _ := store.FindByID(ctx, ledger.OutboxEntryIDFor("order-1"))
	fmt.Println(e.Status, e.Result.ProviderRef)
	// Output:
	// sent: [order-1 order-2]
	// claimed: 2 delivered: 2
	// delivered msg-order-1
}
