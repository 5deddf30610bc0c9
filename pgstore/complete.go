package pgstore

import (
	"context"
	"errors"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// Compile-time check that the outbox completes claims in batches.
var _ ledger.ClaimCompleter = (*Outbox)(nil)

// CompleteClaims applies the claim completions cs together (see
// ledger.ClaimCompleter): those on entries this store holds in one
// statement, the others in one group transaction that locks and reads
// them. With group commit (WithGroupCommit) they queue together, as one
// arrival, with the store's other calls and batches, and share their
// commits; several completions of one entry run as one group of their
// own. A completion no group can decide runs on its own. Under WithTx
// they run one after another in the caller's transaction. Completions of
// one entry apply in the order of cs. The error joins those of the
// completions left undecided, whose results are zero.
func (o *Outbox) CompleteClaims(ctx context.Context, cs []ledger.ClaimCompletion) ([]ledger.OutboxResult, error) {
	s := o.s
	if err := s.check(ctx, storekit.ValidateClaimCompletions(cs)); err != nil {
		return nil, err
	}
	results := make([]ledger.OutboxResult, len(cs))
	var errs []error
	if s.callerTx {
		for i := range cs {
			ec := claimCompletionOf(&cs[i])
			res, err := o.completeClaimAlone(ctx, ec.op, ec.h, ec.id, ec.apply, nil)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			results[i] = res
		}
		return outboxResultsOut(results, errors.Join(errs...))
	}
	ecs := make([]entryCompletion, len(cs))
	ids := make([]string, len(cs))
	for i := range cs {
		ecs[i] = claimCompletionOf(&cs[i])
		ids[i] = string(cs[i].Claim.EntryID)
	}
	var answers []groupAnswer[entryCompletion, ledger.OutboxResult]
	switch {
	case s.groups != nil && len(repeated(ids)) == 0:
		// Queued as one arrival, to share commits with the completions
		// of the store's other callers.
		answers = s.groups.entries.submitAll(ctx, ecs)
	case s.groups != nil:
		// Several on one entry apply in their order: one group of their own.
		ms := make([]*groupMember[entryCompletion, ledger.OutboxResult], len(cs))
		for i := range ecs {
			ms[i] = &groupMember[entryCompletion, ledger.OutboxResult]{ctx: ctx, req: ecs[i]}
		}
		s.runEntryGroup(ctx, ms)
		for _, m := range ms {
			answers = append(answers, groupAnswer[entryCompletion, ledger.OutboxResult]{req: m.req, res: m.res, single: m.single, err: m.err})
		}
	default:
		for i, d := range s.runHeldEntries(ctx, ecs) {
			// ecs[i] carries what the held write wrote, if it tried.
			answers = append(answers, groupAnswer[entryCompletion, ledger.OutboxResult]{req: ecs[i], res: d.res, single: !d.decided, err: d.err})
		}
	}
	for i, a := range answers {
		res, err := a.res, a.err
		if a.single {
			res, err = o.completeClaimSingle(ctx, a.req)
		}
		if err != nil {
			errs = append(errs, wrap(ctx, a.req.op, err))
			continue
		}
		results[i] = res
	}
	return outboxResultsOut(results, errors.Join(errs...))
}
