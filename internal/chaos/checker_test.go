package chaos

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/leaseledger/ledger"
)

// This file is the checker: it reads the history of a run and the final
// records, and reports counts and violations. Like Jepsen's total-queue
// checker it never takes a call that may have happened (statusInfo) as
// done: such calls only widen what the checks allow.

// invariant names one checked property; each is asserted on its own.
type invariant string

const (
	invTerminal   invariant = "every enqueued item exists and is terminal"
	invUnexpected invariant = "no item exists that was never enqueued"
	invAckedBy    invariant = "nothing was processed without an acknowledgement by the same owner"
	invExclusive  invariant = "no two holders held an item under overlapping unexpired grants"
	invAttempts   invariant = "attempts equal grants less releases"
	invFences     invariant = "no MarkProcessed with a stale fence applied"
	invVisible    invariant = "every applied call is visible in the final record"
	invNoWrite    invariant = "a call that did not apply changed nothing"
	invOnce       invariant = "no item was processed or delivered twice"
	invExplained  invariant = "every end was made by a logged call or sweep that may have made it"
	invCount      invariant = "the store holds the planned items less those whose enqueue failed, and nothing else"
)

func invariants() []invariant {
	return []invariant{invTerminal, invUnexpected, invAckedBy, invExclusive, invAttempts, invFences, invVisible, invNoWrite, invOnce,
		invExplained, invCount}
}

// maxReported bounds the violations kept per invariant, so that a broken
// store still gives a readable failure.
const maxReported = 20

// finalState is what the stores hold after the drain.
type finalState struct {
	deliveries map[string]ledger.Delivery
	entries    map[string]ledger.OutboxEntry
	// allEntries: entries holds every entry of the store, not only those
	// the history names, so entries nobody enqueued can be found.
	allEntries bool
	// storedDeliveries and storedEntries are how many records of each
	// kind the store says it holds (its stats), which counts the records
	// no read by ID finds.
	storedDeliveries, storedEntries int
}

// checkOptions says what the checker may assume about the run.
type checkOptions struct {
	// storeClock: the store decides on a clock of its own rather than on
	// the nows passed in. Then only the times the store returned count,
	// and a call that may have happened ended its grant at an unknown
	// time.
	storeClock bool
	// crashedAt is when the server was crashed (wall-clock nanoseconds;
	// 0: it was not), to single out the calls that returned before.
	crashedAt int64
	// planned is how many deliveries, and as many entries, the run set
	// out to enqueue (0: the history is hand-made, and the counts of the
	// store are not checked); kills is how many worker processes were
	// killed, each of which may have taken item numbers it never logged.
	planned, kills int
}

// report is what the checker found.
type report struct {
	violations map[invariant][]string
	dropped    map[invariant]int
	calls      map[string]int // by "kind fn status"
	states     map[string]int // final states
	// Jepsen's total-queue counts: items whose enqueue succeeded, lost
	// (enqueued but missing or open), unexpected (present, never
	// enqueued), duplicated (granted to more than one holder: delivery is
	// at least once) and recovered (enqueue failed uncertainly, yet the
	// item exists).
	enqueued, lost, unexpected, duplicated, recovered int
	// pairs is how many successive grants the exclusivity check compared;
	// overlaps how many of them overlapped, or were one grant handed out
	// twice.
	pairs, overlaps int
	// staleFences counts MarkProcessed calls that applied with a fence
	// below one accepted before.
	staleFences int
	// okBeforeCrash counts applied calls that returned before the crash.
	okBeforeCrash int
	// accounts holds, per kind, the store's records against the plan
	// (set when checkOptions.planned is).
	accounts map[kind]*accounting
}

func (r *report) addf(inv invariant, format string, args ...any) {
	if len(r.violations[inv]) >= maxReported {
		r.dropped[inv]++
		return
	}
	r.violations[inv] = append(r.violations[inv], fmt.Sprintf(format, args...))
}

