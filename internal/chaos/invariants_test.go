package chaos

import (
	"fmt"
	"sort"

	"github.com/leaseledger/ledger"
)

// This file holds the checks of one final record against its history,
// and the fence check across all of them. checker_test.go drives them.

// checkDelivery checks one delivery that exists after the drain.
func checkDelivery(r *report, h *history, it *itemHistory, d ledger.Delivery, opts checkOptions) {
	checkExclusive(r, h, it, opts)
	checkAttempts(r, h, it, d.LeaseSeq, d.Attempts)
	if d.Attempts > d.Policy.MaxAttempts {
		r.addf(invAttempts, "delivery %s: %d attempts, more than the policy's %d", d.ID, d.Attempts, d.Policy.MaxAttempts)
	}
	for _, g := range it.grants {
		visible(r, opts, it, g.c, g.g.Seq <= d.LeaseSeq, "the record's lease seq is %d, below the grant's %d", d.LeaseSeq, g.g.Seq)
	}
	for seq, cs := range it.under {
		for _, c := range cs {
			if !definite(c) {
				continue
			}
			// A Repeated answer proves that a call of the same kind
			// applied under the grant, not that it had the same
			// arguments: only an applied one shows whether it was
			// permanent.
			permanent := c.Permanent && c.Status == statusOK
			switch {
			case c.Fn == fnAck:
				visible(r, opts, it, c, d.Ack != nil && d.Ack.Owner == c.Owner && d.LeaseSeq == seq,
					"the record is %s", describeDelivery(d))
			case c.Fn == fnRelease || (c.Fn == fnFail && !permanent):
				// The grant ended; the delivery was granted again or
				// its attempts ran out.
				visible(r, opts, it, c, d.LeaseSeq > seq || d.State == ledger.DeliveryStateFailed,
					"the record is %s", describeDelivery(d))
			case c.Fn == fnFail:
				visible(r, opts, it, c, d.State == ledger.DeliveryStateFailed && d.LeaseSeq == seq,
					"the record is %s", describeDelivery(d))
			}
		}
	}
	applied := 0
	for _, c := range it.processes {
		if c.Status != statusOK {
			continue
		}
		applied++
		visible(r, opts, it, c, d.State == ledger.DeliveryStateProcessed && d.Processing != nil &&
			string(d.Processing.Action) == c.Action && d.Ack != nil && d.Ack.Owner == c.Owner,
			"the record is %s", describeDelivery(d))
		if !ackedBefore(it, c) {
			r.addf(invAckedBy, "delivery %s: %s#%d processed it as %s, which had made no acknowledgement of it before",
				d.ID, c.Proc, c.N, c.Owner)
		}
	}
	if applied > 1 {
		r.addf(invOnce, "delivery %s: MarkProcessed applied %d times", d.ID, applied)
	}
	checkProcessed(r, it, d)

	ackDef, ackPos := ends(it, fnAck)
	endDef, endPos := ends(it, fnRelease, fnFail)
	procDef, procPos := 0, 0
	for _, c := range it.processes {
		switch {
		case definite(c):
			procDef = 1
		case c.Status == statusInfo:
			procPos = 1
		}
	}
	procPos -= procDef * procPos
	// Every grant ends once (by a takeover of its expired lease without
	// a write of its own), so the definite ends are at most the grants,
	// and the uncertain ones at most the grants left.
	endsDef := endDef + procDef + len(it.reclaims) + it.expired
	endsPos := endPos + procPos + uncertainSweeps(h, it, opts)
	if int64(endsDef) > d.LeaseSeq {
		r.addf(invNoWrite, "delivery %s: %d grants, but %d of them certainly ended with a write", d.ID, d.LeaseSeq, endsDef)
	}
	lo := 1 + d.LeaseSeq + int64(ackDef+endsDef)
	hi := lo + int64(ackPos) + min(int64(endsPos), max(0, d.LeaseSeq-int64(endsDef)))
	checkVersion(r, it, d.Version, lo, hi)
}

