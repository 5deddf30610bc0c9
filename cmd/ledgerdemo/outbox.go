package main

import (
	"context"
	"time"

	"github.com/leaseledger/ledger"
)

// workers are the outbox workers; each claims in turn every tick.
var workers = []string{"worker-a", "worker-b", "worker-c"}

// emit runs every outbox worker once: claim pending and retry-ready
// entries, hand each to a flaky provider, and complete it by what the
// provider said.
func (f *fleet) emit(ctx context.Context, now time.Time) error {
	for _, w := range workers {
		req := ledger.ClaimRequest{Worker: w, Now: now, LeaseDuration: 20 * time.Second, Limit: 10}
		pending, err := f.outbox.ClaimPending(ctx, req)
		if err != nil {
			return err
		}
		retry, err := f.outbox.ClaimRetryReady(ctx, req)
		if err != nil {
			return err
		}
		for _, c := range append(pending, retry...) {
			if err := f.provide(ctx, c, now); err != nil {
				return err
			}
		}
	}
	return nil
}

// provide plays the provider: most emissions succeed, some fail and are
// retried until they run out of attempts, a few are rejected for good or
// deferred, and now and then a worker stalls past its claim.
func (f *fleet) provide(ctx context.Context, c ledger.ClaimedEntry, now time.Time) error {
	var (
		res ledger.OutboxResult
		err error
	)
	switch p := f.rng.Float64(); {
	case p < 0.02:
		f.stats.stalls++ // the claim expires and another worker takes the entry
		return nil
	case p < 0.05:
		res, err = f.outbox.MarkClaimDeadLettered(ctx, c.Claim, ledger.EmissionError{Code: "422", Message: "provider rejected the address"}, "permanent provider rejection")
	case p < 0.08:
		deferred := c.Entry
		deferred.Status = ledger.OutboxStatusDeferred
		deferred.NextAttemptAt = now.Add(15 * time.Second)
		res, err = f.outbox.SaveClaim(ctx, c.Claim, deferred)
	case p < 0.25:
		if c.Entry.Attempts >= 4 {
			res, err = f.outbox.MarkClaimDeadLettered(ctx, c.Claim, ledger.EmissionError{Code: "503", Message: "provider unavailable"}, "retries exhausted")
			break
		}
		next := now.Add(10 * time.Second)
		res, err = f.outbox.MarkClaimFailed(ctx, c.Claim, ledger.EmissionError{Code: "503", Message: "provider unavailable"}, &next)
	default:
		res, err = f.outbox.MarkClaimDelivered(ctx, c.Claim, ledger.EmissionResult{ProviderRef: "msg-" + string(c.Entry.ID[:8])})
	}
	if err != nil {
		return err
	}
	if !res.Applied() {
		f.stats.claimsLost++
	}
	return nil
}
