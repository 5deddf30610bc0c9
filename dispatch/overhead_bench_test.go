package dispatch_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/dispatch"
)

// instantClaims is a claim store that answers at once, handing out n
// claims of one batch of entries made in advance, again and again, so
// that a benchmark over it measures the dispatch loop's own work per
// entry: what it adds to a store's. A caller must be done with a batch
// before it claims the next. Only the calls a drain makes are
// implemented.
type instantClaims struct {
	ledger.ClaimStore // nil: any other call panics
	mu                sync.Mutex
	batch             []ledger.ClaimedEntry
	left              int
	delivered         atomic.Int64
}

func newInstantClaims(n int) *instantClaims {
	s := &instantClaims{batch: make([]ledger.ClaimedEntry, 100), left: n}
	now := time.Now()
	for i := range s.batch {
		id := ledger.OutboxEntryID(fmt.Sprintf("entry-%09d", i))
		claim := ledger.Claim{EntryID: id, Worker: "bench", Token: "token", Seq: 1, ClaimedAt: now, ExpiresAt: now.Add(time.Minute)}
		s.batch[i] = ledger.ClaimedEntry{Claim: claim, Entry: ledger.OutboxEntry{
			ID: id, Envelope: ledger.Envelope{Provider: "mail", Kind: "welcome", Payload: []byte(`{"t":1}`), IdempotencyKey: string(id)},
			Status: ledger.OutboxStatusPending, Attempts: 1, ClaimSeq: 1, Claim: &claim, CreatedAt: now, UpdatedAt: now, Version: 2,
		}}
	}
	return s
}

func (s *instantClaims) ClaimDue(_ context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := min(req.Limit, len(s.batch), s.left)
	s.left -= n
	return s.batch[:n:n], nil
}

func (s *instantClaims) ClaimPending(ctx context.Context, req ledger.ClaimRequest) ([]ledger.ClaimedEntry, error) {
	return s.ClaimDue(ctx, req)
}

func (s *instantClaims) MarkClaimDelivered(_ context.Context, c ledger.Claim, _ ledger.EmissionResult) (ledger.OutboxResult, error) {
	s.delivered.Add(1)
	return ledger.OutboxResult{Outcome: ledger.OutcomeApplied, Entry: ledger.OutboxEntry{ID: c.EntryID, Status: ledger.OutboxStatusDelivered}}, nil
}

func (s *instantClaims) RenewClaim(_ context.Context, c ledger.Claim, _ time.Time, _ time.Duration) (ledger.OutboxResult, error) {
	return ledger.OutboxResult{Outcome: ledger.OutcomeApplied}, nil
}

// BenchmarkDispatchOverhead drains b.N entries from a store that answers
// at once, with batches of 100 emitted 100 at a time, as the
// side-by-side comparison runs its loops: Dispatcher through
// dispatch.Dispatcher.RunOnce, HandLoop through the loop a user would
// write by hand (claim, complete each item from a goroutine of a pool,
// again). The difference is what the Dispatcher costs per entry beyond
// the store's work. An op is one entry.
func BenchmarkDispatchOverhead(b *testing.B) {
	emitter := dispatch.EmitterFunc(func(context.Context, ledger.OutboxEntry) (ledger.EmissionResult, error) {
		return ledger.EmissionResult{ProviderRef: "ref"}, nil
	})
	b.Run("Dispatcher", func(b *testing.B) {
		s := newInstantClaims(b.N)
		d, err := dispatch.NewDispatcher(s, emitter, dispatch.WithBatchSize(100), dispatch.WithConcurrency(100),
			dispatch.WithLogger(discardLogger()), dispatch.WithObserver(dispatch.ObserverFunc(func(dispatch.Event) {})))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for s.delivered.Load() < int64(b.N) {
			if _, err := d.RunOnce(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("HandLoop", func(b *testing.B) {
		s := newInstantClaims(b.N)
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		for s.delivered.Load() < int64(b.N) {
			cs, err := s.ClaimPending(ctx, ledger.ClaimRequest{Worker: "bench", Now: time.Now(), LeaseDuration: time.Minute, Limit: 100})
			if err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			var wg sync.WaitGroup
			for range len(cs) {
				wg.Go(func() {
					for i := int(next.Add(1)) - 1; i < len(cs); i = int(next.Add(1)) - 1 {
						res, err := emitter.Emit(ctx, cs[i].Entry)
						if err == nil {
							_, err = s.MarkClaimDelivered(ctx, cs[i].Claim, res)
						}
						if err != nil {
							b.Error(err)
						}
					}
				})
			}
			wg.Wait()
		}
	})
}
