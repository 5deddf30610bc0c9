package memstore_test

// How the delivery model compares itself with the store.

import (
	"reflect"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/leaseledger/ledger"
)

// check compares every record the store holds with the model.
func (s *deliveryModel) check(t *rapid.T) {
	for _, id := range mdlIDs {
		d, err := s.l.Get(s.ctx, id)
		if m := s.recs[id]; m != nil {
			require.NoError(t, err)
			s.same(t, m, d)
		} else {
			require.ErrorIs(t, err, ledger.ErrNotFound, "%s", id)
		}
	}
}

// viewOf turns a record from the store into the model's shape.
func viewOf(d ledger.Delivery) mdlRecord {
	v := mdlRecord{
		ID: d.ID, State: d.State, Target: d.Target, Ceremony: d.Ceremony, Payload: string(d.Payload),
		MaxAttempts: d.Policy.MaxAttempts, Attempts: d.Attempts, LeaseSeq: d.LeaseSeq, Version: d.Version,
		Created: d.CreatedAt, Updated: d.UpdatedAt, EndedAt: d.EndedAt, Lease: d.Lease, AvailableAt: d.AvailableAt,
	}
	if d.LastFailure != nil {
		v.Failure = d.LastFailure.Kind
	}
	if d.EndedLease != nil {
		v.Ended = &mdlEnded{Token: d.EndedLease.Token, Seq: d.EndedLease.Seq, Op: d.EndedLease.Op}
	}
	if d.Ack != nil {
		v.AckOwner, v.AckDeadline = &d.Ack.Owner, d.Ack.Deadline
	}
	v.Action, v.Cause = "<none>", "<none>"
	if d.Processing != nil {
		v.Action, v.Fence = d.Processing.Action, d.Processing.Fence
	}
	if d.Cause != nil {
		v.Cause = d.Cause.Kind
	}
	return v
}

// trim zeroes the fields that only mean something in other states, and
// the tokens, which a store never hands out: the model's are left out of
// the comparison, and the store's must be empty.
func (v mdlRecord) trim() mdlRecord {
	if v.Lease != nil {
		l := *v.Lease
		l.Token = ""
		v.Lease = &l
	}
	if v.Ended != nil {
		e := *v.Ended
		e.Token = ""
		v.Ended = &e
	}
	if v.State != ledger.DeliveryStateOffered && v.State != ledger.DeliveryStateLeased {
		v.AvailableAt = time.Time{}
	}
	if v.State != ledger.DeliveryStateProcessed {
		v.Action, v.Fence = "", nil
	}
	if v.State != ledger.DeliveryStateExpired {
		v.Cause = ""
	}
	return v
}

// same compares the model's record with the store's; m nil means the zero
// record of a NotFound answer.
func (s *deliveryModel) same(t *rapid.T, m *mdlDelivery, d ledger.Delivery) {
	if m == nil {
		require.Zero(t, d.ID)
		return
	}
	// Compare cheaply first: require's call-site bookkeeping dominates the
	// run time when it runs for every record at every step.
	if want, got := m.trim(), viewOf(d).trim(); !reflect.DeepEqual(want, got) {
		require.Equal(t, want, got, "record %s", m.ID)
	}
}
