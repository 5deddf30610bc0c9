package memstore

import (
	"cmp"
	"context"
	"slices"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// Compile-time checks that both stores offer the operators' reads.
var (
	_ ledger.EndedLister       = (*Store)(nil)
	_ ledger.OutboxLister      = (*Outbox)(nil)
	_ ledger.OutboxEndedLister = (*Outbox)(nil)
)

// This file is the reads behind operators' tools (see browse.go in the
// root package). memstore keeps no index of outbox entries by ID nor of
// records by EndedAt, so these scan every record under the lock, as
// retention does: O(n) per call, plus sorting what matched. That suits the
// sizes memstore is for.

// ListEntries returns one page of outbox entries matching q, in ID order
// (see ledger.OutboxLister). Errors: ErrInvalid, ctx.Err().
func (o *Outbox) ListEntries(ctx context.Context, q ledger.OutboxListQuery) (ledger.OutboxPage, error) {
	after, err := storekit.ValidateOutboxList(q)
	if err := begin(ctx, err); err != nil {
		return ledger.OutboxPage{}, err
	}
	var found []*entry
	o.mu.Lock()
	for id, p := range o.entries {
		if id > after && q.Matches(p.OutboxEntry) {
			found = append(found, p)
		}
	}
	slices.SortFunc(found, func(a, b *entry) int { return cmp.Compare(a.ID, b.ID) })
	var page ledger.OutboxPage
	for _, p := range found[:min(len(found), q.Limit)] {
		page.Entries = append(page.Entries, handOutEntry(p.OutboxEntry))
	}
	o.mu.Unlock()
	if len(found) > q.Limit {
		page.Next = storekit.EncodeOutboxCursor(page.Entries[q.Limit-1].ID)
	}
	return page, nil
}

// ListEnded returns the deliveries that ended in [q.Since, q.Until),
// latest first (see ledger.EndedLister). Errors: ErrInvalid, ctx.Err().
func (s *Store) ListEnded(ctx context.Context, q ledger.EndedQuery) ([]ledger.DeliveryEnd, error) {
	if err := begin(ctx, storekit.ValidateEnded(q)); err != nil {
		return nil, err
	}
	ends := []ledger.DeliveryEnd{}
	s.mu.Lock()
	for _, p := range s.recs {
		if e, ok := p.End(); ok && q.Includes(e.EndedAt) {
			ends = append(ends, e)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(ends, func(a, b ledger.DeliveryEnd) int {
		return storekit.CompareEnded(a.EndedAt, string(a.ID), b.EndedAt, string(b.ID))
	})
	return ends[:min(len(ends), q.Limit)], nil
}

// ListEndedEntries returns the outbox entries that ended in [q.Since,
// q.Until), latest first (see ledger.OutboxEndedLister). Errors:
// ErrInvalid, ctx.Err().
func (o *Outbox) ListEndedEntries(ctx context.Context, q ledger.EndedQuery) ([]ledger.EntryEnd, error) {
	if err := begin(ctx, storekit.ValidateEnded(q)); err != nil {
		return nil, err
	}
	ends := []ledger.EntryEnd{}
	o.mu.Lock()
	for _, p := range o.entries {
		if e, ok := p.End(); ok && q.Includes(e.EndedAt) {
			ends = append(ends, e)
		}
	}
	o.mu.Unlock()
	slices.SortFunc(ends, func(a, b ledger.EntryEnd) int {
		return storekit.CompareEnded(a.EndedAt, string(a.ID), b.EndedAt, string(b.ID))
	})
	return ends[:min(len(ends), q.Limit)], nil
}
