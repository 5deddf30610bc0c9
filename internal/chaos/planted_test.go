package chaos

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/memstore"
)

// The checker is itself checked against stores broken on purpose, as
// ledgertest is: each runs the whole in-memory scenario, and the checker
// must name the broken guarantee, where the checks of calls alone (the
// version counts among them) find nothing wrong.

// silentEnder ends one delivery nobody has leased as Expired during the
// first sweep that finds one, says nothing of it in the sweep's result,
// and hides the version its end took from every read: a store that ends
// work by itself.
type silentEnder struct {
	deliveryStore
	mu     sync.Mutex
	hidden ledger.DeliveryID
}

func (s *silentEnder) Expire(ctx context.Context, now time.Time) (ledger.SweepResult, error) {
	s.mu.Lock()
	if s.hidden == "" {
		page, err := s.deliveryStore.List(ctx, ledger.ListQuery{States: []ledger.DeliveryState{ledger.DeliveryStateOffered}, Limit: ledger.MaxLimit})
		for _, d := range page.Deliveries {
			if err != nil || d.LeaseSeq != 0 {
				continue
			}
			res, err := s.deliveryStore.Abandon(ctx, d.ID, ledger.Cause{Kind: ledger.CauseCeremonyEnded}, now)
			if err == nil && res.Applied() {
				s.hidden = d.ID
			}
			break
		}
	}
	s.mu.Unlock()
	return s.deliveryStore.Expire(ctx, now)
}

func (s *silentEnder) unbump(d ledger.Delivery) ledger.Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.ID == s.hidden && d.ID != "" {
		d.Version--
	}
	return d
}

func (s *silentEnder) Get(ctx context.Context, id ledger.DeliveryID) (ledger.Delivery, error) {
	d, err := s.deliveryStore.Get(ctx, id)
	return s.unbump(d), err
}

func (s *silentEnder) List(ctx context.Context, q ledger.ListQuery) (ledger.Page, error) {
	page, err := s.deliveryStore.List(ctx, q)
	for i := range page.Deliveries {
		page.Deliveries[i] = s.unbump(page.Deliveries[i])
	}
	return page, err
}

// extraEntry adds an entry nobody enqueued, already delivered, with the
// first batch it is asked to enqueue: no worker ever calls anything on it.
type extraEntry struct {
	entryStore
	once sync.Once
}

func (o *extraEntry) EnqueueBatch(ctx context.Context, envs []ledger.Envelope) ([]ledger.OutboxResult, error) {
	o.once.Do(func() {
		res, err := o.entryStore.Enqueue(ctx, ledger.Envelope{Provider: "provider", Kind: "planted", IdempotencyKey: "planted-extra"})
		if err == nil {
			_, _ = o.entryStore.MarkDelivered(ctx, res.Entry.ID, ledger.EmissionResult{ProviderRef: "planted"})
		}
	})
	return o.entryStore.EnqueueBatch(ctx, envs)
}

func TestCheckerFailsOnPlantedStores(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the in-memory scenario twice")
	}
	p := runParams(false)
	p.Items = 300
	p.MaxCalls = 5*p.Items + 1000
	for _, tc := range []struct {
		name string
		wrap func(backend) backend
		want []invariant
	}{
		{"SilentEndWithoutVersionBump", func(b backend) backend {
			b.deliveries = &silentEnder{deliveryStore: b.deliveries}
			return b
		}, []invariant{invExplained}},
		{"EntryNobodyEnqueued", func(b backend) backend {
			b.entries = &extraEntry{entryStore: b.entries}
			return b
		}, []invariant{invCount}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, b := runMemstore(t, p, tc.wrap)
			calls := r.log.history()
			rep := check(calls, readFinal(t.Context(), t, b, entryIDs(calls)), checkOptions{planned: p.Items})
			for _, inv := range tc.want {
				assert.NotEmpty(t, rep.violations[inv], "the checker must find the planted fault: %q", inv)
				t.Logf("found: %s", rep.failure(inv))
			}
			// What the checks of calls alone see: nothing. The planted
			// fault is one only the new accounting can find.
			for _, inv := range []invariant{invTerminal, invUnexpected, invNoWrite, invVisible, invAttempts} {
				require.Empty(t, rep.violations[inv], rep.failure(inv))
			}
		})
	}
}

