package shard_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/dispatch"
	"github.com/leaseledger/ledger/memstore"
	"github.com/leaseledger/ledger/shard"
)

// downOutbox is a memstore outbox that fails its claims while down.
type downOutbox struct {
	*memstore.Outbox
	mu   sync.Mutex
	down bool
}

func (o *downOutbox) isDown() bool { o.mu.Lock(); defer o.mu.Unlock(); return o.down }

func (o *downOutbox) ClaimDue(ctx context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	if o.isDown() {
		return nil, errDown
	}
	return o.Outbox.ClaimDue(ctx, req)
}

func (o *downOutbox) ClaimPending(ctx context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	if o.isDown() {
		return nil, errDown
	}
	return o.Outbox.ClaimPending(ctx, req)
}

func newOutbox(t *testing.T) (*shard.Outbox, []*downOutbox) {
	t.Helper()
	stores := []*downOutbox{{Outbox: memstore.NewOutbox()}, {Outbox: memstore.NewOutbox()}, {Outbox: memstore.NewOutbox()}}
	o, err := shard.NewOutbox([]ledger.ClaimStore{stores[0], stores[1], stores[2]})
	require.NoError(t, err)
	return o, stores
}

func TestOutboxKeepsAProvidersEntriesOnOneShard(t *testing.T) {
	o, stores := newOutbox(t)
	for i := range 10 {
		_, err := o.Enqueue(t.Context(), ledger.Envelope{Provider: "mail", Kind: "k", IdempotencyKey: fmt.Sprintf("key-%d", i)})
		require.NoError(t, err)
	}
	holding := 0
	for _, s := range stores {
		got, err := s.FindPending(t.Context(), 100)
		require.NoError(t, err)
		if len(got) > 0 {
			holding++
			require.Len(t, got, 10)
		}
	}
	require.Equal(t, 1, holding, "one provider's entries live on one shard")

	// The same key under another provider is Conflict, wherever that
	// provider lives.
	res, err := o.Enqueue(t.Context(), ledger.Envelope{Provider: "sms", Kind: "k", IdempotencyKey: "key-3"})
	require.NoError(t, err)
	require.Equal(t, ledger.OutcomeConflict, res.Outcome)
}

func TestOutboxClaimsCarryTheirShard(t *testing.T) {
	o, _ := newOutbox(t)
	for _, p := range []string{"p-a", "p-b", "p-c", "p-d", "p-e", "p-f"} {
		_, err := o.Enqueue(t.Context(), ledger.Envelope{Provider: p, Kind: "k", IdempotencyKey: p})
		require.NoError(t, err)
	}
	claimed, err := o.ClaimPending(t.Context(), ledger.ClaimRequest{Worker: "w", Now: t0, LeaseDuration: time.Minute, Limit: 10})
	require.NoError(t, err)
	require.Len(t, claimed, 6)
	for _, c := range claimed {
		require.Regexp(t, `^[0-2]~`, string(c.Claim.Token))
		require.Empty(t, c.Entry.Claim.Token, "the record carries no token")
		res, err := o.MarkClaimDelivered(t.Context(), c.Claim, ledger.EmissionResult{ProviderRef: "ok"})
		require.NoError(t, err)
		require.Equal(t, ledger.OutcomeApplied, res.Outcome)
	}
}

func TestOutboxClaimsTakeFromEveryShardInTurn(t *testing.T) {
	o, stores := newOutbox(t)
	// Enough providers that every shard holds several entries.
	for i := range 60 {
		p := fmt.Sprintf("p-%d", i)
		_, err := o.Enqueue(t.Context(), ledger.Envelope{Provider: p, Kind: "k", IdempotencyKey: p})
		require.NoError(t, err)
	}
	shardOf := func(c ledger.ClaimedEntry) byte { return c.Claim.Token[0] }
	perCall := map[byte]int{}
	for range 3 {
		claimed, err := o.ClaimPending(t.Context(), ledger.ClaimRequest{Worker: "w", Now: t0, LeaseDuration: time.Minute, Limit: 2})
		require.NoError(t, err)
		require.Len(t, claimed, 2)
		require.Equal(t, shardOf(claimed[0]), shardOf(claimed[1]), "a shard with enough work answers the whole limit")
		perCall[shardOf(claimed[0])]++
	}
	require.Equal(t, map[byte]int{'0': 1, '1': 1, '2': 1}, perCall, "consecutive claims start at each shard in turn")

	// A claim for more than its first shard has takes the rest from the
	// others.
	claimed, err := o.ClaimPending(t.Context(), ledger.ClaimRequest{Worker: "w", Now: t0, LeaseDuration: time.Minute, Limit: 100})
	require.NoError(t, err)
	require.Len(t, claimed, 54)
	for _, s := range stores {
		left, err := s.FindPending(t.Context(), 100)
		require.NoError(t, err)
		for _, e := range left {
			require.NotNil(t, e.Claim, "every entry is claimed")
		}
	}
}

