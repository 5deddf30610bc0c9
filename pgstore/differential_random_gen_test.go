package pgstore_test

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/leaseledger/ledger"
)

// This file is the drawing machinery of the generator of
// TestRandomSequencesMatchMemstore: which calls a sequence is made of,
// the clock, the content and the grants handed back; the calls themselves
// are in differential_random_ledger_test.go and
// differential_random_outbox_test.go. Every draw happens before a call
// runs, so both sides get exactly the same call; the closures only look
// up each side's own grant for a drawn (ID, seq).

// The name spaces the sequences draw from: small, so that calls collide.
var (
	diffIDs        = []ledger.DeliveryID{"d1", "d2", "d3", "d4", "d5", "d6"}
	diffTargets    = []ledger.Target{"h1", "h2", "h3"}
	diffCeremonies = []ledger.CeremonyID{"c1", "c2"}
	// Two agents with one incarnation, and one with two.
	diffOwners = []ledger.Owner{
		{Agent: "agent-a", Incarnation: "boot-1"},
		{Agent: "agent-a", Incarnation: "boot-2"},
		{Agent: "agent-b", Incarnation: "boot-1"},
		{Agent: "agent-c", Incarnation: "boot-1"},
	}
	diffKeys        = []string{"k1", "k2", "k3", "k4", "k5"}
	diffWorkerNames = []string{"worker-1", "worker-2"}
	// Lease and claim durations, from ones that lapse between two steps
	// (a step moves the clock by 1 to 5 µs almost a third of the time) to ones
	// that outlive many steps; the odd nanoseconds must be truncated alike.
	diffDurations = []time.Duration{
		time.Microsecond, 3*time.Microsecond + 400, time.Millisecond,
		2 * time.Second, 30 * time.Second, 2*time.Minute + 500, 10 * time.Minute, 30 * time.Minute,
	}
	diffPolicies = []ledger.Policy{
		{}, // the store's defaults: 5 attempts, 5 min acknowledgement window
		{MaxAttempts: 2, BackoffBase: 1500 * time.Microsecond, AckWindow: 90 * time.Second},
		{MaxAttempts: 1},
		{MaxAttempts: 3, BackoffBase: 2*time.Second + 333, BackoffMax: 5 * time.Second, AckWindow: 3*time.Microsecond + 7},
	}
)

// forgedToken is a token no store handed out, the same on both sides.
const forgedToken ledger.Token = "FORGED-TOKEN"

// diffGen is a call a step draws from, with its weight.
type diffGen struct {
	weight int
	// grants is what the call hands back: a lease, a claim or nothing.
	grants grantKind
	// always: the call is in every seed's swarm of its contract.
	always bool
	gen    func(r *diffRun) diffOp
}

type grantKind int

const (
	noGrant grantKind = iota
	aLease
	aClaim
)

var diffLedgerGens = []diffGen{
	{10, noGrant, true, (*diffRun).opEnqueue},
	{6, noGrant, true, (*diffRun).opEnqueueBatch},
	{14, noGrant, true, (*diffRun).opLease},
	{12, aLease, true, (*diffRun).opAcknowledge},
	{5, aLease, false, (*diffRun).opAcknowledgeProcessed},
	{10, noGrant, true, (*diffRun).opMarkProcessed},
	{5, aLease, false, (*diffRun).opMarkFailed},
	{4, aLease, false, (*diffRun).opRelease},
	{3, noGrant, false, (*diffRun).opRecordActivation},
	{4, noGrant, false, (*diffRun).opExpire},
	{2, noGrant, false, (*diffRun).opAbandon},
	{2, noGrant, false, (*diffRun).opExpireCeremony},
	{3, noGrant, false, (*diffRun).opSupersede},
	{2, noGrant, false, (*diffRun).opGet},
	{3, noGrant, false, (*diffRun).opList},
	{2, noGrant, false, (*diffRun).opPurgeDeliveries},
}

