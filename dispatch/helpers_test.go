package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/dispatch"
	"github.com/leaseledger/ledger/memstore"
)

// t0 is the fixed start of every test's clock.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// waitLimit bounds every wait for another goroutine.
const waitLimit = 10 * time.Second

// testClock is a settable clock shared by the store and the dispatchers.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *testClock { return &testClock{now: t0} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// fakeTimers is a dispatch.AfterFunc whose timers fire only when the test
// says so.
type fakeTimers struct {
	mu     sync.Mutex
	timers []*fakeTimer
}

type fakeTimer struct {
	d      time.Duration
	f      func()
	active bool
}

func (ft *fakeTimers) AfterFunc(d time.Duration, f func()) func() bool {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	t := &fakeTimer{d: d, f: f, active: true}
	ft.timers = append(ft.timers, t)
	return func() bool {
		ft.mu.Lock()
		defer ft.mu.Unlock()
		was := t.active
		t.active = false
		return was
	}
}

// Fire runs every active timer of duration d, in the caller's goroutine,
// and returns how many it ran.
func (ft *fakeTimers) Fire(d time.Duration) int {
	ft.mu.Lock()
	var due []*fakeTimer
	for _, t := range ft.timers {
		if t.active && t.d == d {
			t.active = false
			due = append(due, t)
		}
	}
	ft.mu.Unlock()
	for _, t := range due {
		t.f()
	}
	return len(due)
}

// FireWhere runs every active timer whose duration matches, in the
// caller's goroutine, and returns how many it ran: for timers with jitter,
// whose exact duration a test cannot know.
func (ft *fakeTimers) FireWhere(match func(time.Duration) bool) int {
	ft.mu.Lock()
	var due []*fakeTimer
	for _, t := range ft.timers {
		if t.active && match(t.d) {
			t.active = false
			due = append(due, t)
		}
	}
	ft.mu.Unlock()
	for _, t := range due {
		t.f()
	}
	return len(due)
}

// ActiveWhere returns the durations of the active timers that match.
func (ft *fakeTimers) ActiveWhere(match func(time.Duration) bool) []time.Duration {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	var ds []time.Duration
	for _, t := range ft.timers {
		if t.active && match(t.d) {
			ds = append(ds, t.d)
		}
	}
	return ds
}

// Active counts the active timers of duration d.
func (ft *fakeTimers) Active(d time.Duration) int {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	n := 0
	for _, t := range ft.timers {
		if t.active && t.d == d {
			n++
		}
	}
	return n
}

// counter is a thread-safe Observer that counts events by kind.
type counter struct {
	mu     sync.Mutex
	kinds  map[dispatch.EventKind]int
	events []dispatch.Event
}

func newCounter() *counter { return &counter{kinds: make(map[dispatch.EventKind]int)} }

func (c *counter) Observe(e dispatch.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kinds[e.Kind]++
	c.events = append(c.events, e)
}

func (c *counter) Count(k dispatch.EventKind) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kinds[k]
}

func (c *counter) Events(k dispatch.EventKind) []dispatch.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []dispatch.Event
	for _, e := range c.events {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

// Finals returns the events that settled an entry or a delivery.
func (c *counter) Finals() []dispatch.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []dispatch.Event
	for _, e := range c.events {
		if e.Final {
			out = append(out, e)
		}
	}
	return out
}

// emissions counts Emit calls per entry.
type emissions struct {
	mu sync.Mutex
	n  map[ledger.OutboxEntryID]int
}

func newEmissions() *emissions { return &emissions{n: make(map[ledger.OutboxEntryID]int)} }

// Add counts one emission of id and returns how many there have been.
func (e *emissions) Add(id ledger.OutboxEntryID) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n[id]++
	return e.n[id]
}

func (e *emissions) Get(id ledger.OutboxEntryID) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[id]
}

// newOutbox returns an empty memstore outbox on clk.
func newOutbox(clk *testClock) *memstore.Outbox {
	return memstore.NewOutbox(memstore.WithClock(clk.Now))
}

// enqueue adds n entries and returns their IDs in enqueue order.
func enqueue(t *testing.T, store ledger.ClaimStore, prefix string, n int) []ledger.OutboxEntryID {
	t.Helper()
	ids := make([]ledger.OutboxEntryID, n)
	for i := range n {
		r, err := store.Enqueue(context.Background(), ledger.Envelope{
			Provider:       "mail",
			Kind:           "welcome",
			Payload:        []byte(fmt.Sprintf("payload %d", i)),
			IdempotencyKey: fmt.Sprintf("%s-%04d", prefix, i),
		})
		require.NoError(t, err)
		require.True(t, r.Applied())
		ids[i] = r.Entry.ID
	}
	return ids
}

// baseOptions are the options every test dispatcher gets.
func baseOptions(clk *testClock, timers *fakeTimers, obs dispatch.Observer) []dispatch.DispatcherOption {
	return []dispatch.DispatcherOption{
		dispatch.WithClock(clk.Now),
		dispatch.WithAfterFunc(timers.AfterFunc),
		dispatch.WithObserver(obs),
		dispatch.WithPolicy(ledger.Policy{MaxAttempts: 3, BackoffBase: time.Second, BackoffMax: time.Minute}),
		dispatch.WithLogger(discardLogger()),
	}
}

// runResult is what a RunOnce in another goroutine returned.
type runResult struct {
	stats dispatch.Stats
	err   error
}

// runOnceAsync runs d.RunOnce(ctx) in a goroutine.
func runOnceAsync(ctx context.Context, d *dispatch.Dispatcher) <-chan runResult {
	out := make(chan runResult, 1)
	go func() {
		st, err := d.RunOnce(ctx)
		out <- runResult{st, err}
	}()
	return out
}

// receive waits, bounded, for one value of ch.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		require.FailNow(t, "timed out waiting for "+what)
	}
	var zero T
	return zero
}

// get reads an entry.
func get(t *testing.T, store ledger.ClaimStore, id ledger.OutboxEntryID) ledger.OutboxEntry {
	t.Helper()
	e, err := store.FindByID(context.Background(), id)
	require.NoError(t, err)
	return e
}

// drain runs every dispatcher's RunOnce, advancing the clock by step
// whenever a round claims nothing, until every entry in ids is terminal.
// It fails after maxRounds rounds.
func drain(t *testing.T, clk *testClock, store ledger.ClaimStore, ids []ledger.OutboxEntryID, step time.Duration, ds ...*dispatch.Dispatcher) {
	t.Helper()
	const maxRounds = 200
	for range maxRounds {
		var wg sync.WaitGroup
		results := make([]runResult, len(ds))
		for i, d := range ds {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := d.RunOnce(context.Background())
				results[i] = runResult{st, err}
			}()
		}
		wg.Wait()
		claimed := 0
		for _, r := range results {
			require.NoError(t, r.err)
			claimed += r.stats.Claimed
		}
		if allTerminal(t, store, ids) {
			return
		}
		if claimed == 0 {
			clk.Advance(step)
		}
	}
	require.FailNow(t, "entries did not all end")
}

func allTerminal(t *testing.T, store ledger.ClaimStore, ids []ledger.OutboxEntryID) bool {
	t.Helper()
	for _, id := range ids {
		if !get(t, store, id).Status.Terminal() {
			return false
		}
	}
	return true
}

var errTransient = errors.New("provider unavailable")
