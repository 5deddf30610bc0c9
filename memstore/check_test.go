package memstore

import (
	"fmt"
	"slices"

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
		byTarget                  = map[ledger.Target][]string{}
		byCeremony                = map[ledger.CeremonyID][]string{}
		open                      = map[ledger.CeremonyID][]string{}
		holders                   = map[ledger.Owner][]string{}
	)
	str := func(k timeKey) string { return fmt.Sprintf("%d/%s", k.at, k.id) }
	for id, p := range s.records {
		if p.ID != id {
			return fmt.Errorf("record %q stored under %q", p.ID, id)
		}
		ids = append(ids, string(id))
		if candidate(p) {
			k := str(key(p.AvailableAt, id))
			offers = append(offers, k)
			byTarget[p.Target] = append(byTarget[p.Target], k)
			if p.Ceremony != "" {
				byCeremony[p.Ceremony] = append(byCeremony[p.Ceremony], k)
			}
		}
		if leased(p) {
			leases = append(leases, str(key(p.Lease.ExpiresAt, id)))
			holders[p.Lease.Owner] = append(holders[p.Lease.Owner], string(id))
		}
		if acked(p) {
			acks = append(acks, str(key(p.Ack.Deadline, id)))
		}
		if openInCeremony(p) {
			open[p.Ceremony] = append(open[p.Ceremony], string(id))
		}
	}
	if err := sameKeys("ids", &s.ids, ids, func(k idKey) string { return string(k) }); err != nil {
		return err
	}
	for name, tree := range map[string]*btree[timeKey]{"offers": &s.offers, "leases": &s.leases, "acks": &s.acks} {
		want := map[string][]string{"offers": offers, "leases": leases, "acks": acks}[name]
		if err := sameKeys(name, tree, want, str); err != nil {
			return err
		}
	}
	if err := sameGroups("byTarget", &s.byTarget, byTarget, str); err != nil {
		return err
	}
	if err := sameGroups("byCeremony", &s.byCeremony, byCeremony, str); err != nil {
		return err
	}
	if err := sameGroups("open", &s.open, open, func(k idKey) string { return string(k) }); err != nil {
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
			for id := range set {
				o := ledger.Owner{Agent: agent, Incarnation: inc}
				got[o] = append(got[o], string(id))
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

func sameKeys[K ordered[K]](name string, t *btree[K], want []string, str func(K) string) error {
	keys, err := checkTree(t)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
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

func sameGroups[N comparable, K ordered[K]](name string, g *groups[N, K], want map[N][]string, str func(K) string) error {
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
		if err := sameKeys(fmt.Sprintf("%s[%v]", name, n), t, keys, str); err != nil {
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
	str := func(k timeKey) string { return fmt.Sprintf("%d/%s", k.at, k.id) }
	for id, p := range o.entries {
		if p.ID != id {
			return fmt.Errorf("entry %q stored under %q", p.ID, id)
		}
		if p.Status == ledger.OutboxStatusPending {
			pending = append(pending, str(entryKey(p.CreatedAt, id)))
		}
		if p.Status.Scheduled() {
			scheduled = append(scheduled, str(entryKey(p.NextAttemptAt, id)))
		}
	}
	if err := sameKeys("pending", &o.pending, pending, str); err != nil {
		return err
	}
	return sameKeys("scheduled", &o.scheduled, scheduled, str)
}

// visits sums the node visits of every index of s.
func (s *Store) visits() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.ids.visits + s.offers.visits + s.leases.visits + s.acks.visits
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
