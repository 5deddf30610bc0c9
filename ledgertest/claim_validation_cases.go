package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leaseledger/ledger"
)

// errNoBatches stands in for EnqueueBatch on a store without it; the
// EnqueueBatch group reports the missing method itself.
var errNoBatches = errors.New("ledgertest: store does not implement ledger.OutboxBatchEnqueuer")

// claimEnqueueBatch calls EnqueueBatch on f's store.
func claimEnqueueBatch(ctx context.Context, f claimFixture, envs []ledger.Envelope) error {
	b, ok := f.s.(ledger.OutboxBatchEnqueuer)
	if !ok {
		return errNoBatches
	}
	_, err := b.EnqueueBatch(ctx, envs)
	return err
}

// claimMethods lists every exported method of ClaimStore and
// OutboxBatchEnqueuer with a well-formed call and its malformed ones.
func claimMethods() []claimMethod {
	deferred := func(f claimFixture) ledger.OutboxEntry {
		e := f.claimed.Clone()
		e.Status = ledger.OutboxStatusDeferred
		e.NextAttemptAt = claimAt(time.Hour)
		return e
	}
	emissionErr := ledger.EmissionError{Code: "code", Message: "message"}
	retryAt := claimAt(time.Hour)
	return []claimMethod{
		{
			name: "Enqueue",
			valid: func(ctx context.Context, f claimFixture) error {
				_, err := f.s.Enqueue(ctx, claimEnvelope("fresh"))
				return err
			},
			bad: claimBadEnvelopes(func(ctx context.Context, f claimFixture, env ledger.Envelope) error {
				_, err := f.s.Enqueue(ctx, env)
				return err
			}),
		},
		{
			name: "EnqueueBatch",
			valid: func(ctx context.Context, f claimFixture) error {
				return claimEnqueueBatch(ctx, f, []ledger.Envelope{claimEnvelope("fresh")})
			},
			// One malformed envelope after a good one: nothing is written.
			bad: append(claimBadEnvelopes(func(ctx context.Context, f claimFixture, env ledger.Envelope) error {
				return claimEnqueueBatch(ctx, f, []ledger.Envelope{claimEnvelope("fresh-first"), env})
			}),
				claimBadCase{"Nil", func(ctx context.Context, f claimFixture) error { return claimEnqueueBatch(ctx, f, nil) }},
				claimBadCase{"Empty", func(ctx context.Context, f claimFixture) error { return claimEnqueueBatch(ctx, f, []ledger.Envelope{}) }},
				claimBadCase{"OverMax", func(ctx context.Context, f claimFixture) error {
					envs := make([]ledger.Envelope, ledger.MaxLimit+1)
					for i := range envs {
						envs[i] = claimEnvelope(fmt.Sprintf("fresh-%d", i))
					}
					return claimEnqueueBatch(ctx, f, envs)
				}},
			),
		},
		{
			name:  "Save",
			valid: func(ctx context.Context, f claimFixture) error { _, err := f.s.Save(ctx, deferred(f)); return err },
			bad: claimBadEntries(func(ctx context.Context, f claimFixture, e ledger.OutboxEntry) error {
				_, err := f.s.Save(ctx, e)
				return err
			}),
		},
		{
			name:  "FindByID",
			valid: func(ctx context.Context, f claimFixture) error { _, err := f.s.FindByID(ctx, f.claimed.ID); return err },
			bad: claimBadEach("ID", claimBadNames, func(ctx context.Context, f claimFixture, v string) error {
				_, err := f.s.FindByID(ctx, ledger.OutboxEntryID(v))
				return err
			}),
		},
		{
			name:  "FindPending",
			valid: func(ctx context.Context, f claimFixture) error { _, err := f.s.FindPending(ctx, 10); return err },
			bad: claimBadLimits(func(ctx context.Context, f claimFixture, limit int) error {
				_, err := f.s.FindPending(ctx, limit)
				return err
			}),
		},
		{
			name: "FindRetryReady",
			valid: func(ctx context.Context, f claimFixture) error {
				_, err := f.s.FindRetryReady(ctx, claimT0, 10)
				return err
			},
			bad: append(claimBadLimits(func(ctx context.Context, f claimFixture, limit int) error {
				_, err := f.s.FindRetryReady(ctx, claimT0, limit)
				return err
			}), claimBadTimeCases("Now", func(ctx context.Context, f claimFixture, now time.Time) error {
				_, err := f.s.FindRetryReady(ctx, now, 10)
				return err
			})...),
		},
		{
			name: "MarkDelivered",
			valid: func(ctx context.Context, f claimFixture) error {
				_, err := f.s.MarkDelivered(ctx, f.free.ID, ledger.EmissionResult{})
				return err
			},
			bad: append(claimBadEach("ID", claimBadNames, func(ctx context.Context, f claimFixture, v string) error {
				_, err := f.s.MarkDelivered(ctx, ledger.OutboxEntryID(v), ledger.EmissionResult{})
				return err
			}), claimBadEmissionResults(func(ctx context.Context, f claimFixture, r ledger.EmissionResult) error {
				_, err := f.s.MarkDelivered(ctx, f.free.ID, r)
				return err
			})...),
		},
		{
			name: "MarkFailed",
			valid: func(ctx context.Context, f claimFixture) error {
				_, err := f.s.MarkFailed(ctx, f.free.ID, emissionErr, nil)
				return err
			},
			bad: claimJoin(
				claimBadEach("ID", claimBadNames, func(ctx context.Context, f claimFixture, v string) error {
					_, err := f.s.MarkFailed(ctx, ledger.OutboxEntryID(v), emissionErr, nil)
					return err
				}),
				claimBadEmissionErrors(func(ctx context.Context, f claimFixture, e ledger.EmissionError) error {
					_, err := f.s.MarkFailed(ctx, f.free.ID, e, nil)
					return err
				}),
				claimBadNextRetries(func(ctx context.Context, f claimFixture, next *time.Time) error {
					_, err := f.s.MarkFailed(ctx, f.free.ID, emissionErr, next)
					return err
				}),
			),
		},
		{
			name: "MarkDeadLettered",
			valid: func(ctx context.Context, f claimFixture) error {
				_, err := f.s.MarkDeadLettered(ctx, f.free.ID, emissionErr, "reason")
				return err
			},
			bad: claimJoin(
				claimBadEach("ID", claimBadNames, func(ctx context.Context, f claimFixture, v string) error {
					_, err := f.s.MarkDeadLettered(ctx, ledger.OutboxEntryID(v), emissionErr, "reason")
					return err
				}),
				claimBadEmissionErrors(func(ctx context.Context, f claimFixture, e ledger.EmissionError) error {
					_, err := f.s.MarkDeadLettered(ctx, f.free.ID, e, "reason")
					return err
				}),
				claimBadEach("Reason", claimBadTexts, func(ctx context.Context, f claimFixture, v string) error {
					_, err := f.s.MarkDeadLettered(ctx, f.free.ID, emissionErr, v)
					return err
				}),
			),
		},
		{
			name: "ClaimPending",
			valid: func(ctx context.Context, f claimFixture) error {
				_, err := f.s.ClaimPending(ctx, claimRequest(claimAt(time.Hour), 10))
				return err
			},
			bad: claimBadRequests(func(ctx context.Context, f claimFixture, req ledger.ClaimRequest) error {
				_, err := f.s.ClaimPending(ctx, req)
				return err
			}),
		},
		{
			name: "ClaimRetryReady",
			valid: func(ctx context.Context, f claimFixture) error {
				_, err := f.s.ClaimRetryReady(ctx, claimRequest(claimAt(time.Hour), 10))
				return err
			},
			bad: claimBadRequests(func(ctx context.Context, f claimFixture, req ledger.ClaimRequest) error {
				_, err := f.s.ClaimRetryReady(ctx, req)
				return err
			}),
		},
		{
			name: "MarkClaimDelivered",
			valid: func(ctx context.Context, f claimFixture) error {
				_, err := f.s.MarkClaimDelivered(ctx, f.claim, ledger.EmissionResult{})
				return err
			},
			bad: append(claimBadClaims(func(ctx context.Context, f claimFixture, c ledger.Claim) error {
				_, err := f.s.MarkClaimDelivered(ctx, c, ledger.EmissionResult{})
				return err
			}), claimBadEmissionResults(func(ctx context.Context, f claimFixture, r ledger.EmissionResult) error {
				_, err := f.s.MarkClaimDelivered(ctx, f.claim, r)
				return err
			})...),
		},
		{
			name: "MarkClaimFailed",
			valid: func(ctx context.Context, f claimFixture) error {
				_, err := f.s.MarkClaimFailed(ctx, f.claim, emissionErr, &retryAt)
				return err
			},
			bad: claimJoin(
				claimBadClaims(func(ctx context.Context, f claimFixture, c ledger.Claim) error {
					_, err := f.s.MarkClaimFailed(ctx, c, emissionErr, &retryAt)
					return err
				}),
				claimBadEmissionErrors(func(ctx context.Context, f claimFixture, e ledger.EmissionError) error {
					_, err := f.s.MarkClaimFailed(ctx, f.claim, e, &retryAt)
					return err
				}),
				claimBadNextRetries(func(ctx context.Context, f claimFixture, next *time.Time) error {
					_, err := f.s.MarkClaimFailed(ctx, f.claim, emissionErr, next)
					return err
				}),
			),
		},
		{
			name: "MarkClaimDeadLettered",
			valid: func(ctx context.Context, f claimFixture) error {
				_, err := f.s.MarkClaimDeadLettered(ctx, f.claim, emissionErr, "reason")
				return err
			},
			bad: claimJoin(
				claimBadClaims(func(ctx context.Context, f claimFixture, c ledger.Claim) error {
					_, err := f.s.MarkClaimDeadLettered(ctx, c, emissionErr, "reason")
					return err
				}),
				claimBadEmissionErrors(func(ctx context.Context, f claimFixture, e ledger.EmissionError) error {
					_, err := f.s.MarkClaimDeadLettered(ctx, f.claim, e, "reason")
					return err
				}),
				claimBadEach("Reason", claimBadTexts, func(ctx context.Context, f claimFixture, v string) error {
					_, err := f.s.MarkClaimDeadLettered(ctx, f.claim, emissionErr, v)
					return err
				}),
			),
		},
		{
			name: "ReleaseClaim",
			valid: func(ctx context.Context, f claimFixture) error {
				_, err := f.s.ReleaseClaim(ctx, f.claim, "reason")
				return err
			},
			bad: append(claimBadClaims(func(ctx context.Context, f claimFixture, c ledger.Claim) error {
				_, err := f.s.ReleaseClaim(ctx, c, "reason")
				return err
			}), claimBadEach("Reason", claimBadTexts, func(ctx context.Context, f claimFixture, v string) error {
				_, err := f.s.ReleaseClaim(ctx, f.claim, v)
				return err
			})...),
		},
		{
			name: "SaveClaim",
			valid: func(ctx context.Context, f claimFixture) error {
				_, err := f.s.SaveClaim(ctx, f.claim, deferred(f))
				return err
			},
			bad: append(claimBadClaims(func(ctx context.Context, f claimFixture, c ledger.Claim) error {
				_, err := f.s.SaveClaim(ctx, c, deferred(f))
				return err
			}), claimBadEntries(func(ctx context.Context, f claimFixture, e ledger.OutboxEntry) error {
				_, err := f.s.SaveClaim(ctx, f.claim, e)
				return err
			})...),
		},
	}
}

// claimBadTimeCases returns one case per time no call accepts as its now.
func claimBadTimeCases(prefix string, call func(ctx context.Context, f claimFixture, t time.Time) error) []claimBadCase {
	return claimBadTimeCasesFrom(claimBadTimes, prefix, call)
}

// claimBadTimeCasesFrom returns one case per time in times.
func claimBadTimeCasesFrom(times []claimBadTime, prefix string, call func(ctx context.Context, f claimFixture, t time.Time) error) []claimBadCase {
	var out []claimBadCase
	for _, bt := range times {
		out = append(out, claimBadCase{prefix + bt.name, func(ctx context.Context, f claimFixture) error { return call(ctx, f, bt.value) }})
	}
	return out
}

// claimJoin concatenates case lists.
func claimJoin(lists ...[]claimBadCase) []claimBadCase {
	var out []claimBadCase
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}
