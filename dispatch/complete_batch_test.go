package dispatch_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/dispatch"
	"github.com/leaseledger/ledger/memstore"
)

// batchStore is a memstore outbox whose CompleteClaims leaves the
// completions of the entries in undecided undecided, failing the call,
// and refuses, as malformed, every call that holds one in invalid. It
// counts the completions made one by one and in batches.
type batchStore struct {
	*memstore.Outbox
	undecided, invalid []ledger.OutboxEntryID

	mu              sync.Mutex
	singles, inCall int
}

func (s *batchStore) MarkClaimDelivered(ctx context.Context, c ledger.Claim, r ledger.EmissionResult) (ledger.OutboxResult, error) {
	s.mu.Lock()
	s.singles++
	s.mu.Unlock()
	return s.Outbox.MarkClaimDelivered(ctx, c, r)
}

func (s *batchStore) CompleteClaims(ctx context.Context, cs []ledger.ClaimCompletion) ([]ledger.OutboxResult, error) {
	s.mu.Lock()
	s.inCall += len(cs)
	s.mu.Unlock()
	var decide []ledger.ClaimCompletion
	var at []int
	for i, c := range cs {
		if slices.Contains(s.invalid, c.Claim.EntryID) {
			return nil, fmt.Errorf("%w: a malformed completion", ledger.ErrInvalid)
		}
		if !slices.Contains(s.undecided, c.Claim.EntryID) {
			decide, at = append(decide, c), append(at, i)
		}
	}
	outs := make([]ledger.OutboxResult, len(cs))
	// A batch may hold only undecided completions, depending on how the
	// cycle's completions were grouped; the store is not asked for none.
	var decided []ledger.OutboxResult
	if len(decide) > 0 {
		var err error
		if decided, err = s.Outbox.CompleteClaims(ctx, decide); err != nil {
			return nil, err
		}
	}
	for j, i := range at {
		outs[i] = decided[j]
	}
	if len(at) < len(cs) {
		return outs, errStore
	}
	return outs, nil
}

// batchDispatcher runs one cycle over n entries of store, emitting them all
// at once.
func batchDispatcher(t *testing.T, clk *testClock, store *batchStore, obs *counter, n int) ([]ledger.OutboxEntryID, dispatch.Stats, error) {
	t.Helper()
	ids := enqueue(t, store, "k", n)
	opts := append(baseOptions(clk, &fakeTimers{}, obs), dispatch.WithConcurrency(n), dispatch.WithBatchSize(n), dispatch.WithBatchCompletion())
	d, err := dispatch.NewDispatcher(store, okEmitter(newEmissions()), opts...)
	require.NoError(t, err)
	st, err := d.RunOnce(context.Background())
	return ids, st, err
}

func TestCyclesCompleteInBatchesWhenTheStoreCan(t *testing.T) {
	t.Parallel()
	clk := newClock()
	store := &batchStore{Outbox: newOutbox(clk)}
	obs := newCounter()
	ids, st, err := batchDispatcher(t, clk, store, obs, 16)
	require.NoError(t, err)
	assert.Equal(t, 16, st.Delivered)
	assert.Equal(t, 16, obs.Count(dispatch.EventDelivered))
	assert.Zero(t, store.singles, "completions made one by one")
	assert.Equal(t, 16, store.inCall, "completions made in batches")
	for _, id := range ids {
		assert.Equal(t, ledger.OutboxStatusDelivered, get(t, store, id).Status)
	}
}

// TestCyclesCompleteOneByOneByDefault: without WithBatchCompletion a
// cycle completes each emission with its own call, even on a store that
// could take them together, so that a group-committing store shares one
// commit among the completions of every dispatcher.
func TestCyclesCompleteOneByOneByDefault(t *testing.T) {
	t.Parallel()
	clk := newClock()
	store := &batchStore{Outbox: newOutbox(clk)}
	obs := newCounter()
	ids := enqueue(t, store, "k", 8)
	opts := append(baseOptions(clk, &fakeTimers{}, obs), dispatch.WithConcurrency(8), dispatch.WithBatchSize(8))
	d, err := dispatch.NewDispatcher(store, okEmitter(newEmissions()), opts...)
	require.NoError(t, err)
	st, err := d.RunOnce(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 8, st.Delivered)
	assert.Equal(t, 8, store.singles, "completions made one by one")
	assert.Zero(t, store.inCall, "completions made in batches")
	for _, id := range ids {
		assert.Equal(t, ledger.OutboxStatusDelivered, get(t, store, id).Status)
	}
}

func TestUndecidedCompletionsOfABatchAreStoreErrors(t *testing.T) {
	t.Parallel()
	clk := newClock()
	store := &batchStore{Outbox: newOutbox(clk)}
	obs := newCounter()
	store.undecided = []ledger.OutboxEntryID{ledger.OutboxEntryIDFor("k-0000"), ledger.OutboxEntryIDFor("k-0002")}
	ids, st, err := batchDispatcher(t, clk, store, obs, 6)
	require.ErrorIs(t, err, errStore)
	assert.Equal(t, 4, st.Delivered)
	assert.Equal(t, 2, st.StoreErrors)
	assert.Equal(t, 2, obs.Count(dispatch.EventStoreError))
	for _, id := range ids {
		e := get(t, store, id)
		if slices.Contains(store.undecided, id) {
			// Its claim stays until it expires, as after a failed single call.
			assert.Equal(t, ledger.OutboxStatusPending, e.Status, "%s", id)
			assert.NotNil(t, e.Claim, "%s", id)
			continue
		}
		assert.Equal(t, ledger.OutboxStatusDelivered, e.Status, "%s", id)
	}
}

func TestAMalformedCompletionRefusesOnlyItself(t *testing.T) {
	t.Parallel()
	clk := newClock()
	store := &batchStore{Outbox: newOutbox(clk)}
	store.invalid = []ledger.OutboxEntryID{ledger.OutboxEntryIDFor("k-0001")}
	obs := newCounter()
	ids, st, err := batchDispatcher(t, clk, store, obs, 6)
	require.ErrorIs(t, err, ledger.ErrInvalid)
	assert.Equal(t, 5, st.Delivered)
	assert.Equal(t, 1, st.StoreErrors)
	for _, id := range ids {
		want := ledger.OutboxStatusDelivered
		if id == store.invalid[0] {
			want = ledger.OutboxStatusPending
		}
		assert.Equal(t, want, get(t, store, id).Status, "%s", id)
	}
}
