package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/user"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/pgstore"
)

// Exit codes, the same for every command (exitCodesText).
const (
	exitOK         = 0
	exitFailed     = 1
	exitUsage      = 2
	exitNotFound   = 3
	exitNotApplied = 4
)

// exitCodesText is the table of exit codes, printed by ledgerctl help and
// by every command's -h, and repeated in the README and the package
// documentation.
const exitCodesText = `exit codes, the same for every command:
  0  done: the command did what it says, or had done it before
     (a redrive of a record already redriven, as asked)
  1  failed: connection or store error, unmigrated schema, a value the
     store refused (an -older-than before 1970, an invisible ID)
  2  usage error: unknown command, bad flag or argument, a value refused
     before connecting (list -limit -1)
  3  not found: no record has the ID (or idempotency key)
  4  not applied: the record is not in a state the command can change
     (abandon of an ended delivery, redrive of open or processed work, a
     new ID already taken); nothing was written, and the message says why
`

// envDSN names the environment variable -dsn defaults to.
const envDSN = "LEDGER_DATABASE_URL"

// connectTimeout bounds connecting and the migration check, so that an
// unreachable server fails the command instead of hanging it.
const connectTimeout = 15 * time.Second

// env is the command's surroundings, so that every command can be run
// in-process by the tests.
type env struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	// clock times the progress lines of batched commands (progress.go).
	clock func() time.Time
	// tick returns a channel that delivers every d, and the function that
	// stops it; it paces the progress of a command whose batches run
	// inside one library call (progress.go). Nil: no such lines.
	tick func(d time.Duration) (<-chan time.Time, func())
	// user names the operating-system user, for the actor of writes
	// (withOperator); nil: unknown.
	user func() string
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

// notApplied returns an exit-4 error with a formatted message: the call
// answered an outcome other than Applied or Repeated.
func notApplied(format string, args ...any) error {
	return &exitError{code: exitNotApplied, msg: fmt.Sprintf(format, args...)}
}

// notFound returns an exit-3 error with a formatted message.
func notFound(format string, args ...any) error {
	return &exitError{code: exitNotFound, msg: fmt.Sprintf(format, args...)}
}

// command is one subcommand: its flags are registered on fs by setup,
// which returns the function that runs it with the positional arguments.
// The top-level help is made from the table (usageText), so a command can
// never be missing from it.
type command struct {
	name     string // one word, or a group and a word: "outbox list"
	synopsis string // its flags and arguments, for the help
	help     string
	setup    func(fs *flag.FlagSet, c *common) func(ctx context.Context, e env, pos []string) error
}

// commands lists the subcommands in help order.
func commands() []command {
	return []command{
		{"migrate", "[-print | -status]", "create the schema if missing and apply pending migrations; -print their SQL; -status: the applied and pending versions", setupMigrate},
		{"list", "[-state S]... [-target T]... [-ceremony C] [-limit N] [-cursor X]", "list one page of deliveries, in ID order", setupList},
		{"show", "ID|KEY", "show one delivery, or the outbox entry with that ID or idempotency key, every field and its history", setupShow},
		{"stats", "[-target T] [-ceremony C]", "count deliveries by state and cause, the queue's depth and lag, and the outbox", setupStats},
		{"abandon", "ID -cause KIND [-detail TEXT]", "end one open delivery as expired with -cause", setupAbandon},
		{"expire-ceremony", "ID -cause KIND [-detail TEXT]", "end every open delivery of the ceremony as expired with -cause", setupExpireCeremony},
		{"expire", "", "run the expiry sweep once: lapsed leases back to offered, lapsed acknowledgements ended", setupExpire},
		{"redrive", "ID [-new-id X] [-dry-run] | -state S... -target T... -ended-before D|T -all [-dry-run]", "send a failed or expired delivery (or outbox entry) again as a new one, by ID or by filter", setupRedrive},
		{"purge", "-older-than DURATION|RFC3339 [-dry-run]", "delete deliveries and outbox entries that ended before -older-than", setupPurge},
		{"outbox list", "[-status S]... [-provider P]... [-key K] [-limit N] [-cursor X]", "list one page of outbox entries, in ID order", setupOutboxList},
		{"outbox show", "ID|KEY", "show one outbox entry, by ID or idempotency key, every field and its history", setupOutboxShow},
		{"outbox stats", "", "count outbox entries by status, and the outbox's depth and lag", setupOutboxStats},
		{"outbox redrive", "ID|KEY [-new-key K] [-dry-run] | -status S... -provider P... -key K -ended-before D|T -all [-dry-run]", "send a failed or dead-lettered entry again as a new one, by ID or by filter", setupOutboxRedrive},
		{"serve", "[-addr HOST:PORT] [-allow-writes]", "serve the web console (read-only unless -allow-writes) until interrupted", setupServe},
		{"version", "", "print the versions of ledgerctl and of the schema it migrates to", setupVersion},
	}
}

