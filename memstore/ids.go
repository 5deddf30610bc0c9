package memstore

import (
	"context"
	"sync"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// FindDeliveryIDs returns the IDs among ids that name a delivery the store
// holds, in any state, in the order of ids (see shard.DeliveryIDFinder,
// which a sharded ledger's enqueue asks every other shard). Errors:
// ErrInvalid for an ID that is no valid name, ctx.Err().
func (s *Store) FindDeliveryIDs(ctx context.Context, ids []ledger.DeliveryID) ([]ledger.DeliveryID, error) {
	return findIDs(ctx, &s.mu, s.records, ids)
}

// FindEntryIDs is FindDeliveryIDs for outbox entries (see
// shard.EntryIDFinder).
func (o *Outbox) FindEntryIDs(ctx context.Context, ids []ledger.OutboxEntryID) ([]ledger.OutboxEntryID, error) {
	return findIDs(ctx, &o.mu, o.entries, ids)
}

// findIDs returns the IDs among ids that are keys of held, read under mu.
func findIDs[ID ~string, V any](ctx context.Context, mu *sync.Mutex, held map[ID]V, ids []ID) ([]ID, error) {
	if err := begin(ctx, validateIDs(ids)); err != nil {
		return nil, err
	}
	var out []ID
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if _, ok := held[id]; ok {
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
