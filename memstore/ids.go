package memstore

import (
	"context"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// FindDeliveryIDs returns the IDs among ids that name a delivery the store
// holds, in any state, in the order of ids (see shard.DeliveryIDFinder,
// which a sharded ledger's enqueue asks every other shard). Errors:
// ErrInvalid for an ID that is no valid name, ctx.Err().
func (s *Store) FindDeliveryIDs(ctx context.Context, ids []ledger.DeliveryID) ([]ledger.DeliveryID, error) {
	if err := begin(ctx, validateIDs(ids)); err != nil {
		return nil, err
	}
	var out []ledger.DeliveryID
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if _, ok := s.records[id]; ok {
			out = append(out, id)
		}
	}
	return out, nil
}

// FindEntryIDs is FindDeliveryIDs for outbox entries (see
// shard.EntryIDFinder).
func (o *Outbox) FindEntryIDs(ctx context.Context, ids []ledger.OutboxEntryID) ([]ledger.OutboxEntryID, error) {
	if err := begin(ctx, validateIDs(ids)); err != nil {
		return nil, err
	}
	var out []ledger.OutboxEntryID
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, id := range ids {
		if _, ok := o.entries[id]; ok {
			out = append(out, id)
		}
	}
	return out, nil
}

// validateIDs checks every ID as Get checks its one.
func validateIDs[ID ~string](ids []ID) error {
	for _, id := range ids {
		if err := storekit.ValidateGet(string(id)); err != nil {
			return err
		}
	}
	return nil
}
