// Package storekit is the store writer's kit: everything a store calls and
// a user of a store never does. It holds the one state machine of
// leaseledger (the transitions of deliveries, outbox entries and leads),
// the Validate functions every store entry point calls first, the
// constructors of new records and history entries, and the accumulators
// of the statistics. memstore, pgstore and shard are built from it, and so
// can a store of your own be.
//
// The name says what it is: the kit a store is built from. It is not a
// driver (memstore drives nothing, and a store is more than its
// connection), and it is not internal, because a store outside this
// module needs it as much as the two inside do. Package ledger keeps the
// contract a user reads: interfaces, records and their read-only helpers,
// requests, results, outcomes, options and errors.
//
// # Building a store
//
// A store implements ledger.Ledger (and, as it can, the optional
// interfaces beside it: BatchEnqueuer, Renewer, Historian, Elector, ...)
// or ledger.ClaimStore. Each method does the same four things:
//
//  1. Check the call with its Validate function (ValidateAcknowledge for
//     Acknowledge, ValidateLease for Lease, ...) before touching storage.
//     A malformed call returns that *ledger.InvalidError and writes
//     nothing.
//  2. Choose which records the call touches, and in what order: the
//     predicates say which (Delivery.Offerable, OutboxEntry.PendingClaimable,
//     Delivery.Expirable, ...) and the orders in what order (OfferedBefore,
//     PendingBefore, RetryBefore). A database store says the same in SQL,
//     with the Go predicate as its reference.
//  3. Apply the transition: convert the record and call the method named
//     after the operation. It returns the new record and a ledger.Outcome,
//     or the record unchanged when the call does not apply.
//  4. When the outcome is ledger.OutcomeApplied, store the new record and
//     its history entry (DeliveryTransition, EntryTransition) together,
//     atomically, and answer with a copy. Otherwise write nothing.
//
// Steps 3 and 4 of a lease, then of an acknowledgement, read:
//
//	next, lease := storekit.Delivery(d).Grant(owner, storekit.NewToken(), now, duration)
//	next, outcome := storekit.Delivery(d).Acknowledge(lease, observation, now)
//
// The example below runs one delivery through them.
//
// The kit never reads a clock and does no I/O: every transition takes the
// caller's now, and tokens come in as arguments (NewToken draws one).
// A store never invents a rule of its own; where it must say a rule
// again (in SQL, say), a test should hold the two to one answer, as
// pgstore's differential tests do.
//
// # Proving a store
//
// Package ledgertest is the conformance suite every store here passes,
// and the proof of a store of your own. Run it from a test of the store's
// package, with a constructor that returns a fresh, empty store:
//
//	func TestConformance(t *testing.T) {
//		ledgertest.TestLedger(t, func(t *testing.T) ledger.Ledger { return mystore.New() })
//		ledgertest.TestClaimStore(t, func(t *testing.T) ledger.ClaimStore { return mystore.NewOutbox() })
//	}
//
// A store with queue bounds runs ledgertest.TestQueueBounds too. The
// suite runs every operation, its outcomes, its validation and its races
// against the store, and checks the records it leaves with the invariant
// checkers (ledgertest.CheckRecords, ...), which a store's own randomised
// tests can call as well.
//
// docs/state-machines.md draws both state machines; its state ×
// operation tables are generated from this package by a test.
package storekit
