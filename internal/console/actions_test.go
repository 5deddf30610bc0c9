package console

import (
	"html/template"
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
	status, _, _ := c.post("/login", url.Values{"name": {"alice"}, "token": {testToken}})
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

func TestRedriveFromTheConsole(t *testing.T) {
	h, store, d := memFixture(t, Options{Writable: true, Token: testToken})
	c := newClient(t, h)
	csrf := c.signIn(testToken)
	const failed = ledger.DeliveryID("done-002")

	_, body := c.get(pageURL("/delivery", "id", string(failed)))
	assert.Contains(t, body, `id="act-redrive"`, "a failed delivery offers redrive")
	_, body = c.get(pageURL("/delivery", "id", string(d.open)))
	assert.NotContains(t, body, `id="act-redrive"`, "open work offers none")
	_, body = c.get(pageURL("/delivery", "id", "done-000"))
	assert.NotContains(t, body, `id="act-redrive"`, "processed work offers none")

	form := url.Values{"id": {string(failed)}, "confirm": {"yes"}, "csrf": {csrf}}
	status, _, loc := c.post("/act/redrive", form)
	require.Equal(t, http.StatusSeeOther, status)
	require.True(t, strings.HasPrefix(loc, pageURL("/delivery", "id", "done-002/redrive")+"&done="), "goes to the new delivery: %s", loc)
	_, body = c.get(loc)
	assert.Contains(t, body, "redrive done-002: applied; sent again as done-002/redrive, now offered")
	assert.Contains(t, body, "redriven from")
	original, err := store.Get(t.Context(), failed)
	require.NoError(t, err)
	assert.Equal(t, ledger.DeliveryStateFailed, original.State, "the original keeps its end")
	assert.Equal(t, ledger.DeliveryID("done-002/redrive"), original.RedrivenTo)
	_, body = c.get(pageURL("/delivery", "id", string(failed)))
	assert.NotContains(t, body, `id="act-redrive"`, "a delivery is redriven once")
	assert.Contains(t, body, "redriven as")

	// Posted again (a second tab): the library answers Repeated.
	_, _, loc = c.post("/act/redrive", form)
	_, body = c.get(loc)
	assert.Contains(t, body, "redrive done-002: repeated; it was already redriven as done-002/redrive, nothing changed")
	_, _, loc = c.post("/act/redrive", url.Values{"id": {string(d.open)}, "confirm": {"yes"}, "csrf": {csrf}})
	_, body = c.get(loc)
	assert.Contains(t, body, "redrive "+string(d.open)+": wrong_state; it is leased")

	// An outbox entry, under a key of the operator's.
	_, body = c.get(pageURL("/entry", "id", string(d.deadEntry)))
	assert.Contains(t, body, `id="act-redrive-entry"`)
	status, _, loc = c.post("/act/redrive-entry", url.Values{"id": {string(d.deadEntry)}, "key": {"again-1"}, "confirm": {"yes"}, "csrf": {csrf}})
	require.Equal(t, http.StatusSeeOther, status)
	newID := ledger.OutboxEntryIDFor("again-1")
	require.True(t, strings.HasPrefix(loc, pageURL("/entry", "id", string(newID))+"&done="), loc)
	got, err := store.Outbox().FindByID(t.Context(), newID)
	require.NoError(t, err)
	assert.Equal(t, ledger.OutboxStatusPending, got.Status)
	assert.Equal(t, d.deadEntry, got.RedrivenFrom)
}

// TestRedrivenRecordsLinkEachOther: the page of a redriven record and the
// page of its redrive link each other, in their fields and at the
// timeline step of the redrive, for deliveries and outbox entries.
func TestRedrivenRecordsLinkEachOther(t *testing.T) {
	h, _, d := memFixture(t, Options{Writable: true, Token: testToken})
	c := newClient(t, h)
	csrf := c.signIn(testToken)
	for _, tc := range []struct {
		page, action, id, newID string
		form                    url.Values
	}{
		{"/delivery", "redrive", "done-002", "done-002/redrive", url.Values{}},
		{"/entry", "redrive-entry", string(d.deadEntry), string(ledger.OutboxEntryIDFor("again-2")), url.Values{"key": {"again-2"}}},
	} {
		_, before := c.get(pageURL(tc.page, "id", tc.id))
		require.NotContains(t, before, "redriven as", "%s: not redriven yet", tc.id)
		tc.form.Set("id", tc.id)
		tc.form.Set("confirm", "yes")
		tc.form.Set("csrf", csrf)
		status, _, _ := c.post("/act/"+tc.action, tc.form)
		require.Equal(t, http.StatusSeeOther, status)

		toNew := `href="` + template.HTMLEscapeString(pageURL(tc.page, "id", tc.newID)) + `"`
		toOld := `href="` + template.HTMLEscapeString(pageURL(tc.page, "id", tc.id)) + `"`
		_, original := c.get(pageURL(tc.page, "id", tc.id))
		assert.Contains(t, original, `<tr><th>redriven as</th><td><a `+toNew+`>`+template.HTMLEscapeString(tc.newID)+`</a></td></tr>`, "%s: the field links the redrive", tc.page)
		assert.Contains(t, original, `<a `+toNew+`>the record it was redriven as</a>`, "%s: the redrive step links it too", tc.page)
		_, redriven := c.get(pageURL(tc.page, "id", tc.newID))
		assert.Contains(t, redriven, `<tr><th>redriven from</th><td><a `+toOld+`>`+template.HTMLEscapeString(tc.id)+`</a></td></tr>`, "%s: the field links the original", tc.page)
		assert.Contains(t, redriven, `<a `+toOld+`>the record it was redriven from</a>`, "%s: the creation step links it too", tc.page)
		assert.NotContains(t, redriven, "redriven as", "%s: the redrive was not redriven", tc.page)
	}
}
