package ledgertest

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/leaseledger/ledger"
)

// ClaimEnd records that the holder of a claim ended it: a completion,
// release or save made under the claim answered OutcomeApplied.
type ClaimEnd struct {
	// Claim is the claim the call was made under.
	Claim ledger.Claim
	// Op is the call: ledger.OpMarkDelivered, OpMarkFailed,
	// OpMarkDeadLettered, OpReleaseClaim or OpSaveClaim.
	Op ledger.Operation
	// At is a logical time by which the claim had ended: no later than the
	// Now of any claim the store granted after this call applied. Claim
	// completions carry no now, so the recorder must choose At with care;
	// the concurrency test takes the smaller of its clock and the Now of
	// every claim call in flight when the completion starts.
	At time.Time
}

// ClaimLog is what a test saw of a claim store: every claim it granted and
// every end applied under one of them, in any order.
type ClaimLog struct {
	Grants []ledger.Claim
	Ends   []ClaimEnd
}

// claimKey names one grant of one entry.
type claimKey struct {
	entry ledger.OutboxEntryID
	seq   int64
}

// maxClaimViolations bounds how many violations a checker reports, so that
// a badly broken store yields a readable error.
const maxClaimViolations = 20

// claimViolations collects the violations a checker finds.
type claimViolations struct {
	errs  []error
	extra int
}

func (v *claimViolations) addf(format string, args ...any) {
	if len(v.errs) == maxClaimViolations {
		v.extra++
		return
	}
	v.errs = append(v.errs, fmt.Errorf(format, args...))
}

func (v *claimViolations) err() error {
	errs := v.errs
	if v.extra > 0 {
		errs = append(errs[:len(errs):len(errs)], fmt.Errorf("and %d more violations", v.extra))
	}
	return errors.Join(errs...)
}

