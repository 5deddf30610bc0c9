package console

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/memstore"
)

// t0 is the instant the fixtures' histories start from; the consoles
// under test run their clock at consoleNow, half an hour later.
var (
	t0         = time.Date(2030, time.January, 1, 9, 0, 0, 0, time.UTC)
	consoleNow = t0.Add(30 * time.Minute)
)

// testToken is the sign-in token of writable test consoles.
const testToken = "test-token-0123456789abcdef"

// hostile values: markup and script in every place a caller can put text.
const (
	hostileID     = `<script>alert("id")</script>"'&`
	hostileTarget = `"><img src=x onerror=alert(1)>`
	hostileText   = `</pre><script>alert('payload')</script><a href="javascript:alert(1)">x</a>`
)

// ledgerData is what a fixture put in its stores: IDs of records in
// known states, and the tokens of the leases and claims it holds.
type ledgerData struct {
	open, ended, hostile ledger.DeliveryID
	ceremony             ledger.CeremonyID
	entry, deadEntry     ledger.OutboxEntryID
	tokens               []string
}

// fill puts a small fleet's worth of records into l and outbox: open,
// leased, acknowledged and ended deliveries over three targets, some of
// them with hostile IDs, targets and payloads; outbox entries delivered,
// dead-lettered, claimed and pending. Times run from t0 by minutes.
func fill(t testing.TB, ctx context.Context, l ledger.Ledger, outbox ledger.ClaimStore) ledgerData {
	t.Helper()
	d := ledgerData{open: "open-001", ended: "done-000", hostile: hostileID, ceremony: "rollout-1"}
	enqueue := func(r ledger.EnqueueRequest, at time.Time) {
		res, err := l.Enqueue(ctx, r, at)
		require.NoError(t, err)
		require.Equal(t, ledger.OutcomeApplied, res.Outcome, r.ID)
	}
	owner := ledger.Owner{Agent: "host-agent", Incarnation: "boot-1"}
	for i := range 30 {
		at := t0.Add(time.Duration(i) * time.Minute)
		id := ledger.DeliveryID(fmt.Sprintf("done-%03d", i))
		target := ledger.Target(fmt.Sprintf("edge-%d", i%3))
		enqueue(ledger.EnqueueRequest{ID: id, Target: target, Ceremony: d.ceremony, Payload: []byte(`{"n":` + fmt.Sprint(i) + `}`)}, at)
		lr, err := l.Lease(ctx, ledger.LeaseFilter{Targets: []ledger.Target{target}}, owner, at, time.Minute, 1)
		require.NoError(t, err)
		require.Len(t, lr.Leased, 1)
		lease := lr.Leased[0].Lease
		switch i % 3 {
		case 0, 1:
			_, err = l.Acknowledge(ctx, lease, "seen", at)
			require.NoError(t, err)
			_, err = l.MarkProcessed(ctx, id, owner, nil, "action-"+ledger.ActionRef(id), at.Add(time.Second))
		default:
			_, err = l.MarkFailed(ctx, lease, ledger.FailureReason{Message: hostileText, Permanent: true}, at.Add(time.Second))
		}
		require.NoError(t, err)
	}
	for i := range 5 {
		enqueue(ledger.EnqueueRequest{ID: ledger.DeliveryID(fmt.Sprintf("open-%03d", i)), Target: "edge-1", Ceremony: d.ceremony,
			Payload: []byte("plain text payload"), Metadata: ledger.Metadata{"tenant": "acme", "note": hostileText}}, t0)
	}
	enqueue(ledger.EnqueueRequest{ID: d.hostile, Target: hostileTarget, Ceremony: `<b>cer</b>`, Payload: []byte(hostileText)}, t0)
	enqueue(ledger.EnqueueRequest{ID: "binary", Target: "edge-2", Payload: []byte{0, 1, 2, '<', 's', 0xff, 0xfe}}, t0)
	lr, err := l.Lease(ctx, ledger.LeaseFilter{Targets: []ledger.Target{"edge-1"}}, owner, consoleNow, time.Hour, 2)
	require.NoError(t, err)
	for _, ld := range lr.Leased {
		d.tokens = append(d.tokens, string(ld.Lease.Token))
	}
	held := lr.Leased[0].Lease
	d.open = held.DeliveryID
	_, err = l.Acknowledge(ctx, lr.Leased[1].Lease, hostileText, consoleNow)
	require.NoError(t, err)
	// A delivery whose lease was given back keeps its ended grant.
	lr, err = l.Lease(ctx, ledger.LeaseFilter{Targets: []ledger.Target{hostileTarget}}, owner, consoleNow, time.Minute, 1)
	require.NoError(t, err)
	require.Len(t, lr.Leased, 1)
	d.tokens = append(d.tokens, string(lr.Leased[0].Lease.Token))
	_, err = l.Release(ctx, lr.Leased[0].Lease, consoleNow)
	require.NoError(t, err)

	if outbox == nil {
		return d
	}
	env := func(key string) ledger.Envelope {
		return ledger.Envelope{Provider: "mail", Kind: "welcome", Payload: []byte(hostileText), IdempotencyKey: key}
	}
	for i := range 6 {
		res, err := outbox.Enqueue(ctx, env(fmt.Sprintf("key-%d", i)))
		require.NoError(t, err)
		if i == 0 {
			d.entry = res.Entry.ID
		}
	}
	hostileEnv := env(hostileID)
	hostileEnv.Provider = hostileTarget
	_, err = outbox.Enqueue(ctx, hostileEnv)
	require.NoError(t, err)
	claims, err := outbox.ClaimPending(ctx, ledger.ClaimRequest{Worker: "worker-1", Now: consoleNow, LeaseDuration: time.Hour, Limit: 4})
	require.NoError(t, err)
	require.Len(t, claims, 4)
	for _, c := range claims {
		d.tokens = append(d.tokens, string(c.Claim.Token))
	}
	_, err = outbox.MarkClaimDelivered(ctx, claims[0].Claim, ledger.EmissionResult{ProviderRef: "ref-1"})
	require.NoError(t, err)
	_, err = outbox.MarkClaimDeadLettered(ctx, claims[1].Claim, ledger.EmissionError{Code: "bad", Message: hostileText}, "poison: "+hostileText)
	require.NoError(t, err)
	d.deadEntry = claims[1].Entry.ID
	_, err = outbox.ReleaseClaim(ctx, claims[2].Claim, "later")
	require.NoError(t, err)
	return d
}

