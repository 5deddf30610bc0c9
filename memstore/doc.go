// Package memstore is the in-memory store of both ledger contracts, for
// unit tests and single-process hosts.
//
// A Store is a ledger.Ledger and a ledger.BatchEnqueuer; its Outbox, the
// outbox living beside it, is a ledger.ClaimStore and a
// ledger.OutboxBatchEnqueuer. (One Go type cannot be both contracts: both
// have Enqueue and MarkFailed, with different signatures.) Records live in
// process memory and are lost when the process ends; use pgstore when work
// must survive a restart.
//
// # The model
//
// memstore chooses which records a call touches and in what order; the
// root package's pure transition functions decide what happens to them, so
// memstore and pgstore produce the same records and outcomes for the same
// calls. Every method validates its arguments with the root's Validate
// functions and checks ctx before it touches anything: a rejected call
// returns an error matching ledger.ErrInvalid and writes nothing.
//
// Every call holds one mutex per store for its whole decision, so two calls
// never both hold the same delivery or claim. No method blocks on anything
// but that mutex; ctx is checked once, before the call starts.
//
// Records are copied in and out: a returned record, and the payload of a
// request after the call, share no memory with what the store keeps.
//
// # Time
//
// Ledger methods take the caller's now and claims carry req.Now; memstore
// never reads the clock for a decision. The outbox methods that carry no
// now (Enqueue, Save and the completions) stamp CreatedAt, UpdatedAt and
// EndedAt from the WithClock option, time.Now by default.
//
// # Cost
//
// Each store keeps ordered indexes (in-memory B-trees) beside its records,
// so that, for n records:
//
//   - Lease finds the oldest offerable delivery for a filter in O(log n),
//     plus one step per candidate it has to skip (Leased deliveries whose
//     attempts ran out, which the next Expire ends);
//   - Expire costs O(k log n) for k deliveries changed, ExpireCeremony and
//     Supersede O(k log n) for k open deliveries of the ceremony or target;
//   - List walks the ID order from its cursor and costs O(log n) plus one
//     step per record it examines, so a very selective filter over many
//     records examines many;
//   - ClaimPending and ClaimRetryReady cost O(log n) plus one step per
//     entry they skip because another worker's claim is still in force;
//   - the incarnation rule costs O(1) plus one step per lease taken back
//     (a map of leases per agent and incarnation).
//
// # Memory
//
// No transition deletes a record, so a Store grows with everything ever
// enqueued until PurgeDeliveries and PurgeEntries delete what ended before
// a cut-off. A million open deliveries with
// 256-byte payloads take about 710 MiB of heap: per delivery, the record
// (328 bytes, allocated in blocks), its payload, and about 130 bytes of
// map, table and index entries (BenchmarkHeapOpen1M measures it).
package memstore
