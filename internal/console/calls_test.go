package console

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/memstore"
)

// countingLedger and countingOutbox count the calls the console makes
// to the store, through every read it uses.
type countingLedger struct {
	*memstore.Store
	n *atomic.Int64
}

func (c countingLedger) Get(ctx context.Context, id ledger.DeliveryID) (ledger.Delivery, error) {
	c.n.Add(1)
	return c.Store.Get(ctx, id)
}

func (c countingLedger) List(ctx context.Context, q ledger.ListQuery) (ledger.Page, error) {
	c.n.Add(1)
	return c.Store.List(ctx, q)
}

func (c countingLedger) Stats(ctx context.Context, f ledger.StatsFilter, now time.Time) (ledger.DeliveryStats, error) {
	c.n.Add(1)
	return c.Store.Stats(ctx, f, now)
}

func (c countingLedger) ListEnded(ctx context.Context, q ledger.EndedQuery) ([]ledger.DeliveryEnd, error) {
	c.n.Add(1)
	return c.Store.ListEnded(ctx, q)
}

func (c countingLedger) History(ctx context.Context, id ledger.DeliveryID) ([]ledger.Transition, error) {
	c.n.Add(1)
	return c.Store.History(ctx, id)
}

type countingOutbox struct {
	*memstore.Outbox
	n *atomic.Int64
}

func (c countingOutbox) FindByID(ctx context.Context, id ledger.OutboxEntryID) (ledger.OutboxEntry, error) {
	c.n.Add(1)
	return c.Outbox.FindByID(ctx, id)
}

func (c countingOutbox) ListEntries(ctx context.Context, q ledger.OutboxListQuery) (ledger.OutboxPage, error) {
	c.n.Add(1)
	return c.Outbox.ListEntries(ctx, q)
}

func (c countingOutbox) OutboxStats(ctx context.Context, now time.Time) (ledger.OutboxStats, error) {
	c.n.Add(1)
	return c.Outbox.OutboxStats(ctx, now)
}

func (c countingOutbox) ListEndedEntries(ctx context.Context, q ledger.EndedQuery) ([]ledger.EntryEnd, error) {
	c.n.Add(1)
	return c.Outbox.ListEndedEntries(ctx, q)
}

func (c countingOutbox) EntryHistory(ctx context.Context, id ledger.OutboxEntryID) ([]ledger.Transition, error) {
	c.n.Add(1)
	return c.Outbox.EntryHistory(ctx, id)
}

// Every page makes at most two calls to the store (see pgstore's
// TestExplainConsoleReads for what each costs), and the pages that show
// counts, a chart or a history make the call for it.
func TestEveryPageMakesAtMostTwoStoreCalls(t *testing.T) {
	store := memstore.New()
	d := fill(t, t.Context(), store, store.Outbox())
	var n atomic.Int64
	h, err := New(countingLedger{store, &n}, countingOutbox{store.Outbox(), &n}, Options{Now: func() time.Time { return consoleNow }})
	require.NoError(t, err)
	c := newClient(t, h)
	want := map[string]int64{
		"/":           2,
		"/outbox":     2,
		"/dead":       2,
		"/deliveries": 1,
		"/entries":    1,
		"/login":      0,
		pageURL("/delivery", "id", string(d.ended)): 2,
		pageURL("/entry", "id", string(d.entry)):    2,
	}
	for _, path := range everyPage(d) {
		n.Store(0)
		status, _ := c.get(path)
		require.Equal(t, http.StatusOK, status, path)
		require.LessOrEqual(t, n.Load(), int64(2), "%s made %d store calls", path, n.Load())
		if w, ok := want[path]; ok {
			require.Equal(t, w, n.Load(), path)
		}
	}
}
