package chaos

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leaseledger/ledger"
)

// This file holds the two checks that account for every record rather
// than for every call: each terminal record's end is matched to the call
// or sweep that made it, and the number of records in the store is the
// number planned less the enqueues the history says failed. A store that
// ends an item by itself, or makes one nobody enqueued, fails them even
// when it keeps every version count straight.

// maxEnqueueBatch is the most items one enqueue call of a worker takes
// (see worker.enqueue): a process killed between taking item numbers and
// logging its call loses at most that many.
const maxEnqueueBatch = 20

// storeClockSlack is how far a record's EndedAt, stamped by the
// database's clock, may lie outside the wall-clock span of the call that
// ended it: both clocks are this machine's, read a statement apart.
const storeClockSlack = time.Second

// endedBy reports whether c, a call that may have happened, can have
// ended a record at endedAt: at its now (the caller's clock decides), or
// within its span (the store's clock does).
func endedBy(c *call, endedAt time.Time, opts checkOptions) bool {
	if !possible(c) {
		return false
	}
	if opts.storeClock {
		at := endedAt.UnixNano()
		return at >= c.Invoked-int64(storeClockSlack) && (c.Returned == 0 || at <= c.Returned+int64(storeClockSlack))
	}
	return ledger.Normalize(c.Now).Equal(endedAt)
}

// explainDelivery checks that the end of terminal delivery d is the work
// of a logged call or sweep that may have made it, at the time it says.
func explainDelivery(r *report, h *history, it *itemHistory, d ledger.Delivery, opts checkOptions) {
	if !d.State.Terminal() {
		return
	}
	by := func(cs []*call, ok func(*call) bool) bool {
		return slices.ContainsFunc(cs, func(c *call) bool { return ok(c) && endedBy(c, d.EndedAt, opts) })
	}
	usedUp := d.Attempts >= d.Policy.MaxAttempts
	var why string
	switch {
	case d.State == ledger.DeliveryStateProcessed:
		if d.Processing != nil && d.Ack != nil && by(it.processes, func(c *call) bool {
			return c.Owner == d.Ack.Owner && c.Action == string(d.Processing.Action)
		}) {
			return
		}
		why = "no MarkProcessed by the acknowledging owner with its action may have made it"
	case d.State == ledger.DeliveryStateFailed && d.LastFailure == nil:
		why = "it records no failure"
	case d.State == ledger.DeliveryStateFailed && d.LastFailure.Kind == ledger.FailureReported:
		if by(it.under[d.LeaseSeq], func(c *call) bool { return c.Fn == fnFail && (c.Permanent || usedUp) }) {
			return
		}
		why = fmt.Sprintf("no MarkFailed under its last grant (seq %d) may have ended it", d.LeaseSeq)
	case d.State == ledger.DeliveryStateFailed && d.LastFailure.Kind == ledger.FailureLeaseExpired:
		if usedUp && by(h.expires, func(c *call) bool { return c.Status == statusInfo || slices.Contains(c.Changed, it.id) }) {
			return
		}
		why = "no sweep that may have changed it ended it with its attempts used up"
	case d.State == ledger.DeliveryStateFailed && d.LastFailure.Kind == ledger.FailureReclaimed:
		old := d.LastFailure.Owner
		if usedUp && by(h.leases, func(c *call) bool {
			return slices.Contains(c.Reclaimed, it.id) ||
				(c.Status == statusInfo && c.Owner.Agent == old.Agent && c.Owner.Incarnation != old.Incarnation)
		}) {
			return
		}
		why = "no Lease by a newer incarnation of its holder's agent took it back with its attempts used up"
	case d.State == ledger.DeliveryStateExpired && d.Cause != nil && d.Cause.Kind == ledger.CauseAcknowledgementLapsed:
		acked := d.Ack != nil && slices.ContainsFunc(it.under[d.LeaseSeq], func(c *call) bool {
			return c.Fn == fnAck && possible(c) && c.Owner == d.Ack.Owner
		})
		if acked && by(h.expires, func(c *call) bool {
			return (c.Status == statusInfo || slices.Contains(c.Changed, it.id)) &&
				(opts.storeClock || !ledger.Normalize(c.Now).Before(d.Ack.Deadline))
		}) {
			return
		}
		why = "no acknowledgement under its last grant and sweep past its deadline may have lapsed it"
	default:
		why = "nothing the workers call ends a delivery that way"
	}
	r.addf(invExplained, "delivery %s: %s, ended at %s, but %s", d.ID, describeDelivery(d), d.EndedAt.Format(time.RFC3339Nano), why)
}

