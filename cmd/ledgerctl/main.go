// Command ledgerctl is the operator's tool for a PostgreSQL leaseledger:
// it migrates the schema, lists and shows deliveries (and outbox entries)
// with their history, counts them, abandons a delivery, expires a ceremony,
// purges ended records, and serves the web console.
//
// Usage:
//
//	ledgerctl COMMAND [flags] [ARGS]
//
// Commands:
//
//	migrate [-print | -status]               create or upgrade the schema; print its SQL; list versions
//	list [-state S]... [-target T]... [-ceremony C] [-limit N] [-cursor X]
//	show ID                                  one delivery (or outbox entry), every field, and its history
//	stats [-target T] [-ceremony C]          counts by state and cause, depth and lag
//	abandon ID -cause KIND [-detail TEXT]    end one open delivery as expired
//	expire-ceremony ID -cause KIND [-detail TEXT]
//	purge -older-than DURATION|RFC3339       delete records that ended before then
//	serve [-addr HOST:PORT] [-allow-writes]  the web console (internal/console), until interrupted
//
// Every command takes -dsn (default $LEDGER_DATABASE_URL), -schema
// (default pgstore.DefaultSchema) and -json (one JSON document on stdout
// instead of a table). Flags may come before or after the ID.
//
// Unlike the library, whose every call takes the caller's now, ledgerctl
// takes now from the wall clock of the machine it runs on: it is a human's
// tool, and "now" means the operator's now. Workers with skewed clocks see
// the results at their own times.
//
// Exit codes:
//
//	0  success (also abandon of an already ended delivery, which says so)
//	1  failure: connection or store error, unmigrated schema, invalid input
//	2  usage error: unknown command, bad flag, missing argument
//	3  not found: show or abandon of an ID no record has
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
