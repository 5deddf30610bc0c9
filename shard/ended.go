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
	parts := make([][]ledger.DeliveryEnd, len(st.shards))
	errs := fanOut(ctx, st.every(), func(ctx context.Context, pos, i int) error {
		e, ok := st.shards[i].(ledger.EndedLister)
		if !ok {
			return &ledger.InvalidError{Field: "ledger", Reason: "a shard does not list ended deliveries"}
		}
		var err error
		parts[pos], err = e.ListEnded(ctx, q)
		return err
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
	parts := make([][]ledger.EntryEnd, len(o.shards))
	errs := fanOut(ctx, o.every(), func(ctx context.Context, pos, i int) error {
		e, ok := o.shards[i].(ledger.OutboxEndedLister)
		if !ok {
			return &ledger.InvalidError{Field: "outbox", Reason: "a shard does not list ended entries"}
		}
		var err error
		parts[pos], err = e.ListEndedEntries(ctx, q)
		return err
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
