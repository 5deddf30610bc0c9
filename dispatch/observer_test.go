package dispatch_test

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/dispatch"
)

// TestDispatcherEventsAreLabelled checks the labels of a Dispatcher's
// events: the worker, the entry's provider and kind, its claim and
// metadata on every event about an entry; the enqueue-to-completion
// latency on the completions that applied; one final event per entry.
// The events of completions applied in a batch (ledger.ClaimCompleter)
// must carry the same as those applied one by one.
func TestDispatcherEventsAreLabelled(t *testing.T) {
	t.Parallel()
	t.Run("one by one", func(t *testing.T) {
		t.Parallel()
		clk := newClock()
		// Only the ClaimStore methods: the cycle cannot complete in batches.
		store := struct{ ledger.ClaimStore }{newOutbox(clk)}
		checkDispatcherEventsLabelled(t, clk, store)
	})
	t.Run("in batches", func(t *testing.T) {
		t.Parallel()
		clk := newClock()
		store := &batchStore{Outbox: newOutbox(clk)}
		checkDispatcherEventsLabelled(t, clk, store, dispatch.WithBatchCompletion())
		assert.Zero(t, store.singles, "completions made one by one")
		assert.Equal(t, 3, store.inCall, "completions made in batches")
	})
}

// checkDispatcherEventsLabelled runs one cycle over three entries of
// store, delivered, retried and dead-lettered, and checks the labels of
// every event of the cycle.
func checkDispatcherEventsLabelled(t *testing.T, clk *testClock, store ledger.ClaimStore, opts ...dispatch.DispatcherOption) {
	t.Helper()
	md := ledger.Metadata{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	envs := []ledger.Envelope{
		{Provider: "mail", Kind: "welcome", IdempotencyKey: "ok", Metadata: md},
		{Provider: "sms", Kind: "code", IdempotencyKey: "retry"},
		{Provider: "mail", Kind: "receipt", IdempotencyKey: "dead"},
	}
	entries := map[string]ledger.OutboxEntry{}
	for _, env := range envs {
		r, err := store.Enqueue(context.Background(), env)
		require.NoError(t, err)
		entries[string(r.Entry.ID)] = r.Entry
	}
	emitter := dispatch.EmitterFunc(func(_ context.Context, e ledger.OutboxEntry) (ledger.EmissionResult, error) {
		switch e.Envelope.IdempotencyKey {
		case "retry":
			return ledger.EmissionResult{}, errTransient
		case "dead":
			return ledger.EmissionResult{}, dispatch.Permanent(errTransient)
		}
		return ledger.EmissionResult{ProviderRef: "ref"}, nil
	})
	obs := newCounter()
	logs := &lockedBuffer{}
	opts = append(opts, dispatch.WithLogger(slog.New(slog.NewJSONHandler(logs, nil))))
	d, err := dispatch.NewDispatcher(store, emitter, append(append(baseOptions(clk, &fakeTimers{}, obs), dispatch.WithWorker("dispatcher-1")), opts...)...)
	require.NoError(t, err)

	const waited = 5 * time.Second // the entries wait this long before the dispatcher runs
	clk.Advance(waited)
	_, err = d.RunOnce(context.Background())
	require.NoError(t, err)

	finals := map[string]dispatch.Event{}
	for _, ev := range obs.events {
		e, ok := entries[ev.EntryID]
		require.True(t, ok, "event %s is about an entry", ev.Kind)
		assert.Equal(t, "dispatcher-1", ev.Worker)
		assert.Equal(t, e.Envelope.Provider, ev.Provider)
		assert.Equal(t, e.Envelope.Kind, ev.EntryKind)
		assert.Equal(t, e.Envelope.IdempotencyKey, ev.IdempotencyKey, "the key the business knows the entry by")
		assert.Equal(t, e.Envelope.Metadata, ev.Metadata)
		assert.Equal(t, int64(1), ev.Seq, "the first claim")
		assert.Equal(t, 1, ev.Attempt)
		assert.Empty(t, ev.DeliveryID, "a Dispatcher's events carry no delivery")
		assert.Zero(t, ev.Owner)
		if ev.Kind == dispatch.EventClaimed {
			assert.False(t, ev.Final)
			assert.Zero(t, ev.Latency)
			continue
		}
		require.True(t, ev.Final, "%s settles its entry", ev.Kind)
		_, twice := finals[ev.EntryID]
		require.False(t, twice, "one final event per entry")
		finals[ev.EntryID] = ev
		assert.Equal(t, waited, ev.Latency, "%s: enqueue to completion, as the store stamped them", ev.Kind)
	}
	require.Len(t, finals, 3)
	kinds := map[dispatch.EventKind]int{}
	for _, ev := range finals {
		kinds[ev.Kind]++
	}
	assert.Equal(t, map[dispatch.EventKind]int{dispatch.EventDelivered: 1, dispatch.EventRetried: 1, dispatch.EventDeadLettered: 1}, kinds)
	// The failed emissions are logged with their entry's key beside its ID.
	for _, key := range []string{"retry", "dead"} {
		assert.Contains(t, logs.String(), `"entry_id":"`+string(ledger.OutboxEntryIDFor(key))+`","idempotency_key":"`+key+`"`)
	}
}

// lockedBuffer is a bytes.Buffer that loops in several goroutines may
// log to.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestDispatcherEventsShareMetadataWithoutCopying pins the cost of the
// labels: the metadata on an event is the loop's map, not a copy.
func TestDispatcherEventsShareMetadataWithoutCopying(t *testing.T) {
	t.Parallel()
	clk := newClock()
	store := newOutbox(clk)
	_, err := store.Enqueue(context.Background(), ledger.Envelope{Provider: "mail", Kind: "welcome", IdempotencyKey: "k", Metadata: ledger.Metadata{"k": "v"}})
	require.NoError(t, err)
	var seen []ledger.Metadata
	obs := dispatch.ObserverFunc(func(ev dispatch.Event) { seen = append(seen, ev.Metadata) })
	d, err := dispatch.NewDispatcher(store, okEmitter(newEmissions()), append(baseOptions(clk, &fakeTimers{}, obs), dispatch.WithConcurrency(1))...)
	require.NoError(t, err)
	_, err = d.RunOnce(context.Background())
	require.NoError(t, err)
	require.Len(t, seen, 2)
	seen[0]["probe"] = "x" // what the godoc forbids observers, done to see the sharing
	assert.Equal(t, "x", seen[1]["probe"], "the claimed and the delivered events share one map")
}

// TestWorkerEventsAreLabelled checks the labels of a Worker's events: the
// delivery ID under its own name (and still in EntryID), the target,
// ceremony, owner, lease and metadata; the latency on the completions
// that applied; one final event per delivery.
func TestWorkerEventsAreLabelled(t *testing.T) {
	t.Parallel()
	clk := newClock()
	l := newLedger(clk)
	md := ledger.Metadata{"tenant": "acme"}
	reqs := []ledger.EnqueueRequest{
		{ID: "done", Target: "host-1", Ceremony: "cer-1", Metadata: md},
		{ID: "again", Target: "host-2"},
		{ID: "back", Target: "host-1"},
	}
	for _, r := range reqs {
		_, err := l.Enqueue(context.Background(), r, clk.Now())
		require.NoError(t, err)
	}
	h := dispatch.HandlerFunc(func(_ context.Context, d ledger.Delivery) (dispatch.Decision, error) {
		switch d.ID {
		case "again":
			return dispatch.Decision{}, errTransient
		case "back":
			return dispatch.Released(), nil
		}
		return dispatch.Processed("shipped"), nil
	})
	obs := newCounter()
	w := newWorker(t, l, "agent-1", h, workerOptions(clk, &fakeTimers{}, obs)...)
	const waited = 7 * time.Second
	clk.Advance(waited)
	_, err := w.RunOnce(context.Background())
	require.NoError(t, err)

	byID := map[ledger.DeliveryID]ledger.EnqueueRequest{}
	for _, r := range reqs {
		byID[r.ID] = r
	}
	finals := map[ledger.DeliveryID]dispatch.Event{}
	for _, ev := range obs.events {
		r, ok := byID[ev.DeliveryID]
		require.True(t, ok, "event %s is about a delivery", ev.Kind)
		assert.Equal(t, string(ev.DeliveryID), ev.EntryID, "EntryID keeps its meaning")
		assert.Equal(t, r.Target, ev.Target)
		assert.Equal(t, r.Ceremony, ev.Ceremony)
		assert.Equal(t, w.Owner(), ev.Owner)
		assert.Equal(t, r.Metadata, ev.Metadata)
		assert.Equal(t, int64(1), ev.Seq)
		assert.Empty(t, ev.Worker, "a Worker's events carry no dispatcher worker name")
		assert.Empty(t, ev.Provider)
		if ev.Kind == dispatch.EventLeased {
			assert.False(t, ev.Final)
			continue
		}
		require.True(t, ev.Final, "%s settles its delivery", ev.Kind)
		finals[ev.DeliveryID] = ev
	}
	require.Len(t, finals, 3)
	assert.Equal(t, dispatch.EventProcessed, finals["done"].Kind)
	assert.Equal(t, waited, finals["done"].Latency)
	assert.Equal(t, dispatch.EventRetried, finals["again"].Kind)
	assert.Equal(t, waited, finals["again"].Latency)
	assert.Equal(t, dispatch.EventReleased, finals["back"].Kind)
	assert.Zero(t, finals["back"].Latency, "a release completes nothing")
}
