package ledgertest

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/leaseledger/ledger"
)

// This file holds the invariant checkers of the delivery ledger. They
// return errors instead of failing a test, so that they can be run against
// deliberately broken ledgers, and so that store authors can reuse them on
// logs of their own runs.

// Grant is one lease a ledger granted during a run, as the run's log keeps
// it, with what its holder managed to do under it.
type Grant struct {
	// Lease is the lease as Ledger.Lease returned it.
	Lease ledger.Lease
	// EndedAt is the now of the holder's own call that ended the grant
	// (Release or MarkFailed applied, or MarkProcessed applied after an
	// acknowledgement under this grant). Zero when the holder did not end
	// it: the grant then ran until ExpiresAt or was taken back.
	EndedAt time.Time
	// AttemptReturned: the grant's attempt was given back, by an applied
	// Release or by a Follow supersession that revoked the lease.
	AttemptReturned bool
	// Acknowledged: the holder's Acknowledge applied under this grant.
	Acknowledged bool
	// Processed: the holder's MarkProcessed applied after it acknowledged
	// under this grant.
	Processed bool
}

// maxViolations bounds how many violations one checker reports.
const maxViolations = 20

// violations collects what a checker found, up to maxViolations.
type violations struct {
	errs    []error
	dropped int
}

func (v *violations) addf(format string, args ...any) {
	if len(v.errs) == maxViolations {
		v.dropped++
		return
	}
	v.errs = append(v.errs, fmt.Errorf(format, args...))
}

func (v *violations) err() error {
	errs := v.errs
	if v.dropped > 0 {
		errs = append(slices.Clip(errs), fmt.Errorf("and %d more", v.dropped))
	}
	return errors.Join(errs...)
}

// grantsByDelivery groups grants by delivery, each group in Seq order.
func grantsByDelivery(grants []Grant) map[ledger.DeliveryID][]Grant {
	by := map[ledger.DeliveryID][]Grant{}
	for _, g := range grants {
		by[g.Lease.DeliveryID] = append(by[g.Lease.DeliveryID], g)
	}
	for _, gs := range by {
		slices.SortStableFunc(gs, func(a, b Grant) int { return cmp.Compare(a.Lease.Seq, b.Lease.Seq) })
	}
	return by
}

