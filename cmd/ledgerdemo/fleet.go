package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/leaseledger/ledger"
)

// fleet is the simulated world: host agents, an integrator and outbox
// workers sharing one ledger and one outbox.
type fleet struct {
	l       ledger.Ledger
	outbox  ledger.ClaimStore
	rng     *rand.Rand
	agents  []*agent
	epoch   map[ledger.Target]int64 // the integrator's fence per target
	grants  map[ledger.DeliveryID][]grant
	ids     []ledger.DeliveryID
	entries []ledger.OutboxEntryID
	stats   stats
}

// agent is one host agent. A crash drops every lease it holds without a
// word; it comes back on the next tick as a new incarnation.
type agent struct {
	target      ledger.Target
	incarnation int
	crashed     bool
	rng         *rand.Rand
}

func (a *agent) owner() ledger.Owner {
	return ledger.Owner{Agent: string(a.target), Incarnation: fmt.Sprintf("boot-%d", a.incarnation)}
}

// grant is one successful lease, and when its holder (or the ledger)
// ended it; the double-held check reads these.
type grant struct {
	owner   ledger.Owner
	granted time.Time
	expires time.Time
	ended   time.Time
}

type stats struct {
	crashes, reclaimed, fenceRejected, leaseLost, ended, lostNotices int
	claimsLost, stalls                                               int
}

// ack is an acknowledged delivery the integrator will close.
type ack struct {
	id     ledger.DeliveryID
	owner  ledger.Owner
	target ledger.Target
}

func newFleet(l ledger.Ledger, outbox ledger.ClaimStore, rng *rand.Rand) *fleet {
	f := &fleet{l: l, outbox: outbox, rng: rng, epoch: map[ledger.Target]int64{}, grants: map[ledger.DeliveryID][]grant{}}
	for _, h := range hosts {
		f.agents = append(f.agents, &agent{target: h, incarnation: 1, rng: rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))})
	}
	return f
}

func (f *fleet) enqueue(ctx context.Context, cfg config, now time.Time) error {
	policy := ledger.Policy{MaxAttempts: 5, BackoffBase: 5 * time.Second, BackoffMax: time.Minute, AckWindow: time.Minute}
	var reqs []ledger.EnqueueRequest
	for i := range cfg.Deliveries {
		id := ledger.DeliveryID(fmt.Sprintf("delivery-%05d", i))
		f.ids = append(f.ids, id)
		reqs = append(reqs, ledger.EnqueueRequest{
			ID:       id,
			Target:   hosts[i%len(hosts)],
			Ceremony: ledger.CeremonyID(fmt.Sprintf("ceremony-%d", i%3)),
			Payload:  []byte(fmt.Sprintf(`{"n":%d}`, i)),
			Policy:   policy,
			// Spread the offers over the first minute, as a real producer would.
			AvailableAt: now.Add(time.Duration(i%60) * time.Second),
		})
	}
	if err := enqueueAll(ctx, f.l, reqs, now); err != nil {
		return err
	}
	for i := range cfg.Entries {
		env := ledger.Envelope{Provider: "mail", Kind: "notice", Payload: []byte(fmt.Sprintf("notice %d", i)), IdempotencyKey: fmt.Sprintf("notice-%05d", i)}
		res, err := f.outbox.Enqueue(ctx, env)
		if err != nil {
			return err
		}
		f.entries = append(f.entries, res.Entry.ID)
	}
	return nil
}

// enqueueAll uses the batch interface when the ledger has it.
func enqueueAll(ctx context.Context, l ledger.Ledger, reqs []ledger.EnqueueRequest, now time.Time) error {
	b, ok := l.(ledger.BatchEnqueuer)
	for start := 0; start < len(reqs); start += ledger.MaxLimit {
		chunk := reqs[start:min(start+ledger.MaxLimit, len(reqs))]
		if ok {
			if _, err := b.EnqueueBatch(ctx, chunk, now); err != nil {
				return err
			}
			continue
		}
		for _, r := range chunk {
			if _, err := l.Enqueue(ctx, r, now); err != nil {
				return err
			}
		}
	}
	return nil
}

// step runs one tick: the agents concurrently, then the integrator, the
// outbox workers, the fleet events and the expiry sweep.
func (f *fleet) step(ctx context.Context, tick int, now time.Time) error {
	type agentResult struct {
		log  agentLog
		err  error
		acks []ack
	}
	results := make([]agentResult, len(f.agents))
	var wg sync.WaitGroup
	for i, a := range f.agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &results[i]
			r.acks, r.err = a.work(ctx, f.l, now, &r.log)
		}()
	}
	wg.Wait()
	var acks []ack
	for _, r := range results {
		if r.err != nil {
			return r.err
		}
		f.merge(r.log)
		acks = append(acks, r.acks...)
	}
	if err := f.integrate(ctx, tick, acks, now); err != nil {
		return err
	}
	if err := f.emit(ctx, now); err != nil {
		return err
	}
	if err := f.events(ctx, tick, now); err != nil {
		return err
	}
	_, err := f.l.Expire(ctx, now)
	return err
}

// agentLog is what one agent did in a tick, merged into the fleet after
// the agents finish so that no shared state is written concurrently.
type agentLog struct {
	granted []ledger.Lease
	ended   map[ledger.DeliveryID]time.Time
	stats   stats
	// reclaimed lists the leases of older incarnations this agent's lease
	// call took back at at; they end before this tick's grants begin.
	reclaimed []ledger.DeliveryID
	at        time.Time
}

