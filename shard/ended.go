package shard

import (
	"context"
	"slices"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// ListEnded asks every shard for its q.Limit latest ends in the window
// and keeps the q.Limit latest of all: the same answer as one store. It
// needs every shard.
func (l *Ledger) ListEnded(ctx context.Context, q ledger.EndedQuery) ([]ledger.DeliveryEnd, error) {
	if err := storekit.ValidateContext(ctx); err != nil {
		return nil, err
	}
	if err := storekit.ValidateEnded(q); err != nil {
		return nil, err
	}
	st := l.state.Load()
	parts, errs := gather(ctx, st.every(), func(ctx context.Context, i int) ([]ledger.DeliveryEnd, error) {
		e, err := capability[ledger.EndedLister](st.shards[i], "ledger", "list ended deliveries")
		if err != nil {
			return nil, err
		}
		return e.ListEnded(ctx, q)
	})
	if err := all(errs); err != nil {
		return nil, err
	}
	out := []ledger.DeliveryEnd{}
	for _, p := range parts {
		out = append(out, p...)
	}
	slices.SortFunc(out, func(a, b ledger.DeliveryEnd) int {
		return storekit.CompareEnded(a.EndedAt, string(a.ID), b.EndedAt, string(b.ID))
	})
	if len(out) > q.Limit {
		out = out[:q.Limit]
	}
	return out, nil
}

// ListEndedEntries merges every shard's latest ends as Ledger.ListEnded
// does. It needs every shard.
func (o *Outbox) ListEndedEntries(ctx context.Context, q ledger.EndedQuery) ([]ledger.EntryEnd, error) {
	if err := storekit.ValidateContext(ctx); err != nil {
		return nil, err
	}
	if err := storekit.ValidateEnded(q); err != nil {
		return nil, err
	}
	parts, errs := gather(ctx, o.every(), func(ctx context.Context, i int) ([]ledger.EntryEnd, error) {
		e, err := capability[ledger.OutboxEndedLister](o.shards[i], "outbox", "list ended entries")
		if err != nil {
			return nil, err
		}
		return e.ListEndedEntries(ctx, q)
	})
	if err := all(errs); err != nil {
		return nil, err
	}
	out := []ledger.EntryEnd{}
	for _, p := range parts {
		out = append(out, p...)
	}
	slices.SortFunc(out, func(a, b ledger.EntryEnd) int {
		return storekit.CompareEnded(a.EndedAt, string(a.ID), b.EndedAt, string(b.ID))
	})
	if len(out) > q.Limit {
		out = out[:q.Limit]
	}
	return out, nil
}

var (
	_ ledger.EndedLister       = (*Ledger)(nil)
	_ ledger.OutboxEndedLister = (*Outbox)(nil)
)