// failure renders the violations of inv for an assertion message.
func (r *report) failure(inv invariant) string {
	msg := strings.Join(r.violations[inv], "\n\t")
	if n := r.dropped[inv]; n > 0 {
		msg += fmt.Sprintf("\n\tand %d more", n)
	}
	return fmt.Sprintf("invariant %q violated:\n\t%s", inv, msg)
}

// grantCall is a grant with the call that obtained it.
type grantCall struct {
	g grant
	c *call
}

// itemHistory gathers the history of one item.
type itemHistory struct {
	kind                    kind
	id                      string
	seq                     int64 // the final record's lease or claim seq
	enqOK, enqInfo, enqFail int
	grants                  []grantCall
	under                   map[int64][]*call // calls made under the grant of that seq
	processes               []*call
	reclaims                []*call // applied Lease calls that took it back
	expired                 int     // sweeps known to have changed it
}

// definite reports whether c certainly applied: it answered Applied, or
// Repeated, which says that the same call applied before.
func definite(c *call) bool {
	return c.Status == statusOK || (c.Status == statusFail && c.Outcome == ledger.OutcomeRepeated)
}

// possible reports whether c may have applied.
func possible(c *call) bool { return definite(c) || c.Status == statusInfo }

// history indexes the calls of a run by item.
type history struct {
	items map[kind]map[string]*itemHistory
	// infoGrants counts the grant calls that may have granted unknown
	// grants; infoExpires the sweeps that may have changed anything.
	infoGrants  map[kind]int
	infoExpires int
	// infoLeases holds the uncertain Lease calls per agent: each may
	// have taken back that agent's other incarnations' leases.
	infoLeases map[string][]*call
	// infoSweeps holds the uncertain Expire and Lease calls, which may
	// have changed records they do not name.
	infoSweeps []*call
	processes  []*call
	// expires are the Expire calls and leases the delivery Lease calls,
	// which end records they do not name as their argument.
	expires, leases []*call
}

func (h *history) item(k kind, id string) *itemHistory {
	m := h.items[k]
	it := m[id]
	if it == nil {
		it = &itemHistory{kind: k, id: id, under: map[int64][]*call{}}
		m[id] = it
	}
	return it
}

func index(calls []call, r *report) *history {
	h := &history{
		items:      map[kind]map[string]*itemHistory{kindDelivery: {}, kindEntry: {}},
		infoGrants: map[kind]int{},
		infoLeases: map[string][]*call{},
	}
	for i := range calls {
		c := &calls[i]
		r.calls[fmt.Sprintf("%s %s %s", c.Kind, c.Fn, c.Status)]++
		switch c.Fn {
		case fnEnqueue:
			for j, id := range c.IDs {
				it := h.item(c.Kind, id)
				switch {
				case c.Status == statusOK && j < len(c.Outcomes) &&
					(c.Outcomes[j] == ledger.OutcomeApplied || c.Outcomes[j] == ledger.OutcomeRepeated):
					it.enqOK++
				case c.Status == statusInfo:
					it.enqInfo++
				default:
					it.enqFail++
				}
			}
		case fnGrant:
			if c.Kind == kindDelivery {
				h.leases = append(h.leases, c)
			}
			for _, g := range c.Grants {
				it := h.item(c.Kind, g.ID)
				it.grants = append(it.grants, grantCall{g, c})
			}
			for _, id := range c.Reclaimed {
				it := h.item(kindDelivery, id)
				it.reclaims = append(it.reclaims, c)
			}
			if c.Status == statusInfo {
				h.infoGrants[c.Kind]++
				if c.Kind == kindDelivery {
					h.infoLeases[c.Owner.Agent] = append(h.infoLeases[c.Owner.Agent], c)
					h.infoSweeps = append(h.infoSweeps, c)
				}
			}
		case fnExpire:
			h.expires = append(h.expires, c)
			for _, id := range c.Changed {
				h.item(kindDelivery, id).expired++
			}
			if c.Status == statusInfo {
				h.infoExpires++
				h.infoSweeps = append(h.infoSweeps, c)
			}
		case fnProcess:
			it := h.item(kindDelivery, c.Item)
			it.processes = append(it.processes, c)
			h.processes = append(h.processes, c)
		default:
			if c.Under != nil {
				it := h.item(c.Kind, c.Under.ID)
				it.under[c.Under.Seq] = append(it.under[c.Under.Seq], c)
			}
		}
	}
	return h
}

