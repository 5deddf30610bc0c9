package memstore_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/memstore"
)

// This file proves that the reference models of model_rapid_test.go and
// model_rapid_claim_test.go have teeth: each store below flips one rule of
// the contract, and the model must catch every one of them
// (TestModelsFailOnBrokenStores).

// ackIgnoresExpiry acknowledges an expired lease as if it were still live.
type ackIgnoresExpiry struct{ ledger.Ledger }

func (b ackIgnoresExpiry) Acknowledge(ctx context.Context, l ledger.Lease, obs string, now time.Time) (ledger.DeliveryResult, error) {
	if !now.Before(l.ExpiresAt) {
		now = l.ExpiresAt.Add(-time.Microsecond)
	}
	return b.Ledger.Acknowledge(ctx, l, obs, now)
}

// fenceIgnored drops the fence of MarkProcessed.
type fenceIgnored struct{ ledger.Ledger }

func (b fenceIgnored) MarkProcessed(ctx context.Context, id ledger.DeliveryID, o ledger.Owner, _ *ledger.Fence, a ledger.ActionRef, now time.Time) (ledger.DeliveryResult, error) {
	return b.Ledger.MarkProcessed(ctx, id, o, nil, a, now)
}

// sweepsClosedInterval treats a lease as expired at its last instant too.
type sweepsClosedInterval struct{ ledger.Ledger }

func (b sweepsClosedInterval) Expire(ctx context.Context, now time.Time) (ledger.SweepResult, error) {
	return b.Ledger.Expire(ctx, now.Add(time.Microsecond))
}

const brokenModelEnv = "MEMSTORE_BROKEN_MODEL"

// releaseIgnoresToken releases whatever claim is in force, whatever claim
// the caller holds.
type releaseIgnoresToken struct{ *memstore.Outbox }

func (b releaseIgnoresToken) ReleaseClaim(ctx context.Context, c ledger.Claim, reason string) (ledger.OutboxResult, error) {
	if e, err := b.FindByID(ctx, c.EntryID); err == nil && e.Claim != nil {
		c = *e.Claim
	}
	return b.Outbox.ReleaseClaim(ctx, c, reason)
}

// brokenModels runs a model against each broken store.
var brokenModels = map[string]func(t *testing.T){
	"ack-ignores-expiry": func(t *testing.T) {
		runDeliveryModel(t, func() ledger.Ledger { return ackIgnoresExpiry{newModelStore()} })
	},
	"fence-ignored": func(t *testing.T) {
		runDeliveryModel(t, func() ledger.Ledger { return fenceIgnored{newModelStore()} })
	},
	"sweeps-closed-interval": func(t *testing.T) {
		runDeliveryModel(t, func() ledger.Ledger { return sweepsClosedInterval{newModelStore()} })
	},
	"claim-release-ignores-token": func(t *testing.T) {
		runClaimModel(t, func(clock func() time.Time) ledger.ClaimStore {
			return releaseIgnoresToken{memstore.NewOutbox(memstore.WithClock(clock))}
		})
	},
}

// TestModelBrokenHelper is not a test on its own:
// TestModelsFailOnBrokenStores runs it in a child process.
func TestModelBrokenHelper(t *testing.T) {
	mode := os.Getenv(brokenModelEnv)
	if mode == "" {
		t.Skip("runs only as a child of TestModelsFailOnBrokenStores")
	}
	run, ok := brokenModels[mode]
	if !ok {
		t.Fatalf("unknown %s=%q", brokenModelEnv, mode)
	}
	run(t)
}

// TestModelsFailOnBrokenStores runs a model against each broken store, in
// a child process so that the expected failure does not fail this binary,
// and requires it to fail.
func TestModelsFailOnBrokenStores(t *testing.T) {
	if os.Getenv(brokenModelEnv) != "" {
		t.Skip("already a child process")
	}
	if testing.Short() {
		t.Skip("runs the model in child processes")
	}
	for mode := range brokenModels {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			// Many checks, since the run stops at the first failure; no fail
			// file, and little shrinking: only the verdict matters here.
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestModelBrokenHelper$", "-test.count=1",
				"-rapid.checks=2000", "-rapid.nofailfile", "-rapid.shrinktime=1s")
			cmd.Env = append(os.Environ(), brokenModelEnv+"="+mode)
			out, err := cmd.CombinedOutput()
			require.NoError(t, ctx.Err(), "the child for %s did not finish:\n%s", mode, out)
			var exit *exec.ExitError
			require.True(t, errors.As(err, &exit), "the model must fail against %s: %v\n%s", mode, err, out)
			require.True(t, strings.Contains(string(out), "--- FAIL: TestModelBrokenHelper"),
				"the child must fail in the model run, not elsewhere:\n%s", out)
		})
	}
}
