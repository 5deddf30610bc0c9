package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// This file is the writes: signing in, and the actions. An action is a
// POST to /act/NAME from a form that carries the session's CSRF token; it
// makes one call of the library, and redirects (303) to a GET page with a
// signed message of the outcome the call answered, so reloading the page
// never repeats the call.
//
// Actions are a table: to add one, write its run function, say which
// records its form appears on, and add it to actionTable.

// action is one write the console can make.
type action struct {
	name, label string
	// offers reports whether the action's form appears for subj.
	offers func(subj subject) bool
	// inputs are the form's fields beside the subject's hidden ID; their
	// values are the defaults.
	inputs []inputView
	// run makes the call with the submitted form and says where to go
	// next and what happened.
	run func(ctx context.Context, h *Handler, form url.Values) (actionResult, error)
}

// subject is what a page shows, and so what an action may act on.
type subject struct {
	delivery *ledger.Delivery
	entry    *ledger.OutboxEntry
	ceremony ledger.CeremonyID
}

// actionResult is where an action redirects and the message it leaves.
type actionResult struct {
	location, message string
}

// actionTable lists every action, in the order their forms appear.
var actionTable = []action{
	{
		name: "abandon", label: "Abandon this delivery",
		offers: func(s subject) bool { return s.delivery != nil && !s.delivery.State.Terminal() },
		inputs: causeInputs("abandoned_by_operator"),
		run:    runAbandon,
	},
	{
		name: "expire-ceremony", label: "Expire every open delivery of this ceremony",
		offers: func(s subject) bool { return s.ceremony != "" || (s.delivery != nil && s.delivery.Ceremony != "") },
		inputs: causeInputs(string(ledger.CauseCeremonyEnded)),
		run:    runExpireCeremony,
	},
	{
		name: "redrive", label: "Redrive: send this delivery again as a new one",
		offers: func(s subject) bool { return s.delivery != nil && s.delivery.Redrivable() },
		inputs: []inputView{{Name: "new_id", Label: "new ID (empty: this ID/redrive)"}},
		run:    runRedrive,
	},
	{
		name: "redrive-entry", label: "Redrive: send this entry again as a new one",
		offers: func(s subject) bool { return s.entry != nil && s.entry.Redrivable() },
		inputs: []inputView{{Name: "key", Label: "new idempotency key (empty: this key/redrive)"}},
		run:    runRedriveEntry,
	},
}

// causeInputs are the fields of an action that ends deliveries with a
// cause.
func causeInputs(kind string) []inputView {
	return []inputView{
		{Name: "cause", Label: "cause", Value: kind, Required: true},
		{Name: "detail", Label: "detail"},
	}
}

func runAbandon(ctx context.Context, h *Handler, f url.Values) (actionResult, error) {
	id := ledger.DeliveryID(f.Get("id"))
	cause, err := formCause(f)
	if err != nil {
		return actionResult{}, err
	}
	res, err := h.l.Abandon(ctx, id, cause, h.now())
	if err != nil {
		return actionResult{}, err
	}
	msg := fmt.Sprintf("abandon %s: %s", id, res.Outcome)
	switch res.Outcome {
	case ledger.OutcomeApplied:
		msg += fmt.Sprintf("; it is now %s (%s)", res.Delivery.State, cause.Kind)
	case ledger.OutcomeEnded:
		msg += fmt.Sprintf("; it had already ended as %s, nothing changed", res.Delivery.State)
	}
	return actionResult{location: listURL("/delivery", "id", string(id)), message: msg}, nil
}

func runExpireCeremony(ctx context.Context, h *Handler, f url.Values) (actionResult, error) {
	ceremony := ledger.CeremonyID(f.Get("ceremony"))
	cause, err := formCause(f)
	if err != nil {
		return actionResult{}, err
	}
	res, err := h.l.ExpireCeremony(ctx, ceremony, cause, h.now())
	if err != nil {
		if len(res.Changed) == 0 {
			return actionResult{}, err
		}
		// A batched sweep may fail after earlier batches committed: say
		// what did change.
		return actionResult{}, fmt.Errorf("expired %d deliveries of ceremony %s before: %w", len(res.Changed), ceremony, err)
	}
	return actionResult{
		location: listURL("/deliveries", "ceremony", string(ceremony)),
		message:  fmt.Sprintf("expire ceremony %s: %d open deliveries ended as expired (%s)", ceremony, len(res.Changed), cause.Kind),
	}, nil
}

