package ledger

import (
	"time"
)

// Owner names who holds a delivery lease: a host agent and the incarnation
// of it that is running now. A host that restarts is a new incarnation of
// the same agent, and leasing under a new incarnation takes back the leases
// of the agent's other incarnations (see Ledger.Lease).
type Owner struct {
	// Agent is the stable name of the host agent.
	Agent string `json:"agent"`
	// Incarnation names one run of the agent (for example a boot ID).
	Incarnation string `json:"incarnation"`
}

// String returns "agent/incarnation", for logs.
func (o Owner) String() string { return o.Agent + "/" + o.Incarnation }

// Token is the secret part of a lease or claim. It comes from a
// cryptographic random source, so it cannot be guessed from an ID, a time or
// another token; only the caller that was granted it can act on the lease.
//
// A token is a capability: whoever holds it can act as the holder. So only
// the Lease or Claim value returned to the grantee (by Ledger.Lease or a
// claim) carries it. Every record a store hands out (Get, List, FindByID,
// FindPending, FindRetryReady, the record inside every result) shows who
// holds a lease or claim, its sequence number and its times, never its
// token (see Delivery.Redacted), and JSON never includes one.
type Token string

// Lease is an exclusive, expiring hold on one delivery.
//
// A lease is valid on the half-open interval [GrantedAt, ExpiresAt): at
// now == ExpiresAt it has expired. Seq is the delivery's lease sequence
// number, one more with every grant, so any two leases of one delivery are
// ordered and a late call made under an earlier grant never lands on a later
// one. Stores check both Token and Seq on every lease-bearing call.
//
// The caller's clock is trusted: a worker whose clock runs slow keeps acting
// on an expired lease until someone else takes the delivery. The token, the
// sequence number and the processing fence are the hard guards, not time.
//
// Only the Lease that Ledger.Lease returns to the grantee (in
// LeasedDelivery.Lease) carries the Token; keep it, and pass it back to
// Acknowledge, MarkFailed, Release and RenewLease. The Lease inside a
// Delivery read back from a store has an empty Token: it says who holds
// the delivery, under which sequence number and until when, and cannot
// be used to act on it. Token is never written to JSON.
type Lease struct {
	DeliveryID DeliveryID `json:"delivery_id"`
	Owner      Owner      `json:"owner"`
	Token      Token      `json:"-"`
	Seq        int64      `json:"seq"`
	GrantedAt  time.Time  `json:"granted_at,omitzero"`
	ExpiresAt  time.Time  `json:"expires_at,omitzero"`
}

// ExpiredAt reports whether the lease has run out at now.
func (l Lease) ExpiredAt(now time.Time) bool { return !now.Before(l.ExpiresAt) }

// Claim is an exclusive, expiring hold on one outbox entry, taken by a
// worker before it emits the entry to its provider.
//
// Like a Lease it carries a random Token and the entry's claim sequence
// number Seq. Providers should use the pair (EntryID, Seq) as their own
// idempotency key: claims reduce duplicate selection among cooperating
// workers, but they do not make provider delivery exactly-once. A worker
// that stalls past ExpiresAt can still be emitting when another worker
// claims the entry again.
//
// Only the Claim that ClaimPending or ClaimRetryReady returns to the
// worker (in ClaimedEntry.Claim) carries the Token; the Claim inside an
// OutboxEntry read back from a store has an empty one, and Token is never
// written to JSON (see Lease).
type Claim struct {
	EntryID   OutboxEntryID `json:"entry_id"`
	Worker    string        `json:"worker"`
	Token     Token         `json:"-"`
	Seq       int64         `json:"seq"`
	ClaimedAt time.Time     `json:"claimed_at,omitzero"`
	ExpiresAt time.Time     `json:"expires_at,omitzero"`
}

// ExpiredAt reports whether the claim has run out at now.
func (c Claim) ExpiredAt(now time.Time) bool { return !now.Before(c.ExpiresAt) }

// Operation names a call of either contract. Records remember the operation
// that ended their last lease or claim, so that a repeated call can be told
// apart from a stale one.
type Operation string

// The operations of both contracts.
const (
	OpEnqueue          Operation = "enqueue"
	OpLease            Operation = "lease"
	OpAcknowledge      Operation = "acknowledge"
	OpMarkProcessed    Operation = "mark_processed"
	OpRecordActivation Operation = "record_activation"
	OpMarkFailed       Operation = "mark_failed"
	OpRelease          Operation = "release"
	OpExpire           Operation = "expire"
	OpAbandon          Operation = "abandon"
	OpExpireCeremony   Operation = "expire_ceremony"
	OpSupersede        Operation = "supersede"
	OpReclaim          Operation = "reclaim"     // incarnation rule
	OpRenewLease       Operation = "renew_lease" // names renewals in logs and history; never ends a grant
	OpRedrive          Operation = "redrive"     // both contracts: see Redriver and OutboxRedriver

	OpSave             Operation = "save"
	OpMarkDelivered    Operation = "mark_delivered"
	OpMarkDeadLettered Operation = "mark_dead_lettered"
	OpClaim            Operation = "claim"
	OpReleaseClaim     Operation = "release_claim"
	OpSaveClaim        Operation = "save_claim"
	OpRenewClaim       Operation = "renew_claim"
)

// Valid reports whether op is one of the operations above.
func (op Operation) Valid() bool {
	switch op {
	case OpEnqueue, OpLease, OpAcknowledge, OpMarkProcessed, OpRecordActivation,
		OpMarkFailed, OpRelease, OpExpire, OpAbandon, OpExpireCeremony, OpSupersede,
		OpReclaim, OpSave, OpMarkDelivered, OpMarkDeadLettered, OpClaim,
		OpReleaseClaim, OpSaveClaim, OpRenewLease, OpRenewClaim, OpRedrive:
		return true
	}
	return false
}

// EndedGrant remembers how a record's most recent lease or claim ended while
// the record stays open, so that a call repeated under that grant answers
// OutcomeRepeated instead of OutcomeLeaseLost. The next grant clears it.
// Stores keep its Token to recognise the repeat; records handed out carry
// it empty, and JSON never includes it.
type EndedGrant struct {
	Token Token `json:"-"`
	Seq   int64 `json:"seq"`
	// Op is the operation that ended the grant.
	Op Operation `json:"op"`
	At time.Time `json:"at,omitzero"`
}

// Normalize returns t in UTC, truncated to the microsecond. Both stores
// apply it at the API boundary, before any comparison or write.
func Normalize(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }
