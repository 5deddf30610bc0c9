package console

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/storekit"
)

// This file is the GET pages. Each makes at most two calls to the store,
// each bounded: a page of a list, a record and its history, the counts
// and one bounded read of what ended in the last hour.

// defaultPage and maxPage bound the lists' page size.
const (
	defaultPage = 50
	maxPage     = 500
)

// countView is one count of an overview, with the list it links to.
type countView struct {
	Name  string
	Count int64
	Link  string
}

// queueView is one target's (or provider's) open work in an overview:
// what waits for it now and for how long.
type queueView struct {
	Key, Link   string
	Depth       int64
	Lag, Oldest string
}

// sortQueues orders the queues deepest first, then by name: the target
// that backs up comes first.
func sortQueues(qs []queueView) {
	slices.SortFunc(qs, func(a, b queueView) int { return cmp.Or(cmp.Compare(b.Depth, a.Depth), cmp.Compare(a.Key, b.Key)) })
}

// overviewPage is the data of the deliveries' overview.
type overviewPage struct {
	Target, Ceremony     string
	Counts, Causes       []countView
	Queues               []queueView
	Depth                int64
	Oldest, Lag          string
	NoStats, NoChart     bool
	Chart                chartView
	ChartOfAll, Filtered bool
}

func (h *Handler) overview(ctx context.Context, r *http.Request, _ *session) (string, any, error) {
	q := r.URL.Query()
	p := overviewPage{Target: q.Get("target"), Ceremony: q.Get("ceremony")}
	p.Filtered = p.Target != "" || p.Ceremony != ""
	now := h.now()
	if sr, ok := h.l.(ledger.StatsReporter); ok {
		st, err := sr.Stats(ctx, ledger.StatsFilter{Target: ledger.Target(p.Target), Ceremony: ledger.CeremonyID(p.Ceremony)}, now)
		if err != nil {
			return "", nil, err
		}
		for _, s := range ledger.DeliveryStates() {
			p.Counts = append(p.Counts, countView{Name: string(s), Count: st.ByState[s],
				Link: listURL("/deliveries", "state", string(s), "target", p.Target, "ceremony", p.Ceremony)})
		}
		for _, k := range sortedKeys(st.ByCause) {
			p.Causes = append(p.Causes, countView{Name: string(k), Count: st.ByCause[k]})
		}
		p.Depth, p.Oldest, p.Lag = st.Depth, fmtTime(st.OldestAvailableAt), lagText(st.Lag, st.Depth)
		// The same call's breakdown: every target with work waiting,
		// whether or not anything of it ended in the chart's hour.
		for t, q := range st.ByTarget {
			p.Queues = append(p.Queues, queueView{Key: string(t), Depth: q.Depth, Lag: lagText(q.Lag, q.Depth), Oldest: fmtTime(q.OldestAvailableAt),
				Link: listURL("/deliveries", "target", string(t), "state", "offered,leased")})
		}
		sortQueues(p.Queues)
	} else {
		p.NoStats = true
	}
	el, ok := h.l.(ledger.EndedLister)
	if !ok {
		p.NoChart = true
		return "overview", p, nil
	}
	since, _ := chartWindow(now)
	ends, err := el.ListEnded(ctx, ledger.EndedQuery{Since: since, Until: now, Limit: chartLimit})
	if err != nil {
		return "", nil, err
	}
	// The read is not filtered: its bound would then cover the other
	// targets' endings it skips. A filtered overview counts the endings
	// of its target (and ceremony-less chart: endings carry no ceremony)
	// among the latest of all.
	var es []ending
	for _, e := range ends {
		if p.Target == "" || string(e.Target) == p.Target {
			es = append(es, ending{at: e.EndedAt, key: string(e.Target),
				completed: e.State == ledger.DeliveryStateProcessed, failed: e.State == ledger.DeliveryStateFailed})
		}
	}
	p.Chart = newChart(es, now, len(ends) == chartLimit)
	p.Chart.KeyName, p.Chart.KeyPath = "target", "/"
	p.ChartOfAll = p.Target != ""
	return "overview", p, nil
}

