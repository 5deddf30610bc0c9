// Package ledgertest is the public conformance suite for ledger stores.
//
// Every implementation of ledger.Ledger runs TestLedger and every
// implementation of ledger.ClaimStore runs TestClaimStore, in the way
// testing/fstest.TestFS serves every fs.FS:
//
//	func TestConformance(t *testing.T) {
//		ledgertest.TestLedger(t, func(t *testing.T) ledger.Ledger { return memstore.New() })
//	}
//
// Subtests are named after the rule they check (Enqueue/SameContentIsRepeated).
// There are no capability flags: a store passes the whole suite or it does
// not conform. The groups for optional interfaces (Renewer, Purger,
// FenceRejecter, Historian, StatsReporter, EndedLister, Redriver and their outbox twins,
// OutboxLister, and Elector in the Leadership group of both suites) run
// when the store implements the interface and skip, saying which, when it
// does not. Time moves only by passing later now values computed from a
// fixed t0; nothing sleeps. Invariant checkers return errors so that the
// suite can itself be tested against deliberately broken stores.
package ledgertest

import (
	"testing"

	"github.com/leaseledger/ledger"
)

// NewLedgerFunc returns a fresh, empty ledger for one test and registers
// its own cleanup with t.
type NewLedgerFunc func(t *testing.T) ledger.Ledger

// NewClaimStoreFunc returns a fresh, empty claim store for one test and
// registers its own cleanup with t.
type NewClaimStoreFunc func(t *testing.T) ledger.ClaimStore

// TestLedger runs the delivery ledger conformance suite against the ledgers
// newLedger returns.
func TestLedger(t *testing.T, newLedger NewLedgerFunc) {
	t.Helper()
	for _, g := range ledgerGroups {
		t.Run(g.name, func(t *testing.T) { g.run(t, newLedger) })
	}
}

// TestClaimStore runs the outbox and claim conformance suite against the
// stores newStore returns.
func TestClaimStore(t *testing.T, newStore NewClaimStoreFunc) {
	t.Helper()
	for _, g := range claimGroups {
		t.Run(g.name, func(t *testing.T) { g.run(t, newStore) })
	}
}

// ledgerGroups lists the operation groups of TestLedger, one file each.
var ledgerGroups = []struct {
	name string
	run  func(*testing.T, NewLedgerFunc)
}{
	{"Enqueue", testEnqueue},
	{"Lease", testLease},
	{"Acknowledge", testAcknowledge},
	{"MarkProcessed", testMarkProcessed},
	{"EndFenceRejected", testEndFenceRejected},
	{"AcknowledgeProcessed", testAcknowledgeProcessed},
	{"RecordActivation", testRecordActivation},
	{"MarkFailed", testMarkFailed},
	{"Release", testRelease},
	{"RenewLease", testRenewLease},
	{"Expire", testExpire},
	{"Abandon", testAbandon},
	{"ExpireCeremony", testExpireCeremony},
	{"Supersede", testSupersede},
	{"Get", testGet},
	{"List", testList},
	{"ListEnded", testListEnded},
	{"PurgeDeliveries", testPurgeDeliveries},
	{"Redrive", testRedrive},
	{"History", testHistory},
	{"Stats", testStats},
	{"Metadata", testMetadata},
	{"Validation", testValidation},
	{"Bounds", testBounds},
	{"Tokens", testTokens},
	{"Concurrency", testConcurrency},
	{"Races", testLedgerRaces},
	{"Leadership", func(t *testing.T, newLedger NewLedgerFunc) {
		testLeadership(t, func(t *testing.T) (ledger.Elector, bool) {
			e, ok := newLedger(t).(ledger.Elector)
			return e, ok
		})
	}},
}

// claimGroups lists the operation groups of TestClaimStore, one file each.
var claimGroups = []struct {
	name string
	run  func(*testing.T, NewClaimStoreFunc)
}{
	{"Enqueue", testOutboxEnqueue},
	{"EnqueueBatch", testOutboxEnqueueBatch},
	{"Save", testOutboxSave},
	{"Find", testOutboxFind},
	{"BaseCompletions", testOutboxBaseCompletions},
	{"Claim", testClaim},
	{"ClaimCompletions", testClaimCompletions},
	{"CompleteClaims", testCompleteClaims},
	{"RenewClaim", testRenewClaim},
	{"ListEntries", testListEntries},
	{"ListEndedEntries", testListEndedEntries},
	{"PurgeEntries", testPurgeEntries},
	{"Redrive", testEntryRedrive},
	{"History", testEntryHistory},
	{"Stats", testOutboxStats},
	{"Metadata", testOutboxMetadata},
	{"Validation", testOutboxValidation},
	{"Bounds", testClaimBounds},
	{"Tokens", testClaimTokens},
	{"Concurrency", testClaimConcurrency},
	{"Races", testClaimRaces},
	{"Leadership", func(t *testing.T, newStore NewClaimStoreFunc) {
		testLeadership(t, func(t *testing.T) (ledger.Elector, bool) {
			e, ok := newStore(t).(ledger.Elector)
			return e, ok
		})
	}},
}
