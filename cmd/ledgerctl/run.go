package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/pgstore"
)

// Exit codes, as the command documentation lists them.
const (
	exitOK       = 0
	exitFailed   = 1
	exitUsage    = 2
	exitNotFound = 3
)

// envDSN names the environment variable -dsn defaults to.
const envDSN = "LEDGER_DATABASE_URL"

// connectTimeout bounds connecting and the migration check, so that an
// unreachable server fails the command instead of hanging it.
const connectTimeout = 15 * time.Second

// usageText is the top-level help, printed for -h and usage errors.
const usageText = `usage: ledgerctl COMMAND [flags] [ARGS]

commands:
  migrate [-print | -status]                  create or upgrade the schema; -print its SQL;
                                              -status: the applied and pending versions
  list [-state S]... [-target T]... [-ceremony C] [-limit N] [-cursor X]
                                              list deliveries, one page
  show ID                                     one delivery (or outbox entry)
  abandon ID -cause KIND [-detail TEXT]       end one open delivery as expired
  expire-ceremony ID -cause KIND [-detail TEXT]
                                              end every open delivery of a ceremony
  purge -older-than DURATION|RFC3339          delete records that ended before then
  serve [-addr HOST:PORT] [-allow-writes]     the web console, until interrupted

common flags: -dsn URL (default $LEDGER_DATABASE_URL), -schema NAME
(default ` + pgstore.DefaultSchema + `), -json (one JSON document on stdout).
Now is the wall clock of this machine.

exit codes: 0 ok, 1 failed (store or connection error, invalid input),
2 usage error, 3 not found.
`

// env is the command's surroundings, so that every command can be run
// in-process by the tests.
type env struct {
	stdout, stderr io.Writer
	getenv         func(string) string
}

// exitError carries an exit code and the message printed for it.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// fail returns an exit-1 error with a formatted message.
func fail(format string, args ...any) error {
	return &exitError{code: exitFailed, msg: fmt.Sprintf(format, args...)}
}

// usage returns an exit-2 error with a formatted message.
func usage(format string, args ...any) error {
	return &exitError{code: exitUsage, msg: fmt.Sprintf(format, args...)}
}

// notFound returns an exit-3 error with a formatted message.
func notFound(format string, args ...any) error {
	return &exitError{code: exitNotFound, msg: fmt.Sprintf(format, args...)}
}

// command is one subcommand: its flags are registered on fs by setup,
// which returns the function that runs it with the positional arguments.
type command struct {
	name  string
	args  string // positional arguments, for the usage line
	help  string
	setup func(fs *flag.FlagSet, c *common) func(ctx context.Context, e env, pos []string) error
}

// commands lists the subcommands in help order.
func commands() []command {
	return []command{
		{"migrate", "", "create the schema if missing and apply pending migrations", setupMigrate},
		{"list", "", "list one page of deliveries, in ID order", setupList},
		{"show", "ID", "show one delivery, or the outbox entry with that ID, and its history", setupShow},
		{"stats", "", "count deliveries by state and cause, and the queue's depth and lag", setupStats},
		{"abandon", "ID", "end one open delivery as expired with -cause", setupAbandon},
		{"expire-ceremony", "ID", "end every open delivery of the ceremony as expired with -cause", setupExpireCeremony},
		{"purge", "", "delete deliveries and outbox entries that ended before -older-than", setupPurge},
		{"serve", "", "serve the web console (read-only unless -allow-writes) until interrupted", setupServe},
	}
}

// common holds the flags every command takes.
type common struct {
	dsn    string
	schema string
	json   bool
}

// run is the whole program but for the process: it parses args, runs one
// command and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	e := env{stdout: stdout, stderr: stderr, getenv: getenv}
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usageText)
		return exitOK
	}
	var cmd *command
	for _, c := range commands() {
		if c.name == name {
			cmd = &c
			break
		}
	}
	if cmd == nil {
		fmt.Fprintf(stderr, "ledgerctl: unknown command %q\n\n%s", name, usageText)
		return exitUsage
	}

	fs := flag.NewFlagSet("ledgerctl "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c common
	// The default is read after parsing, not given to the flag package,
	// so that -h never prints a DSN (and its password) from the environment.
	fs.StringVar(&c.dsn, "dsn", "", "PostgreSQL connection URL (default $"+envDSN+")")
	fs.StringVar(&c.schema, "schema", pgstore.DefaultSchema, "schema that holds the ledger's tables")
	fs.BoolVar(&c.json, "json", false, "print one JSON document instead of a table")
	exec := cmd.setup(fs, &c)
	fs.Usage = func() {
		line := "usage: ledgerctl " + name + " [flags]"
		if cmd.args != "" {
			line += " " + cmd.args
		}
		fmt.Fprintf(fs.Output(), "%s\n\n%s.\n\nflags:\n", line, cmd.help)
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), "\nexit codes: 0 ok, 1 failed, 2 usage error, 3 not found.\n")
	}
	pos, err := parseInterspersed(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		// The flag package has already printed the problem and the usage.
		return exitUsage
	}
	if c.dsn == "" {
		c.dsn = getenv(envDSN)
	}
	if err := exec(ctx, e, pos); err != nil {
		return report(stderr, err)
	}
	return exitOK
}

