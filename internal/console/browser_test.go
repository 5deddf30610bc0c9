package console

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/leaseledger/ledger"
	"github.com/leaseledger/ledger/internal/pgtest"
	"github.com/leaseledger/ledger/pgstore"
)

// screenshots makes TestConsoleInABrowser write the README's pictures of
// the console: go test ./internal/console -run Browser -console.screenshots
var screenshots = flag.Bool("console.screenshots", false, "write docs/console-overview.png and docs/console-item.png")

// browserNames are the names Debian and others give Chromium's binary.
var browserNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// findBrowser returns the path of a Chromium, skipping the test when
// there is none, or failing it under CI=true, where a missing browser is
// a broken set-up rather than a reason to test less.
func findBrowser(t *testing.T) string {
	t.Helper()
	for _, name := range browserNames {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	msg := "no Chromium found (Debian: apt-get install chromium)"
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatal(msg + "; CI=true requires it")
	}
	t.Skip(msg)
	return ""
}

// fleetDeliveries is the size of the browser test's ledger, about the
// demo's: enough for full pages, a busy chart and every state.
const fleetDeliveries = 1200

// fillFleet enqueues fleetDeliveries deliveries over four hosts and ends
// most of them over the hour before consoleNow: processed, failed or
// abandoned, as a fleet's would. clock is the store's clock for the
// outbox, which fillFleet moves along as the outbox's entries end.
func fillFleet(t *testing.T, ctx context.Context, s *pgstore.Store, clock *atomic.Int64) {
	t.Helper()
	start := consoleNow.Add(-time.Hour)
	reqs := make([]ledger.EnqueueRequest, 0, ledger.MaxLimit)
	flush := func() {
		if len(reqs) > 0 {
			_, err := s.EnqueueBatch(ctx, reqs, start)
			require.NoError(t, err)
			reqs = reqs[:0]
		}
	}
	for i := range fleetDeliveries {
		reqs = append(reqs, ledger.EnqueueRequest{
			ID: ledger.DeliveryID(fmt.Sprintf("delivery-%05d", i)), Target: ledger.Target(fmt.Sprintf("host-%d", i%4+1)),
			Ceremony: ledger.CeremonyID(fmt.Sprintf("ceremony-%d", i%3)), Payload: []byte(fmt.Sprintf(`{"order":%d,"note":"ship it"}`, i)),
		})
		if len(reqs) == cap(reqs) {
			flush()
		}
	}
	flush()
	owner := ledger.Owner{Agent: "fleet", Incarnation: "boot-1"}
	const batch = 100
	for b := 0; b < fleetDeliveries*9/10/batch; b++ {
		now := start.Add(time.Duration(b) * time.Hour / time.Duration(fleetDeliveries*9/10/batch))
		lr, err := s.Lease(ctx, ledger.LeaseFilter{}, owner, now, 10*time.Minute, batch)
		require.NoError(t, err)
		for i, l := range lr.Leased {
			at := now.Add(time.Duration(i) * 3 * time.Second)
			switch {
			case i%10 == 7:
				_, err = s.MarkFailed(ctx, l.Lease, ledger.FailureReason{Message: "host refused: 503", Permanent: true}, at)
			case i%10 == 8:
				_, err = s.Abandon(ctx, l.Delivery.ID, ledger.Cause{Kind: ledger.CauseQueueBounded, Detail: "over 500 open"}, at)
			default:
				if _, err = s.Acknowledge(ctx, l.Lease, "received", at); err == nil {
					_, err = s.MarkProcessed(ctx, l.Delivery.ID, owner, nil, "shipped", at.Add(time.Second))
				}
			}
			require.NoError(t, err)
		}
	}
	o := s.Outbox()
	for i := range 200 {
		clock.Store(start.Add(time.Duration(i) * 17 * time.Second).UnixNano())
		res, err := o.Enqueue(ctx, ledger.Envelope{Provider: []string{"mail", "sms"}[i%2], Kind: "notice", Payload: []byte("hello"), IdempotencyKey: fmt.Sprintf("notice-%d", i)})
		require.NoError(t, err)
		switch {
		case i%8 == 3:
			_, err = o.MarkDeadLettered(ctx, res.Entry.ID, ledger.EmissionError{Code: "bounce", Message: "mailbox does not exist"}, "permanent bounce")
		case i%8 != 5:
			_, err = o.MarkDelivered(ctx, res.Entry.ID, ledger.EmissionResult{ProviderRef: fmt.Sprintf("ref-%d", i)})
		}
		require.NoError(t, err)
	}
	clock.Store(consoleNow.UnixNano())
}

// TestConsoleInABrowser drives headless Chromium through the console over
// a throwaway PostgreSQL holding a demo-sized ledger: it opens the
// overview, filters a list, opens an item and reads its timeline, signs
// in and abandons a delivery, and sees its new state. No page may run
// script: a dialog opened by any value shown would fail the test.
func TestConsoleInABrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser; skipped under -short")
	}
	browser := findBrowser(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool)
	var clock atomic.Int64
	clock.Store(consoleNow.UnixNano())
	s, err := pgstore.New(pool, pgstore.WithSchema(schema), pgstore.WithLogger(slog.New(slog.DiscardHandler)),
		pgstore.WithClock(func() time.Time { return time.Unix(0, clock.Load()) }))
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	fillFleet(t, ctx, s, &clock)
	d := fill(t, ctx, s, s.Outbox())
	h, err := New(s, s.Outbox(), Options{Title: "schema leaseledger", Now: func() time.Time { return consoleNow },
		Writable: true, Token: testToken})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()

	// The flags keep the browser off the network: no background
	// requests, no component updates, no QUIC, and a profile of its own.
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(browser), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1100, 1060))
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(alloc)
	defer cancelBrowser()

	// Any dialog is script that ran: record it and close it, or the page
	// would wait for it forever.
	var mu sync.Mutex
	var dialogs []string
	opened := chromedp.Events(bctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range opened {
			if err != nil {
				return
			}
			mu.Lock()
			dialogs = append(dialogs, ev.Message)
			mu.Unlock()
			_, _ = chromedp.Call(bctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		require.NoError(t, chromedp.Do(bctx, steps...), what)
	}
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(sel)))
		require.NoError(t, err, "text of %s", sel)
		return strings.TrimSpace(v)
	}
	texts := func(sel string) []string {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](
			`[...document.querySelectorAll(`+strconv.Quote(sel)+`)].map(e => e.textContent.replace(/\s+/g, " ").trim())`))
		require.NoError(t, err, "texts of %s", sel)
		return v
	}
	// fields returns the rows of a record page as "name: value".
	fields := func() []string {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](
			`[...document.querySelectorAll("table.fields tr")].map(r => r.querySelector("th").textContent.trim() + ": " + r.querySelector("td").textContent.replace(/\s+/g, " ").trim())`))
		require.NoError(t, err, "fields")
		return v
	}
	shot := func(name string) {
		t.Helper()
		if !*screenshots {
			return
		}
		png, err := chromedp.Run(bctx, chromedp.CaptureScreenshot())
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join("..", "..", "docs", name), png, 0o644))
	}

	// The overview: counts, and a chart whose bars the browser drew.
	do("overview", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("figure.chart svg")))
	require.Equal(t, "Deliveries", text("h1"))
	bars, err := chromedp.Run(bctx, chromedp.Evaluate[int](
		`[...document.querySelectorAll("figure.chart svg rect.completed")].filter(r => r.getBBox().height > 0).length`))
	require.NoError(t, err)
	require.Greater(t, bars, 30, "the chart has a bar for most minutes of the hour")
	// Its minutes are the clock's, labelled every ten minutes.
	require.Contains(t, text("figure.chart figcaption"), "2030-01-01 08:31:00Z to 2030-01-01 09:31:00Z")
	require.Equal(t, []string{"08:40", "08:50", "09:00", "09:10", "09:20", "09:30"}, texts("figure.chart svg text.tick"))
	// Every target with work waiting, deepest first, from the counts.
	queued, depths := texts("#queues tbody tr td:nth-child(1)"), texts("#queues tbody tr td:nth-child(2)")
	require.Subset(t, queued, []string{"host-1", "host-2", "host-3", "host-4", "edge-1"})
	for i := 1; i < len(depths); i++ {
		prev, _ := strconv.Atoi(depths[i-1])
		cur, _ := strconv.Atoi(depths[i])
		require.GreaterOrEqual(t, prev, cur, "sorted by depth: %q %q", queued, depths)
	}
	shot("console-overview.png")

	// Auto-refresh is off unless asked for, then a plain reload.
	refresh := func() string {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Evaluate[string](`(document.querySelector('meta[http-equiv="refresh"]') || {content: ""}).content`))
		require.NoError(t, err)
		return v
	}
	require.Empty(t, refresh())
	do("auto-refresh", chromedp.Click(chromedp.CSS(`#refresh a[href="/?refresh=30"]`)), chromedp.WaitVisible(chromedp.CSS(`#refresh strong`)))
	require.Equal(t, "30", refresh())
	require.Equal(t, "30 s", text("#refresh strong"))

	// The outbox's overview: its queue by provider.
	do("outbox overview", chromedp.Navigate(srv.URL+"/outbox"), chromedp.WaitVisible(chromedp.CSS(`#queues`)))
	require.Subset(t, texts("#queues tbody tr td:nth-child(1)"), []string{"mail"})

	// Found by the key the business knows, from the header's search.
	do("find by key",
		chromedp.Navigate(srv.URL+"/entries"),
		chromedp.SendKeys(chromedp.CSS(`#search input[name="q"]`), "notice-3"),
		chromedp.Click(chromedp.CSS(`#search button`)),
		chromedp.WaitVisible(chromedp.CSS(`#timeline`)),
	)
	require.Contains(t, fields(), "idempotency key: notice-3")
	require.Equal(t, "dead_lettered", text("#state"))
	// Every outbox list shows the key.
	do("entries", chromedp.Navigate(srv.URL+"/entries?key=notice-3"), chromedp.WaitVisible(chromedp.CSS(`table.records`)))
	require.Equal(t, []string{"notice-3"}, texts("table.records tbody td.key"))

	// The dead letters say why each ended, and mark what was redriven.
	do("dead letters", chromedp.Navigate(srv.URL+"/dead"), chromedp.WaitVisible(chromedp.CSS(`#dead-deliveries`)))
	deadIDs := texts("#dead-deliveries tbody td.id")
	require.NotEmpty(t, deadIDs)
	for _, r := range texts("#dead-deliveries tbody td.reason") {
		require.NotEmpty(t, r, "every dead letter says why it ended")
	}
	require.Contains(t, texts("#dead-entries tbody td.key"), "notice-3")
	require.Contains(t, texts("#dead-entries tbody td.reason"), "permanent bounce")
	res, err := s.Redrive(ctx, ledger.RedriveRequest{ID: ledger.DeliveryID(deadIDs[0])}, consoleNow)
	require.NoError(t, err)
	require.True(t, res.Applied())
	do("dead letters again", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`#dead-deliveries`)))
	require.Equal(t, "as "+deadIDs[0]+"/redrive", texts("#dead-deliveries tbody td.redriven")[0])
	do("redriven", chromedp.Click(chromedp.CSS(`#dead-deliveries tbody tr:first-child td.redriven a`)), chromedp.WaitVisible(chromedp.CSS(`#timeline`)))
	require.Equal(t, "offered", text("#state"))

	// A list, filtered through its form: failed deliveries of host-2.
	do("filter",
		chromedp.Navigate(srv.URL+"/deliveries"),
		chromedp.Click(chromedp.CSS(`#filters input[value="failed"]`)),
		chromedp.SendKeys(chromedp.CSS(`#filters input[name="target"]`), "host-2"),
		chromedp.Click(chromedp.CSS(`#filters button[type="submit"]`)),
		// Only a filtered list offers to clear its filter.
		chromedp.WaitVisible(chromedp.CSS(`#filters a.clear`)),
	)
	location, err := chromedp.Run(bctx, chromedp.Location())
	require.NoError(t, err)
	require.Contains(t, location, "state=failed")
	states, targets := texts("table.records tbody tr td:nth-child(2)"), texts("table.records tbody tr td:nth-child(3)")
	require.NotEmpty(t, states)
	for i := range states {
		require.Equal(t, "failed", states[i])
		require.Equal(t, "host-2", targets[i])
	}

	// An item from that list, and its timeline.
	do("item",
		chromedp.Click(chromedp.CSS(`table.records tbody tr:first-child td.id a`)),
		chromedp.WaitVisible(chromedp.CSS(`#timeline`)),
	)
	require.Equal(t, "failed", text("#state"))
	steps := texts("#timeline li")
	require.Len(t, steps, 3, "enqueue, lease, mark_failed: %q", steps)
	require.Contains(t, steps[0], "enqueue - → offered")
	require.Contains(t, steps[1], "lease offered → leased by fleet/boot-1")
	require.Contains(t, steps[2], "mark_failed leased → failed by fleet/boot-1 reported: host refused: 503")
	shot("console-item.png")

	// Pages full of hostile values run no script.
	do("hostile", chromedp.Navigate(srv.URL+pageURL("/delivery", "id", string(d.hostile))), chromedp.WaitVisible(chromedp.CSS(`#timeline`)))
	do("hostile entries", chromedp.Navigate(srv.URL+"/entries"), chromedp.WaitVisible(chromedp.CSS(`table.records`)))

	// An item page shows its metadata.
	do("metadata", chromedp.Navigate(srv.URL+pageURL("/delivery", "id", string(d.open))), chromedp.WaitVisible(chromedp.CSS(`#timeline`)))
	require.Contains(t, fields(), "metadata tenant: acme")

	// Sign in, abandon an open delivery, and see it ended, by whom.
	do("sign in",
		chromedp.Navigate(srv.URL+"/login"),
		chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name="name"]`), "alice"),
		chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), testToken),
		chromedp.Click(chromedp.CSS(`form[action="/login"] button`)),
		chromedp.WaitVisible(chromedp.CSS(`.badge.writable`)),
	)
	do("abandon",
		chromedp.Navigate(srv.URL+pageURL("/delivery", "id", string(d.open))),
		chromedp.Click(chromedp.CSS(`#act-abandon input[name="confirm"]`)),
		chromedp.Click(chromedp.CSS(`#act-abandon button`)),
		chromedp.WaitVisible(chromedp.CSS(`.flash`)),
	)
	require.Equal(t, fmt.Sprintf("abandon %s: applied; it is now expired (abandoned_by_operator)", d.open), text(".flash"))
	require.Equal(t, "expired", text("#state"))
	steps = texts("#timeline li")
	require.Contains(t, steps[len(steps)-1], "abandon leased → expired by alice via console abandoned_by_operator")
	got, err := s.Get(ctx, d.open)
	require.NoError(t, err)
	require.Equal(t, ledger.DeliveryStateExpired, got.State, "the library's own Abandon ended it")

	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, dialogs, "a page ran script")
}
