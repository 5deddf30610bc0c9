package memstore

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/leaseledger/ledger"
)

// checkStore rebuilds every index of s from its records and compares: an
// index that missed a transition (or kept a stale key) shows up here. It
// also checks the structure of every tree.
func checkStore(s *Store) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var (
		ids, offers, leases, acks []string
		spentKeys                 []string
		counts                    tallies
		byTarget                  = map[ledger.Target][]string{}
		byCeremony                = map[ledger.CeremonyID][]string{}
		open                      = map[ledger.CeremonyID][]string{}
		holders                   = map[ledger.Owner][]string{}
	)
	str := func(k slotKey) string { return fmt.Sprintf("%d/%d", k.at, k.slot) }
	if len(s.recs) != len(s.records) {
		return fmt.Errorf("%d records by ID, %d by slot", len(s.records), len(s.recs))
	}
	taken := make([]bool, len(s.recs))
	for id, slot := range s.records {
		if int(slot) >= len(s.recs) || taken[slot] {
			return fmt.Errorf("record %q in slot %d: out of range or shared", id, slot)
		}
		taken[slot] = true
		p := s.recs[slot]
		if p.ID != id {
			return fmt.Errorf("record %q stored under %q", p.ID, id)
		}
		ids = append(ids, string(id))
		counts.move(nil, p)
		if spent(p) {
			spentKeys = append(spentKeys, str(key(p.AvailableAt, slot)))
		}
		if err := checkHistory(s, slot); err != nil {
			return err
		}
		if candidate(p) {
			k := str(key(p.AvailableAt, slot))
			offers = append(offers, k)
			byTarget[p.Target] = append(byTarget[p.Target], k)
			if p.Ceremony != "" {
				byCeremony[p.Ceremony] = append(byCeremony[p.Ceremony], k)
			}
		}
		if leased(p) {
			leases = append(leases, str(key(p.Lease.ExpiresAt, slot)))
			holders[p.Lease.Owner] = append(holders[p.Lease.Owner], string(id))
		}
		if acked(p) {
			acks = append(acks, str(key(p.Ack.Deadline, slot)))
		}
		if openInCeremony(p) {
			open[p.Ceremony] = append(open[p.Ceremony], string(id))
		}
	}
	idStr := func(k idKey) string { return string(k) }
	if err := sameKeys("ids", &s.ids, ids, idStr, idKey.compare); err != nil {
		return err
	}
	// The offer indexes must hold their keys in Lease's order, (time, ID),
	// whatever comparator their trees were given; the others in key order.
	if err := sameKeys("offers", &s.offers, offers, str, s.offerOrder); err != nil {
		return err
	}
	if err := sameKeys("leases", &s.leases, leases, str, slotKey.compare); err != nil {
		return err
	}
	if err := sameKeys("acks", &s.acks, acks, str, slotKey.compare); err != nil {
		return err
	}
	if err := sameKeys("spent", &s.spent, spentKeys, str, slotKey.compare); err != nil {
		return err
	}
	if err := sameTallies(&s.counts, &counts); err != nil {
		return err
	}
	if err := sameGroups("byTarget", &s.byTarget, byTarget, str, s.offerOrder); err != nil {
		return err
	}
	if err := sameGroups("byCeremony", &s.byCeremony, byCeremony, str, s.offerOrder); err != nil {
		return err
	}
	if err := sameGroups("open", &s.open, open, idStr, idKey.compare); err != nil {
		return err
	}
	got := map[ledger.Owner][]string{}
	idle := 0
	for agent, a := range s.holders.agents {
		n := 0
		for inc, set := range a.byInc {
			if len(set) == 0 && len(a.byInc) > 1 {
				return fmt.Errorf("holders: empty set kept for superseded %s/%s", agent, inc)
			}
			for slot := range set {
				if int(slot) >= len(s.recs) {
					return fmt.Errorf("holders: slot %d out of range", slot)
				}
				o := ledger.Owner{Agent: agent, Incarnation: inc}
				got[o] = append(got[o], string(s.recs[slot].ID))
				n++
			}
		}
		if n != a.held {
			return fmt.Errorf("holders: agent %s holds %d, counted %d", agent, n, a.held)
		}
		if n == 0 {
			idle++
		}
	}
	if idle != s.holders.idle {
		return fmt.Errorf("holders: %d idle agents, counted %d", idle, s.holders.idle)
	}
	if len(got) != len(holders) {
		return fmt.Errorf("holders: %d owners indexed, %d hold leases", len(got), len(holders))
	}
	for o, want := range holders {
		slices.Sort(want)
		have := got[o]
		slices.Sort(have)
		if !slices.Equal(want, have) {
			return fmt.Errorf("holders of %s: index %v, records %v", o, have, want)
		}
	}
	return nil
}

