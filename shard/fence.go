package shard

import (
	"context"
	"time"

	"github.com/leaseledger/ledger"
)

var _ ledger.FenceRejecter = (*Ledger)(nil)

// EndFenceRejected ends a delivery whose MarkProcessed was fence-rejected
// (see ledger.FenceRejecter) on the shard that holds it, found as
// MarkProcessed finds it. A shard that is not a ledger.FenceRejecter
// answers ErrInvalid.
func (l *Ledger) EndFenceRejected(ctx context.Context, id ledger.DeliveryID, owner ledger.Owner, fence ledger.Fence, now time.Time) (ledger.DeliveryResult, error) {
	st, i, err := l.byID(ctx, id)
	if err != nil {
		return ledger.DeliveryResult{}, err
	}
	r, ok := st.shards[i].(ledger.FenceRejecter)
	if !ok {
		return ledger.DeliveryResult{}, &ledger.InvalidError{Field: "ledger", Reason: "the shard does not end fence-rejected deliveries"}
	}
	res, err := r.EndFenceRejected(ctx, id, owner, fence, now)
	return res, wrapShard(i, err)
}
