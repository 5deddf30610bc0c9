// Package console is the operators' web console of a ledger: an
// http.Handler that shows the counts, the lists, every record with its
// history and the dead letters of a ledger.Ledger and its outbox, and,
// when it is told to, abandons a delivery or expires a ceremony.
//
// It is built from the standard library only: html/template, whose
// contextual escaping prints every value (IDs, targets, payloads,
// reasons) as text, templates and a style sheet embedded in the binary,
// no JavaScript. It reads through the root package's interfaces, so
// `ledgerctl serve` (pgstore) and `ledgerdemo -serve` (memstore) show
// the same pages; optional interfaces a store lacks (StatsReporter,
// Historian, EndedLister, OutboxLister, ...) leave their part of a page
// out and say so.
//
// Every page is a GET that is safe to reload and makes at most two calls
// to the store, each bounded (a page, a limit): see pgstore's
// TestExplainConsoleReads. A page reloads itself only when the operator
// asks (?refresh=10, 30 or 60: a meta refresh, no script). The search
// (GET /find) takes an ID or an outbox entry's idempotency key. Every write is a POST form carrying a CSRF
// token, made only when the console was built writable and the operator
// signed in with its token and a name, through the library's own calls,
// recorded in the history as made by "NAME via console"
// (ledger.WithActor); it redirects to a GET page that shows the outcome
// the call answered.
//
// A record's lease or claim token is never rendered: the views the
// templates receive have no field for it.
package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leaseledger/ledger"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// DefaultTimeout bounds the store calls of one request unless
// Options.Timeout says otherwise.
const DefaultTimeout = 10 * time.Second

// Options configures a Handler. The zero value is a read-only console on
// the wall clock.
type Options struct {
	// Title names what the console shows (a schema, "demo"); shown in
	// every page's header.
	Title string
	// Now is the console's clock: the now of counts, of the chart's hour
	// and of the actions. time.Now when nil.
	Now func() time.Time
	// Writable turns the actions on. Token must then be set: an operator
	// signs in with it before any action is offered.
	Writable bool
	// Token is the secret an operator signs in with (at least 16 bytes).
	Token string
	// Timeout bounds the store calls of one request; DefaultTimeout when
	// zero. A store that does not answer in time gives an error page.
	Timeout time.Duration
	// Logger receives one line per failed request and per action; none
	// when nil.
	Logger *slog.Logger
}

// MinTokenBytes is the shortest sign-in token New accepts.
const MinTokenBytes = 16

// ErrNoToken is returned by New for a writable console without a token
// (or with one shorter than MinTokenBytes).
var ErrNoToken = errors.New("console: a writable console needs a token of at least 16 bytes")

// Handler serves the console. Create it with New; it is safe for
// concurrent use.
type Handler struct {
	l      ledger.Ledger
	outbox ledger.OutboxStore // nil: no outbox pages
	opts   Options
	pages  map[string]*template.Template
	keys   keys
	mux    *http.ServeMux
}

// New returns the console of l and outbox (which may be nil when there is
// no outbox to show). It answers ErrNoToken for a writable console
// without a usable token.
func New(l ledger.Ledger, outbox ledger.OutboxStore, opts Options) (*Handler, error) {
	if l == nil {
		return nil, errors.New("console: nil ledger")
	}
	if opts.Writable && len(opts.Token) < MinTokenBytes {
		return nil, ErrNoToken
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	pages, err := parseTemplates()
	if err != nil {
		return nil, err
	}
	k, err := newKeys()
	if err != nil {
		return nil, err
	}
	h := &Handler{l: l, outbox: outbox, opts: opts, pages: pages, keys: k, mux: http.NewServeMux()}
	h.routes()
	return h, nil
}

// routes registers every page, action and asset.
func (h *Handler) routes() {
	static, _ := fs.Sub(staticFS, "static")
	h.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	h.page("GET /{$}", h.overview)
	h.page("GET /outbox", h.outboxOverview)
	h.page("GET /deliveries", h.deliveries)
	h.page("GET /delivery", h.delivery)
	h.page("GET /entries", h.entries)
	h.page("GET /entry", h.entry)
	h.page("GET /dead", h.deadLetters)
	h.page("GET /login", h.loginForm)
	h.mux.HandleFunc("GET /find", h.find)
	h.mux.HandleFunc("POST /login", h.login)
	h.mux.HandleFunc("POST /logout", h.logout)
	h.mux.HandleFunc("POST /act/{action}", h.act)
}

// ServeHTTP sets the security headers every answer carries, then serves
// the request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	// No script at all, styles and images from this server only, forms
	// only to it, and never inside another site's frame.
	hd.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	// same-origin, not no-referrer: under no-referrer a browser sends
	// "Origin: null" with the console's own forms, which sameOrigin must
	// then refuse.
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("Cache-Control", "no-store")
	h.mux.ServeHTTP(w, r)
}

// pageFunc serves one GET page: it returns the template name and its
// data, or an error for the error page.
type pageFunc func(ctx context.Context, r *http.Request, s *session) (string, any, error)

