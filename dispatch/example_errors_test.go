package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/dispatch"
	"github.com/leaseledger/ledger/memstore"
)

// errBadAddress is what a mail provider answers for an address that can
// never receive mail: retrying cannot help.
var errBadAddress = errors.New("550 no such mailbox")

// oneCycle runs one dispatch cycle of emitter over the entries of store,
// on a fixed clock, and prints any error.
func oneCycle(store *memstore.Outbox, emitter dispatch.Emitter, opts ...dispatch.DispatcherOption) {
	now := func() time.Time { return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) }
	opts = append([]dispatch.DispatcherOption{dispatch.WithWorker("example"), dispatch.WithClock(now),
		dispatch.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	d, err := dispatch.NewDispatcher(store, emitter, opts...)
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := d.RunOnce(context.Background()); err != nil {
		fmt.Println(err)
	}
}

// An error wrapped by Permanent dead-letters the entry at once, with no
// retry, keeping the provider's message.
func ExamplePermanent() {
	ctx := context.Background()
	store := memstore.NewOutbox()
	res, err := store.Enqueue(ctx, ledger.Envelope{Provider: "mail", Kind: "welcome", IdempotencyKey: "user-7/welcome"})
	if err != nil {
		fmt.Println(err)
		return
	}
	oneCycle(store, dispatch.EmitterFunc(func(ctx context.Context, e ledger.OutboxEntry) (ledger.EmissionResult, error) {
		return ledger.EmissionResult{}, dispatch.Permanent(errBadAddress)
	}))

	e, err := store.FindByID(ctx, res.Entry.ID)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(e.Status, "after", e.Attempts, "attempt:", e.DeadLetterReason)
	fmt.Printf("last error: code %q, message %q\n", e.LastError.Code, e.LastError.Message)
	// Output:
	// dead_lettered after 1 attempt: permanent error
	// last error: code "permanent", message "550 no such mailbox"
}

// Coded records the provider's own error code instead of the dispatcher's
// "error" or "permanent"; it combines with Permanent either way round.
func ExampleCoded() {
	ctx := context.Background()
	store := memstore.NewOutbox()
	res, err := store.Enqueue(ctx, ledger.Envelope{Provider: "mail", Kind: "welcome", IdempotencyKey: "user-8/welcome"})
	if err != nil {
		fmt.Println(err)
		return
	}
	oneCycle(store, dispatch.EmitterFunc(func(ctx context.Context, e ledger.OutboxEntry) (ledger.EmissionResult, error) {
		// The provider answered 550 5.1.1: no retry can change that.
		return ledger.EmissionResult{}, dispatch.Permanent(dispatch.Coded("550", errBadAddress))
	}))

	e, err := store.FindByID(ctx, res.Entry.ID)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(e.Status, e.DeadLetterReason)
	fmt.Printf("last error: code %q, message %q\n", e.LastError.Code, e.LastError.Message)
	// Output:
	// dead_lettered permanent error
	// last error: code "550", message "550 no such mailbox"
}

// Defer saves the entry as Deferred until the time the provider asked for
// (here a rate limit's Retry-After), instead of the policy's backoff.
func ExampleDefer() {
	ctx := context.Background()
	store := memstore.NewOutbox()
	res, err := store.Enqueue(ctx, ledger.Envelope{Provider: "sms", Kind: "code", IdempotencyKey: "user-7/code"})
	if err != nil {
		fmt.Println(err)
		return
	}
	retryAfter := time.Date(2030, 1, 1, 0, 5, 0, 0, time.UTC)
	oneCycle(store, dispatch.EmitterFunc(func(ctx context.Context, e ledger.OutboxEntry) (ledger.EmissionResult, error) {
		return ledger.EmissionResult{}, dispatch.Defer(retryAfter) // 429, Retry-After: 300
	}))

	e, err := store.FindByID(ctx, res.Entry.ID)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(e.Status, "until", e.NextAttemptAt.Format(time.TimeOnly))
	// Output:
	// deferred until 00:05:00
}

// An Observer sees everything the dispatcher does to each entry: here it
// counts events by kind, as a metrics adapter would.
func ExampleObserver() {
	ctx := context.Background()
	store := memstore.NewOutbox()
	for _, key := range []string{"a", "b", "c"} {
		if _, err := store.Enqueue(ctx, ledger.Envelope{Provider: "mail", Kind: "receipt", IdempotencyKey: key}); err != nil {
			fmt.Println(err)
			return
		}
	}
	var mu sync.Mutex
	counts := map[dispatch.EventKind]int{}
	observer := dispatch.ObserverFunc(func(ev dispatch.Event) {
		// Observe is called from many goroutines and must not block.
		mu.Lock()
		defer mu.Unlock()
		counts[ev.Kind]++
	})
	oneCycle(store, dispatch.EmitterFunc(func(ctx context.Context, e ledger.OutboxEntry) (ledger.EmissionResult, error) {
		if e.Envelope.IdempotencyKey == "b" {
			return ledger.EmissionResult{}, errors.New("provider timed out") // retried later
		}
		return ledger.EmissionResult{ProviderRef: "ok"}, nil
	}), dispatch.WithObserver(observer))

	var lines []string
	for kind, n := range counts {
		lines = append(lines, fmt.Sprintf("%s=%d", kind, n))
	}
	sort.Strings(lines)
	fmt.Println(strings.Join(lines, " "))
	// Output:
	// claimed=3 delivered=2 retried=1
}