// check runs every check of the run's history against the final records.
func check(calls []call, final finalState, opts checkOptions) *report {
	r := &report{
		violations: map[invariant][]string{},
		dropped:    map[invariant]int{},
		calls:      map[string]int{},
		states:     map[string]int{},
		accounts:   map[kind]*accounting{},
	}
	h := index(calls, r)
	tokens := map[ledger.Token]string{}
	for _, k := range []kind{kindDelivery, kindEntry} {
		ids := make([]string, 0, len(h.items[k]))
		for id := range h.items[k] {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			it := h.items[k][id]
			checkGrants(r, it, tokens)
			if k == kindDelivery {
				d, ok := final.deliveries[id]
				it.seq = d.LeaseSeq
				if checkExists(r, it, ok, d.State.Terminal(), string(d.State)) {
					checkDelivery(r, h, it, d, opts)
					explainDelivery(r, h, it, d, opts)
				}
			} else {
				e, ok := final.entries[id]
				it.seq = e.ClaimSeq
				if checkExists(r, it, ok, e.Status.Terminal(), string(e.Status)) {
					checkEntry(r, h, it, e, opts)
					explainEntry(r, it, e)
				}
			}
		}
	}
	for id, d := range final.deliveries {
		r.states["delivery "+string(d.State)]++
		if !enqueueTried(h.items[kindDelivery][id]) {
			r.unexpected++
			r.addf(invUnexpected, "delivery %s exists, but no enqueue of it was ever made", id)
		}
	}
	for id, e := range final.entries {
		r.states["entry "+string(e.Status)]++
		if final.allEntries && !enqueueTried(h.items[kindEntry][id]) {
			r.unexpected++
			r.addf(invUnexpected, "outbox entry %s exists, but no enqueue of it was ever made", id)
		}
	}
	checkFences(r, h.processes)
	if opts.planned > 0 {
		deliveries, entries := make([]string, opts.planned), make([]string, opts.planned)
		for i := range opts.planned {
			deliveries[i] = string(deliveryID(int64(i)))
			entries[i] = string(ledger.OutboxEntryIDFor(entryKey(int64(i))))
		}
		account(r, h, kindDelivery, deliveries, final.storedDeliveries, func(id string) bool { _, ok := final.deliveries[id]; return ok }, opts.kills)
		account(r, h, kindEntry, entries, final.storedEntries, func(id string) bool { _, ok := final.entries[id]; return ok }, opts.kills)
		for _, d := range final.deliveries {
			if d.State.Terminal() {
				r.accounts[kindDelivery].ended[string(d.State)]++
			}
		}
		for _, e := range final.entries {
			if e.Status.Terminal() {
				r.accounts[kindEntry].ended[string(e.Status)]++
			}
		}
	}
	return r
}

// enqueueTried reports whether the history holds an enqueue of the item
// whose history h is (nil: none at all).
func enqueueTried(h *itemHistory) bool { return h != nil && h.enqOK+h.enqInfo+h.enqFail > 0 }

