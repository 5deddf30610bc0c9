package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	ledgerotel "github.com/leaseledger/ledger/otel"
	"github.com/leaseledger/ledger/pgstore/pgstoretest"
)

// TestMain gives TestServesADatabase its database: the server named by
// LEDGER_TEST_DATABASE_URL, or a throwaway cluster (see pgstoretest).
func TestMain(m *testing.M) { pgstoretest.Main(m) }

// TestServesADatabase runs the program with -dsn and -schema on a
// migrated PostgreSQL ledger holding queued work, and reads its depth,
// lag and counts at /metrics; a schema that was never migrated fails it
// at once.
func TestServesADatabase(t *testing.T) {
	store, pool := pgstoretest.New(t)
	ctx := t.Context()
	now := time.Now()
	for i, target := range []ledger.Target{"host-1", "host-1", "host-2"} {
		_, err := store.Enqueue(ctx, ledger.EnqueueRequest{ID: ledger.DeliveryID(fmt.Sprintf("d-%d", i)), Target: target}, now)
		require.NoError(t, err)
	}
	_, err := store.Outbox().Enqueue(ctx, ledger.Envelope{Provider: "mail", Kind: "welcome", IdempotencyKey: "k-1"})
	require.NoError(t, err)
	dsn := pool.Config().ConnString()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- runDatabase(runCtx, ln, dsn, store.Schema()) }()
	body := scrape(t, ln.Addr().String(), []string{
		`leaseledger_delivery_depth{messaging_destination_name="host-1",`,
		`leaseledger_outbox_depth{messaging_destination_name="mail",`,
		`leaseledger_delivery_records{leaseledger_delivery_state="offered",`,
	})
	assert.Regexp(t, `leaseledger_delivery_depth\{messaging_destination_name="host-1",[^}]*\} 2\n`, body)
	assert.Regexp(t, `leaseledger_delivery_depth\{messaging_destination_name="host-2",[^}]*\} 1\n`, body)
	assert.Contains(t, body, `otel_scope_version="`+ledgerotel.Version+`"`)
	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the program did not stop")
	}

	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln2.Close()
	err = runDatabase(ctx, ln2, dsn, "never_migrated")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "never_migrated")
}

// scrape reads /metrics at addr until it holds every string of want, or
// 20 s have passed, and returns the last body.
func scrape(t *testing.T, addr string, want []string) string {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	var body string
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		res, err := client.Get("http://" + addr + "/metrics")
		require.NoError(t, err)
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode)
		body = string(b)
		if containsAll(body, want) {
			break
		}
		time.Sleep(50 * time.Millisecond) // polling a live server: it runs on the wall clock
	}
	for _, w := range want {
		assert.Contains(t, body, w)
	}
	return body
}

// TestServesMetrics runs the program on a loopback port until /metrics
// shows the events, the durations and the gauges, checks them against the
// module README's table, then stops it.
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
		`messaging_process_duration_seconds_bucket{`,
		`messaging_operation_name="emit"`,
		`messaging_operation_name="handle"`,
		`error_type="_OTHER"`,
		`messaging_client_consumed_messages_total{`,
		`messaging_operation_name="claim"`,
		`messaging_operation_name="lease"`,
		`leaseledger_sweep_events_total{`,
		`leaseledger_sweep_job="dispatch.sweep.expire"`,
		`leaseledger_sweep_records_total{`,
		`otel_scope_version="` + ledgerotel.Version + `"`,
		`leaseledger_outbox_completion_latency_seconds_count{`,
		`leaseledger_delivery_events_total{`,
		`leaseledger_delivery_completion_latency_seconds_sum{`,
		`leaseledger_delivery_depth{messaging_destination_name="host-1",`,
		`leaseledger_delivery_lag_seconds{`,
		`leaseledger_delivery_records{`,
		`leaseledger_delivery_state="processed"`,
		`leaseledger_outbox_depth{messaging_destination_name="sms",`,
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
	checkReadmeTable(t, body)
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

