// Package memstore is the in-memory store of both ledger contracts, for
// unit tests and single-process hosts.
//
// A Store is a ledger.Ledger and a ledger.BatchEnqueuer, and also a
// ledger.Purger, ledger.Renewer, ledger.Historian and ledger.StatsReporter;
// its Outbox, the outbox living beside it, is a ledger.ClaimStore and a
// ledger.OutboxBatchEnqueuer, and also a ledger.OutboxPurger,
// ledger.ClaimRenewer, ledger.OutboxHistorian and
// ledger.OutboxStatsReporter. Both are a ledger.Elector over one table of
// leads, so that several sweepers in one process (dispatch.Sweeper) take
// turns. (One Go type cannot be both contracts: both
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
// # History and stats
//
// Every applied transition appends one entry to its record's history in
// the same critical section as the change, so History never shows a change
// that did not happen nor misses one that did; a call that does not apply
// writes none. Entries are built by the root package
// (storekit.DeliveryTransition, storekit.EntryTransition) and numbered by their
// place, which equals the record's Version after the change. Purging a
// record purges its history; WithoutHistory switches recording off.
//
// Stats and OutboxStats read counts kept up to date as records change, and
// the offer and claim indexes; they never scan the records.
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
//     (a map of leases per agent and incarnation);
//   - Stats and OutboxStats read counts kept up to date as records change,
//     O(1), and count what is due a node of an index at a time,
//     O(log n + k/31) for k due records (their godoc has the details);
//   - History and EntryHistory cost O(1) plus one step per entry returned.
//
// # Memory
//
// No transition deletes a record, so a Store grows with everything ever
// enqueued until PurgeDeliveries and PurgeEntries delete what ended before
// a cut-off. A million open deliveries with 256-byte payloads take about
// 735 MiB of heap, history on: per delivery, the record (328 bytes,
// allocated in blocks), its payload, and about 155 bytes of map, table,
// index and history entries (BenchmarkHeapOpen1M measures it). A record's
// creation costs its history nothing (it is rebuilt from the record); each
// later transition adds a 64-byte entry, whose strings are shared with the
// call that made it, so a million leased deliveries take about 985 MiB
// (900 MiB WithoutHistory).
package memstore
