// Command ledgerctl is the operator's tool for a PostgreSQL leaseledger:
// it migrates the schema, lists, shows and counts deliveries and outbox
// entries with their history, abandons a delivery, expires a ceremony,
// runs the expiry sweep, redrives what ended badly, purges ended records,
// and serves the web console.
//
// Usage:
//
//	ledgerctl [common flags] COMMAND [flags] [ARGS]
//
// Commands (ledgerctl help lists them with what they do; ledgerctl help
// COMMAND shows a command's flags):
//
//	migrate [-print | -status]
//	list [-state S]... [-target T]... [-ceremony C] [-limit N] [-cursor X]
//	show ID|KEY                               a delivery, or the outbox entry with that ID or idempotency key
//	stats [-target T] [-ceremony C]
//	abandon ID -cause KIND [-detail TEXT]
//	expire-ceremony ID -cause KIND [-detail TEXT]
//	expire                                    run the expiry sweep once
//	redrive ID [-new-id X] [-dry-run]         or by filter: -state, -target, -ended-before, -all, -dry-run
//	purge -older-than DURATION|RFC3339 [-dry-run]
//	outbox list [-status S]... [-provider P]... [-key K] [-limit N] [-cursor X]
//	outbox show ID|KEY
//	outbox stats
//	outbox redrive ID|KEY [-new-key K]        or by filter: -status, -provider, -key, -ended-before, -all, -dry-run
//	serve [-addr HOST:PORT] [-allow-writes]   the web console (internal/console), until interrupted
//	version
//
// Every command takes -dsn (default $LEDGER_DATABASE_URL), -schema
// (default pgstore.DefaultSchema) and -json (one JSON document on stdout
// instead of a table; durations in it are nanoseconds, in keys ending in
// _ns), before the command or after it. Flags may come before or after
// the ID. A command that works in batches (purge, redrive by filter)
// prints a progress line on stderr once it has run for a second.
//
// Unlike the library, whose every call takes the caller's now, ledgerctl
// takes now from the wall clock of the machine it runs on: it is a human's
// tool, and "now" means the operator's now. Workers with skewed clocks see
// the results at their own times.
//
// Writes (abandon, expire-ceremony, redrive) are recorded in the
// history as made by "USER via ledgerctl", USER the operating-system user
// (ledger.WithActor).
//
// Exit codes, the same for every command:
//
//	0  done: the command did what it says, or had done it before (a
//	   redrive of a record already redriven, as asked)
//	1  failed: connection or store error, unmigrated schema, a value the
//	   store refused
//	2  usage error: unknown command, bad flag or argument, a value
//	   refused before connecting (list -limit -1)
//	3  not found: no record has the ID (or idempotency key)
//	4  not applied: the record is not in a state the command can change
//	   (abandon of an ended delivery, redrive of open or processed work,
//	   a new ID already taken); nothing was written
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}
