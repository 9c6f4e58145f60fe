package statuspage

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/admintoken"
	"github.com/watukuy/watukuy/internal/admin"
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

const (
	// chromiumPath is Debian's chromium (.ci/run installs it).
	chromiumPath = "/usr/bin/chromium"
	// requireChromiumEnv turns a missing chromium from a skip into a failure (CI sets it).
	requireChromiumEnv = "WATUKUY_REQUIRE_CHROMIUM"
	// updateScreenshotEnv makes the browser test write docs/status-page.png.
	updateScreenshotEnv = "WATUKUY_UPDATE_SCREENSHOT"
)

// consoleLog collects what the page reports as an error: console.error and console.assert
// calls, uncaught exceptions and unhandled rejections, and the browser's own error entries (a
// CSP violation, an asset that failed to load).
type consoleLog struct {
	mu     sync.Mutex
	errors []string
}

func (c *consoleLog) add(s string) {
	c.mu.Lock()
	c.errors = append(c.errors, s)
	c.mu.Unlock()
}

// take returns the errors seen so far and forgets them.
func (c *consoleLog) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.errors
	c.errors = nil
	return out
}

// listen records the tab's errors until ctx ends. A page's login form answers 401 by design
// (logged out, wrong token); the browser logs those as network errors, which are expected.
func (c *consoleLog) listen(ctx context.Context, base string) {
	msgs := chromedp.Console(ctx) // subscribes now: nothing after this call is missed
	go func() {
		for m, err := range msgs {
			if err != nil {
				return // the context ended
			}
			switch {
			case m.IsException():
			case m.Type == chromedp.ConsoleError || m.Type == "assert":
				if m.Source == "network" && strings.Contains(m.Text, "status of 401") &&
					strings.HasPrefix(m.URL, base+Root) && !strings.HasPrefix(m.URL, base+Root+"/assets/") {
					continue
				}
			default:
				continue
			}
			src := m.Source
			if src == "" {
				src = "page"
			}
			c.add(fmt.Sprintf("%s %s at %s:%d: %s", src, m.Type, m.URL, m.Line+1, m.Text))
		}
	}()
}

// browser starts headless Chromium with a profile of its own and returns its context, or
// skips when Chromium is not installed (fails with WATUKUY_REQUIRE_CHROMIUM=1).
func browser(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv(requireChromiumEnv) == "1" {
			t.Fatalf("%s: %v, and %s=1 (apt-get install chromium)", chromiumPath, err, requireChromiumEnv)
		}
		t.Skipf("%s: %v (set %s=1 to fail instead)", chromiumPath, err, requireChromiumEnv)
	}
	// The machine has no network: without these flags Chromium tries to reach Google's
	// services at start and stalls.
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(bcancel)
	// Starts the browser; the viewport is the screenshot's width.
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(1440, 600)); err != nil {
		t.Fatalf("start %s: %v", chromiumPath, err)
	}
	return bctx
}

// browserWorld is an engine on a real redis-server with keys of a fake API in several
// states, and the status page with the admin API on a loopback listener.
type browserWorld struct {
	eng  *watukuy.Engine
	base string
}