// family is a metric as Prometheus serves it, or as the README lists it:
// its type and the names of its labels.
type family struct {
	typ    string
	labels map[string]bool
}

// exporterLabels are added by the exporter to every series, and le to
// histogram buckets; the README says so in prose, not in the table.
var exporterLabels = map[string]bool{"otel_scope_name": true, "otel_scope_version": true, "otel_scope_schema_url": true, "le": true}

// optionalLabels are in the README's table but not served by this
// program (as metric/label): its sweeps never fail.
var optionalLabels = map[string]bool{"leaseledger_sweep_events_total/error_type": true}

// checkReadmeTable checks the metrics table of the module's README
// against what /metrics served: the same metric names, each of the
// documented type, each served label documented and each documented
// label served.
func checkReadmeTable(t *testing.T, body string) {
	t.Helper()
	md, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	documented := readmeFamilies(string(md))
	served := servedFamilies(body)
	require.Equal(t, slices.Sorted(maps.Keys(documented)), slices.Sorted(maps.Keys(served)), "the README's metric names")
	for name, doc := range documented {
		got := served[name]
		assert.Equal(t, doc.typ, got.typ, "%s: type", name)
		for l := range got.labels {
			assert.True(t, doc.labels[l], "%s: label %s is served but not in the README", name, l)
		}
		for l := range doc.labels {
			assert.True(t, got.labels[l] || optionalLabels[name+"/"+l], "%s: label %s is in the README but not served", name, l)
		}
	}
}

var (
	backticked = regexp.MustCompile("`([^`]*)`")
	labelName  = regexp.MustCompile(`^[a-z_]+$`)
	labelInSet = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)
)

// readmeFamilies reads the rows of the README's metrics table: the
// Prometheus name, the type, and the label names in the labels cell.
func readmeFamilies(md string) map[string]family {
	out := map[string]family{}
	for line := range strings.Lines(md) {
		if !strings.HasPrefix(line, "| `leaseledger_") && !strings.HasPrefix(line, "| `messaging_") {
			continue
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if len(cells) != 5 {
			continue // a row of the labels' table
		}
		name := strings.Trim(strings.TrimSpace(cells[0]), "`")
		f := family{typ: strings.TrimSpace(cells[1]), labels: map[string]bool{}}
		for _, m := range backticked.FindAllStringSubmatch(cells[3], -1) {
			if labelName.MatchString(m[1]) {
				f.labels[m[1]] = true
			}
		}
		out[name] = f
	}
	return out
}

// ours reports whether a metric name (or a line that starts with one) is
// one of ledgerotel's: its own, or the messaging conventions' it uses.
func ours(name string) bool {
	return strings.HasPrefix(name, "leaseledger_") || strings.HasPrefix(name, "messaging_")
}

// servedFamilies reads the leaseledger_ and messaging_ families of a /metrics body: the
// type of each from its TYPE line, and the labels of all its series.
func servedFamilies(body string) map[string]family {
	out := map[string]family{}
	for line := range strings.Lines(body) {
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok && ours(rest) {
			name, typ, _ := strings.Cut(strings.TrimSpace(rest), " ")
			out[name] = family{typ: typ, labels: map[string]bool{}}
		}
	}
	for line := range strings.Lines(body) {
		if !ours(line) {
			continue
		}
		series, labels, _ := strings.Cut(line, "{")
		name := series
		if _, ok := out[name]; !ok {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				name = strings.TrimSuffix(name, suffix)
				if _, ok := out[name]; ok {
					break
				}
			}
		}
		f, ok := out[name]
		if !ok {
			f = family{labels: map[string]bool{}}
			out[series] = f
		}
		for _, m := range labelInSet.FindAllStringSubmatch(labels, -1) {
			if !exporterLabels[m[1]] {
				f.labels[m[1]] = true
			}
		}
	}
	return out
}
