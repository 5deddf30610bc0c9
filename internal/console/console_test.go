package console

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/memstore"
)

// everyPage lists a URL of every page of a console over fill's data.
func everyPage(d ledgerData) []string {
	return []string{
		"/",
		pageURL("/", "target", hostileTarget),
		pageURL("/", "target", "edge-1", "ceremony", string(d.ceremony)),
		"/outbox",
		"/deliveries",
		pageURL("/deliveries", "state", "offered", "target", "edge-1, "+hostileTarget),
		pageURL("/deliveries", "ceremony", string(d.ceremony), "limit", "5"),
		pageURL("/deliveries", "state", "failed,expired", "state", "processed"),
		"/entries",
		pageURL("/entries", "status", "dead_lettered", "provider", "mail"),
		"/dead",
		pageURL("/delivery", "id", string(d.open)),
		pageURL("/delivery", "id", string(d.ended)),
		pageURL("/delivery", "id", string(d.hostile)),
		pageURL("/delivery", "id", string(d.hostile), "payload", "hex"),
		pageURL("/delivery", "id", "binary"),
		pageURL("/entry", "id", string(d.entry)),
		pageURL("/entry", "id", string(d.deadEntry)),
		pageURL("/entry", "id", string(ledger.OutboxEntryIDFor(hostileID))),
		"/login",
	}
}

func TestEveryPageRendersTheLedger(t *testing.T) {
	h, _, d := memFixture(t, Options{})
	c := newClient(t, h)
	for _, path := range everyPage(d) {
		status, body := c.get(path)
		require.Equal(t, http.StatusOK, status, "%s:\n%s", path, body)
		require.Contains(t, body, "</html>", path)
	}

	_, body := c.get("/")
	assert.Contains(t, body, `<span class="state s-processed">processed</span></a></td><td class="n">20</td>`)
	assert.Contains(t, body, `<td class="n">10</td>`, "ten failed")
	assert.Contains(t, body, "<svg", "the chart")
	assert.Contains(t, body, "completed 20", "every ending of the hour counted")
	assert.NotContains(t, body, "Partial view")

	_, body = c.get(pageURL("/deliveries", "state", "failed"))
	assert.Equal(t, 10, strings.Count(body, `<span class="state s-failed">failed</span>`))
	assert.NotContains(t, body, "s-processed\">processed</span>", "the filter applies")

	_, body = c.get(pageURL("/delivery", "id", string(d.ended)))
	for _, want := range []string{"mark_processed", "acknowledged → processed", "by host-agent/boot-1", "enqueue", `{&#34;n&#34;:0}`} {
		assert.Contains(t, body, want)
	}

	_, body = c.get(pageURL("/delivery", "id", "binary"))
	assert.Contains(t, body, `<pre class="payload hex">00000000  00 01 02 3c 73 ff fe`, "a binary payload is shown in hex")

	_, body = c.get(pageURL("/entry", "id", string(d.deadEntry)))
	assert.Contains(t, body, "dead_lettered")
	assert.Contains(t, body, "by worker-1")
}

func TestHostileValuesAreShownAsText(t *testing.T) {
	h, _, d := memFixture(t, Options{})
	c := newClient(t, h)
	for _, path := range everyPage(d) {
		_, body := c.get(path)
		for _, raw := range []string{"<script>", "<img src=x", `href="javascript:`, "</pre><script", "<b>cer</b>"} {
			require.NotContains(t, body, raw, "%s prints markup from the ledger", path)
		}
	}
	_, body := c.get(pageURL("/delivery", "id", string(d.hostile)))
	assert.Contains(t, body, "&lt;script&gt;alert(&#34;id&#34;)&lt;/script&gt;&#34;&#39;&amp;", "the ID, escaped")
	assert.Contains(t, body, "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;", "the target, escaped")
	assert.Contains(t, body, "&lt;/pre&gt;&lt;script&gt;alert(&#39;payload&#39;)&lt;/script&gt;", "the payload, escaped")
	// Links to a hostile record carry its ID as an escaped query value.
	_, body = c.get("/deliveries")
	assert.Contains(t, body, `href="/delivery?id=%3cscript%3ealert%28%22id%22%29%3c%2fscript%3e%22%27%26"`)
}

func TestTokensAreNeverRendered(t *testing.T) {
	h, _, d := memFixture(t, Options{Writable: true, Token: testToken})
	require.NotEmpty(t, d.tokens)
	c := newClient(t, h)
	c.signIn(testToken)
	for _, path := range everyPage(d) {
		_, body := c.get(path)
		for _, tok := range d.tokens {
			require.NotContains(t, body, tok, "%s shows a lease or claim token", path)
		}
	}
	// The lease is shown, without its token.
	_, body := c.get(pageURL("/delivery", "id", string(d.open)))
	assert.Contains(t, body, "held by host-agent/boot-1, seq 1")
}