func newBrowserWorld(t *testing.T) *browserWorld {
	t.Helper()
	b := redistest.Real(t)
	eng, err := watukuy.New(watukuy.Options{Redis: b.Client, InstanceID: "browser-test"})
	if err != nil {
		t.Fatal(err)
	}
	orders := fakeapi.New()
	for i := 1; i <= 5; i++ {
		orders.Put(fmt.Sprintf("o%d", i), map[string]any{"total": i * 10})
	}
	orders.Put("o6", map[string]any{"note": poisonName})
	customers := fakeapi.New()
	customers.PutMany(3, "c", nil)
	invoices := fakeapi.New()
	invoices.Put("i1", nil)
	invoices.OnFetch(func(context.Context, watukuytype.FetchRequest) error {
		return errors.New("GET https://billing.example/v2/invoices: 502 Bad Gateway")
	})
	shipments := fakeapi.New()
	shipments.Put("s1", nil)
	shipments.OnFetch(func(context.Context, watukuytype.FetchRequest) error {
		return &watukuytype.HTTPError{StatusCode: 429, URL: "https://carrier.example/shipments", RetryAfter: 15 * time.Minute}
	})
	payments := fakeapi.New()
	payments.Put("p1", nil)
	handler := func(ctx context.Context, ev watukuytype.Event) error {
		switch {
		case ev.Identity == "o6":
			return errors.New("webhook answered 500: unknown field note")
		case ev.Poller == "payments":
			return errors.New("ledger service unavailable")
		}
		return nil
	}
	fast := watukuytype.Delivery{Attempts: 2, RetryHorizon: -1, Backoff: watukuytype.Backoff{Base: time.Millisecond, Factor: 1, Max: time.Millisecond}}
	sched := watukuytype.Schedule{Min: 30 * time.Second, Max: 5 * time.Minute}
	for _, p := range []watukuytype.Poller{
		{Name: "orders", Fetch: orders.ChangeFeed(10), Version: watukuytype.Field("version"), Handler: handler, Delivery: fast, Schedule: sched},
		{Name: "customers", Partitions: []string{"acme", "globex", "initech"}, Fetch: customers.ChangeFeed(10), Version: watukuytype.Field("version"),
			Handler: handler, Delivery: fast, Schedule: sched},
		{Name: "invoices", Fetch: invoices.ChangeFeed(10), Version: watukuytype.Field("version"), Handler: handler, Delivery: fast, Schedule: sched},
		{Name: "shipments", Fetch: shipments.ChangeFeed(10), Version: watukuytype.Field("version"), Handler: handler, Delivery: fast, Schedule: sched},
		{Name: "payments", Fetch: payments.ChangeFeed(10), Version: watukuytype.Field("version"), Handler: handler, Schedule: sched,
			Delivery: watukuytype.Delivery{Attempts: 2, RetryHorizon: -1, Poison: watukuytype.PoisonHalt, Backoff: fast.Backoff}},
	} {
		if err := eng.Register(p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := eng.Tick(t.Context(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := eng.Pause(t.Context(), watukuytype.Key{Poller: "customers", Partition: "initech"}); err != nil {
		t.Fatal(err)
	}

	tokens, err := admintoken.NewSet([]admintoken.Token{{ID: "ops", Secret: opsSecret}}...)
	if err != nil {
		t.Fatal(err)
	}
	logger := zerolog.New(zerolog.NewTestWriter(t))
	login := admin.NewLogin(admin.LoginOptions{Tokens: tokens}) // the page's and the API's, as on a process's listener
	page := New(Options{Engine: eng, Tokens: tokens, Login: login, Logger: logger, MonitoringPath: "/monitoring/"})
	// Mounted as internal/health mounts them on a process's listener.
	mux := http.NewServeMux()
	mux.Handle(Root, page)
	mux.Handle(Root+"/", page)
	mux.Handle(APIRoot+"/", admin.NewAPI(admin.Options{Engine: eng, Tokens: tokens, Login: login, Logger: logger}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return &browserWorld{eng: eng, base: "http://" + ln.Addr().String()}
}

func TestBrowser(t *testing.T) {
	ctx := browser(t)
	w := newBrowserWorld(t)
	var console consoleLog
	console.listen(ctx, w.base)
	noErrors := func(step string) {
		t.Helper()
		for _, e := range console.take() {
			t.Errorf("%s: %s", step, e)
		}
	}
	rows := func() int {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('tr[data-key]').length`))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	// Logged out: the login form, nothing else.
	if err := chromedp.Do(ctx, chromedp.Navigate(w.base+Root), chromedp.WaitVisible(chromedp.CSS(`input#token`))); err != nil {
		t.Fatalf("login form: %v", err)
	}
	if n := rows(); n != 0 {
		t.Fatalf("%d keys shown before the login", n)
	}
	noErrors("the login form")

	// A wrong token: the form again, with the error.
	err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`input#token`), "not-the-token-0000000000"),
		chromedp.Click(chromedp.CSS(`form[data-login] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`p[data-error]`)))
	if err != nil {
		t.Fatalf("wrong token: %v", err)
	}
	if msg, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`p[data-error]`))); err != nil || !strings.Contains(msg, "not accepted") {
		t.Fatalf("wrong token: %v %q", err, msg)
	}
	noErrors("a wrong token")

	// Logging in through the form shows every key.
	err = chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`input#token`), opsSecret),
		chromedp.Click(chromedp.CSS(`form[data-login] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`table[data-keys]`)))
	if err != nil {
		t.Fatalf("login: %v", err)
	}
	if who, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`[data-who]`))); err != nil || who != "ops" {
		t.Fatalf("logged in as %q: %v", who, err)
	}
	if n := rows(); n != 7 {
		t.Fatalf("%d keys shown, want 7", n)
	}
	statuses, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]string](`Object.fromEntries([...document.querySelectorAll('tr[data-key]')].map(
		tr => [tr.dataset.key, tr.querySelector('[data-status]').textContent]))`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"orders/-": "idle", "customers/acme": "idle", "customers/globex": "idle", "customers/initech": "paused",
		"invoices/-": "failing", "shipments/-": "throttled", "payments/-": "circuitOpen"}
	if fmt.Sprint(statuses) != fmt.Sprint(want) {
		t.Fatalf("statuses %v, want %v", statuses, want)
	}
	noErrors("the keys' table")

	screenshot(t, ctx)
	noErrors("the screenshot")

	// Pause from the table: the API pauses the key in Redis, the page says so and shows the
	// table again with the key paused (and Resume in place of Pause).
	acme := `tr[data-key="customers/acme"]`
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(acme+` button[data-api$="/pause"]`))); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelector('`+acme+` [data-status]').textContent === 'paused'
		&& !!document.querySelector('`+acme+` button[data-api$="/resume"]') && document.getElementById('flash').className === 'ok'`,
		chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("the table after Pause: %v", err)
	}
	if msg := flash(t, ctx); msg != "pause: customers/acme: paused" {
		t.Errorf("after Pause the page says %q", msg)
	}
	if ki, err := w.eng.Inspect(t.Context(), watukuytype.Key{Poller: "customers", Partition: "acme"}); err != nil || !ki.Paused {
		t.Fatalf("customers/acme after Pause on the page: paused %v, %v", ki.Paused, err)
	}
	noErrors("Pause")

	// A key's page from its link; its parked row's Retry returns the row to work.
	parked, err := w.eng.Parked().List(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}, "")
	if err != nil || len(parked) != 1 {
		t.Fatalf("orders' parked rows: %v %v", parked, err)
	}
	err = chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`tr[data-key="orders/-"] a[data-detail]`)),
		chromedp.WaitVisible(chromedp.CSS(`table[data-parked]`)))
	if err != nil {
		t.Fatalf("orders' page: %v", err)
	}
	row := `tr[data-row="` + parked[0].ID + `"]`
	if text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(row))); err != nil || !strings.Contains(text, "unknown field note") {
		t.Fatalf("the parked row: %q %v", text, err)
	}
	// The item's <script> is shown as text inside the row's <details>, never run.
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('main script').length`)); err != nil || n != 0 {
		t.Fatalf("%d scripts in the page's content: %v", n, err)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(row+` button[data-api$="/parked/retry"]`))); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`!document.querySelector('tr[data-row]') && !!document.querySelector('[data-parked-section]')
		&& document.getElementById('flash').className === 'ok'`, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("the key's page after Retry: %v", err)
	}
	if msg := flash(t, ctx); msg != "retry "+parked[0].ID+": released 1 row" {
		t.Errorf("after Retry the page says %q", msg)
	}
	if rows, err := w.eng.Parked().List(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}, ""); err != nil || len(rows) != 0 {
		t.Fatalf("orders' parked rows after Retry on the page: %v %v", rows, err)
	}
	noErrors("Retry")

	// An action the API refuses shows the API's message. The browser reports the 404 of the
	// request on the console as a network error: that one is expected.
	err = chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`(() => {
		const b = document.createElement('button');
		b.id = 'gone'; b.textContent = 'Retry';
		b.setAttribute('data-api', '/api/keys/orders/-/parked/retry');
		b.setAttribute('data-body', '{"ids":["ev_gone"]}');
		b.setAttribute('data-label', 'retry ev_gone');
		document.querySelector('[data-parked-section]').append(b);
	})()`), chromedp.Click(chromedp.ID("gone")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById('flash').className === 'bad'`,
		chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("no error shown: %v", err)
	}
	if msg := flash(t, ctx); !strings.HasPrefix(msg, `retry ev_gone failed: no parked row "ev_gone" in`) || !strings.Contains(msg, "(not_found)") {
		t.Errorf("after a refused action the page says %q", msg)
	}
	for _, e := range console.take() {
		if !strings.Contains(e, "/api/keys/orders/-/parked/retry") || !strings.Contains(e, "404") {
			t.Errorf("a refused action: %s", e)
		}
	}

	// Log out: the cookie is gone, the login form is back.
	err = chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`button[data-logout]`)), chromedp.WaitVisible(chromedp.CSS(`input#token`)),
		chromedp.Navigate(w.base+Root+"/keys/orders/-"), chromedp.WaitVisible(chromedp.CSS(`input#token`)))
	if err != nil {
		t.Fatalf("logout: %v", err)
	}
	noErrors("logout")
}

// flash is the message the page shows after an action.
func flash(t *testing.T, ctx context.Context) string {
	t.Helper()
	msg, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('flash').textContent`))
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// screenshot captures the whole page (the keys' table with the header) and writes it to
// docs/status-page.png when WATUKUY_UPDATE_SCREENSHOT=1.
func screenshot(t *testing.T, ctx context.Context) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG

	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv(updateScreenshotEnv) != "1" {
		return
	}
	dst := filepath.Join("..", "..", "docs", "status-page.png")
	if err := os.WriteFile(dst, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", dst, len(png))
}