// usageText is the top-level help, printed for -h and usage errors.
func usageText() string {
	var b strings.Builder
	b.WriteString("usage: ledgerctl [common flags] COMMAND [flags] [ARGS]\n\ncommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(&b, "  %s", c.name)
		if c.synopsis != "" {
			fmt.Fprintf(&b, " %s", c.synopsis)
		}
		fmt.Fprintf(&b, "\n      %s\n", c.help)
	}
	b.WriteString(`
common flags, before or after the command: -dsn URL (default $` + envDSN + `),
-schema NAME (default ` + pgstore.DefaultSchema + `), -json (one JSON document on stdout;
durations in it are nanoseconds, their keys end in _ns).
Now is the wall clock of this machine. "ledgerctl help COMMAND" shows a
command's flags, "ledgerctl help outbox" the outbox's commands. Writes
(abandon, expire-ceremony, redrive) are recorded in the history as made by
"USER via ledgerctl", USER the operating-system user.

` + exitCodesText)
	return b.String()
}

// groupText is the help of a group of commands (outbox): its commands
// with what they do, and the exit codes.
func groupText(word string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: ledgerctl [common flags] %s COMMAND [flags] [ARGS]\n\ncommands:\n", word)
	for _, c := range commands() {
		if first, _, ok := strings.Cut(c.name, " "); !ok || first != word {
			continue
		}
		fmt.Fprintf(&b, "  %s", c.name)
		if c.synopsis != "" {
			fmt.Fprintf(&b, " %s", c.synopsis)
		}
		fmt.Fprintf(&b, "\n      %s\n", c.help)
	}
	fmt.Fprintf(&b, "\n\"ledgerctl help %s COMMAND\" shows a command's flags.\n\n%s", word, exitCodesText)
	return b.String()
}

// common holds the flags every command takes.
type common struct {
	dsn    string
	schema string
	json   bool
}

// register adds the common flags to fs, c's values as their defaults,
// except the DSN's: the default is read after parsing, not given to the
// flag package, so that -h never prints a DSN (and its password) from the
// environment or the command line.
func (c *common) register(fs *flag.FlagSet, withJSON bool) {
	fs.StringVar(&c.dsn, "dsn", "", "PostgreSQL connection URL (default $"+envDSN+")")
	fs.StringVar(&c.schema, "schema", c.schema, "schema that holds the ledger's tables")
	if withJSON {
		fs.BoolVar(&c.json, "json", c.json, "print one JSON document instead of a table")
	}
}

// withOperator returns ctx naming the person at the keyboard as the actor
// of the writes made with it (ledger.WithActor): "USER via ledgerctl",
// USER the operating-system user (e.user), so that the history says who
// abandoned or redrove a record.
func withOperator(ctx context.Context, e env) context.Context {
	name := ""
	if e.user != nil {
		name = e.user()
	}
	if name == "" {
		name = "unknown user"
	}
	if actx, err := ledger.WithActor(ctx, name+" via ledgerctl"); err == nil {
		return actx
	}
	// A user name the ledger cannot record (control characters) is
	// shown as a name it can.
	actx, _ := ledger.WithActor(ctx, "unnamed user via ledgerctl")
	return actx
}