var diffOutboxGens = []diffGen{
	{5, noGrant, true, (*diffRun).opOutboxEnqueue},
	{3, noGrant, true, (*diffRun).opOutboxEnqueueBatch},
	{3, noGrant, false, (*diffRun).opSave},
	{1, noGrant, false, (*diffRun).opFindByID},
	{2, noGrant, false, (*diffRun).opFindPending},
	{2, noGrant, false, (*diffRun).opFindRetryReady},
	{2, noGrant, false, (*diffRun).opMarkDelivered},
	{3, noGrant, false, (*diffRun).opOutboxMarkFailed},
	{1, noGrant, false, (*diffRun).opMarkDeadLettered},
	{6, noGrant, true, (*diffRun).opClaimPending},
	{4, noGrant, false, (*diffRun).opClaimRetryReady},
	{3, noGrant, false, (*diffRun).opClaimDue},
	{3, aClaim, false, (*diffRun).opMarkClaimDelivered},
	{4, aClaim, false, (*diffRun).opMarkClaimFailed},
	{2, aClaim, false, (*diffRun).opMarkClaimDeadLettered},
	{3, aClaim, false, (*diffRun).opReleaseClaim},
	{3, aClaim, false, (*diffRun).opSaveClaim},
	{3, aClaim, false, (*diffRun).opCompleteClaims},
	{2, noGrant, false, (*diffRun).opPurgeEntries},
}

// drawSwarm chooses the calls of this seed ("swarm testing"): a seed
// runs both contracts, or one of them alone, and leaves about a quarter
// of its calls out, so that some sequences go deep into a lifecycle (say,
// without Expire, Abandon or MarkFailed cutting it short) instead of every
// sequence averaging everything. The calls that make work and move it
// forward are always in: without them nothing happens.
func (r *diffRun) drawSwarm() {
	var gens []diffGen
	switch x := r.rng.IntN(10); {
	case x < 4:
		gens = diffLedgerGens
	case x < 6:
		gens = diffOutboxGens
	default:
		gens = slices.Concat(diffLedgerGens, diffOutboxGens)
	}
	r.gens = nil
	for _, g := range gens {
		if g.always || r.chance(75) {
			r.gens = append(r.gens, g)
		}
	}
}

// draw draws the call of a step among the seed's swarm. Calls that hand
// a grant back are drawn a quarter as often while there is none to hand
// back: they could only be made up.
func (r *diffRun) draw() diffOp {
	weights := make([]int, len(r.gens))
	total := 0
	for i, g := range r.gens {
		weights[i] = g.weight
		if (g.grants == aLease && len(r.leaseKeys) == 0) || (g.grants == aClaim && len(r.claimKeys) == 0) {
			weights[i] = max(g.weight/4, 1)
		}
		total += weights[i]
	}
	n := r.rng.IntN(total)
	for i, g := range r.gens {
		if n < weights[i] {
			return g.gen(r)
		}
		n -= weights[i]
	}
	return r.gens[0].gen(r) // unreachable: n < total
}

// cloneReqs, cloneEnvs and cloneTimePtr give each side its own copy of the
// memory in a call's arguments, so that a store writing into them could
// not change the other side's call.
func cloneReqs(reqs ...ledger.EnqueueRequest) []ledger.EnqueueRequest {
	out := slices.Clone(reqs)
	for i := range out {
		out[i].Payload = bytes.Clone(out[i].Payload) // nil stays nil, empty stays empty
	}
	return out
}

func cloneEnvs(envs ...ledger.Envelope) []ledger.Envelope {
	out := slices.Clone(envs)
	for i := range out {
		out[i].Payload = bytes.Clone(out[i].Payload)
	}
	return out
}

func cloneTimePtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	c := *t
	return &c
}

func pickOne[T any](r *diffRun, xs []T) T { return xs[r.rng.IntN(len(xs))] }

func (r *diffRun) chance(percent int) bool { return r.rng.IntN(100) < percent }

// nanos is a sub-microsecond remainder that both stores must truncate.
func (r *diffRun) nanos() time.Duration { return time.Duration(r.rng.IntN(1000)) }

// advance moves the logical clock forward: not at all, by a few µs (past
// the shortest leases), by seconds, by minutes (past the 90 s
// acknowledgement window and 2 min leases) or past the default 5 min
// window.
func (r *diffRun) advance() {
	var d time.Duration
	switch x := r.rng.IntN(100); {
	case x < 40:
		return
	case x < 70:
		d = time.Duration(1+r.rng.IntN(5)) * time.Microsecond
	case x < 90:
		d = time.Duration(1+r.rng.IntN(10)) * time.Second
	case x < 97:
		d = time.Duration(60+r.rng.IntN(120)) * time.Second
	default:
		d = time.Duration(5+r.rng.IntN(6)) * time.Minute
	}
	r.w.now = r.w.now.Add(d + r.nanos())
}

// callNow is the now of one call: usually the clock, sometimes that of a
// caller running a few seconds behind (the caller's clock is trusted).
func (r *diffRun) callNow() time.Time {
	if r.chance(8) {
		return r.w.now.Add(-time.Duration(1+r.rng.IntN(20))*time.Second - r.nanos())
	}
	return r.w.now
}