func (lg *agentLog) end(id ledger.DeliveryID, at time.Time) {
	if lg.ended == nil {
		lg.ended = map[ledger.DeliveryID]time.Time{}
	}
	lg.ended[id] = at
}

func (a *agent) work(ctx context.Context, l ledger.Ledger, now time.Time, lg *agentLog) ([]ack, error) {
	if a.crashed {
		a.crashed = false
		a.incarnation++
	}
	res, err := l.Lease(ctx, ledger.LeaseFilter{Targets: []ledger.Target{a.target}}, a.owner(), now, leaseDuration, batch)
	if err != nil {
		return nil, err
	}
	lg.stats.reclaimed += len(res.Reclaimed)
	lg.reclaimed = res.Reclaimed
	lg.at = now
	var acks []ack
	for _, ld := range res.Leased {
		lg.granted = append(lg.granted, ld.Lease)
		switch p := a.rng.Float64(); {
		case p < 0.01:
			// The host dies holding this and the rest of its batch.
			a.crashed = true
			lg.stats.crashes++
			return acks, nil
		case p < 0.08:
			r, err := l.MarkFailed(ctx, ld.Lease, ledger.FailureReason{Message: "handler timed out"}, now)
			if err != nil {
				return nil, err
			}
			lg.count(r.Outcome)
			lg.end(ld.Delivery.ID, now)
		default:
			r, err := l.Acknowledge(ctx, ld.Lease, "received", now)
			if err != nil {
				return nil, err
			}
			lg.count(r.Outcome)
			if !r.Applied() {
				continue
			}
			if a.rng.Float64() < 0.01 {
				// The notice to the integrator is lost: the acknowledgement
				// will lapse and the delivery end as Expired.
				lg.stats.lostNotices++
				continue
			}
			acks = append(acks, ack{id: ld.Delivery.ID, owner: ld.Lease.Owner, target: ld.Delivery.Target})
		}
	}
	return acks, nil
}

func (lg *agentLog) count(o ledger.Outcome) {
	switch o {
	case ledger.OutcomeLeaseLost:
		lg.stats.leaseLost++
	case ledger.OutcomeEnded:
		lg.stats.ended++
	}
}

func (f *fleet) merge(lg agentLog) {
	for _, id := range lg.reclaimed {
		f.endGrant(id, lg.at)
	}
	for _, l := range lg.granted {
		f.grants[l.DeliveryID] = append(f.grants[l.DeliveryID], grant{owner: l.Owner, granted: l.GrantedAt, expires: l.ExpiresAt})
	}
	for id, at := range lg.ended {
		f.endGrant(id, at)
	}
	f.stats.crashes += lg.stats.crashes
	f.stats.reclaimed += lg.stats.reclaimed
	f.stats.leaseLost += lg.stats.leaseLost
	f.stats.ended += lg.stats.ended
	f.stats.lostNotices += lg.stats.lostNotices
}

// endGrant notes that the latest grant of id ended at at, unless it ended
// already.
func (f *fleet) endGrant(id ledger.DeliveryID, at time.Time) {
	gs := f.grants[id]
	if n := len(gs); n > 0 && gs[n-1].ended.IsZero() {
		gs[n-1].ended = at
	}
}

// integrate closes acknowledged deliveries under the integrator's fence. At
// tick 12 a stale integrator, one epoch behind, tries first and is fenced off.
func (f *fleet) integrate(ctx context.Context, tick int, acks []ack, now time.Time) error {
	if tick%25 == 0 {
		for _, h := range append(hosts, "host-5") {
			f.epoch[h]++
		}
	}
	for i, a := range acks {
		if tick == 12 && i < 3 {
			r, err := f.l.MarkProcessed(ctx, a.id, a.owner, ledger.FenceOf(f.epoch[a.target]-1), "stale-integrator", now)
			if err != nil {
				return err
			}
			if r.Outcome == ledger.OutcomeFenceRejected {
				f.stats.fenceRejected++
			}
		}
		r, err := f.l.MarkProcessed(ctx, a.id, a.owner, ledger.FenceOf(f.epoch[a.target]), ledger.ActionRef("action-"+string(a.id)), now)
		if err != nil {
			return err
		}
		if r.Applied() {
			f.endGrant(a.id, now)
		}
	}
	return nil
}

// events are the fleet's scripted moments: a ceremony ends, a host is
// replaced and its open work follows the replacement.
func (f *fleet) events(ctx context.Context, tick int, now time.Time) error {
	switch tick {
	case ceremonyEndTick:
		res, err := f.l.ExpireCeremony(ctx, "ceremony-2", ledger.Cause{Kind: ledger.CauseCeremonyEnded, Detail: "ceremony closed by operator"}, now)
		if err != nil {
			return err
		}
		for _, id := range res.Changed {
			f.endGrant(id, now)
		}
	case supersedeTick:
		res, err := f.l.Supersede(ctx, "host-4", "host-5", ledger.Follow, now)
		if err != nil {
			return err
		}
		for _, id := range res.Moved {
			f.endGrant(id, now)
		}
		for _, a := range f.agents {
			if a.target == "host-4" {
				a.target = "host-5"
				a.incarnation = 1
			}
		}
	}
	return nil
}

// sortedIDs returns the keys of m in order, for stable reports.
func sortedIDs[V any](m map[ledger.DeliveryID]V) []ledger.DeliveryID {
	ids := make([]ledger.DeliveryID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}
