package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// This file holds the sweeps: Expire, ExpireCeremony and Supersede (and
// the incarnation rule of Lease, which uses the same batch step). A sweep
// walks its candidates in ID order in batches of sweepBatchSize: each
// batch locks its rows (FOR UPDATE, never SKIP LOCKED, so a row another
// call holds is waited for, not missed), applies the state machine to
// each in Go, and writes the changed ones back in one round trip.

// sweepBatchSize bounds the rows one sweep batch locks and rewrites.
const sweepBatchSize = 500

// sweepStep is the state machine step of a sweep: the new record and
// whether it changed.
type sweepStep func(d ledger.Delivery) (ledger.Delivery, bool)

// sweepBatch locks the next batch of query's rows after the ID after,
// applies step and writes back what changed, recording each change as made
// by h (and the changes of the terminal counts in counts, when not nil;
// see writeDeliveries). It returns the changed IDs in ID order, the last
// ID read, and whether the batch was full (more rows may follow). query
// takes $1 after, $2 the batch size, then args.
func (s *Store) sweepBatch(ctx context.Context, tx pgx.Tx, h how, counts deliveryCounts, query, after string, args []any, step sweepStep) (changed []ledger.DeliveryID, last string, more bool, err error) {
	if err := s.indexesFirst(ctx, tx); err != nil {
		return nil, "", false, err
	}
	rows, err := tx.Query(ctx, query, append([]any{after, sweepBatchSize}, args...)...)
	if err != nil {
		return nil, "", false, err
	}
	ds, err := collectDeliveries(rows)
	if err != nil {
		return nil, "", false, err
	}
	var ws []deliveryChange
	for _, d := range ds {
		if nd, ok := step(d); ok {
			ws = append(ws, changeOf(h, d, nd))
			changed = append(changed, d.ID)
		}
	}
	if err := s.writeDeliveries(ctx, tx, ws, counts); err != nil {
		return nil, "", false, err
	}
	if len(ds) > 0 {
		last = string(ds[len(ds)-1].ID)
	}
	return changed, last, len(ds) == sweepBatchSize, nil
}

// sweep runs a whole sweep, one transaction per batch, so that a large
// backlog never holds thousands of row locks at once. When a batch fails,
// the batches before it stay committed (each record's transition is
// complete on its own): the IDs they changed are returned together with
// the error, because a later sweep no longer sees those records and the
// caller would otherwise never learn of them. The next sweep picks up the
// rest.
func (s *Store) sweep(ctx context.Context, op string, h how, query string, args []any, step sweepStep) ([]ledger.DeliveryID, error) {
	var all []ledger.DeliveryID
	for after := ""; ; {
		var changed []ledger.DeliveryID
		var last string
		var more bool
		err := s.inTx(ctx, op, func(tx pgx.Tx) (bool, error) {
			var err error
			changed, last, more, err = s.sweepBatch(ctx, tx, h, nil, query, after, args, step)
			return len(changed) > 0, err
		})
		if err != nil {
			return all, err
		}
		all = append(all, changed...)
		if !more {
			return all, nil
		}
		after = last
	}
}

// Expire sweeps what has run out at now (see ledger.Ledger), applying
// storekit.Delivery.Expire to every Leased delivery whose lease expired and
// every Acknowledged one past its deadline. Changed lists them in ID order.
// It commits in batches; see the package documentation.
func (s *Store) Expire(ctx context.Context, now time.Time) (ledger.SweepResult, error) {
	if err := s.check(ctx, storekit.ValidateExpire(now)); err != nil {
		return ledger.SweepResult{}, err
	}
	now, err := s.decisionTime(ctx, "expire", now)
	if err != nil {
		return ledger.SweepResult{}, err
	}
	now = ledger.Normalize(now)
	changed, err := s.sweep(ctx, "expire", how{op: ledger.OpExpire}, s.q.expirable, []any{now}, func(d ledger.Delivery) (ledger.Delivery, bool) {
		return storekit.Delivery(d).Expire(now)
	})
	return ledger.SweepResult{Changed: changed}, err
}

// ExpireCeremony ends every open delivery of the ceremony as Expired with
// cause (see ledger.Ledger), applying storekit.Delivery.Abandon to each.
// Changed lists them in ID order.
func (s *Store) ExpireCeremony(ctx context.Context, ceremony ledger.CeremonyID, cause ledger.Cause, now time.Time) (ledger.SweepResult, error) {
	if err := s.check(ctx, storekit.ValidateExpireCeremony(ceremony, cause, now)); err != nil {
		return ledger.SweepResult{}, err
	}
	now, err := s.decisionTime(ctx, "expire ceremony", now)
	if err != nil {
		return ledger.SweepResult{}, err
	}
	now = ledger.Normalize(now)
	changed, err := s.sweep(ctx, "expire ceremony", how{op: ledger.OpExpireCeremony, actor: ledger.ActorFrom(ctx)}, s.q.ceremonyOpen, []any{string(ceremony)}, func(d ledger.Delivery) (ledger.Delivery, bool) {
		nd, o := storekit.Delivery(d).Abandon(cause, now)
		return nd, o == ledger.OutcomeApplied
	})
	return ledger.SweepResult{Changed: changed}, err
}

// Supersede moves (Follow) or ends (LeaveBehind) the previous target's
// Offered and Leased deliveries (see ledger.Ledger), applying
// storekit.Delivery.Supersede to each. The lists are in ID order.
func (s *Store) Supersede(ctx context.Context, previous, replacement ledger.Target, mode ledger.FollowMode, now time.Time) (ledger.SupersedeResult, error) {
	if err := s.check(ctx, storekit.ValidateSupersede(previous, replacement, mode, now)); err != nil {
		return ledger.SupersedeResult{}, err
	}
	now, err := s.decisionTime(ctx, "supersede", now)
	if err != nil {
		return ledger.SupersedeResult{}, err
	}
	now = ledger.Normalize(now)
	changed, err := s.sweep(ctx, "supersede", how{op: ledger.OpSupersede}, s.q.supersedable, []any{string(previous)}, func(d ledger.Delivery) (ledger.Delivery, bool) {
		return storekit.Delivery(d).Supersede(replacement, mode, now)
	})
	if mode == ledger.Follow {
		return ledger.SupersedeResult{Moved: changed}, err
	}
	return ledger.SupersedeResult{Ended: changed}, err
}