// TestDispatcherDrainsTheOtherShardsWhileOneIsDown runs a
// dispatch.Dispatcher over a sharded outbox whose shard 1 stops
// answering claims, then comes back.
func TestDispatcherDrainsTheOtherShardsWhileOneIsDown(t *testing.T) {
	o, stores := newOutbox(t)
	providers := []string{"p-a", "p-b", "p-c", "p-d", "p-e", "p-f", "p-g", "p-h"}
	total := 0
	for _, p := range providers {
		for i := range 5 {
			_, err := o.Enqueue(t.Context(), ledger.Envelope{Provider: p, Kind: "k", IdempotencyKey: fmt.Sprintf("%s-%d", p, i)})
			require.NoError(t, err)
			total++
		}
	}
	var mu sync.Mutex
	emitted := map[ledger.OutboxEntryID]int{}
	emitter := dispatch.EmitterFunc(func(ctx context.Context, e ledger.OutboxEntry) (ledger.EmissionResult, error) {
		mu.Lock()
		emitted[e.ID]++
		mu.Unlock()
		return ledger.EmissionResult{ProviderRef: "ok"}, nil
	})
	clock := t0
	d, err := dispatch.NewDispatcher(o, emitter, dispatch.WithClock(func() time.Time { return clock }),
		dispatch.WithLogger(slog.New(slog.DiscardHandler)), dispatch.WithBatchSize(4))
	require.NoError(t, err)

	stores[1].mu.Lock()
	stores[1].down = true
	stores[1].mu.Unlock()
	onShard1, err := stores[1].FindPending(t.Context(), 100)
	require.NoError(t, err)
	require.NotEmpty(t, onShard1, "the providers spread over shard 1 too")
	for range 50 {
		_, err := d.RunOnce(t.Context())
		require.NoError(t, err, "claims answer from the shards that are up")
		clock = clock.Add(time.Second)
	}
	require.Len(t, emitted, total-len(onShard1), "everything but shard 1's work is emitted")

	stores[1].mu.Lock()
	stores[1].down = false
	stores[1].mu.Unlock()
	for range 50 {
		_, err := d.RunOnce(t.Context())
		require.NoError(t, err)
		clock = clock.Add(time.Second)
	}
	require.Len(t, emitted, total, "the same Dispatcher takes shard 1 up again")
	for id, n := range emitted {
		require.Equal(t, 1, n, "entry %s emitted once", id)
	}
	stats, err := o.OutboxStats(t.Context(), clock)
	require.NoError(t, err)
	require.Equal(t, int64(total), stats.ByStatus[ledger.OutboxStatusDelivered])
}

func TestOutboxWithoutIDCheckHoldsTheRulePerShard(t *testing.T) {
	stores := []ledger.ClaimStore{memstore.NewOutbox(), memstore.NewOutbox(), memstore.NewOutbox()}
	o, err := shard.NewOutbox(stores, shard.WithoutIDCheck())
	require.NoError(t, err)
	// Two providers on different shards, one key.
	var a, b string
	for i := 0; b == ""; i++ {
		p := fmt.Sprintf("p-%d", i)
		switch {
		case a == "":
			a = p
		case shardOf(t, stores, o, p) != shardOf(t, stores, o, a):
			b = p
		}
	}
	res, err := o.Enqueue(t.Context(), ledger.Envelope{Provider: a, Kind: "k", IdempotencyKey: "same"})
	require.NoError(t, err)
	require.Equal(t, ledger.OutcomeApplied, res.Outcome)
	res, err = o.Enqueue(t.Context(), ledger.Envelope{Provider: b, Kind: "k", IdempotencyKey: "same"})
	require.NoError(t, err)
	require.Equal(t, ledger.OutcomeApplied, res.Outcome, "without the look-up, another shard does not know the key")
}

// shardOf enqueues a probe for provider and returns the store it landed
// on.
func shardOf(t *testing.T, stores []ledger.ClaimStore, o *shard.Outbox, provider string) int {
	t.Helper()
	key := "probe-" + provider
	_, err := o.Enqueue(t.Context(), ledger.Envelope{Provider: provider, Kind: "k", IdempotencyKey: key})
	require.NoError(t, err)
	for i, s := range stores {
		if _, err := s.FindByID(t.Context(), ledger.OutboxEntryIDFor(key)); err == nil {
			return i
		}
	}
	t.Fatalf("probe for %s not found", provider)
	return -1
}
