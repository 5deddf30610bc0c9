package memstore

import (
	"context"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// Compile-time checks that Store implements the delivery contracts.
var (
	_ ledger.Ledger        = (*Store)(nil)
	_ ledger.FenceRejecter = (*Store)(nil)
	_ ledger.BatchEnqueuer = (*Store)(nil)
)

// Option configures a Store (and the Outbox beside it).
type Option func(*config)

type config struct {
	policy     ledger.Policy
	maxPayload int
	clock      func() time.Time
	// noHistory switches history recording off (WithoutHistory); the zero
	// config records it.
	noHistory bool
	// bounds are the targets' queue bounds (bound.go).
	bounds ledger.QueueBounds
}

func newConfig(opts []Option) config {
	c := config{
		policy:     ledger.DefaultPolicy().Resolve(ledger.DefaultPolicy()),
		maxPayload: ledger.DefaultMaxPayload,
		clock:      time.Now,
	}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

// WithDefaultPolicy sets the policy whose fields fill an EnqueueRequest's
// zero Policy fields. Zero fields of p fall back to ledger.DefaultPolicy(). A
// policy that fails p.Validate is ignored, so the store keeps its previous
// default; options never panic.
func WithDefaultPolicy(p ledger.Policy) Option {
	return func(c *config) {
		if p.Validate("default policy") != nil {
			return
		}
		c.policy = p.Resolve(ledger.DefaultPolicy())
	}
}

// WithMaxPayload sets the largest payload, in bytes, that Enqueue accepts
// for deliveries and outbox envelopes (ledger.DefaultMaxPayload by
// default). A value below 1 or above ledger.MaxPayloadLimit (the bound
// pgstore keeps too, so that both stores accept the same payloads) is
// ignored.
func WithMaxPayload(n int) Option {
	return func(c *config) {
		if n >= 1 && n <= ledger.MaxPayloadLimit {
			c.maxPayload = n
		}
	}
}

// WithClock sets the clock that stamps the timestamps of the outbox methods
// that carry no now (Enqueue, Save and the completions); time.Now by
// default. It is never used for a decision: leases, claims and expiry use
// the now of the call. A nil clock is ignored.
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		if now != nil {
			c.clock = now
		}
	}
}

// Store is the in-memory delivery ledger. It is safe for concurrent use;
// the zero value is not usable: create one with New.
type Store struct {
	cfg    config
	outbox *Outbox
	// leads holds the leadership leases, shared with outbox (lead.go).
	leads *leadTable

	mu sync.Mutex
	// records maps the ID of every delivery held to its slot, the
	// record's number in recs. Only PurgeDeliveries deletes records; it
	// keeps recs dense by moving the last record into the emptied slot and
	// re-keying it.
	records map[ledger.DeliveryID]uint32
	// recs holds every record by slot. Transitions replace the record in
	// place, after updating the indexes below. The time indexes key
	// records by slot, not by ID, so that their nodes hold no pointers.
	recs []*ledger.Delivery
	// slab is the block new records are placed in. Records are never
	// deleted, so blocks never need freeing; one allocation per block
	// instead of per record saves time and the allocator's rounding.
	slab []ledger.Delivery
	// ids orders every delivery by ID, for List.
	ids btree[idKey]
	// offers holds the candidates of Lease (Offered and Leased deliveries)
	// by (AvailableAt, ID) (offerOrder); byTarget and byCeremony hold the
	// same candidates split by target and by ceremony. For a Leased
	// delivery AvailableAt is its lease's expiry, when it becomes
	// offerable again.
	offers     btree[slotKey]
	byTarget   groups[ledger.Target, slotKey]
	byCeremony groups[ledger.CeremonyID, slotKey]
	// open holds each ceremony's open deliveries by ID, for ExpireCeremony.
	open groups[ledger.CeremonyID, idKey]
	// leases holds Leased deliveries by (lease ExpiresAt, slot) and acks
	// Acknowledged ones by (Ack.Deadline, slot), for Expire, which needs
	// every due record but no particular order among them.
	leases btree[slotKey]
	acks   btree[slotKey]
	// holders holds Leased deliveries by agent and incarnation, for the
	// incarnation rule of Lease.
	holders holderIndex
	// spent holds the offer candidates whose attempts are used up, by
	// (AvailableAt, slot): they are in the offer indexes but never
	// offerable, and Stats takes them off its count of due keys.
	spent btree[slotKey]
	// counts counts the records by state and cause, per filter, for Stats.
	counts tallies
	// hist holds each record's history after its creation, by slot (see
	// history.go); nil when history is off.
	hist [][]event
	// fences is the highest fence accepted per target.
	fences map[ledger.Target]*ledger.Fence
}

