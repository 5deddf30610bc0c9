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

func ExampleWorker() {
	ctx := context.Background()
	now := func() time.Time { return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) }
	l := memstore.New()
	for _, id := range []ledger.DeliveryID{"settings-1", "settings-2"} {
		req := ledger.EnqueueRequest{ID: id, Target: "host-7", Payload: []byte("apply")}
		if _, err := l.Enqueue(ctx, req, now()); err != nil {
			fmt.Println(err)
			return
		}
	}

	var mu sync.Mutex
	var applied []string
	handler := dispatch.HandlerFunc(func(ctx context.Context, d ledger.Delivery) (dispatch.Decision, error) {
		// A real handler acts on d.Payload here, idempotently (keyed on
		// d.ID), since a delivery may be handled more than once.
		mu.Lock()
		defer mu.Unlock()
		applied = append(applied, string(d.ID))
		return dispatch.Processed("applied"), nil
	})
	w, err := dispatch.NewWorker(l, "host-agent-7", []ledger.Target{"host-7"}, handler,
		dispatch.WithClock(now),
		dispatch.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println(err)
		return
	}

	// Production code calls w.Run(ctx); one cycle shows what it does.
	stats, err := w.RunOnce(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	sort.Strings(applied)
	fmt.Println("applied:", applied)
	fmt.Println("leased:", stats.Leased, "processed:", stats.Processed)
	d, _ := l.Get(ctx, "settings-1")
	fmt.Println(d.State, d.Processing.Action, d.Ack.Owner.Agent)
	// Output:
	// applied: [settings-1 settings-2]
	// leased: 2 processed: 2
	// processed applied host-agent-7
}
