package shard

import (
	"context"
	"errors"

	"github.com/leaseledger/ledger"
)

// DeliveryIDFinder is a store that tells, in one call, which of many
// delivery IDs it holds. The enqueue's ID check (see Ledger.Enqueue)
// asks every shard but the target's this for all the IDs of a call at
// once; a store without it is asked one Get per ID, which also reads and
// copies each record it finds. pgstore and memstore implement it: one
// primary key read per ID in one statement, or one map look-up.
type DeliveryIDFinder interface {
	// FindDeliveryIDs returns the IDs among ids that name a delivery the
	// store holds, in any state, in no particular order. An empty ids
	// returns nothing without a call to the database.
	FindDeliveryIDs(ctx context.Context, ids []ledger.DeliveryID) ([]ledger.DeliveryID, error)
}

// EntryIDFinder is DeliveryIDFinder for outbox entries: the Outbox's
// enqueue ID check asks it of every shard but the provider's.
type EntryIDFinder interface {
	// FindEntryIDs returns the IDs among ids that name an entry the
	// store holds, in any state, in no particular order.
	FindEntryIDs(ctx context.Context, ids []ledger.OutboxEntryID) ([]ledger.OutboxEntryID, error)
}

// heldDeliveries reports which of ids the store s holds: found[k] for
// ids[k]. It asks a DeliveryIDFinder once, any other store one Get per
// ID.
func heldDeliveries(ctx context.Context, s ledger.Ledger, ids []ledger.DeliveryID) ([]bool, error) {
	var find func(context.Context, []ledger.DeliveryID) ([]ledger.DeliveryID, error)
	if f, ok := s.(DeliveryIDFinder); ok {
		find = f.FindDeliveryIDs
	}
	return held(ctx, find, func(ctx context.Context, id ledger.DeliveryID) error {
		_, err := s.Get(ctx, id)
		return err
	}, ids)
}

// heldEntries is heldDeliveries for outbox entries.
func heldEntries(ctx context.Context, s ledger.ClaimStore, ids []ledger.OutboxEntryID) ([]bool, error) {
	var find func(context.Context, []ledger.OutboxEntryID) ([]ledger.OutboxEntryID, error)
	if f, ok := s.(EntryIDFinder); ok {
		find = f.FindEntryIDs
	}
	return held(ctx, find, func(ctx context.Context, id ledger.OutboxEntryID) error {
		_, err := s.FindByID(ctx, id)
		return err
	}, ids)
}

// held answers found[k] for ids[k]: by one call of find when the store
// has it (find not nil), else by one get per ID, where ErrNotFound means
// absent.
func held[ID comparable](ctx context.Context, find func(context.Context, []ID) ([]ID, error), get func(context.Context, ID) error, ids []ID) ([]bool, error) {
	found := make([]bool, len(ids))
	if find != nil {
		have, err := find(ctx, ids)
		if err != nil {
			return nil, err
		}
		set := make(map[ID]bool, len(have))
		for _, id := range have {
			set[id] = true
		}
		for k, id := range ids {
			found[k] = set[id]
		}
		return found, nil
	}
	for k, id := range ids {
		switch err := get(ctx, id); {
		case err == nil:
			found[k] = true
		case errors.Is(err, ledger.ErrNotFound):
		default:
			return nil, err
		}
	}
	return found, nil
}

// holders finds, for each of ids, the shards other than its home that
// hold it: every shard that is not home to all of them is asked once,
// concurrently, for the IDs it is not home to (held answers found[k] for
// its ids[k]). homes[k] is the home of ids[k]. It returns, per ID, the
// other shards that hold it in shard order (nil for most), and the
// errors of the shards that failed (an ErrInvalid is the caller's
// mistake and ends the call; the others the caller reports, and treats
// the shard's IDs as absent).
func holders[ID comparable](ctx context.Context, n int, homes []int, ids []ID, held func(ctx context.Context, shard int, ids []ID) ([]bool, error)) (where [][]int, failed []error, err error) {
	asks := make([][]int, n) // asks[i]: positions in ids asked of shard i
	for k, h := range homes {
		for i := range n {
			if i != h {
				asks[i] = append(asks[i], k)
			}
		}
	}
	var idx []int
	for i, ks := range asks {
		if len(ks) > 0 {
			idx = append(idx, i)
		}
	}
	found := make([][]bool, n)
	errs := fanOut(ctx, idx, func(ctx context.Context, _, i int) error {
		part := make([]ID, len(asks[i]))
		for j, k := range asks[i] {
			part[j] = ids[k]
		}
		var err error
		found[i], err = held(ctx, i, part)
		return err
	})
	for pos, e := range errs {
		if e == nil {
			continue
		}
		if isCallerError(e) {
			return nil, nil, unwrapShard(e)
		}
		found[idx[pos]] = nil
		failed = append(failed, e)
	}
	where = make([][]int, len(ids))
	for i, f := range found {
		for j, ok := range f {
			if ok {
				k := asks[i][j]
				where[k] = append(where[k], i)
			}
		}
	}
	return where, failed, nil
}
