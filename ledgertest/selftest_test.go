package ledgertest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/ledgertest"
	"github.com/leaseledger/ledger/memstore"
)

// brokenEnv selects the store TestBrokenStoreHelper runs the suite against.
// The suite's failures must not fail this test binary, so each broken store
// runs in a child process of it and the parent reads the verdict.
const brokenEnv = "LEDGERTEST_BROKEN"

// brokenSuites maps each value of brokenEnv to the suite run it selects.
var brokenSuites = map[string]func(t *testing.T){
	"claim-intact": func(t *testing.T) {
		ledgertest.TestClaimStore(t, func(*testing.T) ledger.ClaimStore { return memstore.NewOutbox() })
	},
	"claim-double-grant": func(t *testing.T) {
		ledgertest.TestClaimStore(t, func(*testing.T) ledger.ClaimStore { return &doubleGrantOutbox{Outbox: memstore.NewOutbox()} })
	},
	"claim-forget-attempt": func(t *testing.T) {
		ledgertest.TestClaimStore(t, func(*testing.T) ledger.ClaimStore { return forgetAttemptOutbox{memstore.NewOutbox()} })
	},
	"claim-stale-token": func(t *testing.T) {
		ledgertest.TestClaimStore(t, func(*testing.T) ledger.ClaimStore { return newStaleTokenOutbox() })
	},
	"claim-leaky-token": func(t *testing.T) {
		ledgertest.TestClaimStore(t, func(*testing.T) ledger.ClaimStore { return leakyTokenOutbox{newStaleTokenOutbox()} })
	},
	"claim-lenient-save": func(t *testing.T) {
		ledgertest.TestClaimStore(t, func(*testing.T) ledger.ClaimStore { return lenientSaveOutbox{memstore.NewOutbox()} })
	},
	"claim-forget-metadata": func(t *testing.T) {
		ledgertest.TestClaimStore(t, func(*testing.T) ledger.ClaimStore { return forgetMetadataOutbox{memstore.NewOutbox()} })
	},
	"claim-one-provider": func(t *testing.T) {
		ledgertest.TestClaimStore(t, func(*testing.T) ledger.ClaimStore { return oneProviderOutbox{memstore.NewOutbox()} })
	},
	"claim-key-ignored": func(t *testing.T) {
		ledgertest.TestClaimStore(t, func(*testing.T) ledger.ClaimStore { return keyIgnoredOutbox{memstore.NewOutbox()} })
	},
	"ledger-intact": func(t *testing.T) {
		ledgertest.TestLedger(t, func(*testing.T) ledger.Ledger { return memstore.New() })
	},
	"ledger-double-grant": func(t *testing.T) {
		ledgertest.TestLedger(t, func(*testing.T) ledger.Ledger { return &doubleGrantLedger{Store: memstore.New()} })
	},
	"ledger-forget-attempt": func(t *testing.T) {
		ledgertest.TestLedger(t, func(*testing.T) ledger.Ledger { return forgetAttemptLedger{memstore.New()} })
	},
	"ledger-stale-token": func(t *testing.T) {
		ledgertest.TestLedger(t, func(*testing.T) ledger.Ledger { return newStaleTokenLedger() })
	},
	"ledger-leaky-token": func(t *testing.T) {
		ledgertest.TestLedger(t, func(*testing.T) ledger.Ledger { return leakyTokenLedger{newStaleTokenLedger()} })
	},
	"bounds-intact": func(t *testing.T) {
		ledgertest.TestQueueBounds(t, func(_ *testing.T, b ledger.QueueBounds) ledger.Ledger {
			opts := []memstore.Option{memstore.WithQueueBound(b.Default)}
			for target, n := range b.Targets {
				opts = append(opts, memstore.WithTargetQueueBound(target, n))
			}
			return memstore.New(opts...)
		})
	},
	// bounds-ignored is a store that was never told its bounds.
	"bounds-ignored": func(t *testing.T) {
		ledgertest.TestQueueBounds(t, func(*testing.T, ledger.QueueBounds) ledger.Ledger { return memstore.New() })
	},
	"lead-double-take": func(t *testing.T) {
		ledgertest.TestLedger(t, func(*testing.T) ledger.Ledger { return doubleLeadLedger{memstore.New()} })
	},
	"lead-stale-renew": func(t *testing.T) {
		ledgertest.TestLedger(t, func(*testing.T) ledger.Ledger { return staleLeadLedger{memstore.New()} })
	},
	"ledger-whole-queue": func(t *testing.T) {
		ledgertest.TestLedger(t, func(*testing.T) ledger.Ledger { return wholeQueueLedger{memstore.New()} })
	},
	"ledger-metadata-content": func(t *testing.T) {
		ledgertest.TestLedger(t, func(*testing.T) ledger.Ledger { return metadataContentLedger{memstore.New()} })
	},
}

// TestBrokenStoreHelper is not a test on its own: TestSuiteFailsOnBrokenStores
// runs it in a child process with brokenEnv set.
func TestBrokenStoreHelper(t *testing.T) {
	mode := os.Getenv(brokenEnv)
	if mode == "" {
		t.Skip("runs only as a child of TestSuiteFailsOnBrokenStores")
	}
	run, ok := brokenSuites[mode]
	if !ok {
		t.Fatalf("unknown %s=%q", brokenEnv, mode)
	}
	run(t)
}