// sortedKeys returns m's keys in order, so reports are stable.
func sortedKeys[V any](m map[ledger.DeliveryID]V) []ledger.DeliveryID {
	keys := make([]ledger.DeliveryID, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// CheckNoOverlappingLeases reports two grants of one delivery that were
// both in force at once. A delivery is offered again only after its lease
// expired or its holder ended it, so each grant must start at or after
// min(ExpiresAt, EndedAt) of the grant before it (by Seq). It also reports
// a sequence number or a token granted twice, and a lease that ends before
// it starts.
//
// Grants ended by somebody other than the holder before they expired (the
// incarnation rule, Abandon, ExpireCeremony, Supersede) must carry that
// time in EndedAt, or they will be reported.
func CheckNoOverlappingLeases(grants []Grant) error {
	var v violations
	tokens := map[ledger.Token]ledger.DeliveryID{}
	for _, g := range grants {
		if other, dup := tokens[g.Lease.Token]; dup {
			v.addf("token %q granted twice (deliveries %s and %s)", g.Lease.Token, other, g.Lease.DeliveryID)
		}
		tokens[g.Lease.Token] = g.Lease.DeliveryID
		if !g.Lease.ExpiresAt.After(g.Lease.GrantedAt) {
			v.addf("delivery %s seq %d: lease expires at %s, not after it was granted at %s",
				g.Lease.DeliveryID, g.Lease.Seq, g.Lease.ExpiresAt, g.Lease.GrantedAt)
		}
	}
	by := grantsByDelivery(grants)
	for _, id := range sortedKeys(by) {
		gs := by[id]
		for i := 1; i < len(gs); i++ {
			prev, next := gs[i-1], gs[i]
			if prev.Lease.Seq == next.Lease.Seq {
				v.addf("delivery %s: seq %d granted twice (to %s and %s)", id, next.Lease.Seq, prev.Lease.Owner, next.Lease.Owner)
				continue
			}
			free := prev.Lease.ExpiresAt
			if !prev.EndedAt.IsZero() && prev.EndedAt.Before(free) {
				free = prev.EndedAt
			}
			if next.Lease.GrantedAt.Before(free) {
				v.addf("delivery %s: seq %d granted to %s at %s while seq %d of %s held it until %s",
					id, next.Lease.Seq, next.Lease.Owner, next.Lease.GrantedAt, prev.Lease.Seq, prev.Lease.Owner, free)
			}
		}
	}
	return v.err()
}

// CheckLeaseSeq reports a delivery whose logged grants are not exactly the
// sequence numbers 1..LeaseSeq: every grant bumps the sequence by one. It
// needs the log of every grant of the run.
func CheckLeaseSeq(deliveries []ledger.Delivery, grants []Grant) error {
	var v violations
	by := grantsByDelivery(grants)
	for _, d := range deliveries {
		gs := by[d.ID]
		if int64(len(gs)) != d.LeaseSeq {
			v.addf("delivery %s: LeaseSeq is %d but %d grants were logged", d.ID, d.LeaseSeq, len(gs))
			continue
		}
		for i, g := range gs {
			if g.Lease.Seq != int64(i+1) {
				v.addf("delivery %s: grant %d has seq %d, want %d", d.ID, i+1, g.Lease.Seq, i+1)
				break
			}
		}
	}
	return v.err()
}

// CheckAllTerminal reports every delivery that is not in a terminal state,
// or whose EndedAt disagrees with its state.
func CheckAllTerminal(deliveries []ledger.Delivery) error {
	var v violations
	for _, d := range deliveries {
		switch {
		case !d.State.Terminal():
			v.addf("delivery %s is still %s", d.ID, d.State)
		case d.EndedAt.IsZero():
			v.addf("delivery %s is %s without EndedAt", d.ID, d.State)
		}
	}
	return v.err()
}

// CheckAttempts reports a delivery whose Attempts is not the number of its
// logged grants less those whose attempt was given back (Release, Follow
// supersession), or lies outside [0, Policy.MaxAttempts]. It needs the log
// of every grant of the run.
func CheckAttempts(deliveries []ledger.Delivery, grants []Grant) error {
	var v violations
	by := grantsByDelivery(grants)
	for _, d := range deliveries {
		want := 0
		for _, g := range by[d.ID] {
			if !g.AttemptReturned {
				want++
			}
		}
		if d.Attempts != want {
			v.addf("delivery %s: Attempts is %d, want %d (%d grants)", d.ID, d.Attempts, want, len(by[d.ID]))
		}
		if d.Attempts < 0 || d.Attempts > d.Policy.MaxAttempts {
			v.addf("delivery %s: Attempts %d outside [0, %d]", d.ID, d.Attempts, d.Policy.MaxAttempts)
		}
	}
	return v.err()
}

// CheckProcessedByAcknowledger reports a delivery processed without an
// acknowledgement by the owner that processed it: every Processed delivery
// must have exactly one logged grant that acknowledged and processed it,
// that grant must be the last one (acknowledged work is never leased
// again), and the record's Ack.Owner must be that grant's owner. No grant
// may claim to have processed a delivery that is not Processed, and at
// most one grant of a delivery may have acknowledged it.
func CheckProcessedByAcknowledger(deliveries []ledger.Delivery, grants []Grant) error {
	var v violations
	by := grantsByDelivery(grants)
	for _, d := range deliveries {
		var acked, processed []Grant
		for _, g := range by[d.ID] {
			if g.Processed {
				processed = append(processed, g)
				if !g.Acknowledged {
					v.addf("delivery %s: seq %d processed by %s without acknowledging", d.ID, g.Lease.Seq, g.Lease.Owner)
				}
			}
			if g.Acknowledged {
				acked = append(acked, g)
			}
		}
		if len(acked) > 1 {
			v.addf("delivery %s acknowledged under %d grants", d.ID, len(acked))
		}
		if len(acked) == 1 && (d.Ack == nil || d.Ack.Owner != acked[0].Lease.Owner) {
			v.addf("delivery %s acknowledged by %s but records Ack %+v", d.ID, acked[0].Lease.Owner, d.Ack)
		}
		if d.State != ledger.DeliveryStateProcessed {
			if len(processed) > 0 {
				v.addf("delivery %s is %s although %s processed it", d.ID, d.State, processed[0].Lease.Owner)
			}
			continue
		}
		if len(processed) != 1 {
			v.addf("delivery %s is processed but %d grants processed it", d.ID, len(processed))
			continue
		}
		g := processed[0]
		switch {
		case d.Ack == nil:
			v.addf("delivery %s processed without an acknowledgement", d.ID)
		case d.Ack.Owner != g.Lease.Owner:
			v.addf("delivery %s acknowledged by %s but processed by %s", d.ID, d.Ack.Owner, g.Lease.Owner)
		case g.Lease.Seq != d.LeaseSeq:
			v.addf("delivery %s processed under seq %d, but its last grant is seq %d", d.ID, g.Lease.Seq, d.LeaseSeq)
		case d.Processing == nil:
			v.addf("delivery %s is processed without Processing", d.ID)
		}
	}
	return v.err()
}

// CheckRecords reports records whose fields disagree with their state:
// EndedAt set exactly when terminal; a lease only while Leased or
// Acknowledged, always while Leased and then matching LeaseSeq and
// AvailableAt; Ack while Acknowledged; Processing exactly when Processed;
// Cause exactly when Expired; LastFailure when Failed; Attempts within the
// policy; Version positive.
func CheckRecords(deliveries []ledger.Delivery) error {
	var v violations
	for _, d := range deliveries {
		if !d.State.Valid() {
			v.addf("delivery %s: unknown state %q", d.ID, d.State)
			continue
		}
		if d.State.Terminal() == d.EndedAt.IsZero() {
			v.addf("delivery %s: state %s with EndedAt %v", d.ID, d.State, d.EndedAt)
		}
		switch d.State {
		case ledger.DeliveryStateLeased:
			switch {
			case d.Lease == nil:
				v.addf("delivery %s: leased without a lease", d.ID)
			case d.Lease.Seq != d.LeaseSeq || d.Lease.DeliveryID != d.ID:
				v.addf("delivery %s: lease %s seq %d, record LeaseSeq %d", d.ID, d.Lease.DeliveryID, d.Lease.Seq, d.LeaseSeq)
			case !d.Lease.ExpiresAt.Equal(d.AvailableAt):
				v.addf("delivery %s: leased until %s but available at %s", d.ID, d.Lease.ExpiresAt, d.AvailableAt)
			}
		case ledger.DeliveryStateAcknowledged:
			if d.Ack == nil {
				v.addf("delivery %s: acknowledged without Ack", d.ID)
			}
		default:
			if d.Lease != nil {
				v.addf("delivery %s: %s but holds lease seq %d", d.ID, d.State, d.Lease.Seq)
			}
		}
		if (d.State == ledger.DeliveryStateProcessed) != (d.Processing != nil) {
			v.addf("delivery %s: state %s with Processing %+v", d.ID, d.State, d.Processing)
		}
		if d.State == ledger.DeliveryStateProcessed && d.Ack == nil {
			v.addf("delivery %s: processed without Ack", d.ID)
		}
		if (d.State == ledger.DeliveryStateExpired) != (d.Cause != nil) {
			v.addf("delivery %s: state %s with Cause %+v", d.ID, d.State, d.Cause)
		}
		if d.State == ledger.DeliveryStateFailed && d.LastFailure == nil {
			v.addf("delivery %s: failed without LastFailure", d.ID)
		}
		if d.Attempts < 0 || d.Attempts > d.Policy.MaxAttempts {
			v.addf("delivery %s: Attempts %d outside [0, %d]", d.ID, d.Attempts, d.Policy.MaxAttempts)
		}
		if d.Version < 1 {
			v.addf("delivery %s: Version %d", d.ID, d.Version)
		}
	}
	return v.err()
}