// maxSlab bounds the records per slab block: as many as fit 32 KiB, the
// largest size class of Go's allocator, since a block past it is rounded
// up to whole pages and wastes the remainder.
const maxSlab = 32 << 10 / int(unsafe.Sizeof(ledger.Delivery{}))

// New returns an empty Store configured by opts, with an empty Outbox
// beside it.
func New(opts ...Option) *Store {
	cfg := newConfig(opts)
	leads := newLeadTable()
	s := &Store{
		cfg:     cfg,
		outbox:  newOutbox(cfg, leads),
		leads:   leads,
		records: make(map[ledger.DeliveryID]uint32),
		fences:  make(map[ledger.Target]*ledger.Fence),
	}
	s.offers.cmp = s.offerOrder
	s.byTarget.cmp = s.offerOrder
	s.byCeremony.cmp = s.offerOrder
	return s
}

// Outbox returns the outbox living beside s, configured with the same
// options. It is a separate value because the two contracts cannot share
// one Go type; it has its own lock and shares no records with s, only the
// leads of ledger.Elector, so that a lead taken through one is held
// through the other.
func (s *Store) Outbox() *Outbox { return s.outbox }

// key returns the index key of the record in slot by one of its times.
func key(t time.Time, slot uint32) slotKey {
	return slotKey{at: t.UnixMicro(), slot: slot}
}

// offerOrder orders the offer indexes the way Lease hands deliveries out:
// by time (AvailableAt), then by ID. Only keys of equal time reach the IDs.
// The caller holds s.mu.
func (s *Store) offerOrder(a, b slotKey) int {
	switch {
	case a.at < b.at:
		return -1
	case a.at > b.at:
		return 1
	case a.slot == b.slot:
		return 0
	}
	return strings.Compare(string(s.recs[a.slot].ID), string(s.recs[b.slot].ID))
}

// candidate reports whether d belongs in the offer indexes.
func candidate(d *ledger.Delivery) bool {
	return d != nil && (d.State == ledger.DeliveryStateOffered || d.State == ledger.DeliveryStateLeased)
}

// leased reports whether d belongs in the lease indexes.
func leased(d *ledger.Delivery) bool {
	return d != nil && d.State == ledger.DeliveryStateLeased && d.Lease != nil
}

// acked reports whether d belongs in the acknowledgement index.
func acked(d *ledger.Delivery) bool {
	return d != nil && d.State == ledger.DeliveryStateAcknowledged && d.Ack != nil
}

// openInCeremony reports whether d belongs in its ceremony's open set.
func openInCeremony(d *ledger.Delivery) bool {
	return d != nil && d.Ceremony != "" && !d.State.Terminal()
}

// insert stores a new record and indexes it. The caller holds s.mu and
// has checked that d.ID is new.
func (s *Store) insert(d *ledger.Delivery) {
	if len(s.slab) == cap(s.slab) {
		// Blocks grow with the store, so a small store stays small.
		s.slab = make([]ledger.Delivery, 0, min(maxSlab, max(4, len(s.recs)/8)))
	}
	s.slab = append(s.slab, *d)
	p := &s.slab[len(s.slab)-1]
	slot := uint32(len(s.recs))
	s.recs = append(s.recs, p)
	s.records[d.ID] = slot
	s.ids.insert(idKey(d.ID))
	if !s.cfg.noHistory {
		s.hist = append(s.hist, nil)
	}
	s.counts.move(nil, p)
	s.reindex(slot, nil, p)
}