// TestSuiteFailsOnBrokenStores runs the suite against memstore intact (it
// must pass) and against each broken wrapper (it must fail, and fail in the
// subtests that check the guarantee the wrapper breaks).
func TestSuiteFailsOnBrokenStores(t *testing.T) {
	if os.Getenv(brokenEnv) != "" {
		t.Skip("already a child process")
	}
	if testing.Short() {
		t.Skip("runs the whole suite in child processes")
	}
	for _, tc := range []struct {
		mode string
		// failed lists subtests (below TestBrokenStoreHelper/) that must
		// fail; none when the suite must pass.
		failed []string
	}{
		{mode: "claim-intact"},
		{mode: "claim-double-grant", failed: []string{
			"Claim/ClaimPending/ClaimedEntryIsNotClaimedAgain",
			"Claim/ClaimRetryReady/ClaimedEntryIsNotClaimedAgain",
			"Concurrency/ClaimsStayExclusiveAndEveryEntryEnds",
		}},
		{mode: "claim-forget-attempt", failed: []string{
			"Claim/ClaimPending/GrantsAndCountsAnAttempt",
			"Claim/ClaimRetryReady/GrantsAndCountsAnAttempt",
			"Concurrency/ClaimsStayExclusiveAndEveryEntryEnds",
		}},
		{mode: "claim-stale-token", failed: []string{
			"ClaimCompletions/MarkClaimDelivered/StaleClaimIsLeaseLost",
			"ClaimCompletions/MarkClaimFailedWithRetry/WrongTokenIsLeaseLost",
			"ClaimCompletions/ReleaseClaim/WrongSeqIsLeaseLost",
			"ClaimCompletions/SaveClaimDeferred/StaleClaimIsLeaseLost",
		}},
		{mode: "claim-leaky-token", failed: []string{
			"Tokens/OnlyTheWorkersClaimCarriesTheToken",
			"Tokens/ClaimRebuiltFromAnEntryCannotAct",
		}},
		{mode: "claim-lenient-save", failed: []string{
			"Bounds/AttemptsPastMaxCountAreInvalid",
			"Validation/Save/AttemptsPastMaxCount",
		}},
		{mode: "claim-forget-metadata", failed: []string{
			"Metadata/RoundTrips",
			"Metadata/KeptByEveryTransition",
		}},
		{mode: "claim-one-provider", failed: []string{
			"Stats/QueueByProvider",
		}},
		{mode: "claim-key-ignored", failed: []string{
			"ListEntries/ByIdempotencyKey",
			"Redrive/MatchingByIdempotencyKey",
		}},
		{mode: "ledger-intact"},
		{mode: "ledger-double-grant", failed: ledgerDoubleGrantFailures},
		{mode: "ledger-forget-attempt", failed: ledgerForgetAttemptFailures},
		{mode: "ledger-stale-token", failed: ledgerStaleTokenFailures},
		{mode: "bounds-intact"},
		{mode: "bounds-ignored", failed: []string{
			"OverTheBoundAbandonsTheOldestOffered",
			"NewDeliveryIsAbandonedWhenNothingOlderIsOffered",
			"BatchSaysSoOnTheLastRequestOfTheTarget",
			"ConcurrentEnqueuesNeverLeaveMoreThanTheBound",
			"ConcurrentBatchesAndRedrivesNeverLeaveMoreThanTheBound",
		}},
		{mode: "lead-double-take", failed: []string{
			"Leadership/HeldLeadIsWrongOwner",
			"Leadership/TwoHoldersRacing",
		}},
		{mode: "lead-stale-renew", failed: []string{
			"Leadership/StaleHolderIsRefused",
			"Leadership/LapsedLeadIsNotRenewed",
		}},
		{mode: "ledger-leaky-token", failed: []string{
			"Tokens/OnlyTheGranteesLeaseCarriesTheToken",
			"Tokens/LeaseRebuiltFromARecordCannotAct",
		}},
		{mode: "ledger-whole-queue", failed: []string{
			"Stats/QueueByTarget",
			"Stats/DepthIsWhatLeaseHandsOut",
		}},
		{mode: "ledger-metadata-content", failed: []string{
			"Metadata/NilAndEmptyAreTheSame",
			"Metadata/IsNotContent",
		}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			out, err := runBrokenHelper(t, tc.mode)
			if len(tc.failed) == 0 {
				require.NoError(t, err, "the suite must pass against the intact store:\n%s", out)
				return
			}
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "the suite must fail against the %s store:\n%s", tc.mode, out)
			for _, name := range tc.failed {
				assert.Contains(t, out, "--- FAIL: TestBrokenStoreHelper/"+name+" (",
					"the suite must report the broken guarantee in %s", name)
			}
			if t.Failed() {
				t.Logf("child output:\n%s", out)
			}
		})
	}
}

// runBrokenHelper runs TestBrokenStoreHelper for mode in a child process of
// this test binary and returns its output and exit error.
func runBrokenHelper(t *testing.T, mode string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestBrokenStoreHelper$", "-test.count=1", "-test.timeout=3m")
	cmd.Env = append(os.Environ(), brokenEnv+"="+mode)
	out, err := cmd.CombinedOutput()
	require.NoError(t, ctx.Err(), "the child process for %s did not finish:\n%s", mode, out)
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("cannot run the child process for %s: %v", mode, err)
	}
	return strings.TrimSpace(string(out)), err
}