// page registers a GET page, run under the request timeout.
func (h *Handler) page(pattern string, fn pageFunc) {
	h.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), h.opts.Timeout)
		defer cancel()
		s := h.session(r)
		name, data, err := fn(ctx, r, s)
		if err != nil {
			h.fail(w, r, s, err)
			return
		}
		h.render(w, r, http.StatusOK, s, name, data)
	})
}

// frame is what the layout around every page shows.
type frame struct {
	Title    string
	Now      string
	Writable bool
	SignedIn bool
	CSRF     string
	Flash    string
	Path     string
	Page     any
	// Operator is the signed-in operator's name.
	Operator string
	// Refresh is the page's auto-refresh period in seconds, 0 for none
	// (the default: a page reloads only when asked to); RefreshLinks
	// turn it on or off.
	Refresh      int
	RefreshLinks []refreshLink
}

// refreshPeriods are the auto-refresh periods a page offers, in seconds.
var refreshPeriods = []int{10, 30, 60}

// refreshLink is one choice of auto-refresh in the footer.
type refreshLink struct {
	Label, Link string
	Current     bool
}

// refreshOf reads the page's opt-in auto-refresh, ?refresh=SECONDS, one
// of refreshPeriods (anything else is off), and the links that change
// it, keeping the rest of the query. A refresh is a plain reload of the
// same GET (a meta refresh: no script), which every page allows.
func refreshOf(r *http.Request) (int, []refreshLink) {
	q := r.URL.Query()
	cur, _ := strconv.Atoi(q.Get("refresh"))
	if !slices.Contains(refreshPeriods, cur) {
		cur = 0
	}
	q.Del("done") // an action's message is shown once
	link := func(period int) string {
		if period == 0 {
			q.Del("refresh")
		} else {
			q.Set("refresh", strconv.Itoa(period))
		}
		if len(q) == 0 {
			return r.URL.Path
		}
		return r.URL.Path + "?" + q.Encode()
	}
	links := []refreshLink{{Label: "off", Link: link(0), Current: cur == 0}}
	for _, p := range refreshPeriods {
		links = append(links, refreshLink{Label: strconv.Itoa(p) + " s", Link: link(p), Current: cur == p})
	}
	return cur, links
}

// render writes page name with data inside the layout. The template runs
// into a buffer first, so a template error gives an error page rather
// than half a page.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, s *session, name string, data any) {
	t, ok := h.pages[name]
	if !ok {
		h.opts.Logger.Error("console: no such template", "name", name)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	f := frame{
		Title:    h.opts.Title,
		Now:      fmtTime(h.now()),
		Writable: h.opts.Writable,
		SignedIn: s != nil,
		Flash:    h.keys.openFlash(r.URL.Query().Get("done")),
		Path:     r.URL.Path,
		Page:     data,
	}
	if s != nil {
		f.CSRF, f.Operator = s.csrf, s.name
	}
	if status == http.StatusOK {
		f.Refresh, f.RefreshLinks = refreshOf(r)
	}
	var b strings.Builder
	if err := t.ExecuteTemplate(&b, "layout", f); err != nil {
		h.opts.Logger.Error("console: render", "page", name, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

// errorPage is the data of the error page.
type errorPage struct {
	Status  int
	Heading string
	Detail  string
}

// fail renders the error page for err: 400 for bad input, 404 for an
// unknown record, 504 when the store did not answer in time, 503 for any
// other store error.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, s *session, err error) {
	p := errorPage{Status: http.StatusServiceUnavailable, Heading: "The store failed", Detail: err.Error()}
	var bad *badRequest
	switch {
	case errors.As(err, &bad):
		p.Status, p.Heading = http.StatusBadRequest, "Bad request"
	case errors.Is(err, ledger.ErrInvalid):
		p.Status, p.Heading = http.StatusBadRequest, "Invalid input"
	case errors.Is(err, ledger.ErrNotFound):
		p.Status, p.Heading = http.StatusNotFound, "Not found"
	case errors.Is(err, context.DeadlineExceeded):
		p.Status, p.Heading = http.StatusGatewayTimeout, "The store did not answer in time"
		p.Detail = fmt.Sprintf("No answer within %s: %v", h.opts.Timeout, err)
	}
	if p.Status >= 500 {
		h.opts.Logger.Error("console: request failed", "path", r.URL.Path, "err", err)
	}
	h.render(w, r, p.Status, s, "error", p)
}

// badRequest is a request the console itself refuses (a missing ID, an
// unknown filter value).
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

func badf(format string, args ...any) error { return &badRequest{msg: fmt.Sprintf(format, args...)} }

// now returns the console's clock, normalised as the library does.
func (h *Handler) now() time.Time { return ledger.Normalize(h.opts.Now()) }

// pageNames lists the templates of templates/ that are pages; each is
// parsed together with layout.html.
var pageNames = []string{"overview", "outbox", "list", "item", "dead", "login", "error"}

// parseTemplates parses every page with the layout it fills.
func parseTemplates() (map[string]*template.Template, error) {
	pages := make(map[string]*template.Template, len(pageNames))
	for _, name := range pageNames {
		t, err := template.ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}