// runRedrive redrives a failed or expired delivery and goes to the new
// one (the original, when nothing was made).
func runRedrive(ctx context.Context, h *Handler, f url.Values) (actionResult, error) {
	r, ok := h.l.(ledger.Redriver)
	if !ok {
		return actionResult{}, badf("this ledger cannot redrive")
	}
	id := ledger.DeliveryID(f.Get("id"))
	res, err := r.Redrive(ctx, ledger.RedriveRequest{ID: id, NewID: ledger.DeliveryID(strings.TrimSpace(f.Get("new_id")))}, h.now())
	if err != nil {
		return actionResult{}, err
	}
	msg := fmt.Sprintf("redrive %s: %s", id, res.Outcome)
	loc := listURL("/delivery", "id", string(id))
	switch res.Outcome {
	case ledger.OutcomeApplied:
		msg += fmt.Sprintf("; sent again as %s, now %s", res.Redriven.ID, res.Redriven.State)
		for _, a := range res.Abandoned {
			msg += fmt.Sprintf("; abandoned %s (queue bound)", a)
		}
		loc = listURL("/delivery", "id", string(res.Redriven.ID))
	case ledger.OutcomeRepeated, ledger.OutcomeConflict:
		if res.Original.RedrivenTo != "" {
			msg += fmt.Sprintf("; it was already redriven as %s, nothing changed", res.Original.RedrivenTo)
		} else {
			msg += "; the new ID is taken, nothing changed"
		}
	case ledger.OutcomeWrongState:
		msg += fmt.Sprintf("; it is %s, and only failed and expired deliveries are redriven", res.Original.State)
	case ledger.OutcomeNotFound:
		return actionResult{}, notFound("delivery", string(id))
	}
	return actionResult{location: loc, message: msg}, nil
}

// runRedriveEntry is runRedrive for outbox entries.
func runRedriveEntry(ctx context.Context, h *Handler, f url.Values) (actionResult, error) {
	r, ok := h.outbox.(ledger.OutboxRedriver)
	if !ok {
		return actionResult{}, badf("this outbox cannot redrive")
	}
	id := ledger.OutboxEntryID(f.Get("id"))
	res, err := r.RedriveEntry(ctx, ledger.RedriveEntryRequest{ID: id, IdempotencyKey: strings.TrimSpace(f.Get("key"))})
	if err != nil {
		return actionResult{}, err
	}
	msg := fmt.Sprintf("redrive %s: %s", id, res.Outcome)
	loc := listURL("/entry", "id", string(id))
	switch res.Outcome {
	case ledger.OutcomeApplied:
		msg += fmt.Sprintf("; sent again as %s (key %s)", res.Redriven.ID, res.Redriven.Envelope.IdempotencyKey)
		loc = listURL("/entry", "id", string(res.Redriven.ID))
	case ledger.OutcomeRepeated, ledger.OutcomeConflict:
		if res.Original.RedrivenTo != "" {
			msg += fmt.Sprintf("; it was already redriven as %s, nothing changed", res.Original.RedrivenTo)
		} else {
			msg += "; the new key is taken, nothing changed"
		}
	case ledger.OutcomeWrongState:
		msg += fmt.Sprintf("; it is %s, and only failed and dead-lettered entries are redriven", res.Original.Status)
	case ledger.OutcomeNotFound:
		return actionResult{}, notFound("outbox entry", string(id))
	}
	return actionResult{location: loc, message: msg}, nil
}

// formCause reads the cause fields, validated as the library will.
func formCause(f url.Values) (ledger.Cause, error) {
	c := ledger.Cause{Kind: ledger.CauseKind(strings.TrimSpace(f.Get("cause"))), Detail: f.Get("detail")}
	if err := storekit.ValidateCause(c); err != nil {
		return ledger.Cause{}, err
	}
	return c, nil
}

