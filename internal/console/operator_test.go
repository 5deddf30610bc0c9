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

// TestFindByIDOrKey: the search redirects to the record with the ID, or
// to the outbox entry with that idempotency key, and answers 404 when
// nothing has it.
func TestFindByIDOrKey(t *testing.T) {
	h, _, d := memFixture(t, Options{})
	c := newClient(t, h)
	for q, want := range map[string]string{
		string(d.open):  pageURL("/delivery", "id", string(d.open)),
		string(d.entry): pageURL("/entry", "id", string(d.entry)),
		"key-0":         pageURL("/entry", "id", string(ledger.OutboxEntryIDFor("key-0"))),
	} {
		status, _, _ := c.post("/find?q="+url.QueryEscape(q), nil)
		assert.Equal(t, http.StatusMethodNotAllowed, status, "the search is a GET")
		res, err := c.http.Get(c.base + "/find?q=" + url.QueryEscape(q))
		require.NoError(t, err)
		res.Body.Close()
		assert.Equal(t, http.StatusSeeOther, res.StatusCode, q)
		assert.Equal(t, want, res.Header.Get("Location"), q)
	}
	status, body := c.get("/find?q=nothing-has-it")
	assert.Equal(t, http.StatusNotFound, status)
	assert.Contains(t, body, "ID or idempotency key")
	status, _ = c.get("/find?q=")
	assert.Equal(t, http.StatusBadRequest, status)
}

// TestActionsNameTheOperator: the history of a change made from the
// console names the operator who signed in; a name the ledger cannot
// record is refused at sign-in.
func TestActionsNameTheOperator(t *testing.T) {
	h, store, d := memFixture(t, Options{Writable: true, Token: testToken})
	c := newClient(t, h)
	status, _, loc := c.post("/login", url.Values{"name": {"bad\x00name"}, "token": {testToken}})
	assert.Equal(t, http.StatusSeeOther, status)
	assert.Equal(t, "/login?badname=1", loc)
	status, _, loc = c.post("/login", url.Values{"name": {strings.Repeat("n", maxOperatorName+1)}, "token": {testToken}})
	assert.Equal(t, http.StatusSeeOther, status)
	assert.Equal(t, "/login?badname=1", loc)

	csrf := c.signIn(testToken)
	_, body := c.get("/")
	assert.Contains(t, body, "as alice")
	status, _, _ = c.post("/act/abandon", url.Values{"id": {string(d.open)}, "cause": {"operator_abandoned"}, "confirm": {"yes"}, "csrf": {csrf}})
	require.Equal(t, http.StatusSeeOther, status)
	hist, err := store.History(t.Context(), d.open)
	require.NoError(t, err)
	assert.Equal(t, "alice via console", hist[len(hist)-1].Actor)
}

// TestAutoRefreshIsOptIn: a page reloads itself only when asked, with a
// period of the console's choosing.
func TestAutoRefreshIsOptIn(t *testing.T) {
	h, _, _ := memFixture(t, Options{})
	c := newClient(t, h)
	_, body := c.get("/")
	assert.NotContains(t, body, `http-equiv="refresh"`)
	_, body = c.get("/?refresh=30")
	assert.Contains(t, body, `<meta http-equiv="refresh" content="30">`)
	_, body = c.get("/?refresh=1")
	assert.NotContains(t, body, `http-equiv="refresh"`, "only the periods offered")
}
