// Package ledger is the contract of leaseledger: lease-based delivery
// ledgers that hand durable work to workers under exclusive, expiring
// leases and keep a visible end for every item.
//
// # Two contracts, one vocabulary
//
// A Ledger offers Deliveries to host destinations (Targets). A host agent
// leases them, acknowledges receipt, and an integrator marks them
// processed. It is modelled on a named event cursor, not on a queue:
// nothing is consumed by an acknowledgement, and every Delivery ends in a
// terminal state that says why (Processed, Failed with its LastFailure,
// Expired with its Cause). A queue whose acknowledgement consumes the item
// cannot answer the question an operator actually asks: what happened to
// the item nobody ever came back about?
//
// An OutboxStore holds entries waiting to be emitted to an external
// provider; a ClaimStore adds claims, so scaled workers can take an entry
// under a token before emitting it and complete it under that token.
//
// Two stores implement both contracts and pass one conformance suite
// (package ledgertest): memstore, in memory, and pgstore, on PostgreSQL.
//
// # Outcomes and errors
//
// Business answers are Outcomes in the result, never errors: a stale lease
// is OutcomeLeaseLost, a lower fence OutcomeFenceRejected, a terminal record
// OutcomeEnded. Every result carries the record as it now stands and an
// Applied method that says whether this call applied the durable
// transition. An error means the call was malformed (ErrInvalid, as an
// *InvalidError naming the field; nothing was written) or the store failed
// (connection lost, context cancelled); ErrUnusable marks a store that
// cannot work at all until its set-up changes (a schema never migrated).
//
// # Leads
//
// Some work must be done by one process at a time, though any may do it:
// the sweeps of package dispatch. A store that is an Elector keeps named
// leadership leases (Lead) for it, taken, renewed and given up with
// outcomes, time passed in, as row state like every lease here.
//
// # Time
//
// Every Ledger method takes the caller's now; stores never read the wall
// clock for a decision, so tests move time by passing a later now. Times
// are normalised to UTC and truncated to the microsecond at the API
// boundary. A lease is valid on [GrantedAt, ExpiresAt): at now ==
// ExpiresAt it has expired. The caller's clock is trusted: a worker whose
// clock runs slow keeps acting on an expired lease until someone else takes
// the delivery; the lease token, the lease sequence number and the
// processing fence are the hard guards.
//
// # One state machine
//
// This package is what a user of a store reads: the interfaces, the
// records and their read-only helpers (Terminal, Applied, Redacted, ...),
// requests, results, outcomes, options and errors. What a store does to
// its records is package storekit, the store writer's kit: the
// transitions of deliveries, outbox entries and leads as pure functions
// (a record and a request go in, the new record and an Outcome come out),
// the Validate functions every store calls first, and the accumulators of
// the statistics. Stores choose which records a call touches and in what
// order, then apply the kit; they never invent rules of their own, which
// is why both stores give the same answers. docs/state-machines.md draws
// both machines; storekit's documentation says how to write a store.
//
// # Guarantees
//
// Delivery is at least once. A record is durable once Enqueue returns
// without error. Two callers never hold unexpired leases on one delivery at
// once. A crashed holder strands nothing: its lease expires and the work is
// offered again. Claims reduce duplicate selection among outbox workers but
// do not make provider delivery exactly-once.
//
// A lease or claim token is a capability: only the Lease or Claim returned
// to the grantee carries it, and every record a store hands out shows the
// holder, sequence number and times of a grant but never its token (see
// Token and Delivery.Redacted); JSON never includes one. Every number a
// caller sets is bounded by what both stores hold (MaxCount, MaxLimit,
// MaxLeaseDuration, MaxPolicyDuration, MaxAttemptsLimit), and no
// transition takes a count past its bound. Names refuse characters that
// do not show as themselves (Invisible), so that look-alike names are one
// name.
package ledger