// inputView is one field of an action's form.
type inputView struct {
	Name, Label, Value string
	Required           bool
}

// actionView is an action's form as a page prints it.
type actionView struct {
	Name, Label, Path string
	Hidden            []inputView
	Inputs            []inputView
}

// actionsFor returns the forms of the actions that apply to subj, none
// unless the console is writable and the operator signed in.
func (h *Handler) actionsFor(s *session, subj subject) []actionView {
	if !h.opts.Writable || s == nil {
		return nil
	}
	var hidden []inputView
	switch {
	case subj.delivery != nil:
		hidden = append(hidden, inputView{Name: "id", Value: string(subj.delivery.ID)})
		subj.ceremony = subj.delivery.Ceremony
	case subj.entry != nil:
		hidden = append(hidden, inputView{Name: "id", Value: string(subj.entry.ID)})
	}
	if subj.ceremony != "" {
		hidden = append(hidden, inputView{Name: "ceremony", Value: string(subj.ceremony)})
	}
	var out []actionView
	for _, a := range actionTable {
		if a.offers(subj) {
			out = append(out, actionView{Name: a.name, Label: a.label, Path: "/act/" + a.name, Hidden: hidden, Inputs: a.inputs})
		}
	}
	return out
}

// maxForm bounds the body of a POST.
const maxForm = 64 << 10

// act serves POST /act/{action}.
func (h *Handler) act(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), h.opts.Timeout)
	defer cancel()
	s := h.session(r)
	if err := h.checkPost(w, r, s); err != nil {
		h.refuse(w, r, s, err)
		return
	}
	var a *action
	for i := range actionTable {
		if actionTable[i].name == r.PathValue("action") {
			a = &actionTable[i]
		}
	}
	if a == nil {
		h.fail(w, r, s, notFound("action", r.PathValue("action")))
		return
	}
	if r.PostForm.Get("confirm") != "yes" {
		h.fail(w, r, s, badf("tick the box to confirm the action"))
		return
	}
	// The history names the operator who signed in (ledger.WithActor).
	actx, err := ledger.WithActor(ctx, s.name+" via console")
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	res, err := a.run(actx, h, r.PostForm)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	h.opts.Logger.Info("console: action", "action", a.name, "operator", s.name, "result", res.message)
	http.Redirect(w, r, withQuery(res.location, "done", h.keys.sealFlash(res.message)), http.StatusSeeOther)
}

// forbidden is a POST the console refuses: read-only, not signed in, a
// bad CSRF token or another site's form.
type forbidden struct{ msg string }

func (e *forbidden) Error() string { return e.msg }

// checkPost refuses a write unless the console is writable, the operator
// signed in, the form came from this console (Origin, when the browser
// sends it) and carries the session's CSRF token. It parses the form.
func (h *Handler) checkPost(w http.ResponseWriter, r *http.Request, s *session) error {
	switch {
	case !h.opts.Writable:
		return &forbidden{"this console is read-only (start it with -allow-writes)"}
	case s == nil:
		return &forbidden{"sign in with the console's token first"}
	case !sameOrigin(r):
		return &forbidden{"the form did not come from this console"}
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		return badf("unreadable form: %v", err)
	}
	if !hmac.Equal([]byte(r.PostForm.Get("csrf")), []byte(s.csrf)) {
		return &forbidden{"the form's CSRF token is missing or stale: reload the page"}
	}
	return nil
}

// refuse renders the error page for a refused POST: 403, or 400 for an
// unreadable form.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, s *session, err error) {
	if f, ok := err.(*forbidden); ok {
		h.render(w, r, http.StatusForbidden, s, "error", errorPage{Status: http.StatusForbidden, Heading: "Refused", Detail: f.msg})
		return
	}
	h.fail(w, r, s, err)
}

// sameOrigin reports whether a POST came from a page of this server. A
// browser sends Origin with every cross-site POST; when it is absent the
// CSRF token and the SameSite cookie still guard the form.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