// explainEntry checks that the end of terminal entry e is the work of a
// completion that may have been made under its last claim, with the
// reference that completion passed.
func explainEntry(r *report, it *itemHistory, e ledger.OutboxEntry) {
	if !e.Status.Terminal() {
		return
	}
	ended := func(f fn, ok func(c *call) bool) bool {
		return slices.ContainsFunc(it.under[e.ClaimSeq], func(c *call) bool { return c.Fn == f && possible(c) && ok(c) })
	}
	errorOf := func(c *call) bool { return e.LastError != nil && e.LastError.Message == c.Action }
	switch e.Status {
	case ledger.OutboxStatusDelivered:
		if ended(fnDeliver, func(c *call) bool { return e.Result != nil && e.Result.ProviderRef == c.Action }) {
			return
		}
	case ledger.OutboxStatusFailed:
		if ended(fnFail, func(c *call) bool { return c.Permanent && errorOf(c) }) {
			return
		}
	case ledger.OutboxStatusDeadLettered:
		if ended(fnDeadLetter, errorOf) {
			return
		}
	}
	r.addf(invExplained, "outbox entry %s: %s under claim seq %d, but no completion under that claim may have ended it so",
		e.ID, e.Status, e.ClaimSeq)
}

// accounting is what the store holds of one kind against the plan.
type accounting struct {
	planned int // items the run set out to enqueue
	// Of the planned items: enqueued (some enqueue answered Applied or
	// Repeated), failed (every enqueue certainly failed), uncertain (no
	// enqueue certainly applied, one may have), untried (no enqueue was
	// logged: item numbers a killed process took before it could log).
	enqueued, failed, uncertain, untried int
	recovered                            int // uncertain items the store holds
	stored                               int // records of the kind in the store
	ended                                map[string]int
}

// account checks, for kind k, that every planned item was tried (or that
// a killed process can have taken the numbers of those that were not),
// and that the store holds exactly the enqueued items and the uncertain
// ones it kept: no fewer (lost) and no more (made by nobody).
func account(r *report, h *history, k kind, planned []string, stored int, present func(id string) bool, kills int) {
	a := accounting{planned: len(planned), stored: stored, ended: map[string]int{}}
	inPlan := make(map[string]bool, len(planned))
	for _, id := range planned {
		inPlan[id] = true
		it := h.items[k][id]
		switch {
		case !enqueueTried(it):
			a.untried++
			if present(id) {
				r.addf(invCount, "%s %s exists, but no enqueue of it was logged", k, id)
			}
		case it.enqOK > 0:
			a.enqueued++
		case it.enqInfo > 0:
			a.uncertain++
			if present(id) {
				a.recovered++
			}
		default:
			a.failed++
		}
	}
	for id, it := range h.items[k] {
		if enqueueTried(it) && !inPlan[id] {
			r.addf(invCount, "%s %s was enqueued, but the run never planned it", k, id)
		}
	}
	if a.untried > maxEnqueueBatch*kills {
		r.addf(invCount, "%s: %d planned items were never enqueued, more than %d killed processes can have taken",
			k, a.untried, kills)
	}
	if want := a.enqueued + a.recovered; stored != want {
		r.addf(invCount, "%s: the store holds %d records, but %d planned less %d whose enqueue failed, %d uncertain ones it lost and %d never tried is %d",
			k, stored, a.planned, a.failed, a.uncertain-a.recovered, a.untried, want)
	}
	r.accounts[k] = &a
}

// untrue counts the violations of inv, those dropped from the report
// included: for invVisible and invNoWrite, the answers a store gave that
// its records contradict.
func (r *report) untrue(inv invariant) int { return len(r.violations[inv]) + r.dropped[inv] }

// figures renders what make chaos prints of a run: per kind, the items
// planned, enqueued and ended, how; the faults injected by kind; and the
// counts the invariants keep at zero (lost, overlapping grants, stale
// fences applied) beside the duplicates delivery at least once allows,
// and the untrue answers.
func figures(rep *report, faults *faultCounts) string {
	var b strings.Builder
	for _, k := range []kind{kindDelivery, kindEntry} {
		label := map[kind]string{kindDelivery: "deliveries:", kindEntry: "entries:"}[k]
		a := rep.accounts[k]
		if a == nil {
			continue
		}
		ended := 0
		for _, n := range a.ended {
			ended += n
		}
		fmt.Fprintf(&b, "  %-11s planned %d, enqueued %d (recovered after an uncertain enqueue %d; failed %d, lost uncertain %d, never tried %d), in the store %d, ended %d: %s\n",
			label, a.planned, a.enqueued+a.recovered, a.recovered, a.failed, a.uncertain-a.recovered, a.untried, a.stored, ended, sortedCounts(a.ended))
	}
	fmt.Fprintf(&b, "  %-11s %s\n", "faults:", strings.TrimSpace(faults.String()))
	fmt.Fprintf(&b, "  lost %d, unexpected %d, overlapping grants %d (of %d successive grants compared), stale fences applied %d, duplicates %d (items granted to more than one holder: delivery is at least once)",
		rep.lost, rep.unexpected, rep.overlaps, rep.pairs, rep.staleFences, rep.duplicated)
	fmt.Fprintf(&b, "\n  untrue answers %d: %d answered Applied whose write is missing, %d answered not applied whose write is there",
		rep.untrue(invVisible)+rep.untrue(invNoWrite), rep.untrue(invVisible), rep.untrue(invNoWrite))
	return b.String()
}