// checkExists counts the item for Jepsen's totals and reports it lost
// when its enqueue succeeded but it is missing or still open. It reports
// whether there is a record to check further.
func checkExists(r *report, it *itemHistory, exists, terminal bool, state string) bool {
	switch {
	case it.enqOK > 0:
		r.enqueued++
	case exists && it.enqInfo > 0:
		r.recovered++
	case exists && it.enqFail > 0:
		r.addf(invNoWrite, "%s %s exists, but every enqueue of it certainly failed", it.kind, it.id)
	}
	holders := map[string]bool{}
	for _, g := range it.grants {
		holders[fmt.Sprintf("%s#%d", g.g.holder(), g.g.Seq)] = true
	}
	if len(holders) > 1 {
		r.duplicated++
	}
	switch {
	case !exists && (it.enqOK > 0 || len(it.grants) > 0):
		r.lost++
		r.addf(invTerminal, "%s %s was enqueued (%d ok) or granted (%d), but it is missing", it.kind, it.id, it.enqOK, len(it.grants))
	case exists && !terminal:
		r.lost++
		r.addf(invTerminal, "%s %s is still %s after the drain", it.kind, it.id, state)
	}
	return exists
}

// checkGrants reports a grant sequence number or token handed out twice.
func checkGrants(r *report, it *itemHistory, tokens map[ledger.Token]string) {
	seen := map[int64]grantCall{}
	for _, gc := range it.grants {
		g := gc.g
		if prev, dup := seen[g.Seq]; dup {
			r.overlaps++
			r.addf(invExclusive, "%s %s: seq %d granted twice, to %s (%s#%d) and to %s (%s#%d)",
				it.kind, it.id, g.Seq, prev.g.holder(), prev.c.Proc, prev.c.N, g.holder(), gc.c.Proc, gc.c.N)
		}
		seen[g.Seq] = gc
		if other, dup := tokens[g.Token]; dup {
			r.overlaps++
			r.addf(invExclusive, "token %s granted twice (%s and %s %s)", g.Token, other, it.kind, it.id)
		}
		tokens[g.Token] = string(it.kind) + " " + it.id
	}
	sort.SliceStable(it.grants, func(i, j int) bool { return it.grants[i].g.Seq < it.grants[j].g.Seq })
}

// minTime stands for an end at an unknown time: it frees any later grant.
var minTime = time.Time{}

// checkExclusive compares each pair of successive known grants of it:
// the later one must start (in the now values the store was given) at
// or after the earlier one's expiry or the end of it, by a call that
// started before the later grant's call returned. Grants are sorted.
func checkExclusive(r *report, h *history, it *itemHistory, opts checkOptions) {
	for i := 1; i < len(it.grants); i++ {
		prev, next := it.grants[i-1], it.grants[i]
		if next.g.Seq != prev.g.Seq+1 {
			continue // a grant in between is unknown: no pair to compare
		}
		r.pairs++
		free, how := prev.g.Expires, "its expiry"
		endAt := func(e *call, t time.Time, what string) {
			if e.Invoked < next.c.Returned && !t.After(free) {
				free, how = t, fmt.Sprintf("%s by %s#%d (%s)", what, e.Proc, e.N, e.Status)
			}
		}
		for _, e := range it.under[prev.g.Seq] {
			if e.Fn == fnAck || !possible(e) {
				continue
			}
			switch {
			case it.kind == kindEntry:
				// Completions carry no now: real-time order is all there is.
				endAt(e, minTime, string(e.Fn))
			case e.Status == statusOK && !e.EndAt.IsZero():
				endAt(e, e.EndAt, string(e.Fn))
			case opts.storeClock:
				endAt(e, minTime, string(e.Fn))
			default:
				endAt(e, ledger.Normalize(e.Now), string(e.Fn))
			}
		}
		if it.kind == kindDelivery {
			takeBack := append(append([]*call(nil), it.reclaims...), h.infoLeases[prev.g.Owner.Agent]...)
			for _, e := range takeBack {
				if e.Owner.Agent != prev.g.Owner.Agent || e.Owner.Incarnation == prev.g.Owner.Incarnation {
					continue
				}
				if opts.storeClock {
					endAt(e, minTime, "take-back")
				} else {
					endAt(e, ledger.Normalize(e.Now), "take-back")
				}
			}
		}
		if next.g.At.Before(free) {
			r.overlaps++
			r.addf(invExclusive, "%s %s: seq %d granted to %s at %s (%s#%d) while seq %d of %s (%s#%d) held it until %s (%s)",
				it.kind, it.id, next.g.Seq, next.g.holder(), next.g.At.Format(time.RFC3339Nano), next.c.Proc, next.c.N,
				prev.g.Seq, prev.g.holder(), prev.c.Proc, prev.c.N, free.Format(time.RFC3339Nano), how)
		}
	}
}

