package console

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Server limits, beside the handler's own bound on store calls.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 15 * time.Second
	idleTimeout       = 60 * time.Second
	shutdownTimeout   = 5 * time.Second
	maxHeaderBytes    = 64 << 10
)

// TokenEnv names the environment variable the commands read a writable
// console's sign-in token from: never a flag, which other users of the
// machine could read in the process list.
const TokenEnv = "LEDGER_CONSOLE_TOKEN"

// DefaultAddr is where the console listens unless told otherwise: the
// loopback interface only.
const DefaultAddr = "127.0.0.1:8080"

// ErrNotLoopback is returned by Listen for an address that is not on the
// loopback interface when public is false.
var ErrNotLoopback = errors.New("console: the address is not a loopback address")

// Loopback reports whether addr (host:port) names only the loopback
// interface: localhost, 127.0.0.0/8 or ::1. An empty host (":8080")
// listens on every interface and is not loopback.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Listen opens addr for the console. Unless public is true it refuses,
// with ErrNotLoopback, an address that reaches beyond this machine.
func Listen(addr string, public bool) (net.Listener, error) {
	if !public && !Loopback(addr) {
		return nil, fmt.Errorf("%w: %q (listening beyond this machine needs an explicit choice)", ErrNotLoopback, addr)
	}
	return net.Listen("tcp", addr)
}

// Serve serves h on ln until ctx is done, then shuts down, giving
// requests in flight up to five seconds. Every phase of a request is
// bounded: reading its headers and body, writing the answer (the
// handler's store calls are bounded by timeout, and the write gets five
// seconds more), and an idle connection. It returns nil after a shutdown
// that ctx asked for.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      timeout + 5*time.Second,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