// checkHistory checks the history kept for the record in slot: none when
// history is off; else a chain from the creation state, each entry's From
// the To of the one before, ending in the record's state, with as many
// entries as the record's Version and as many grants as its LeaseSeq.
func checkHistory(s *Store, slot uint32) error {
	p := s.recs[slot]
	if s.cfg.noHistory {
		if s.hist != nil {
			return fmt.Errorf("history kept with history off")
		}
		return nil
	}
	if len(s.hist) != len(s.recs) {
		return fmt.Errorf("%d histories for %d records", len(s.hist), len(s.recs))
	}
	return checkChain(string(p.ID), s.hist[slot], deliveryStates[:], string(ledger.DeliveryStateOffered),
		string(p.State), p.CreatedAt, p.UpdatedAt, p.Version, ledger.OpLease, p.LeaseSeq)
}

// checkChain checks one record's stored history events against the record:
// first is its state at creation, last its state now, version its Version,
// grants its LeaseSeq (or ClaimSeq), counted as entries made by grant.
// Times need not grow: every call brings its own now.
func checkChain(id string, events []event, states []string, first, last string, created, updated time.Time, version int64, grant ledger.Operation, grants int64) error {
	if int64(len(events))+1 != version {
		return fmt.Errorf("%s: %d history entries after the creation, version %d", id, len(events), version)
	}
	state, at, n := first, created.UnixMicro(), int64(0)
	for i, e := range events {
		if states[e.from] != state {
			return fmt.Errorf("%s: entry %d goes from %q, the one before ended in %q", id, i+2, states[e.from], state)
		}
		if operations[e.op] == grant {
			n++
		}
		state, at = states[e.to], e.at
	}
	switch {
	case state != last:
		return fmt.Errorf("%s: history ends in %q, record is %q", id, state, last)
	case at != updated.UnixMicro():
		return fmt.Errorf("%s: history ends at %d, record updated at %d", id, at, updated.UnixMicro())
	case n != grants:
		return fmt.Errorf("%s: %d grants in history, sequence %d", id, n, grants)
	}
	return nil
}

// sameTallies compares the counts a store keeps with the counts of its
// records, group by group.
func sameTallies(have, want *tallies) error {
	if err := sameTally("all", &have.all, &want.all); err != nil {
		return err
	}
	if err := sameTallyGroups("target", have.byTarget, want.byTarget); err != nil {
		return err
	}
	if err := sameTallyGroups("ceremony", have.byCeremony, want.byCeremony); err != nil {
		return err
	}
	return sameTallyGroups("pair", have.byPair, want.byPair)
}

func sameTallyGroups[N comparable](name string, have, want map[N]*tally) error {
	if len(have) != len(want) {
		return fmt.Errorf("tallies by %s: %d kept, %d groups have records", name, len(have), len(want))
	}
	for n, w := range want {
		h, ok := have[n]
		if !ok {
			return fmt.Errorf("tallies by %s: %v missing", name, n)
		}
		if err := sameTally(fmt.Sprintf("%s %v", name, n), h, w); err != nil {
			return err
		}
	}
	return nil
}

func sameTally(name string, have, want *tally) error {
	if have.total != want.total || have.states != want.states || !maps.Equal(have.causes, want.causes) {
		return fmt.Errorf("tally %s: kept %+v, records give %+v", name, *have, *want)
	}
	return nil
}

