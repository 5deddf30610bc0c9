package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestServesMetrics runs the program on a loopback port until /metrics
// shows the events, the durations and the gauges, then stops it.
func TestServesMetrics(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- run(ctx, ln, 10*time.Millisecond, io.Discard) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Error("the program did not stop")
		}
	}()

	want := []string{
		`leaseledger_outbox_events_total{`,
		`leaseledger_event="delivered"`,
		`messaging_destination_name="mail"`,
		`leaseledger_outbox_emit_duration_seconds_bucket{`,
		`leaseledger_outbox_completion_latency_seconds_count{`,
		`leaseledger_delivery_events_total{`,
		`leaseledger_delivery_handle_duration_seconds_bucket{`,
		`leaseledger_delivery_completion_latency_seconds_sum{`,
		`leaseledger_delivery_depth{`,
		`leaseledger_delivery_lag_seconds{`,
		`leaseledger_delivery_records{`,
		`leaseledger_delivery_state="processed"`,
		`leaseledger_outbox_depth{`,
		`leaseledger_outbox_lag_seconds{`,
		`leaseledger_outbox_entries{`,
		`leaseledger_outbox_status="delivered"`,
	}
	client := &http.Client{Timeout: 5 * time.Second}
	var body string
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		res, err := client.Get("http://" + ln.Addr().String() + "/metrics")
		require.NoError(t, err)
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode)
		body = string(b)
		if containsAll(body, want) {
			break
		}
		time.Sleep(50 * time.Millisecond) // polling a live server: the loops run on the wall clock
	}
	for _, w := range want {
		assert.Contains(t, body, w)
	}
	assert.NotContains(t, body, "delivery-1\"", "IDs never become labels")
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