// outboxOverviewPage is the data of the outbox's overview.
type outboxOverviewPage struct {
	NoOutbox, NoStats, NoChart bool
	Counts                     []countView
	Queues                     []queueView
	Depth                      int64
	Oldest, Lag                string
	Chart                      chartView
}

func (h *Handler) outboxOverview(ctx context.Context, _ *http.Request, _ *session) (string, any, error) {
	var p outboxOverviewPage
	if h.outbox == nil {
		p.NoOutbox = true
		return "outbox", p, nil
	}
	now := h.now()
	if sr, ok := h.outbox.(ledger.OutboxStatsReporter); ok {
		st, err := sr.OutboxStats(ctx, now)
		if err != nil {
			return "", nil, err
		}
		for _, s := range ledger.OutboxStatuses() {
			p.Counts = append(p.Counts, countView{Name: string(s), Count: st.ByStatus[s], Link: listURL("/entries", "status", string(s))})
		}
		p.Depth, p.Oldest, p.Lag = st.Depth, fmtTime(st.OldestDueAt), lagText(st.Lag, st.Depth)
		for pr, q := range st.ByProvider {
			p.Queues = append(p.Queues, queueView{Key: pr, Depth: q.Depth, Lag: lagText(q.Lag, q.Depth), Oldest: fmtTime(q.OldestDueAt),
				Link: listURL("/entries", "provider", pr, "status", "pending,retry_scheduled,deferred")})
		}
		sortQueues(p.Queues)
	} else {
		p.NoStats = true
	}
	el, ok := h.outbox.(ledger.OutboxEndedLister)
	if !ok {
		p.NoChart = true
		return "outbox", p, nil
	}
	since, _ := chartWindow(now)
	ends, err := el.ListEndedEntries(ctx, ledger.EndedQuery{Since: since, Until: now, Limit: chartLimit})
	if err != nil {
		return "", nil, err
	}
	es := make([]ending, len(ends))
	for i, e := range ends {
		es[i] = ending{at: e.EndedAt, key: e.Provider,
			completed: e.Status == ledger.OutboxStatusDelivered, failed: true}
	}
	p.Chart = newChart(es, now, len(ends) == chartLimit)
	p.Chart.KeyName, p.Chart.KeyPath = "provider", "/entries"
	return "outbox", p, nil
}

// choiceView is one checkbox of a list's filter form.
type choiceView struct {
	Name    string
	Checked bool
}

// rowsView is a table of deliveries or outbox entries.
type rowsView struct {
	Entries bool // outbox entries, else deliveries
	// Dead adds the columns of the dead letters: why each record ended,
	// and the record a redrive made of it.
	Dead bool
	Rows []rowView
}

// listPage is the data of a list of deliveries or outbox entries.
type listPage struct {
	rowsView
	Choices               []choiceView
	Keys, Ceremony, Limit string
	// IdemKey is the outbox list's idempotency key filter.
	IdemKey     string
	Next, First string
	Filtered    bool
	Unsupported string
	Actions     []actionView
}