// uncertainSweeps bounds how many times calls whose outcome is unknown
// may have ended a grant of it without the history saying so: a sweep
// (Expire) whose now was past a grant's expiry, or a Lease by the
// grant's agent under another incarnation (the incarnation rule), that
// ran after the grant was made. An acknowledged grant lapses later than
// its lease expires, so the expiry bounds both. When the history misses
// some grants, or the store decides on its own clock, any may have.
func uncertainSweeps(h *history, it *itemHistory, opts checkOptions) int {
	known := map[int64]bool{}
	for _, g := range it.grants {
		known[g.g.Seq] = true
	}
	if opts.storeClock || int64(len(known)) < it.seq {
		n := h.infoExpires
		for _, cs := range h.infoLeases {
			n += len(cs)
		}
		return n
	}
	n := 0
	for _, e := range h.infoSweeps {
		for _, g := range it.grants {
			if e.Returned > g.c.Invoked && (e.Fn == fnExpire && !ledger.Normalize(e.Now).Before(g.g.Expires) ||
				e.Fn == fnGrant && e.Owner.Agent == g.g.Owner.Agent && e.Owner.Incarnation != g.g.Owner.Incarnation) {
				n++
				break
			}
		}
	}
	return n
}

// ackedBefore reports whether p's owner made an acknowledgement of the
// delivery, which may have applied, before p returned.
func ackedBefore(it *itemHistory, p *call) bool {
	for _, cs := range it.under {
		for _, c := range cs {
			if c.Fn == fnAck && possible(c) && c.Owner == p.Owner && c.Invoked < p.Returned {
				return true
			}
		}
	}
	return false
}

// checkProcessed checks that a processed delivery was acknowledged, under
// its last grant, by the owner the record names, and processed by a call
// of that owner with the recorded action.
func checkProcessed(r *report, it *itemHistory, d ledger.Delivery) {
	if d.State != ledger.DeliveryStateProcessed {
		return
	}
	if d.Ack == nil || d.Processing == nil {
		r.addf(invAckedBy, "delivery %s is processed without an acknowledgement (%s)", d.ID, describeDelivery(d))
		return
	}
	acked, made := false, false
	for _, c := range it.under[d.LeaseSeq] {
		acked = acked || (c.Fn == fnAck && possible(c) && c.Owner == d.Ack.Owner)
	}
	for _, c := range it.processes {
		made = made || (possible(c) && c.Owner == d.Ack.Owner && c.Action == string(d.Processing.Action))
	}
	if !acked {
		r.addf(invAckedBy, "delivery %s: processed by %s under seq %d, but no acknowledgement by that owner under that grant may have applied",
			d.ID, d.Ack.Owner, d.LeaseSeq)
	}
	if !made {
		r.addf(invAckedBy, "delivery %s: processed as %q by %s, but no such MarkProcessed may have applied",
			d.ID, d.Processing.Action, d.Ack.Owner)
	}
}

func describeDelivery(d ledger.Delivery) string {
	s := fmt.Sprintf("%s, lease seq %d, attempts %d, version %d", d.State, d.LeaseSeq, d.Attempts, d.Version)
	if d.Ack != nil {
		s += ", acknowledged by " + d.Ack.Owner.String()
	}
	if d.Processing != nil {
		s += fmt.Sprintf(", processed as %q", d.Processing.Action)
	}
	return s
}