// sameKeys checks the structure of t, that its keys ascend strictly by
// order, and that they are want (as str prints them, in any order).
func sameKeys[K ordered[K]](name string, t *btree[K], want []string, str func(K) string, order func(a, b K) int) error {
	keys, err := checkTree(t)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	for i := 1; i < len(keys); i++ {
		if order(keys[i-1], keys[i]) >= 0 {
			return fmt.Errorf("%s: keys out of order at %d: %v then %v", name, i, keys[i-1], keys[i])
		}
	}
	have := make([]string, len(keys))
	for i, k := range keys {
		have[i] = str(k)
	}
	slices.Sort(have)
	slices.Sort(want)
	if !slices.Equal(have, want) {
		return fmt.Errorf("%s: index holds %v, records say %v", name, have, want)
	}
	return nil
}

func sameGroups[N comparable, K ordered[K]](name string, g *groups[N, K], want map[N][]string, str func(K) string, order func(a, b K) int) error {
	empty := 0
	for n, t := range g.m {
		if t.Len() == 0 {
			empty++
			continue
		}
		if _, ok := want[n]; !ok {
			return fmt.Errorf("%s: group %v indexed with %d keys, records have none", name, n, t.Len())
		}
	}
	if empty != g.empty {
		return fmt.Errorf("%s: %d empty trees, counted %d", name, empty, g.empty)
	}
	for n, keys := range want {
		t := g.get(n)
		if t == nil {
			return fmt.Errorf("%s: group %v missing", name, n)
		}
		if err := sameKeys(fmt.Sprintf("%s[%v]", name, n), t, keys, str, order); err != nil {
			return err
		}
	}
	return nil
}

// checkOutbox does the same for an Outbox.
func checkOutbox(o *Outbox) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	var pending, scheduled []string
	var counts [len(outboxStatuses)]int64
	str := func(k timeKey) string { return fmt.Sprintf("%d/%s", k.at, k.id) }
	pstr := func(k seqKey) string { return fmt.Sprintf("%d/%d/%s", k.at, k.seq, k.id) }
	if len(o.seqs) != len(o.entries) {
		return fmt.Errorf("%d enqueue sequences for %d entries", len(o.seqs), len(o.entries))
	}
	seen := make(map[uint64]bool, len(o.seqs))
	for id, p := range o.entries {
		if p.ID != id {
			return fmt.Errorf("entry %q stored under %q", p.ID, id)
		}
		seq := o.seqs[id]
		if seq < 1 || seq > o.enqueued || seen[seq] {
			return fmt.Errorf("entry %q has enqueue sequence %d (counter at %d, or taken)", id, seq, o.enqueued)
		}
		seen[seq] = true
		if p.Status == ledger.OutboxStatusPending {
			pending = append(pending, pstr(seqKey{at: p.CreatedAt.UnixMicro(), seq: seq, id: string(id)}))
		}
		if p.Status.Scheduled() {
			scheduled = append(scheduled, str(entryKey(p.NextAttemptAt, id)))
		}
		counts[statusCode(string(p.Status))]++
		if o.cfg.noHistory {
			if p.hist != nil {
				return fmt.Errorf("history kept with history off")
			}
			continue
		}
		if err := checkChain(string(id), p.hist, outboxStatuses[:], string(ledger.OutboxStatusPending),
			string(p.Status), p.CreatedAt, p.UpdatedAt, p.Version, ledger.OpClaim, p.ClaimSeq); err != nil {
			return err
		}
	}
	if counts != o.counts {
		return fmt.Errorf("counts by status: kept %v, entries give %v", o.counts, counts)
	}
	if err := sameKeys("pending", &o.pending, pending, pstr, seqKey.compare); err != nil {
		return err
	}
	return sameKeys("scheduled", &o.scheduled, scheduled, str, timeKey.compare)
}

// visits sums the node visits of every index of s.
func (s *Store) visits() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.ids.visits + s.offers.visits + s.leases.visits + s.acks.visits + s.spent.visits
	for _, t := range s.byTarget.m {
		n += t.visits
	}
	for _, t := range s.byCeremony.m {
		n += t.visits
	}
	for _, t := range s.open.m {
		n += t.visits
	}
	return n
}