// replace overwrites the record in slot with d, the result of op made for
// actor (the zero Owner: nobody in particular), moving it between indexes
// and counts and writing its history entry first. Every transition that
// writes goes through here, so no change of State, Target, Ceremony,
// AvailableAt, lease or acknowledgement can miss an index, a count or the
// history. The caller holds s.mu.
func (s *Store) replace(slot uint32, d *ledger.Delivery, op ledger.Operation, actor ledger.Owner) {
	p := s.recs[slot]
	if !s.cfg.noHistory {
		s.record(slot, op, p, d, actor)
	}
	s.counts.move(p, d)
	s.reindex(slot, p, d)
	*p = *d
}

// reindex moves the record in slot from the index entries of old (nil for
// a new record) to those of d, touching only the indexes whose key
// changed.
func (s *Store) reindex(slot uint32, old, d *ledger.Delivery) {
	if wasIn, isIn := candidate(old), candidate(d); wasIn != isIn || (wasIn &&
		(!old.AvailableAt.Equal(d.AvailableAt) || old.Target != d.Target || old.Ceremony != d.Ceremony)) {
		if wasIn {
			s.removeOffer(slot, old)
		}
		if isIn {
			s.addOffer(slot, d)
		}
	}
	if wasIn, isIn := spent(old), spent(d); wasIn != isIn || (wasIn && !old.AvailableAt.Equal(d.AvailableAt)) {
		if wasIn {
			s.spent.delete(key(old.AvailableAt, slot))
		}
		if isIn {
			s.spent.insert(key(d.AvailableAt, slot))
		}
	}
	if wasIn, isIn := leased(old), leased(d); wasIn != isIn || (wasIn &&
		(!old.Lease.ExpiresAt.Equal(d.Lease.ExpiresAt) || old.Lease.Owner != d.Lease.Owner)) {
		if wasIn {
			s.leases.delete(key(old.Lease.ExpiresAt, slot))
			s.holders.remove(old.Lease.Owner, slot)
		}
		if isIn {
			s.leases.insert(key(d.Lease.ExpiresAt, slot))
			s.holders.add(d.Lease.Owner, slot)
		}
	}
	if wasIn, isIn := acked(old), acked(d); wasIn != isIn || (wasIn && !old.Ack.Deadline.Equal(d.Ack.Deadline)) {
		if wasIn {
			s.acks.delete(key(old.Ack.Deadline, slot))
		}
		if isIn {
			s.acks.insert(key(d.Ack.Deadline, slot))
		}
	}
	if wasIn, isIn := openInCeremony(old), openInCeremony(d); wasIn != isIn || (wasIn && old.Ceremony != d.Ceremony) {
		if wasIn {
			s.open.remove(old.Ceremony, idKey(old.ID))
		}
		if isIn {
			s.open.add(d.Ceremony, idKey(d.ID))
		}
	}
}

func (s *Store) addOffer(slot uint32, d *ledger.Delivery) {
	k := key(d.AvailableAt, slot)
	s.offers.insert(k)
	s.byTarget.add(d.Target, k)
	if d.Ceremony != "" {
		s.byCeremony.add(d.Ceremony, k)
	}
}

func (s *Store) removeOffer(slot uint32, d *ledger.Delivery) {
	k := key(d.AvailableAt, slot)
	s.offers.delete(k)
	s.byTarget.remove(d.Target, k)
	if d.Ceremony != "" {
		s.byCeremony.remove(d.Ceremony, k)
	}
}

// holderIndex is the set of Leased deliveries per agent and incarnation.
// It uses maps rather than an ordered index: the incarnation rule needs
// membership by owner, not order, and a map insert or delete is several
// times cheaper than a tree's on the path of every Lease and Acknowledge.
type holderIndex struct {
	agents map[string]*agentLeases
	idle   int // agents in the map holding nothing
}

type agentLeases struct {
	held  int
	byInc map[string]map[uint32]struct{} // slots by incarnation
}

func (h *holderIndex) add(o ledger.Owner, slot uint32) {
	if h.agents == nil {
		h.agents = make(map[string]*agentLeases)
	}
	a := h.agents[o.Agent]
	if a == nil {
		a = &agentLeases{byInc: make(map[string]map[uint32]struct{}, 1)}
		h.agents[o.Agent] = a
	} else if a.held == 0 {
		h.idle--
	}
	set := a.byInc[o.Incarnation]
	if set == nil {
		// A new incarnation: the empty set kept for an earlier one goes.
		for inc, old := range a.byInc {
			if len(old) == 0 {
				delete(a.byInc, inc)
			}
		}
		set = make(map[uint32]struct{})
		a.byInc[o.Incarnation] = set
	}
	set[slot] = struct{}{}
	a.held++
}