// login serves POST /login: the right token starts a session (a signed
// cookie) and goes to the overview; a wrong one goes back to the form.
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	if !h.opts.Writable {
		h.refuse(w, r, nil, &forbidden{"this console is read-only: there is nothing to sign in for"})
		return
	}
	if !sameOrigin(r) {
		h.refuse(w, r, nil, &forbidden{"the form did not come from this console"})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, nil, badf("unreadable form: %v", err))
		return
	}
	// Comparing digests keeps the comparison's time independent of the
	// token's length too.
	got, want := sha256.Sum256([]byte(r.PostForm.Get("token"))), sha256.Sum256([]byte(h.opts.Token))
	if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
		h.opts.Logger.Warn("console: sign-in with a wrong token", "remote", r.RemoteAddr)
		http.Redirect(w, r, "/login?failed=1", http.StatusSeeOther)
		return
	}
	// The name is who the history says made the operator's changes: it
	// must be one the ledger can record, with room for " via console".
	name := strings.TrimSpace(r.PostForm.Get("name"))
	if len(name) > maxOperatorName || storekit.ValidateName("name", name) != nil {
		http.Redirect(w, r, "/login?badname=1", http.StatusSeeOther)
		return
	}
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	sid := hex.EncodeToString(id) + "-" + base64.RawURLEncoding.EncodeToString([]byte(name))
	h.opts.Logger.Info("console: sign-in", "operator", name, "remote", r.RemoteAddr)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: sid + "." + h.keys.sign("session", sid),
		Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// logout serves POST /logout.
func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	s := h.session(r)
	if err := h.checkPost(w, r, s); err != nil {
		h.refuse(w, r, s, err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// sessionCookie names the cookie of a signed-in operator.
const sessionCookie = "ledger_console_session"

// maxOperatorName bounds the sign-in name, so that "NAME via console"
// is a name the ledger records.
const maxOperatorName = 200

// session is a signed-in operator.
type session struct {
	csrf string
	// name is the name the operator signed in under.
	name string
}

// session returns the request's session, nil when the console is
// read-only or the request carries no valid session cookie. Sessions are
// signed with the console's key, which lives as long as the process.
func (h *Handler) session(r *http.Request) *session {
	if !h.opts.Writable {
		return nil
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil
	}
	sid, sig, ok := strings.Cut(c.Value, ".")
	if !ok || !hmac.Equal([]byte(sig), []byte(h.keys.sign("session", sid))) {
		return nil
	}
	// The session ID carries the operator's name, under the signature.
	_, b64, _ := strings.Cut(sid, "-")
	name, err := base64.RawURLEncoding.DecodeString(b64)
	if err != nil || len(name) == 0 {
		return nil
	}
	return &session{csrf: h.keys.sign("csrf", sid), name: string(name)}
}

// keys holds the console's secret key, random per process: it signs
// sessions, CSRF tokens and the messages actions leave.
type keys struct{ mac []byte }

func newKeys() (keys, error) {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return keys{}, fmt.Errorf("console: key: %w", err)
	}
	return keys{mac: k}, nil
}

// sign returns the MAC of msg for purpose, in hex.
func (k keys) sign(purpose, msg string) string {
	m := hmac.New(sha256.New, k.mac)
	m.Write([]byte(purpose))
	m.Write([]byte{0})
	m.Write([]byte(msg))
	return hex.EncodeToString(m.Sum(nil))
}

// sealFlash returns msg signed for the done parameter of a redirect, so
// that a link made elsewhere cannot make the console claim an outcome.
func (k keys) sealFlash(msg string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(msg)) + "." + k.sign("flash", msg)
}

// openFlash returns the message sealed in v, or "" when v is empty or not
// sealed by this console.
func (k keys) openFlash(v string) string {
	b64, sig, ok := strings.Cut(v, ".")
	if !ok {
		return ""
	}
	msg, err := base64.RawURLEncoding.DecodeString(b64)
	if err != nil || !hmac.Equal([]byte(sig), []byte(k.sign("flash", string(msg)))) {
		return ""
	}
	return string(msg)
}

// withQuery adds key=value to the query of the local URL loc.
func withQuery(loc, key, value string) string {
	sep := "?"
	if strings.Contains(loc, "?") {
		sep = "&"
	}
	return loc + sep + url.Values{key: {value}}.Encode()
}