// claimGrantsByEntry groups grants per entry, each group in Seq order.
func claimGrantsByEntry(grants []ledger.Claim) (map[ledger.OutboxEntryID][]ledger.Claim, []ledger.OutboxEntryID) {
	by := make(map[ledger.OutboxEntryID][]ledger.Claim)
	for _, g := range grants {
		by[g.EntryID] = append(by[g.EntryID], g)
	}
	ids := make([]ledger.OutboxEntryID, 0, len(by))
	for id, gs := range by {
		sort.SliceStable(gs, func(i, j int) bool { return gs[i].Seq < gs[j].Seq })
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return by, ids
}

// CheckClaimsExclusive returns an error describing every way in which the
// claims of log were not exclusive, or nil:
//
//   - a token granted twice, or one entry granted twice under one Seq;
//   - one claim ended twice by its holder, or an end under a claim that
//     was never granted;
//   - two successive claims of one entry (by Seq) whose hold overlapped:
//     the later one must start (ClaimedAt) at or after the earlier one's
//     ExpiresAt or, when its holder ended it, the end's At, whichever is
//     sooner.
//
// Only successive claims are compared: once a claim ended, a caller whose
// clock lags may legitimately claim at a Now before earlier claims began.
func CheckClaimsExclusive(log ClaimLog) error {
	var v claimViolations
	tokens := make(map[ledger.Token]claimKey)
	for _, g := range log.Grants {
		k := claimKey{g.EntryID, g.Seq}
		if prev, ok := tokens[g.Token]; ok {
			v.addf("token %q granted twice: entry %s seq %d and entry %s seq %d", g.Token, prev.entry, prev.seq, k.entry, k.seq)
			continue
		}
		tokens[g.Token] = k
		if !g.ClaimedAt.Before(g.ExpiresAt) {
			v.addf("entry %s seq %d: claim expires at %s, not after it was granted at %s", g.EntryID, g.Seq, g.ExpiresAt, g.ClaimedAt)
		}
	}
	by, ids := claimGrantsByEntry(log.Grants)
	granted := make(map[claimKey]ledger.Claim, len(log.Grants))
	for _, id := range ids {
		for _, g := range by[id] {
			k := claimKey{id, g.Seq}
			if _, ok := granted[k]; ok {
				v.addf("entry %s: seq %d granted twice (%s to %q and again to %q)", id, g.Seq, g.ClaimedAt, granted[k].Worker, g.Worker)
				continue
			}
			granted[k] = g
		}
	}
	ends := make(map[claimKey]ClaimEnd, len(log.Ends))
	for _, e := range log.Ends {
		k := claimKey{e.Claim.EntryID, e.Claim.Seq}
		g, ok := granted[k]
		first, dup := ends[k]
		switch {
		case !ok || g.Token != e.Claim.Token:
			v.addf("entry %s seq %d: %s applied under a claim that was never granted", k.entry, k.seq, e.Op)
		case dup:
			v.addf("entry %s seq %d: ended twice, by %s and by %s", k.entry, k.seq, first.Op, e.Op)
		default:
			ends[k] = e
		}
	}
	for _, id := range ids {
		gs := by[id]
		for i := 1; i < len(gs); i++ {
			prev, next := gs[i-1], gs[i]
			if prev.Seq == next.Seq {
				continue // reported above
			}
			free := prev.ExpiresAt
			how := "expired"
			if e, ok := ends[claimKey{id, prev.Seq}]; ok && e.At.Before(free) {
				free, how = e.At, "ended by "+string(e.Op)
			}
			if next.ClaimedAt.Before(free) {
				v.addf("entry %s: seq %d granted at %s while seq %d held it until %s (%s)",
					id, next.Seq, next.ClaimedAt, prev.Seq, free, how)
			}
		}
	}
	return v.err()
}

// CheckClaimsTerminal returns an error naming every entry of entries that
// is not in a terminal status, or whose EndedAt does not say so, or nil.
func CheckClaimsTerminal(entries []ledger.OutboxEntry) error {
	var v claimViolations
	for _, e := range entries {
		switch {
		case !e.Status.Terminal():
			v.addf("entry %s is %s, not terminal", e.ID, e.Status)
		case e.EndedAt.IsZero():
			v.addf("entry %s is %s without EndedAt", e.ID, e.Status)
		case e.Claim != nil:
			v.addf("entry %s is %s and still claimed", e.ID, e.Status)
		}
	}
	return v.err()
}

// CheckClaimAttempts returns an error for every entry of entries whose
// record disagrees with log, or nil: its grants in log must be exactly
// Seq 1 to ClaimSeq, and its Attempts must be the number of grants less
// the releases (ends by ledger.OpReleaseClaim) applied under them. It
// assumes that nothing but claims, claim completions and releases touched
// the entries, as in the concurrency test. Grants of entries not in
// entries are reported too.
func CheckClaimAttempts(log ClaimLog, entries []ledger.OutboxEntry) error {
	var v claimViolations
	by, ids := claimGrantsByEntry(log.Grants)
	releases := make(map[ledger.OutboxEntryID]int)
	for _, e := range log.Ends {
		if e.Op == ledger.OpReleaseClaim {
			releases[e.Claim.EntryID]++
		}
	}
	known := make(map[ledger.OutboxEntryID]bool, len(entries))
	for _, e := range entries {
		known[e.ID] = true
		gs := by[e.ID]
		for i, g := range gs {
			if g.Seq != int64(i+1) {
				v.addf("entry %s: grant %d of %d has seq %d, want %d", e.ID, i+1, len(gs), g.Seq, i+1)
				break
			}
		}
		if e.ClaimSeq != int64(len(gs)) {
			v.addf("entry %s: ClaimSeq %d, but %d claims were granted", e.ID, e.ClaimSeq, len(gs))
		}
		if want := len(gs) - releases[e.ID]; e.Attempts != want {
			v.addf("entry %s: Attempts %d, want %d (%d claims less %d releases)", e.ID, e.Attempts, want, len(gs), releases[e.ID])
		}
	}
	for _, id := range ids {
		if !known[id] {
			v.addf("entry %s was claimed but is not among the entries checked", id)
		}
	}
	return v.err()
}