// report prints err, with everything in it that would not show escaped
// (it may quote the operator's input or the server's words), and returns
// its exit code.
func report(stderr io.Writer, err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		fmt.Fprintf(stderr, "ledgerctl: %s\n", clean(ee.msg))
		return ee.code
	}
	fmt.Fprintf(stderr, "ledgerctl: %s\n", clean(err.Error()))
	return exitFailed
}

// parseInterspersed parses flags that may come before or after the
// positional arguments (`show ID -json` as well as `show -json ID`), which
// the flag package alone stops at the first positional one. A lone "--"
// ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > 0 && len(rest) < len(args) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// exactlyOne returns the single positional argument a command needs.
func exactlyOne(pos []string, what string) (string, error) {
	switch len(pos) {
	case 0:
		return "", usage("missing %s", what)
	case 1:
		if pos[0] == "" {
			return "", usage("empty %s", what)
		}
		return pos[0], nil
	default:
		return "", usage("want one %s, got %d arguments: %s", what, len(pos), strings.Join(pos, " "))
	}
}

// noArgs rejects positional arguments for commands that take none.
func noArgs(pos []string) error {
	if len(pos) > 0 {
		return usage("unexpected arguments: %s", strings.Join(pos, " "))
	}
	return nil
}

// open connects to the database and returns the store and a function that
// closes the pool. Unless migrating is true it also checks that the schema
// is migrated, so that an operator pointed at the wrong database or schema
// reads what to do rather than a "relation does not exist" error.
func open(ctx context.Context, c common, migrating bool) (*pgstore.Store, func(), error) {
	if c.dsn == "" {
		return nil, nil, usage("no database: pass -dsn or set %s", envDSN)
	}
	// New checks its options before the pool, so a nil pool tells a bad
	// schema name (the operator's input) apart before any connection.
	var inv *ledger.InvalidError
	if _, err := pgstore.New(nil, pgstore.WithSchema(c.schema)); errors.As(err, &inv) && inv.Field == "schema" {
		return nil, nil, fail("invalid -schema %q: %v", c.schema, err)
	}
	cfg, err := pgxpool.ParseConfig(c.dsn)
	if err != nil {
		// pgx's parse errors never repeat the password.
		return nil, nil, fail("cannot connect to the database: invalid DSN: %v", err)
	}
	where := describe(cfg)
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(cctx, cfg)
	if err != nil {
		return nil, nil, fail("cannot connect to %s: %v", where, err)
	}
	if err := pool.Ping(cctx); err != nil {
		pool.Close()
		return nil, nil, fail("cannot connect to %s: %v", where, err)
	}
	store, err := pgstore.New(pool, pgstore.WithSchema(c.schema))
	if err != nil {
		pool.Close()
		return nil, nil, fail("%v", err)
	}
	if !migrating {
		// to_regclass answers NULL for a missing table instead of failing,
		// so this one cheap query tells "not migrated" from a real error.
		var missing bool
		table := pgx.Identifier{c.schema, "deliveries"}.Sanitize()
		if err := pool.QueryRow(cctx, "SELECT to_regclass($1) IS NULL", table).Scan(&missing); err != nil {
			pool.Close()
			return nil, nil, fail("cannot check schema %s on %s: %v", c.schema, where, err)
		}
		if missing {
			pool.Close()
			return nil, nil, fail("schema %s is not migrated: run ledgerctl migrate", c.schema)
		}
	}
	return store, pool.Close, nil
}

// describe names the server of cfg for messages, without the password.
func describe(cfg *pgxpool.Config) string {
	cc := cfg.ConnConfig
	return fmt.Sprintf("%s:%d/%s as %s", cc.Host, cc.Port, cc.Database, cc.User)
}

// writeJSON prints v as one indented JSON document.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fail("writing JSON: %v", err)
	}
	return nil
}