// memFixture returns a console over a filled memstore, and its data.
func memFixture(t *testing.T, opts Options) (*Handler, *memstore.Store, ledgerData) {
	t.Helper()
	store := memstore.New(memstore.WithClock(func() time.Time { return consoleNow.Add(-time.Minute) }))
	d := fill(t, t.Context(), store, store.Outbox())
	if opts.Now == nil {
		opts.Now = func() time.Time { return consoleNow }
	}
	opts.Title = "test"
	h, err := New(store, store.Outbox(), opts)
	require.NoError(t, err)
	return h, store, d
}

// client is a browser-like HTTP client of a test server: it keeps
// cookies and does not follow redirects, so tests see them.
type client struct {
	t    *testing.T
	base string
	http *http.Client
}

func newClient(t *testing.T, h http.Handler) *client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &client{t: t, base: srv.URL, http: &http.Client{
		Jar:           jar,
		Timeout:       10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// get fetches path and returns the status and body.
func (c *client) get(path string) (int, string) {
	c.t.Helper()
	res, err := c.http.Get(c.base + path)
	require.NoError(c.t, err)
	return c.read(res)
}

// post submits form to path and returns the status, body and Location.
func (c *client) post(path string, form url.Values, header ...string) (int, string, string) {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.base+path, strings.NewReader(form.Encode()))
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := c.http.Do(req)
	require.NoError(c.t, err)
	status, body := c.read(res)
	return status, body, res.Header.Get("Location")
}

func (c *client) read(res *http.Response) (int, string) {
	c.t.Helper()
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(c.t, err)
	require.Contains(c.t, res.Header.Get("Content-Security-Policy"), "default-src 'none'", "every answer carries the CSP")
	return res.StatusCode, string(b)
}

// signIn signs c in with token and returns the CSRF token of its
// session, read from a page's form.
func (c *client) signIn(token string) string {
	c.t.Helper()
	status, _, loc := c.post("/login", url.Values{"name": {"alice"}, "token": {token}})
	require.Equal(c.t, http.StatusSeeOther, status)
	require.Equal(c.t, "/", loc)
	_, body := c.get("/")
	m := csrfField.FindStringSubmatch(body)
	require.NotNil(c.t, m, "a signed-in page carries the CSRF token")
	return m[1]
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// pageURL returns path with query key=value.
func pageURL(path string, kv ...string) string { return listURL(path, kv...) }