func (h *holderIndex) remove(o ledger.Owner, slot uint32) {
	a := h.agents[o.Agent]
	if a == nil {
		return
	}
	set := a.byInc[o.Incarnation]
	if _, ok := set[slot]; !ok {
		return
	}
	delete(set, slot)
	a.held--
	// An agent's last incarnation keeps its (empty) set, so that an agent
	// whose leases come and go does not reallocate it; a superseded
	// incarnation's set goes once empty.
	if len(set) == 0 && len(a.byInc) > 1 {
		delete(a.byInc, o.Incarnation)
	}
	if a.held > 0 {
		return
	}
	// Idle agents are dropped in bulk once they outnumber the busy ones,
	// as groups drops emptied trees.
	h.idle++
	if h.idle > 64 && h.idle > len(h.agents)/2 {
		for name, a := range h.agents {
			if a.held == 0 {
				delete(h.agents, name)
			}
		}
		h.idle = 0
	}
}

// others returns the slots of the deliveries Leased to o's agent under
// incarnations other than o's, in no particular order.
func (h *holderIndex) others(o ledger.Owner) []uint32 {
	a := h.agents[o.Agent]
	if a == nil || a.held == len(a.byInc[o.Incarnation]) {
		return nil
	}
	var slots []uint32
	for inc, set := range a.byInc {
		if inc == o.Incarnation {
			continue
		}
		for slot := range set {
			slots = append(slots, slot)
		}
	}
	return slots
}

// groups is a family of indexes by name (target or ceremony). A tree that
// empties stays in the map, so that a name whose work comes and goes does
// not reallocate its index every time; emptied trees are dropped in bulk
// once they outnumber the live ones, so that names that never come back
// do not accumulate. The sweep is amortised O(1) per emptying.
type groups[N comparable, K ordered[K]] struct {
	m     map[N]*btree[K]
	empty int // trees in m holding nothing
	// cmp is the comparator of every tree of the family (see btree.cmp).
	cmp func(a, b K) int
}

// get returns the tree of name; nil or empty when name has nothing.
func (g *groups[N, K]) get(name N) *btree[K] { return g.m[name] }

func (g *groups[N, K]) add(name N, k K) {
	if g.m == nil {
		g.m = make(map[N]*btree[K])
	}
	t := g.m[name]
	switch {
	case t == nil:
		t = &btree[K]{cmp: g.cmp}
		g.m[name] = t
	case t.Len() == 0:
		g.empty-- // an emptied tree comes back into use
	}
	t.insert(k)
}

func (g *groups[N, K]) remove(name N, k K) {
	t := g.m[name]
	if t == nil || !t.delete(k) || t.Len() > 0 {
		return
	}
	g.empty++
	if g.empty > 64 && g.empty > len(g.m)/2 {
		for n, t := range g.m {
			if t.Len() == 0 {
				delete(g.m, n)
			}
		}
		g.empty = 0
	}
}

// begin runs the checks every method starts with, in order: a usable
// context, the call's own validation (invalid, computed by the caller), and
// a context not already done. A call that fails any of them touches nothing.
func begin(ctx context.Context, invalid error) error {
	if err := storekit.ValidateContext(ctx); err != nil {
		return err
	}
	if invalid != nil {
		return invalid
	}
	return ctx.Err()
}

// handOut returns the copy of a stored delivery that leaves the store: a
// deep copy, so that the caller shares no memory with the store, without
// the tokens of its lease and ended lease (ledger.Delivery.Redacted): a
// token is the grantee's alone, and reaches it only in the Lease that
// Lease returns. Every record a method returns goes through here.
func handOut(d ledger.Delivery) ledger.Delivery { return d.Clone().Redacted() }

// handOutEntry is handOut for outbox entries and their claim tokens.
func handOutEntry(e ledger.OutboxEntry) ledger.OutboxEntry { return e.Clone().Redacted() }