// drawContent draws the seed's usual content per delivery ID and per
// idempotency key, and the ID lists grants are drawn from.
func (r *diffRun) drawContent() {
	r.canon = map[ledger.DeliveryID]ledger.EnqueueRequest{}
	for _, id := range diffIDs {
		// The defaults twice as often: one-attempt policies end work fast.
		// h1 is a busy host, so that its fences meet.
		req := ledger.EnqueueRequest{ID: id, Target: pickOne(r, append([]ledger.Target{"h1", "h1"}, diffTargets...)),
			Policy: pickOne(r, append([]ledger.Policy{{}}, diffPolicies...))}
		if r.chance(60) {
			req.Ceremony = pickOne(r, diffCeremonies)
		}
		switch r.rng.IntN(3) {
		case 1:
			req.Payload = []byte("payload of " + string(id))
		case 2:
			req.Payload = []byte{0, 0xff, 'x'}
		}
		if r.chance(25) {
			req.AvailableAt = t0.Add(time.Duration(1+r.rng.IntN(120))*time.Second + r.nanos())
		}
		if r.chance(30) {
			req.Metadata = ledger.Metadata{"tenant": "t-" + string(id), "note": "<\"&\">\n"}
		}
		r.canon[id] = req
		r.deliveryIDs = append(r.deliveryIDs, string(id))
	}
	r.envs = map[string]ledger.Envelope{}
	r.keyNames = map[string]string{}
	for _, key := range diffKeys {
		env := ledger.Envelope{Provider: pickOne(r, []string{"mail", "sms"}), Kind: pickOne(r, []string{"notice", "alert"}), IdempotencyKey: key}
		if r.chance(60) {
			env.Payload = []byte("body of " + key)
		}
		if r.chance(30) {
			env.Metadata = ledger.Metadata{"traceparent": "00-" + key}
		}
		r.envs[key] = env
		id := string(ledger.OutboxEntryIDFor(key))
		r.entryIDs = append(r.entryIDs, id)
		r.keyNames[id] = key
	}
}

// name prints a record ID for the op log: entry IDs by their key.
func (r *diffRun) name(id string) string {
	if k, ok := r.keyNames[id]; ok {
		return k
	}
	return id
}

func pickOther[T comparable](r *diffRun, xs []T, not T) T {
	for {
		if x := pickOne(r, xs); x != not {
			return x
		}
	}
}

// grantPick is a drawn lease or claim to hand back, and how it is bent.
type grantPick struct {
	key    grantKey
	madeUp bool   // never granted: the forged token under key
	bend   int    // 0 as granted, 1 sent for another record, 2 forged token, 3 next seq, 4 seq 0
	other  string // the other record's ID, for bend 1
}

// drawGrant picks a grant among keys: often the one in force on a record
// of live, else the newest of some record, sometimes an older (stale)
// one, sometimes bent into a grant of another record, a forged token or a
// seq not granted yet; now and then one made up from nothing.
func (r *diffRun) drawGrant(keys []grantKey, latest map[string]int64, ids, live []string) (grantPick, string) {
	if len(keys) == 0 || r.chance(4) {
		g := grantPick{key: grantKey{pickOne(r, ids), int64(1 + r.rng.IntN(3))}, madeUp: true}
		return g, fmt.Sprintf("made-up %s#%d", r.name(g.key.id), g.key.seq)
	}
	g := grantPick{key: pickOne(r, keys)}
	switch {
	case len(live) > 0 && r.chance(70):
		if id := pickOne(r, live); latest[id] > 0 {
			g.key = grantKey{id, latest[id]}
		}
	case r.chance(60):
		id := pickOne(r, slices.Sorted(maps.Keys(latest)))
		g.key = grantKey{id, latest[id]}
	}
	desc := fmt.Sprintf("%s#%d", r.name(g.key.id), g.key.seq)
	if g.key.seq < latest[g.key.id] {
		desc += " (stale)"
	}
	switch x := r.rng.IntN(100); {
	case x < 76:
	case x < 85:
		g.bend, g.other = 1, pickOther(r, ids, g.key.id)
		desc += " sent for " + r.name(g.other)
	case x < 92:
		g.bend = 2
		desc += " with a forged token"
	case x < 98:
		g.bend = 3
		desc += " with the next seq"
	default:
		g.bend = 4
		desc += " with seq 0"
	}
	return g, desc
}
