package memstore

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// Compile-time checks that both stores offer retention.
var (
	_ ledger.Purger       = (*Store)(nil)
	_ ledger.OutboxPurger = (*Outbox)(nil)
)

// PurgeDeliveries deletes up to limit terminal deliveries that ended before
// olderThan (storekit.Delivery.Purgeable), oldest EndedAt first, then by ID,
// and returns how many it deleted. Open deliveries are never deleted,
// whatever their age; the per-target fences stay. A purged delivery's
// history goes with it, and its ID is free again: a later Enqueue of it
// creates a new record with a new history. Errors: ErrInvalid
// (a zero olderThan, or limit outside 1..ledger.MaxLimit), ctx.Err().
//
// memstore keeps no index of ended deliveries, so each call scans every
// record under the lock and sorts the candidates: O(n + k log k) for n
// records and k purgeable ones. That suits the sizes memstore is for; a
// host that keeps millions of records in memory should purge in larger
// batches, less often.
func (s *Store) PurgeDeliveries(ctx context.Context, olderThan time.Time, limit int) (int, error) {
	if err := begin(ctx, storekit.ValidatePurge(olderThan, limit)); err != nil {
		return 0, err
	}
	olderThan = ledger.Normalize(olderThan)
	s.mu.Lock()
	defer s.mu.Unlock()
	var victims []uint32
	for slot, p := range s.recs {
		if storekit.Delivery(*p).Purgeable(olderThan) {
			victims = append(victims, uint32(slot))
		}
	}
	slices.SortFunc(victims, func(a, b uint32) int {
		da, db := s.recs[a], s.recs[b]
		return cmp.Or(da.EndedAt.Compare(db.EndedAt), cmp.Compare(da.ID, db.ID))
	})
	victims = victims[:min(limit, len(victims))]
	// Remove from the highest slot down: removeSlot moves the last record
	// into the emptied slot, and every victim above the current one is
	// already gone, so the record it moves is never a victim still to come.
	slices.SortFunc(victims, func(a, b uint32) int { return cmp.Compare(b, a) })
	for _, slot := range victims {
		s.removeSlot(slot)
	}
	return len(victims), nil
}

// removeSlot deletes the record in slot from the table and every index,
// keeping the table dense: the record in the last slot moves into slot,
// re-keyed in the indexes that key by slot. The caller holds s.mu.
//
// The deleted record's memory stays in its slab block (blocks are shared
// and never freed one record at a time), but it is zeroed so that its
// payload and error texts can be collected.
func (s *Store) removeSlot(slot uint32) {
	p := s.recs[slot]
	s.reindex(slot, p, nil) // a terminal record is in no index but ids; stay safe
	s.counts.move(p, nil)
	s.ids.delete(idKey(p.ID))
	delete(s.records, p.ID)
	last := uint32(len(s.recs) - 1)
	if slot != last {
		moved := s.recs[last]
		// Unindex under the old slot while s.recs still maps it, since the
		// offer order looks IDs up by slot; then index under the new one.
		s.reindex(last, moved, nil)
		s.recs[slot] = moved
		s.records[moved.ID] = slot
		s.recs[last] = nil
		s.recs = s.recs[:last]
		s.reindex(slot, nil, moved)
	} else {
		s.recs[last] = nil
		s.recs = s.recs[:last]
	}
	if !s.cfg.noHistory {
		// The purged record's history goes with it; the moved record's
		// follows it to its new slot.
		s.hist[slot] = s.hist[last]
		s.hist[last] = nil
		s.hist = s.hist[:last]
	}
	*p = ledger.Delivery{}
}

// PurgeEntries deletes up to limit terminal outbox entries that ended
// before olderThan (storekit.OutboxEntry.Purgeable), oldest EndedAt first,
// then by ID, and returns how many it deleted. Open entries, claimed or
// not, are never deleted. A purged entry's history goes with it, and its
// idempotency key is free again: a later Enqueue of it creates a new
// entry, with a new place in the enqueue order and a new history. Errors:
// ErrInvalid (a zero olderThan, or limit outside 1..ledger.MaxLimit),
// ctx.Err().
//
// Like Store.PurgeDeliveries it scans every entry under the lock and sorts
// the candidates: O(n + k log k).
func (o *Outbox) PurgeEntries(ctx context.Context, olderThan time.Time, limit int) (int, error) {
	if err := begin(ctx, storekit.ValidatePurge(olderThan, limit)); err != nil {
		return 0, err
	}
	olderThan = ledger.Normalize(olderThan)
	o.mu.Lock()
	defer o.mu.Unlock()
	var victims []*entry
	for _, p := range o.entries {
		if storekit.OutboxEntry(p.OutboxEntry).Purgeable(olderThan) {
			victims = append(victims, p)
		}
	}
	slices.SortFunc(victims, func(a, b *entry) int {
		return cmp.Or(a.EndedAt.Compare(b.EndedAt), cmp.Compare(a.ID, b.ID))
	})
	victims = victims[:min(limit, len(victims))]
	for _, p := range victims {
		// Terminal entries are in no index, but an index must never keep
		// a key for an entry that is gone.
		o.unindex(&p.OutboxEntry)
		delete(o.entries, p.ID) // and its history with it
		delete(o.seqs, p.ID)
	}
	return len(victims), nil
}
