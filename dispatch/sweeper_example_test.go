package dispatch_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/dispatch"
	"github.com/leaseledger/ledger/memstore"
)

// A Sweeper ends what its ledger leaves lapsed and, with retention,
// deletes what ended long ago. Two sweepers over one store take turns: the
// one holding a job's lead does it.
func ExampleSweeper() {
	ctx := context.Background()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	store := memstore.New()
	req := ledger.EnqueueRequest{ID: "order-42", Target: "host-1", Policy: ledger.Policy{AckWindow: 5 * time.Minute}}
	if _, err := store.Enqueue(ctx, req, now); err != nil {
		fmt.Println(err)
		return
	}
	// A host acknowledges and never marks it processed.
	res, err := store.Lease(ctx, ledger.LeaseFilter{}, ledger.Owner{Agent: "host-1", Incarnation: "boot-1"}, now, time.Minute, 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := store.Acknowledge(ctx, res.Leased[0].Lease, "received", now); err != nil {
		fmt.Println(err)
		return
	}

	opts := []dispatch.SweeperOption{
		dispatch.WithClock(clock),
		dispatch.WithRetention(30 * 24 * time.Hour),
		dispatch.WithLogger(slog.New(slog.DiscardHandler)),
	}
	a, err := dispatch.NewSweeper(store, store.Outbox(), append(opts, dispatch.WithHolder("process-a"))...)
	if err != nil {
		fmt.Println(err)
		return
	}
	b, err := dispatch.NewSweeper(store, store.Outbox(), append(opts, dispatch.WithHolder("process-b"))...)
	if err != nil {
		fmt.Println(err)
		return
	}

	// Production code calls a.Run(ctx) in every process; sweeps by hand
	// show what it does.
	now = now.Add(10 * time.Minute)
	stA, _ := a.RunOnce(ctx)
	stB, _ := b.RunOnce(ctx)
	fmt.Printf("a: expired %d, did %d jobs; b: skipped %d jobs\n", stA.Expired, stA.Done, stB.Skipped)
	d, _ := store.Get(ctx, "order-42")
	fmt.Println(d.State, d.Cause.Kind)

	// 31 days later a has died without giving its leads up; b takes over
	// and deletes what ended more than 30 days ago.
	now = now.Add(31 * 24 * time.Hour)
	stB, _ = b.RunOnce(ctx)
	fmt.Printf("b: purged %d, did %d jobs\n", stB.PurgedDeliveries, stB.Done)
	// Output:
	// a: expired 1, did 3 jobs; b: skipped 3 jobs
	// expired acknowledgement_lapsed
	// b: purged 1, did 3 jobs
}
