// Package chaos holds the fault test of both stores. It has no code of its
// own outside its tests; this file only explains them.
//
// The test offers N deliveries and N outbox entries and lets 16 workers
// lease, acknowledge, process, fail and release the deliveries, and claim,
// complete and release the entries, at random, while faults hit them:
//
//   - a worker's server-side connection is killed (pg_terminate_backend):
//     each worker has pools of its own, named by application_name, so the
//     kill hits only that worker;
//   - a worker "crashes": it forgets its leases and claims without a word
//     and comes back as a new incarnation of the same agent;
//   - every incarnation's clock is skewed by up to a lease duration: its
//     now is a shared logical clock, which the workers drive forward, plus
//     its skew (no test step waits for wall time to pass);
//   - contexts are cancelled in the middle of calls;
//   - some calls run on a connection whose statement_timeout is 1ms;
//   - a worker process (the test binary run again as TestChaosChild) is
//     killed with SIGKILL in the middle of a call, and comes back as a new
//     incarnation;
//   - the PostgreSQL server itself is crashed (immediate shutdown) and
//     restarted once.
//
// The in-memory store gets the faults that apply to it: crashed holders,
// skewed clocks and cancelled contexts. It runs once as one store and once
// spread over three (shard.New and shard.NewOutbox over three memstores),
// so that the routing is held to the same checker.
//
// Afterwards time is driven far forward, Expire is run until nothing
// changes, and a clean worker finishes whatever is still open, so every
// record ends terminal. A checker then reads the history that every worker
// appended to (in memory for goroutines; a file, fsynced per line, for the
// child process) and the final records, in the manner of Jepsen's
// total-queue checker: a call that returned an error which might have
// committed counts as "may have happened", never as done. It counts items
// lost, unexpected, delivered more than once (allowed: delivery is at least
// once) and recovered, and checks, each as its own assertion:
//
//   - every item whose enqueue succeeded exists and is terminal;
//   - every end is explained: each terminal record is matched to the
//     logged call or sweep that ended it (at the now it was given, or
//     within its span when the store decides on its own clock), calls cut
//     short by a crash counting as may-have-happened; a store that ends
//     an item by itself fails this even when its version counts add up;
//   - the store holds exactly the planned items less those whose enqueue
//     certainly failed (or, uncertain, did not land, or were never tried
//     because a killed process took their numbers), counted by its stats,
//     so a record nobody enqueued is found on both stores;
//   - nothing was processed without an acknowledgement by the same owner;
//   - no two holders held one item under overlapping unexpired grants, in
//     terms of the now values passed in (the contract trusts the caller's
//     clock, so this is all a store can promise under skew);
//   - attempts equal grants less releases, within the bounds that
//     uncertain calls leave;
//   - a MarkProcessed with a stale fence never applied;
//   - every call that answered Applied is visible in the final record
//     (including those that returned before the server crash), and a call
//     that did not apply changed nothing (version accounting).
//
// The checker is itself tested against hand-made histories
// (checker_self_test.go) and against in-memory stores broken on purpose
// (planted_test.go): one that ends an item silently without a version
// bump, one that holds an entry nobody enqueued.
//
// # The failover test
//
// TestChaosFailover runs the same checker over a run of the real loops:
// dispatch.Workers and dispatch.Dispatchers drain both ledgers of a
// primary with a synchronous standby (pgcluster.StartReplicated) while a
// producer enqueues at a steady rate, and the primary is killed with
// SIGKILL and the standby promoted (pg_ctl promote), at random points of
// progress; once in the full form the roles change by a planned
// switchover instead. After each change the old primary is rebuilt as the
// new one's synchronous standby, so that the next can happen. Every
// client reaches the primary through a multi-host connection string with
// target_session_attrs=read-write. The loops see the stores through
// wrappers that log every call in the history format above
// (record_test.go), and only the base contracts, so that every call they
// make is one the checker knows. The test prints, per role change, the
// time from the primary being gone until both ledgers complete work
// again, and the median and worst over the failovers. The checker is
// shown to catch untrue answers in this history too
// (TestFailoverCheckerFailsOnPlantedStores).
//
// The short forms run by default (go test ./internal/chaos): the fault
// test with 500 items, the failover test with 600 items and one failover.
// The full forms, 10,000 deliveries and 10,000 entries under faults, and
// 6,000 of each through three failovers and a switchover, run with make
// chaos:
//
//	go test -race -count=1 -timeout 30m -v -run '^TestChaos(Memstore|PG|Failover)$' ./internal/chaos -chaos.full
//
// which prints each run's figures: items planned, enqueued and ended per
// store and kind, faults injected by kind (failovers and switchovers
// among them), lost items, overlapping grants, stale fences applied,
// duplicates and untrue answers, and for the failover test the recovery
// times. -chaos.seed picks the random seed, which every run logs.
package chaos
