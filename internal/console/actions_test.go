package console

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
)

func TestAReadOnlyConsoleRefusesEveryWrite(t *testing.T) {
	h, store, d := memFixture(t, Options{})
	c := newClient(t, h)
	_, body := c.get(pageURL("/delivery", "id", string(d.open)))
	assert.NotContains(t, body, "<form method=\"post\"", "a read-only console offers no action")
	status, _, _ := c.post("/login", url.Values{"token": {testToken}})
	assert.Equal(t, http.StatusForbidden, status)
	status, body, _ = c.post("/act/abandon", url.Values{"id": {string(d.open)}, "cause": {"x"}, "confirm": {"yes"}})
	assert.Equal(t, http.StatusForbidden, status)
	assert.Contains(t, body, "read-only")
	got, err := store.Get(t.Context(), d.open)
	require.NoError(t, err)
	assert.Equal(t, ledger.DeliveryStateLeased, got.State, "nothing changed")
}

func TestWritesNeedASignInAndTheCSRFToken(t *testing.T) {
	h, store, d := memFixture(t, Options{Writable: true, Token: testToken})
	c := newClient(t, h)
	form := url.Values{"id": {string(d.open)}, "cause": {"operator_abandoned"}, "detail": {hostileText}, "confirm": {"yes"}}

	_, body := c.get(pageURL("/delivery", "id", string(d.open)))
	assert.NotContains(t, body, "act-abandon", "no action before signing in")
	assert.Contains(t, body, "Sign in to act")
	status, _, _ := c.post("/act/abandon", form)
	assert.Equal(t, http.StatusForbidden, status, "not signed in")

	status, _, loc := c.post("/login", url.Values{"token": {"not-the-token-at-all"}})
	assert.Equal(t, http.StatusSeeOther, status)
	assert.Equal(t, "/login?failed=1", loc)

	csrf := c.signIn(testToken)
	_, body = c.get(pageURL("/delivery", "id", string(d.open)))
	assert.Contains(t, body, `id="act-abandon"`)
	assert.Contains(t, body, `id="act-expire-ceremony"`)

	status, _, _ = c.post("/act/abandon", form)
	assert.Equal(t, http.StatusForbidden, status, "no CSRF token")
	form.Set("csrf", strings.Repeat("0", len(csrf)))
	status, _, _ = c.post("/act/abandon", form)
	assert.Equal(t, http.StatusForbidden, status, "a wrong CSRF token")
	form.Set("csrf", csrf)
	status, _, _ = c.post("/act/abandon", form, "Origin", "http://evil.example")
	assert.Equal(t, http.StatusForbidden, status, "another site's form")
	form.Del("confirm")
	status, _, _ = c.post("/act/abandon", form)
	assert.Equal(t, http.StatusBadRequest, status, "not confirmed")
	form.Set("confirm", "yes")
	form.Set("cause", "bad\x00cause")
	status, _, _ = c.post("/act/abandon", form)
	assert.Equal(t, http.StatusBadRequest, status, "a cause the library refuses")
	got, err := store.Get(t.Context(), d.open)
	require.NoError(t, err)
	require.Equal(t, ledger.DeliveryStateLeased, got.State, "no refused call changed anything")

	form.Set("cause", "operator_abandoned")
	status, _, loc = c.post("/act/abandon", form)
	require.Equal(t, http.StatusSeeOther, status)
	require.True(t, strings.HasPrefix(loc, pageURL("/delivery", "id", string(d.open))+"&done="), loc)
	got, err = store.Get(t.Context(), d.open)
	require.NoError(t, err)
	require.Equal(t, ledger.DeliveryStateExpired, got.State)
	require.Equal(t, ledger.Cause{Kind: "operator_abandoned", Detail: hostileText}, *got.Cause)
	_, body = c.get(loc)
	assert.Contains(t, body, "abandon "+string(d.open)+": applied; it is now expired (operator_abandoned)")
	assert.NotContains(t, body, `id="act-abandon"`, "an ended delivery offers no abandon")

	// Again: the library answers Ended, and the page says so.
	_, _, loc = c.post("/act/abandon", form)
	_, body = c.get(loc)
	assert.Contains(t, body, "abandon "+string(d.open)+": ended; it had already ended as expired, nothing changed")

	// A whole ceremony, from its list.
	_, body = c.get(pageURL("/deliveries", "ceremony", string(d.ceremony)))
	assert.Contains(t, body, `id="act-expire-ceremony"`)
	status, _, loc = c.post("/act/expire-ceremony", url.Values{"ceremony": {string(d.ceremony)}, "cause": {"ceremony_ended"}, "confirm": {"yes"}, "csrf": {csrf}})
	require.Equal(t, http.StatusSeeOther, status)
	_, body = c.get(loc)
	assert.Contains(t, body, "expire ceremony rollout-1: 4 open deliveries ended as expired (ceremony_ended)")

	// Signing out ends the session: its CSRF token no longer acts.
	status, _, _ = c.post("/logout", url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusSeeOther, status)
	status, _, _ = c.post("/act/expire-ceremony", url.Values{"ceremony": {string(d.ceremony)}, "cause": {"x"}, "confirm": {"yes"}, "csrf": {csrf}})
	assert.Equal(t, http.StatusForbidden, status)
}

func TestAForgedOutcomeIsNotShown(t *testing.T) {
	h, _, _ := memFixture(t, Options{Writable: true, Token: testToken})
	c := newClient(t, h)
	// The signature's last character changed to another: a signature that
	// happened to end in the replacement would otherwise forge nothing.
	forged := h.keys.sealFlash("abandon x: applied")
	last := "0"
	if strings.HasSuffix(forged, last) {
		last = "1"
	}
	forged = forged[:len(forged)-1] + last
	_, body := c.get("/?done=" + url.QueryEscape(forged))
	assert.NotContains(t, body, "abandon x")
	_, body = c.get("/?done=" + url.QueryEscape(h.keys.sealFlash("abandon x: applied")))
	assert.Contains(t, body, `<p class="flash" role="status">abandon x: applied</p>`)
}