func (h *Handler) deliveries(ctx context.Context, r *http.Request, s *session) (string, any, error) {
	q := r.URL.Query()
	states, err := parseEnum(q["state"], ledger.DeliveryState.Valid, "state")
	if err != nil {
		return "", nil, err
	}
	limit, err := parseLimit(q.Get("limit"))
	if err != nil {
		return "", nil, err
	}
	lq := ledger.ListQuery{States: states, Ceremony: ledger.CeremonyID(q.Get("ceremony")), Limit: limit, Cursor: q.Get("cursor")}
	for _, t := range splitList(q["target"]) {
		lq.Targets = append(lq.Targets, ledger.Target(t))
	}
	page, err := h.l.List(ctx, lq)
	if err != nil {
		return "", nil, err
	}
	p := listPage{Keys: strings.Join(splitList(q["target"]), ", "), Ceremony: string(lq.Ceremony), Limit: strconv.Itoa(limit)}
	for _, s := range ledger.DeliveryStates() {
		p.Choices = append(p.Choices, choiceView{Name: string(s), Checked: slices.Contains(states, s)})
	}
	for _, d := range page.Deliveries {
		p.Rows = append(p.Rows, deliveryRow(d))
	}
	p.Filtered = len(states) > 0 || len(lq.Targets) > 0 || lq.Ceremony != ""
	p.Actions = h.actionsFor(s, subject{ceremony: lq.Ceremony})
	p.First, p.Next = pageLinks(r.URL, "cursor", page.Next)
	return "list", p, nil
}

func (h *Handler) entries(ctx context.Context, r *http.Request, _ *session) (string, any, error) {
	p := listPage{rowsView: rowsView{Entries: true}}
	lister, ok := h.outbox.(ledger.OutboxLister)
	if !ok {
		p.Unsupported = "This store does not list outbox entries (it does not implement ledger.OutboxLister)."
		return "list", p, nil
	}
	q := r.URL.Query()
	statuses, err := parseEnum(q["status"], ledger.OutboxStatus.Valid, "status")
	if err != nil {
		return "", nil, err
	}
	limit, err := parseLimit(q.Get("limit"))
	if err != nil {
		return "", nil, err
	}
	oq := ledger.OutboxListQuery{Statuses: statuses, Providers: splitList(q["provider"]), IdempotencyKey: strings.TrimSpace(q.Get("key")),
		Limit: limit, Cursor: q.Get("cursor")}
	page, err := lister.ListEntries(ctx, oq)
	if err != nil {
		return "", nil, err
	}
	p.Keys, p.IdemKey, p.Limit = strings.Join(oq.Providers, ", "), oq.IdempotencyKey, strconv.Itoa(limit)
	for _, s := range ledger.OutboxStatuses() {
		p.Choices = append(p.Choices, choiceView{Name: string(s), Checked: slices.Contains(statuses, s)})
	}
	for _, e := range page.Entries {
		p.Rows = append(p.Rows, entryRow(e))
	}
	p.Filtered = len(statuses) > 0 || len(oq.Providers) > 0 || oq.IdempotencyKey != ""
	p.First, p.Next = pageLinks(r.URL, "cursor", page.Next)
	return "list", p, nil
}

// deadPage is the data of the dead letters: what ended badly, deliveries
// and outbox entries, a page of each.
type deadPage struct {
	Deliveries, Entries         rowsView
	DeliveriesNext, EntriesNext string
	First                       string
	NoEntries                   string
}

// Dead letters: what a redrive could send again.
var (
	deadStates   = []ledger.DeliveryState{ledger.DeliveryStateFailed, ledger.DeliveryStateExpired}
	deadStatuses = []ledger.OutboxStatus{ledger.OutboxStatusDeadLettered, ledger.OutboxStatusFailed}
)

func (h *Handler) deadLetters(ctx context.Context, r *http.Request, _ *session) (string, any, error) {
	q := r.URL.Query()
	p := deadPage{Deliveries: rowsView{Dead: true}, Entries: rowsView{Entries: true, Dead: true}}
	page, err := h.l.List(ctx, ledger.ListQuery{States: deadStates, Limit: defaultPage, Cursor: q.Get("dcursor")})
	if err != nil {
		return "", nil, err
	}
	for _, d := range page.Deliveries {
		p.Deliveries.Rows = append(p.Deliveries.Rows, deliveryRow(d))
	}
	_, p.DeliveriesNext = pageLinks(r.URL, "dcursor", page.Next)
	p.First = r.URL.Path
	lister, ok := h.outbox.(ledger.OutboxLister)
	if !ok {
		p.NoEntries = "This store does not list outbox entries."
		return "dead", p, nil
	}
	ep, err := lister.ListEntries(ctx, ledger.OutboxListQuery{Statuses: deadStatuses, Limit: defaultPage, Cursor: q.Get("ecursor")})
	if err != nil {
		return "", nil, err
	}
	for _, e := range ep.Entries {
		p.Entries.Rows = append(p.Entries.Rows, entryRow(e))
	}
	_, p.EntriesNext = pageLinks(r.URL, "ecursor", ep.Next)
	return "dead", p, nil
}

