package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger/internal/console"
)

// lockedBuffer is a bytes.Buffer that the command writes to from its
// goroutine while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var servingOn = regexp.MustCompile(`on (http://127\.0\.0\.1:\d+) `)

// serve starts ledgerctl serve on f's schema on a free loopback port with
// env, and returns the console's base URL and a function that stops the
// command and returns its exit code.
func serve(t *testing.T, f *fixture, env map[string]string, args ...string) (string, func() int) {
	t.Helper()
	env[envDSN] = f.dsn
	ctx, cancel := context.WithCancel(t.Context())
	var stdout, stderr lockedBuffer
	done := make(chan int, 1)
	args = append([]string{"serve", "-schema", f.schema, "-addr", "127.0.0.1:0"}, args...)
	go func() { done <- run(ctx, args, &stdout, &stderr, func(k string) string { return env[k] }) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m := servingOn.FindStringSubmatch(stderr.String()); m != nil {
			return m[1], func() int {
				cancel()
				select {
				case code := <-done:
					return code
				case <-time.After(30 * time.Second):
					t.Fatal("ledgerctl serve did not stop")
					return -1
				}
			}
		}
		select {
		case code := <-done:
			cancel()
			t.Fatalf("ledgerctl serve exited with %d: %s", code, stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("ledgerctl serve never said where it listens: %s", stderr.String())
		}
	}
}

func TestServeShowsTheSchemaInTheConsole(t *testing.T) {
	f := migrated(t)
	f.enqueue("order-42", "host-1", "cer-1")
	base, stop := serve(t, f, map[string]string{})
	res, err := http.Get(base + "/delivery?id=order-42")
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Contains(t, string(body), "schema "+f.schema)
	assert.Contains(t, string(body), "order-42")
	assert.Contains(t, string(body), "read-only")
	assert.NotEmpty(t, res.Header.Get("Content-Security-Policy"))
	assert.Equal(t, exitOK, stop())
}

func TestServeChecksItsFlagsBeforeConnecting(t *testing.T) {
	// The DSN names no server: a command that connected first would fail
	// on the connection instead.
	env := map[string]string{envDSN: "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"}
	r := cli(t, env, "serve", "-addr", "0.0.0.0:8080")
	assert.Equal(t, exitFailed, r.code)
	assert.Contains(t, r.stderr, "-public")
	r = cli(t, env, "serve", "-allow-writes")
	assert.Equal(t, exitFailed, r.code)
	assert.Contains(t, r.stderr, console.TokenEnv)
	env[console.TokenEnv] = "short"
	r = cli(t, env, "serve", "-allow-writes")
	assert.Equal(t, exitFailed, r.code)
	r = cli(t, env, "serve", "extra")
	assert.Equal(t, exitUsage, r.code)
}

func TestServeWritableSignsInWithTheTokenFromTheEnvironment(t *testing.T) {
	f := migrated(t)
	const token = "a-long-enough-console-token"
	base, stop := serve(t, f, map[string]string{console.TokenEnv: token}, "-allow-writes")
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.PostForm(base+"/login", map[string][]string{"name": {"alice"}, "token": {token}})
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusSeeOther, res.StatusCode)
	assert.Equal(t, "/", res.Header.Get("Location"))
	assert.NotEmpty(t, res.Cookies(), "a session cookie")
	assert.Equal(t, exitOK, stop())
}
