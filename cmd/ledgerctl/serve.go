package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/leaseledger/ledger/internal/console"
)

// setupServe is the serve command: the web console (internal/console) on
// the same database and schema as the other commands, until interrupted.
// It is read-only unless -allow-writes is given, and then offers its
// actions only to operators who sign in with the token in
// $LEDGER_CONSOLE_TOKEN, never given as a flag, which the process list
// would show.
func setupServe(fs *flag.FlagSet, c *common) func(context.Context, env, []string) error {
	addr := fs.String("addr", console.DefaultAddr, "address to listen on; loopback only unless -public")
	public := fs.Bool("public", false, "allow an address that other machines can reach")
	writable := fs.Bool("allow-writes", false, "offer abandon and expire-ceremony to operators signed in with $"+console.TokenEnv)
	timeout := fs.Duration("timeout", console.DefaultTimeout, "how long a page may wait for the database before it shows an error")
	return func(ctx context.Context, e env, pos []string) error {
		if err := noArgs(pos); err != nil {
			return err
		}
		if *timeout <= 0 {
			return usage("-timeout must be positive")
		}
		// Everything the operator typed is checked before connecting.
		token := e.getenv(console.TokenEnv)
		if *writable && len(token) < console.MinTokenBytes {
			return fail("-allow-writes needs a token of at least %d bytes in $%s", console.MinTokenBytes, console.TokenEnv)
		}
		if !*public && !console.Loopback(*addr) {
			return fail("-addr %s is reachable from other machines: pass -public to mean it", *addr)
		}
		store, closePool, err := open(ctx, *c, false)
		if err != nil {
			return err
		}
		defer closePool()
		h, err := console.New(store, store.Outbox(), console.Options{
			Title:    "schema " + c.schema,
			Now:      time.Now,
			Writable: *writable,
			Token:    token,
			Timeout:  *timeout,
		})
		if err != nil {
			return fail("%v", err)
		}
		ln, err := console.Listen(*addr, *public)
		if err != nil {
			return fail("cannot listen on %s: %v", *addr, err)
		}
		mode := "read-only"
		if *writable {
			mode = "writable: sign in with $" + console.TokenEnv
		}
		fmt.Fprintf(e.stderr, "ledgerctl: console of schema %s on http://%s (%s); interrupt to stop\n", c.schema, ln.Addr(), mode)
		if err := console.Serve(ctx, ln, h, *timeout); err != nil && !errors.Is(err, context.Canceled) {
			return fail("console: %v", err)
		}
		return nil
	}
}