// itemPage is the data of a delivery's or an entry's page.
type itemPage struct {
	Delivery  *deliveryView
	Entry     *entryView
	Steps     []stepView
	NoHistory bool
	HexLink   string
	TextLink  string
	Actions   []actionView
}

func (h *Handler) delivery(ctx context.Context, r *http.Request, s *session) (string, any, error) {
	id, err := requireID(r)
	if err != nil {
		return "", nil, err
	}
	d, err := h.l.Get(ctx, ledger.DeliveryID(id))
	if errors.Is(err, ledger.ErrNotFound) {
		return "", nil, notFound("delivery", id)
	}
	if err != nil {
		return "", nil, err
	}
	forceHex := r.URL.Query().Get("payload") == "hex"
	v := newDeliveryView(d, h.now(), forceHex)
	p := itemPage{Delivery: &v}
	if hs, ok := h.l.(ledger.Historian); ok {
		hist, err := hs.History(ctx, d.ID)
		if err != nil {
			return "", nil, err
		}
		p.Steps = newSteps(hist, v.Target, redriveLinks{"/delivery", string(d.RedrivenFrom), string(d.RedrivenTo)})
	} else {
		p.NoHistory = true
	}
	p.HexLink, p.TextLink = listURL("/delivery", "id", id, "payload", "hex"), listURL("/delivery", "id", id)
	p.Actions = h.actionsFor(s, subject{delivery: &d})
	return "item", p, nil
}

func (h *Handler) entry(ctx context.Context, r *http.Request, s *session) (string, any, error) {
	id, err := requireID(r)
	if err != nil {
		return "", nil, err
	}
	if h.outbox == nil {
		return "", nil, notFound("outbox entry", id)
	}
	e, err := h.outbox.FindByID(ctx, ledger.OutboxEntryID(id))
	if errors.Is(err, ledger.ErrNotFound) {
		return "", nil, notFound("outbox entry", id)
	}
	if err != nil {
		return "", nil, err
	}
	v := newEntryView(e, h.now(), r.URL.Query().Get("payload") == "hex")
	p := itemPage{Entry: &v}
	if hs, ok := h.outbox.(ledger.OutboxHistorian); ok {
		hist, err := hs.EntryHistory(ctx, e.ID)
		if err != nil {
			return "", nil, err
		}
		p.Steps = newSteps(hist, "", redriveLinks{"/entry", string(e.RedrivenFrom), string(e.RedrivenTo)})
	} else {
		p.NoHistory = true
	}
	p.HexLink, p.TextLink = listURL("/entry", "id", id, "payload", "hex"), listURL("/entry", "id", id)
	p.Actions = h.actionsFor(s, subject{entry: &e})
	return "item", p, nil
}

// notFound is the error of an item page for an ID no record has.
func notFound(what, id string) error {
	return &notFoundError{what: what, id: id}
}

type notFoundError struct {
	what, id string
	orKey    bool // nothing has it as its idempotency key either
}

func (e *notFoundError) Error() string {
	if e.orKey {
		return "no " + e.what + " has ID or idempotency key " + strconv.Quote(e.id)
	}
	return "no " + e.what + " has ID " + strconv.Quote(e.id)
}
func (e *notFoundError) Unwrap() error { return ledger.ErrNotFound }

