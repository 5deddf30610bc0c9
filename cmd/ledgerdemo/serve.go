package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/internal/console"
)

// serveFlags registers -serve and the console's flags on fs and returns a
// function that, after parsing, gives what start does with the ledger:
// nothing, or serve it in the console until the process is interrupted.
func serveFlags(fs *flag.FlagSet) func() afterFunc {
	serve := fs.Bool("serve", false, "after the run, keep the ledger open in the web console until interrupted")
	addr := fs.String("addr", console.DefaultAddr, "with -serve, the console's address (loopback only unless -public)")
	public := fs.Bool("public", false, "with -serve, allow an address beyond the loopback interface")
	writable := fs.Bool("allow-writes", false, "with -serve, offer the console's actions to operators signed in with $"+console.TokenEnv)
	return func() afterFunc {
		if !*serve {
			return nil
		}
		return func(l ledger.Ledger, outbox ledger.ClaimStore, end time.Time) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return serveDemo(ctx, os.Stdout, l, outbox, end, *addr, *public, *writable, os.Getenv(console.TokenEnv))
		}
	}
}

// serveDemo serves the demo's ledger in the console until ctx is done.
// The demo's time is simulated, so the console's clock starts at the
// demo's last now and runs on from there: its last hour is the end of the
// run.
func serveDemo(ctx context.Context, out io.Writer, l ledger.Ledger, outbox ledger.ClaimStore, end time.Time, addr string, public, writable bool, token string) error {
	started := time.Now()
	h, err := console.New(l, outbox, console.Options{
		Title:    "demo",
		Now:      func() time.Time { return end.Add(time.Since(started)) },
		Writable: writable,
		Token:    token,
	})
	if err != nil {
		return fmt.Errorf("console: %w (set $%s)", err, console.TokenEnv)
	}
	ln, err := console.Listen(addr, public)
	if err != nil {
		return err
	}
	mode := "read-only"
	if writable {
		mode = "writable, sign in with $" + console.TokenEnv
	}
	fmt.Fprintf(out, "\nconsole on http://%s (%s); interrupt to stop\n", ln.Addr(), mode)
	return console.Serve(ctx, ln, h, 0)
}
