package pgstore

import (
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/leaseledger/ledger"
)

// This file keeps the records this store holds grants on: every record a
// Lease or a claim of this store granted, as its transaction committed
// it, and as each later transition of this store committed it while a
// lease or claim stays in force on it. A transition on a held record is
// decided in Go on the held copy and written back in one statement that
// applies only when the row is still exactly that copy: its version and
// its token in force unchanged (see held_tx.go). It needs no locking
// read, and no round trip beside its own: the statement is a transaction
// of its own, one pipeline committed at its Sync (oneTrip).
//
// Why the version and the token together are enough: every applied
// transition, of any process, bumps the version, so a row at the held
// version has not changed since this store wrote it; and a version is
// unique only along one record's committed history, which a purge and a
// new enqueue of the same ID would start again at 1, but the token in
// force comes from a cryptographic random source and belongs to exactly
// one grant. A row that moved on, or a record that is not the held one,
// fails the check, writes nothing, and the call is decided again the
// ordinary way, under the row's lock.
//
// Only committed records are held: a grant or a transition run inside a
// caller's transaction (WithTx) may still roll back, and a version it
// wrote may then be written again with other contents, so those calls
// neither read nor fill the cache.

// heldMax bounds the records kept: what is evicted is decided again the
// ordinary way, so the bound costs speed, never correctness. It is far
// above what a process holds in hand (a few batches per worker).
const heldMax = 1 << 16

// heldRecords is the cache of one kind of record, by ID.
type heldRecords[R any] struct {
	mu sync.Mutex
	m  map[string]heldCopy[R]
}

// heldCopy is a held record and, when the statement that wrote it said,
// the position of the version it wrote (see position.go).
type heldCopy[R any] struct {
	r   R
	pos tuplePos
}

func newHeldRecords[R any]() *heldRecords[R] {
	return &heldRecords[R]{m: make(map[string]heldCopy[R])}
}

// get returns the held copy of record id and its position. The caller
// must not change what it shares with the cache (its payload and
// metadata); state machine steps return new records and never do.
func (h *heldRecords[R]) get(id string) (R, tuplePos, bool) {
	h.mu.Lock()
	c, ok := h.m[id]
	h.mu.Unlock()
	return c.r, c.pos, ok
}

// put keeps r, committed at pos (the zero tuplePos when not known), as
// the held copy of record id, replacing whatever was held: the caller
// committed it, so it is the newest. When the cache is full some other
// record is dropped.
func (h *heldRecords[R]) put(id string, r R, pos tuplePos) {
	h.mu.Lock()
	if _, ok := h.m[id]; !ok && len(h.m) >= heldMax {
		for k := range h.m { // map order: an arbitrary victim
			delete(h.m, k)
			break
		}
	}
	h.m[id] = heldCopy[R]{r: r, pos: pos}
	h.mu.Unlock()
}

// drop forgets record id.
func (h *heldRecords[R]) drop(id string) {
	h.mu.Lock()
	delete(h.m, id)
	h.mu.Unlock()
}

// heldKind is the cache of one kind of record and how the held write
// writes it.
type heldKind[R any] struct {
	cache *heldRecords[R]
	kind  *recordKind[R]
	tail  *heldTail
}

// heldState is a store's held records of both kinds.
type heldState struct {
	entries    heldKind[ledger.OutboxEntry]
	deliveries heldKind[ledger.Delivery]
}

func newHeldState(schema string, q *queries) *heldState {
	s := pgx.Identifier{schema}.Sanitize()
	return &heldState{
		entries: heldKind[ledger.OutboxEntry]{
			cache: newHeldRecords[ledger.OutboxEntry](),
			kind:  newEntryRecords(schema, q),
			tail: &heldTail{token: "claim_token", counts: s + ".outbox_counts",
				countKeys: []string{"status", "shard"}, countTypes: []string{"text", "smallint"}},
		},
		deliveries: heldKind[ledger.Delivery]{
			cache: newHeldRecords[ledger.Delivery](),
			kind:  newDeliveryRecords(schema, q),
			tail: &heldTail{token: "lease_token", counts: s + ".delivery_counts",
				countKeys:  []string{"target", "ceremony", "state", "cause_kind", "shard"},
				countTypes: []string{"text", "text", "text", "text", "smallint"}},
		},
	}
}

// keepEntry keeps e, just committed by this store at pos (the zero
// tuplePos when not known), while a claim is in force on it, and forgets
// it otherwise.
func (h *heldState) keepEntry(e ledger.OutboxEntry, pos tuplePos) {
	if e.Claim != nil {
		h.entries.cache.put(string(e.ID), e, pos)
		return
	}
	h.entries.cache.drop(string(e.ID))
}

// keepDelivery is keepEntry for deliveries: while a lease is in force.
func (h *heldState) keepDelivery(d ledger.Delivery, pos tuplePos) {
	if d.Lease != nil {
		h.deliveries.cache.put(string(d.ID), d, pos)
		return
	}
	h.deliveries.cache.drop(string(d.ID))
}

// settledEntry updates the cache after the ordinary path decided a call
// on entry id and committed (or rolled back) res: an applied transition
// keeps its record, anything else forgets the held copy, which may be
// stale. The ordinary path does not read the position of what it wrote, so
// a held write on the record finds it by ID. A nil h (a store bound to a
// caller's transaction) does nothing.
func (h *heldState) settledEntry(id ledger.OutboxEntryID, res ledger.OutboxResult) {
	if h == nil {
		return
	}
	if res.Outcome == ledger.OutcomeApplied {
		h.keepEntry(res.Entry.Clone(), tuplePos{})
		return
	}
	h.entries.cache.drop(string(id))
}

// settledDelivery is settledEntry for deliveries.
func (h *heldState) settledDelivery(id ledger.DeliveryID, res ledger.DeliveryResult) {
	if h == nil {
		return
	}
	if res.Outcome == ledger.OutcomeApplied {
		h.keepDelivery(res.Delivery.Clone(), tuplePos{})
		return
	}
	h.deliveries.cache.drop(string(id))
}