// find serves GET /find?q=ID-or-key: the search of the header and of
// the lists. It redirects to the delivery with that ID, else to the
// outbox entry with that ID, else to the one enqueued with that
// idempotency key (the name the business knows it by), and answers the
// not-found page when none has it. Each lookup is one indexed read.
func (h *Handler) find(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), h.opts.Timeout)
	defer cancel()
	s := h.session(r)
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	if q == "" {
		h.fail(w, r, s, badf("type an ID or an idempotency key to find"))
		return
	}
	loc, err := h.lookup(ctx, q)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	http.Redirect(w, r, loc, http.StatusSeeOther)
}

// lookup returns the page of the record whose ID or idempotency key is q.
func (h *Handler) lookup(ctx context.Context, q string) (string, error) {
	if storekit.ValidateGet(q) != nil {
		return "", badf("%q is not an ID or a key: IDs and keys are 1 to 255 bytes of visible text", q)
	}
	_, err := h.l.Get(ctx, ledger.DeliveryID(q))
	switch {
	case err == nil:
		return listURL("/delivery", "id", q), nil
	case !errors.Is(err, ledger.ErrNotFound):
		return "", err
	}
	if h.outbox != nil {
		_, err := h.outbox.FindByID(ctx, ledger.OutboxEntryID(q))
		switch {
		case err == nil:
			return listURL("/entry", "id", q), nil
		case !errors.Is(err, ledger.ErrNotFound):
			return "", err
		}
		if lister, ok := h.outbox.(ledger.OutboxLister); ok {
			page, err := lister.ListEntries(ctx, ledger.OutboxListQuery{IdempotencyKey: q, Limit: 1})
			if err != nil {
				return "", err
			}
			if len(page.Entries) > 0 {
				return listURL("/entry", "id", string(page.Entries[0].ID)), nil
			}
		}
	}
	return "", &notFoundError{what: "delivery or outbox entry", id: q, orKey: true}
}

func requireID(r *http.Request) (string, error) {
	id := r.URL.Query().Get("id")
	if id == "" {
		return "", badf("missing id")
	}
	return id, nil
}

// parseEnum reads a repeatable filter whose values may also be comma
// lists, each checked by valid.
func parseEnum[S ~string](raw []string, valid func(S) bool, name string) ([]S, error) {
	var out []S
	for _, v := range splitList(raw) {
		s := S(v)
		if !valid(s) {
			return nil, badf("unknown %s %q", name, v)
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out, nil
}

// splitList reads a repeatable filter whose values may be comma lists, as
// ledgerctl's flags do.
func splitList(raw []string) []string {
	var out []string
	for _, v := range raw {
		for part := range strings.SplitSeq(v, ",") {
			if part = strings.TrimSpace(part); part != "" {
				out = append(out, part)
			}
		}
	}
	return out
}

func parseLimit(v string) (int, error) {
	if v == "" {
		return defaultPage, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxPage {
		return 0, badf("limit must be a number from 1 to %d", maxPage)
	}
	return n, nil
}

// pageLinks returns the link to the first page of u (without cursor
// param) and, when next is set, to the page after it.
func pageLinks(u *url.URL, param, next string) (first, after string) {
	q := u.Query()
	q.Del(param)
	q.Del("done")
	first = u.Path + "?" + q.Encode()
	if next != "" {
		q.Set(param, next)
		after = u.Path + "?" + q.Encode()
	}
	return first, after
}

// listURL returns path with the query of the key/value pairs kv, leaving
// out empty values.
func listURL(path string, kv ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			q.Add(kv[i], kv[i+1])
		}
	}
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}

func lagText(lag time.Duration, depth int64) string {
	if depth == 0 {
		return "-"
	}
	return roundAge(lag)
}

func sortedKeys[K ~string, V any](m map[K]V) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// loginPage is the data of the sign-in page.
type loginPage struct {
	Failed, BadName bool
}

func (h *Handler) loginForm(_ context.Context, r *http.Request, _ *session) (string, any, error) {
	return "login", loginPage{Failed: r.URL.Query().Get("failed") != "", BadName: r.URL.Query().Get("badname") != ""}, nil
}