// osUser is the name of the operating-system user running ledgerctl:
// the account's name, else $USER.
func osUser(getenv func(string) string) func() string {
	return func() string {
		if u, err := user.Current(); err == nil && u.Username != "" {
			return u.Username
		}
		return getenv("USER")
	}
}

// findCommand returns the command args start with and the arguments
// after its name, or nil.
func findCommand(args []string) (*command, []string) {
	for _, c := range commands() {
		words := strings.Fields(c.name)
		if len(args) >= len(words) && slices.Equal(args[:len(words)], words) {
			return &c, args[len(words):]
		}
	}
	return nil, args
}

// group returns the second words of the commands named word ...: the
// commands of a group such as outbox.
func group(word string) []string {
	var subs []string
	for _, c := range commands() {
		if first, second, ok := strings.Cut(c.name, " "); ok && first == word {
			subs = append(subs, second)
		}
	}
	return subs
}

// run is the whole program but for the process: it parses args, runs one
// command and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	return runEnv(ctx, args, env{stdout: stdout, stderr: stderr, getenv: getenv, clock: time.Now, tick: ticker, user: osUser(getenv)})
}

// runEnv is run with its surroundings given whole.
func runEnv(ctx context.Context, args []string, e env) int {
	// The common flags may come before the command: ledgerctl -json list.
	pre := flag.NewFlagSet("ledgerctl", flag.ContinueOnError)
	pre.SetOutput(io.Discard)
	before := common{schema: pgstore.DefaultSchema}
	before.register(pre, true)
	if err := pre.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(e.stdout, usageText())
			return exitOK
		}
		fmt.Fprintf(e.stderr, "ledgerctl: %v\n\n%s", err, usageText())
		return exitUsage
	}
	args = pre.Args()
	if len(args) == 0 {
		fmt.Fprint(e.stderr, usageText())
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 {
			// help COMMAND: the command's own usage.
			if cmd, _ := findCommand(args[1:]); cmd != nil {
				return runEnv(ctx, append(strings.Fields(cmd.name), "-h"), e)
			}
			if len(group(args[1])) > 0 {
				fmt.Fprint(e.stdout, groupText(args[1]))
				return exitOK
			}
			fmt.Fprintf(e.stderr, "ledgerctl: no command %q\n\n%s", strings.Join(args[1:], " "), usageText())
			return exitUsage
		}
		fmt.Fprint(e.stdout, usageText())
		return exitOK
	}
	cmd, rest := findCommand(args)
	if cmd == nil && len(args) > 0 {
		if subs := group(args[0]); len(subs) > 0 {
			if len(args) > 1 && (args[1] == "-h" || args[1] == "-help" || args[1] == "--help") {
				fmt.Fprint(e.stdout, groupText(args[0]))
				return exitOK
			}
			fmt.Fprintf(e.stderr, "ledgerctl: %s needs a command: %s\n\n%s", args[0], strings.Join(subs, ", "), usageText())
			return exitUsage
		}
	}
	if cmd == nil {
		fmt.Fprintf(e.stderr, "ledgerctl: unknown command %q\n\n%s", strings.Join(args[:min(len(args), 2)], " "), usageText())
		return exitUsage
	}
	name := cmd.name

	fs := flag.NewFlagSet("ledgerctl "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	c := common{schema: before.schema, json: before.json}
	c.register(fs, cmd.name != "serve") // serve prints no document
	exec := cmd.setup(fs, &c)
	fs.Usage = func() {
		line := "usage: ledgerctl " + name + " [flags]"
		if cmd.synopsis != "" {
			line = "usage: ledgerctl " + name + " " + cmd.synopsis
		}
		fmt.Fprintf(fs.Output(), "%s\n\n%s.\n\nflags:\n", line, cmd.help)
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), "\n"+exitCodesText)
	}
	pos, err := parseInterspersed(fs, rest)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		// The flag package has already printed the problem and the usage.
		return exitUsage
	}
	if c.dsn == "" {
		c.dsn = before.dsn
	}
	if c.dsn == "" {
		c.dsn = e.getenv(envDSN)
	}
	ctx = withOperator(ctx, e)
	if err := exec(ctx, e, pos); err != nil {
		return report(e.stderr, err)
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
