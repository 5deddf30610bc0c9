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

	"github.com/leaseledger/ledger"
)

// syncBuffer is a bytes.Buffer written by the server's goroutine and read
// by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// After the run, -serve keeps the demo's ledger open in the console, on
// the demo's clock: its last hour is the end of the run.
func TestServeKeepsTheDemosLedgerOpen(t *testing.T) {
	cfg := defaultConfig()
	cfg.Deliveries, cfg.Entries = 200, 40
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out syncBuffer
	done := make(chan error, 1)
	after := func(l ledger.Ledger, outbox ledger.ClaimStore, end time.Time) error {
		return serveDemo(ctx, &out, l, outbox, end, "127.0.0.1:0", false, false, "")
	}
	go func() { done <- start(ctx, cfg, "", false, io.Discard, after) }()
	on := regexp.MustCompile(`console on (http://127\.0\.0\.1:\d+) \(read-only\)`)
	var base string
	require.Eventually(t, func() bool {
		m := on.FindStringSubmatch(out.String())
		if m != nil {
			base = m[1]
		}
		return m != nil
	}, 30*time.Second, 10*time.Millisecond, "the console never started: %s", out.String())
	res, err := http.Get(base + "/")
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Contains(t, string(body), "demo")
	assert.Contains(t, string(body), "As of 2030-01-01", "the console runs on the demo's clock")
	assert.Contains(t, string(body), `class="completed"`, "the run's endings are in the console's last hour")
	cancel()
	require.NoError(t, <-done)
}