// deliveredWithoutWrite answers the first MarkClaimDelivered Applied, with
// the entry as it would be, and writes nothing: an Applied answer whose
// write is missing.
type deliveredWithoutWrite struct {
	entryStore
	once sync.Once
}

func (o *deliveredWithoutWrite) MarkClaimDelivered(ctx context.Context, cl ledger.Claim, res ledger.EmissionResult) (ledger.OutboxResult, error) {
	lie := false
	o.once.Do(func() { lie = true })
	if !lie {
		return o.entryStore.MarkClaimDelivered(ctx, cl, res)
	}
	e, err := o.entryStore.FindByID(ctx, cl.EntryID)
	e.Status, e.Result, e.Version = ledger.OutboxStatusDelivered, &res, e.Version+1
	return ledger.OutboxResult{Outcome: ledger.OutcomeApplied, Entry: e}, err
}

// processedButEnded applies the first MarkProcessed and answers it Ended,
// as a store that misreads a lost COMMIT would: a not-applied answer
// whose write is there.
type processedButEnded struct {
	deliveryStore
	once sync.Once
}

func (s *processedButEnded) MarkProcessed(ctx context.Context, id ledger.DeliveryID, owner ledger.Owner, fence *ledger.Fence, action ledger.ActionRef, now time.Time) (ledger.DeliveryResult, error) {
	res, err := s.deliveryStore.MarkProcessed(ctx, id, owner, fence, action, now)
	if err == nil && res.Applied() {
		s.once.Do(func() { res.Outcome = ledger.OutcomeEnded })
	}
	return res, err
}

// TestFailoverCheckerFailsOnPlantedStores runs the failover test's loops
// (Workers, Dispatchers, a producer, all recorded) over an in-memory store
// broken on purpose, without role changes: the checker must name each
// untrue answer.
func TestFailoverCheckerFailsOnPlantedStores(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the dispatch loops twice")
	}
	for _, tc := range []struct {
		name string
		wrap func(backend) backend
		want []invariant
	}{
		{"AppliedWithoutWrite", func(b backend) backend {
			b.entries = &deliveredWithoutWrite{entryStore: b.entries}
			return b
		}, []invariant{invVisible}},
		{"WrittenButAnsweredEnded", func(b backend) backend {
			b.deliveries = &processedButEnded{deliveryStore: b.deliveries}
			return b
		}, []invariant{invExplained, invNoWrite}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A short lease: what a planted fault leaves open lapses soon.
			f := newFailoverRun(t, failoverPlan{items: 200, rate: 400, loops: 2, lease: 500 * time.Millisecond})
			store := memstore.New(memstore.WithClock(f.sh.now))
			b := tc.wrap(backend{deliveries: store, entries: store.Outbox()})
			f.open = func(context.Context, string) backend { return b }
			ctx := t.Context()
			require.Empty(t, f.drive(ctx))
			clean := f.newWorker("clean", false)
			clean.main = b
			f.drain(ctx, clean)
			calls := f.log.history()
			rep := check(calls, readFinal(ctx, t, b, entryIDs(calls)), checkOptions{planned: f.p.Items})
			for _, inv := range tc.want {
				assert.NotEmpty(t, rep.violations[inv], "the checker must find the planted fault: %q", inv)
				t.Logf("found: %s", rep.failure(inv))
			}
			assert.Positive(t, rep.untrue(invVisible)+rep.untrue(invNoWrite), "the figures count no untrue answer")
			assert.Zero(t, rep.lost)
		})
	}
}
