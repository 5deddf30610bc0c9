package storekit

import (
	"bytes"
	"crypto/rand"

	"github.com/leaseledger/ledger"
)

// sameLease reports whether other is the same grant as l.
func sameLease(l, other ledger.Lease) bool {
	return l.Token == other.Token && l.Seq == other.Seq && l.DeliveryID == other.DeliveryID
}

// sameClaim reports whether other is the same grant as c.
func sameClaim(c, other ledger.Claim) bool {
	return c.Token == other.Token && c.Seq == other.Seq && c.EntryID == other.EntryID
}

// endedBy reports whether the grant (token, seq) is the one that ended, by op.
func endedBy(e *ledger.EndedGrant, token ledger.Token, seq int64, op ledger.Operation) bool {
	return e != nil && e.Token == token && e.Seq == seq && e.Op == op
}

// clonePayload copies p as ledger.Delivery.Clone does: an empty payload
// is nil.
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

// NewToken returns a fresh random token (128 bits, base32 text). Stores call
// it once per grant; the state machine takes the token as an argument so that
// it stays a pure function.
func NewToken() ledger.Token { return ledger.Token(rand.Text()) }
