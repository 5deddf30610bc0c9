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
// skewed clocks and cancelled contexts.
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
// The short form runs by default (go test ./internal/chaos); the full
// form, 10,000 deliveries and 10,000 entries, runs with
//
//	go test -race -count=1 -timeout 30m ./internal/chaos -chaos.full
//
// and -chaos.seed picks the random seed, which every run logs.
package chaos
