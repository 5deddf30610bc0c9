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
// them, as concurrent single calls would share one with group commit
// (WithGroupCommit); a completion that group cannot decide runs on its
// own. Under WithTx they run one after another in the caller's
// transaction. Completions of one entry apply in the order of cs. The
// error joins those of the completions left undecided, whose results are
// zero.
func (o *Outbox) CompleteClaims(ctx context.Context, cs []ledger.ClaimCompletion) ([]ledger.OutboxResult, error) {
	s := o.s
	if err := s.check(ctx, storekit.ValidateClaimCompletions(cs)); err != nil {
		return nil, err
	}
	results := make([]ledger.OutboxResult, len(cs))
	var errs []error
	if s.callerTx {
		for i, c := range cs {
			ec := claimCompletionOf(c)
			res, err := o.completeClaimAlone(ctx, ec.op, ec.h, ec.id, ec.apply, nil)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			results[i] = res
		}
		return outboxResultsOut(results, errors.Join(errs...))
	}
	ms := make([]*groupMember[entryCompletion, ledger.OutboxResult], len(cs))
	ecs := make([]entryCompletion, len(cs))
	for i, c := range cs {
		ecs[i] = claimCompletionOf(c)
		ms[i] = &groupMember[entryCompletion, ledger.OutboxResult]{ctx: ctx, req: ecs[i]}
	}
	if s.groups != nil {
		s.runEntryGroup(ctx, ms)
	} else {
		for i, d := range s.runHeldEntries(ctx, ecs) {
			ms[i].res, ms[i].err, ms[i].single = d.res, d.err, !d.decided
			ms[i].req = ecs[i] // with what the held write wrote, if it tried
		}
	}
	for i, m := range ms {
		res, err := m.res, m.err
		if m.single {
			res, err = o.completeClaimSingle(ctx, m.req)
		}
		if err != nil {
			errs = append(errs, wrap(ctx, m.req.op, err))
			continue
		}
		results[i] = res
	}
	return outboxResultsOut(results, errors.Join(errs...))
}