func TestSecurityHeaders(t *testing.T) {
	h, _, _ := memFixture(t, Options{})
	srv := newClient(t, h)
	for _, path := range []string{"/", "/static/style.css", "/delivery?id=nobody", "/nowhere"} {
		res, err := srv.http.Get(srv.base + path)
		require.NoError(t, err)
		res.Body.Close()
		assert.Equal(t, "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
			res.Header.Get("Content-Security-Policy"), path)
		assert.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"), path)
		assert.Equal(t, "DENY", res.Header.Get("X-Frame-Options"), path)
	}
}

func TestErrorPages(t *testing.T) {
	h, _, _ := memFixture(t, Options{})
	c := newClient(t, h)
	for path, want := range map[string]int{
		"/delivery?id=nobody":                   http.StatusNotFound,
		"/entry?id=nobody":                      http.StatusNotFound,
		"/delivery":                             http.StatusBadRequest,
		"/deliveries?state=lost":                http.StatusBadRequest,
		"/deliveries?limit=100000":              http.StatusBadRequest,
		"/deliveries?cursor=bad":                http.StatusBadRequest,
		"/entries?status=lost":                  http.StatusBadRequest,
		"/?target=" + url.QueryEscape("a\x01b"): http.StatusBadRequest,
	} {
		status, body := c.get(path)
		assert.Equal(t, want, status, "%s: %s", path, body)
		assert.Contains(t, body, "Back to the overview", path)
	}
}

// stuckLedger is a ledger whose every read waits for its context: a
// database that stopped answering.
type stuckLedger struct{ *memstore.Store }

func (stuckLedger) wait(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
func (s stuckLedger) Get(ctx context.Context, _ ledger.DeliveryID) (ledger.Delivery, error) {
	return ledger.Delivery{}, s.wait(ctx)
}
func (s stuckLedger) List(ctx context.Context, _ ledger.ListQuery) (ledger.Page, error) {
	return ledger.Page{}, s.wait(ctx)
}
func (s stuckLedger) Stats(ctx context.Context, _ ledger.StatsFilter, _ time.Time) (ledger.DeliveryStats, error) {
	return ledger.DeliveryStats{}, s.wait(ctx)
}

// brokenLedger is a ledger whose reads fail at once.
type brokenLedger struct{ *memstore.Store }

var errConnection = errors.New("connection refused")

func (brokenLedger) List(context.Context, ledger.ListQuery) (ledger.Page, error) {
	return ledger.Page{}, errConnection
}

func TestAStoreThatDoesNotAnswerGivesAnErrorPage(t *testing.T) {
	store := memstore.New()
	h, err := New(stuckLedger{store}, store.Outbox(), Options{Timeout: 100 * time.Millisecond})
	require.NoError(t, err)
	c := newClient(t, h)
	for _, path := range []string{"/", "/deliveries", "/delivery?id=x", "/dead"} {
		start := time.Now()
		status, body := c.get(path)
		assert.Equal(t, http.StatusGatewayTimeout, status, path)
		assert.Contains(t, body, "The store did not answer in time", path)
		assert.Less(t, time.Since(start), 5*time.Second, "%s waited for the store", path)
	}

	h, err = New(brokenLedger{store}, nil, Options{})
	require.NoError(t, err)
	status, body := newClient(t, h).get("/deliveries")
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.Contains(t, body, "connection refused")
}

func TestNewRefusesAWritableConsoleWithoutAToken(t *testing.T) {
	store := memstore.New()
	for _, token := range []string{"", "short"} {
		_, err := New(store, nil, Options{Writable: true, Token: token})
		require.ErrorIs(t, err, ErrNoToken)
	}
	_, err := New(nil, nil, Options{})
	require.Error(t, err)
}

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "127.1.2.3:1": true, "[::1]:8080": true, "localhost:80": true,
		":8080": false, "0.0.0.0:8080": false, "[::]:8080": false, "192.168.1.5:8080": false, "example.com:80": false, "bad": false,
	} {
		assert.Equal(t, want, Loopback(addr), addr)
	}
	_, err := Listen("0.0.0.0:0", false)
	require.ErrorIs(t, err, ErrNotLoopback)
	ln, err := Listen("127.0.0.1:0", false)
	require.NoError(t, err)
	require.NoError(t, ln.Close())
}
