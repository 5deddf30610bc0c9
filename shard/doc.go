// Package shard spreads one ledger over several stores: a Ledger is a
// ledger.Ledger over N ledgers, an Outbox a ledger.ClaimStore over N claim
// stores, of any kind (pgstore databases on separate servers, memstores in
// tests); it sees the stores only through the contract. The host code does not
// change: it never names a shard, and the dispatch loops run over a
// sharded store as over one store.
//
// # Where records live
//
// A delivery lives on the shard its target is placed on (a PlaceFunc:
// Hash over the shards by default, or a table the user controls with
// Pinned). Everything that is exact per target stays exact because it
// stays in one store: fences, queue bounds, oldest-first order, per-target
// statistics. An outbox entry lives on the shard of a hash of its
// envelope's provider, for the same reason (see Outbox).
//
// # What each call costs
//
// Calls that carry a lease or a claim (Acknowledge, AcknowledgeProcessed,
// MarkFailed, Release, RenewLease, the claim completions) are one call to
// one shard (a second only when the shard named answers NotFound, for a
// lease passed with another delivery's ID): the token handed out by Lease is the shard's index, a
// separator, and the shard's own token ("2~K7Q..."). The shard's part
// keeps all its randomness, so the token is as unguessable as the store's;
// like every token it never appears in a record read back (records keep
// their tokens inside the shard, and the index is added only to the Lease
// handed to the grantee). A token this package did not mint is routed by
// the delivery's ID and reaches the store unchanged, which answers it as
// it answers any stale token.
//
// Calls that name a delivery by ID alone (Get, MarkProcessed,
// RecordActivation, Abandon, History) read the ID on every shard at
// once, then call the shard that has it: one round trip of latency more,
// and one read per shard. dispatch.Worker completes through
// AcknowledgeProcessed when the ledger has it, as a Ledger does, so the
// loop's common path is Lease plus one call per delivery.
//
// Enqueue looks the ID up on every other shard before it writes (see
// Ledger.Enqueue), so that the idempotency rule holds across shards: the
// same ID under a target on another shard is Conflict, a repeat is
// Repeated wherever the record lives. A store that implements
// DeliveryIDFinder (pgstore and memstore do) answers the look-up for a
// whole batch in one statement that returns only IDs. WithoutIDCheck makes an enqueue one
// call to one shard when IDs cannot repeat across targets; docs/scale.md
// says what the look-up costs.
//
// Lease, ClaimPending, ClaimRetryReady and ClaimDue ask one shard that
// may hold matching work for the whole limit, the first shard rotating
// from call to call, and only when it has too little the others,
// concurrently, splitting the rest between them (see Ledger.Lease): a
// busy ledger pays one call per Lease, as one store does, and
// consecutive calls take from every shard in turn. List, ListEntries, ListEnded, ListEndedEntries,
// Stats, OutboxStats, Expire and ExpireCeremony ask every shard and merge: lists in ID order behind the
// stores' own cursor (storekit.EncodeCursor of the last ID), so paging is
// as stable as on one store; statistics by adding counts and taking the
// earliest oldest time. Leadership (ledger.Elector) lives on shard 0.
//
// # A shard that is down
//
// A call that needs one shard fails when that shard fails, with a
// *ShardError that errors.Is sees through to the store's error. Calls
// that gather from several (Lease, the claims) answer from the shards
// that answered and report the others to the ErrorFunc of WithErrorFunc;
// they fail only when every shard they asked failed. Expire returns the
// other shards' changes together with the error, as a store that sweeps
// in batches may. So the dispatch loops keep leasing, completing and
// sweeping on the other shards, and pick the shard up again on their next
// call once it is back: there is no connection state here to repair.
// Merged reads (List, Stats) fail while any shard is down, since an answer
// without it would be wrong. Leads live on shard 0: while it is down,
// sweeps, which take a lead first, pause; leases that ran out are still
// taken back by the next Lease on each shard.
//
// # Growing
//
// AddShard appends a store to a running Ledger. Nothing moves: the
// placement decides where new targets go, so a user who pins existing
// targets where Hash put them can place new ones on the new shard. Move
// takes a target's open work from one shard to another (see Ledger.Move),
// for a placement that changes where an existing target lives.
//
// # What is weaker than one store
//
//   - Lease order is oldest-first within each shard. A call takes from
//     the shards in turn, not from the one with the oldest work: while
//     its first shard has enough, a Lease takes all of its limit there,
//     and the next Lease starts at the next shard.
//   - Two concurrent first enqueues of one ID for targets on different
//     shards can both apply; nothing spans shards to serialise them.
//     Sequential ones, and any repeat, are answered as by one store.
//   - EnqueueBatch, outbox EnqueueBatch and CompleteClaims are atomic per
//     shard: when a shard fails, the others' parts are written.
//   - The incarnation rule reaches shards a Lease does not ask through a
//     Lease for ReclaimTarget, the first time this Ledger sees an
//     incarnation of an agent on that shard (see Ledger.Lease).
//   - A Follow supersession across shards leaves the moved work on the
//     previous target's shard until Move brings it over; until then only
//     the Ledger that superseded leases it for the replacement.
//   - Redrive (ledger.Redriver, ledger.OutboxRedriver) is not offered. A
//     redrive by filter takes, in one transaction, up to a limit of
//     records oldest end first, each under a derived ID that must be free:
//     shard by shard, the order is the shards' and a derived ID taken on
//     another shard goes unseen, and both are rules of the conformance
//     suite. Redrive on the shard itself (Ledger.Shards), where the record
//     and its redrive live together.
package shard
