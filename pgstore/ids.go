package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// FindDeliveryIDs returns the IDs among ids that name a delivery the store
// holds, in any state, in no particular order: one statement, one primary
// key look-up per ID, and only the IDs come back. A sharded ledger
// (shard.DeliveryIDFinder) asks it of every shard but a target's before
// an enqueue, so that an ID is one delivery across the shards; it is
// much cheaper to the client than a Get per ID, which reads and decodes
// whole records. Errors: ErrInvalid for an ID that is no valid name.
func (s *Store) FindDeliveryIDs(ctx context.Context, ids []ledger.DeliveryID) ([]ledger.DeliveryID, error) {
	return findIDs(ctx, s, "find delivery ids", s.q.deliveryIDsIn, ids)
}

// FindEntryIDs is FindDeliveryIDs for outbox entries (see
// shard.EntryIDFinder).
func (o *Outbox) FindEntryIDs(ctx context.Context, ids []ledger.OutboxEntryID) ([]ledger.OutboxEntryID, error) {
	return findIDs(ctx, o.s, "find entry ids", o.s.q.entryIDsIn, ids)
}

func findIDs[ID ~string](ctx context.Context, s *Store, op, query string, ids []ID) ([]ID, error) {
	strs := make([]string, len(ids))
	var invalid error
	for k, id := range ids {
		if invalid = storekit.ValidateGet(string(id)); invalid != nil {
			break
		}
		strs[k] = string(id)
	}
	if err := s.check(ctx, invalid); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, nil
	}
	var out []ID
	err := s.read(ctx, op, func(db dbtx) error {
		rows, err := db.Query(ctx, query, strs)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (ID, error) {
			var id string
			err := row.Scan(&id)
			return ID(id), err
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