// ends counts, over the grants of it, those certainly ended by a call
// made under them with one of fns, and those that may have been.
func ends(it *itemHistory, fns ...fn) (def, pos int) {
	for _, cs := range it.under {
		d, p := false, false
		for _, c := range cs {
			for _, f := range fns {
				if c.Fn == f {
					d, p = d || definite(c), p || c.Status == statusInfo
				}
			}
		}
		switch {
		case d:
			def++
		case p:
			pos++
		}
	}
	return def, pos
}

// checkAttempts checks the record's grant count and attempts against the
// history: grants it cannot account for, and attempts outside
// [grants - releases that may have applied, grants - releases that did].
func checkAttempts(r *report, h *history, it *itemHistory, seq int64, attempts int) {
	known := map[int64]bool{}
	for _, g := range it.grants {
		known[g.g.Seq] = true
	}
	if unknown := seq - int64(len(known)); unknown > int64(h.infoGrants[it.kind]) {
		r.addf(invAttempts, "%s %s: %d grants (seq %d) but %d in the history, and only %d grant calls may have made the rest",
			it.kind, it.id, seq, seq, len(known), h.infoGrants[it.kind])
	}
	relDef, relPos := ends(it, fnRelease)
	lo, hi := int(seq)-relDef-relPos, int(seq)-relDef
	if attempts < lo || attempts > hi {
		r.addf(invAttempts, "%s %s: %d attempts, want %d to %d (%d grants, %d releases applied, %d more may have)",
			it.kind, it.id, attempts, lo, hi, seq, relDef, relPos)
	}
}

// visible reports an applied call that the final record does not show.
func visible(r *report, opts checkOptions, it *itemHistory, c *call, ok bool, format string, args ...any) {
	before := opts.crashedAt > 0 && c.Returned < opts.crashedAt
	if c.Status == statusOK && before {
		r.okBeforeCrash++
	}
	if ok {
		return
	}
	msg := fmt.Sprintf(format, args...)
	if before {
		msg += " (it returned before the server crash)"
	}
	r.addf(invVisible, "%s %s: %s#%d %s answered %s %s, but %s", it.kind, it.id, c.Proc, c.N, c.Fn, c.Status, c.Outcome, msg)
}

// checkVersion checks that every applied call returned a version the
// record reached, and that the record's version is the count of the
// transitions the history shows, within what uncertain calls allow: a
// call that did not apply but wrote would push it past the bound.
func checkVersion(r *report, it *itemHistory, version, lo, hi int64) {
	for _, cs := range it.under {
		for _, c := range cs {
			if c.Status == statusOK && c.Version > version {
				r.addf(invVisible, "%s %s: %s#%d %s returned version %d, but the record is at %d", it.kind, it.id, c.Proc, c.N, c.Fn, c.Version, version)
			}
		}
	}
	for _, g := range it.grants {
		if g.g.Version > version {
			r.addf(invVisible, "%s %s: grant seq %d returned version %d, but the record is at %d", it.kind, it.id, g.g.Seq, g.g.Version, version)
		}
	}
	if version < lo || version > hi {
		r.addf(invNoWrite, "%s %s: version %d, but the history accounts for %d to %d transitions", it.kind, it.id, version, lo, hi)
	}
}
