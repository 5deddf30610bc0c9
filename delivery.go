package ledger

import (
	"bytes"
)

// The delivery state machine is package storekit's (storekit.Delivery):
// a user reads records, a store writes them.

// Clone returns a deep copy of d, sharing no memory with it.
func (d Delivery) Clone() Delivery {
	d.Payload = clonePayload(d.Payload)
	d.Metadata = d.Metadata.Clone()
	d.Lease = clonePtr(d.Lease)
	d.EndedLease = clonePtr(d.EndedLease)
	d.Ack = clonePtr(d.Ack)
	if d.Processing != nil {
		p := *d.Processing
		p.Fence = clonePtr(p.Fence)
		d.Processing = &p
	}
	d.LastActivation = clonePtr(d.LastActivation)
	d.LastFailure = clonePtr(d.LastFailure)
	d.Cause = clonePtr(d.Cause)
	return d
}

func clonePayload(p []byte) []byte {
	if len(p) == 0 {
		return nil
	}
	return bytes.Clone(p)
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