// checkEntry checks one outbox entry that exists after the drain.
func checkEntry(r *report, h *history, it *itemHistory, e ledger.OutboxEntry, opts checkOptions) {
	checkExclusive(r, h, it, opts)
	checkAttempts(r, h, it, e.ClaimSeq, e.Attempts)
	for _, g := range it.grants {
		visible(r, opts, it, g.c, g.g.Seq <= e.ClaimSeq, "the entry's claim seq is %d, below the claim's %d", e.ClaimSeq, g.g.Seq)
	}
	describe := func() string {
		return fmt.Sprintf("%s, claim seq %d, attempts %d, version %d", e.Status, e.ClaimSeq, e.Attempts, e.Version)
	}
	terminal := 0
	for seq, cs := range it.under {
		for _, c := range cs {
			if !definite(c) {
				continue
			}
			permanent := c.Permanent && c.Status == statusOK // as for deliveries
			switch {
			case c.Fn == fnDeliver:
				visible(r, opts, it, c, e.Status == ledger.OutboxStatusDelivered && e.ClaimSeq == seq &&
					e.Result != nil && e.Result.ProviderRef == c.Action, "the entry is %s", describe())
			case c.Fn == fnDeadLetter:
				visible(r, opts, it, c, e.Status == ledger.OutboxStatusDeadLettered && e.ClaimSeq == seq, "the entry is %s", describe())
			case c.Fn == fnFail && permanent:
				visible(r, opts, it, c, e.Status == ledger.OutboxStatusFailed && e.ClaimSeq == seq, "the entry is %s", describe())
			case c.Fn == fnFail && c.Status == statusOK:
				visible(r, opts, it, c, e.ClaimSeq > seq, "the entry is %s", describe())
			case c.Fn == fnFail:
				// Failed for good under this claim, or claimed again
				// after a retry.
				visible(r, opts, it, c, (e.Status == ledger.OutboxStatusFailed && e.ClaimSeq == seq) || e.ClaimSeq > seq,
					"the entry is %s", describe())
			default: // a release: claimed again later
				visible(r, opts, it, c, e.ClaimSeq > seq, "the entry is %s", describe())
			}
			if c.Status == statusOK && (c.Fn == fnDeliver || c.Fn == fnDeadLetter || (c.Fn == fnFail && c.Permanent)) {
				terminal++
			}
		}
	}
	if terminal > 1 {
		r.addf(invOnce, "outbox entry %s: %d completions that end it applied", e.ID, terminal)
	}
	endDef, endPos := ends(it, fnDeliver, fnDeadLetter, fnFail, fnRelease)
	lo := 1 + e.ClaimSeq + int64(endDef)
	checkVersion(r, it, e.Version, lo, lo+int64(endPos))
}

// checkFences checks, per target, that no MarkProcessed applied with a
// fence below one accepted by a call that returned before it started, and
// that every FenceRejected had a higher fence, accepted or maybe
// accepted, by a call that started before the rejected one returned.
func checkFences(r *report, calls []*call) {
	byTarget := map[string][]*call{}
	for _, c := range calls {
		if c.Fence != nil {
			byTarget[c.Target] = append(byTarget[c.Target], c)
		}
	}
	targets := make([]string, 0, len(byTarget))
	for t := range byTarget {
		targets = append(targets, t)
	}
	sort.Strings(targets)
	for _, t := range targets {
		var applied, maybe []*call
		for _, c := range byTarget[t] {
			if c.Status == statusOK {
				applied = append(applied, c)
			}
			if possible(c) {
				maybe = append(maybe, c)
			}
		}
		byReturn := append([]*call(nil), applied...)
		sort.Slice(byReturn, func(i, j int) bool { return byReturn[i].Returned < byReturn[j].Returned })
		sort.Slice(applied, func(i, j int) bool { return applied[i].Invoked < applied[j].Invoked })
		var highest *call
		j := 0
		for _, b := range applied {
			for ; j < len(byReturn) && byReturn[j].Returned < b.Invoked; j++ {
				if highest == nil || *byReturn[j].Fence > *highest.Fence {
					highest = byReturn[j]
				}
			}
			if highest != nil && *b.Fence < *highest.Fence {
				r.staleFences++
				r.addf(invFences, "target %s: %s#%d processed delivery %s with fence %d after %s#%d had had fence %d accepted (delivery %s)",
					t, b.Proc, b.N, b.Item, *b.Fence, highest.Proc, highest.N, *highest.Fence, highest.Item)
			}
		}
		sort.Slice(maybe, func(i, j int) bool { return maybe[i].Invoked < maybe[j].Invoked })
		prefix := make([]int64, len(maybe))
		for i, c := range maybe {
			prefix[i] = *c.Fence
			if i > 0 {
				prefix[i] = max(prefix[i], prefix[i-1])
			}
		}
		for _, c := range byTarget[t] {
			if c.Status != statusFail || c.Outcome != ledger.OutcomeFenceRejected {
				continue
			}
			k := sort.Search(len(maybe), func(i int) bool { return maybe[i].Invoked >= c.Returned })
			if k == 0 || prefix[k-1] <= *c.Fence {
				r.addf(invFences, "target %s: %s#%d got FenceRejected for fence %d, but no higher fence may have been accepted before",
					t, c.Proc, c.N, *c.Fence)
			}
		}
	}
}
