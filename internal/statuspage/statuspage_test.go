package statuspage

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy/admintoken"
	"github.com/watukuy/watukuy/internal/admin"
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/watukuytest"
	"github.com/watukuy/watukuy/watukuytype"
)

const (
	opsSecret    = "ops-secret-0123456789abcdef"
	viewerSecret = "viewer-secret-0123456789abcdef"
	// poisonName is what the poisoned item holds: the page must show it as text.
	poisonName = `<script>alert("x")</script>`
)

// world is an engine on miniredis with two pollers (orders: one key, one parked poison event
// whose item holds a <script>; customers: two partitions, one of them with characters a path
// must escape), the status page on it and the log it writes.
type world struct {
	env    *watukuytest.Env
	h      http.Handler
	log    *bytes.Buffer
	tokens *admintoken.Set
	login  *admin.Login
}

func newWorld(t *testing.T, tokens ...admintoken.Token) *world {
	t.Helper()
	api := fakeapi.New()
	api.Put("o1", map[string]any{"name": "fine"})
	api.Put("o2", map[string]any{"name": poisonName})
	customers := fakeapi.New()
	customers.Put("c1", nil)
	handler := func(ctx context.Context, ev watukuytype.Event) error {
		if ev.Identity == "o2" {
			return errors.New("the sink refuses o2")
		}
		return nil
	}
	fast := watukuytype.Delivery{Attempts: 1, RetryHorizon: -1, Backoff: watukuytype.Backoff{Base: time.Microsecond, Factor: 1, Max: time.Microsecond}}
	env := watukuytest.New(t,
		watukuytype.Poller{Name: "orders", Fetch: api.ChangeFeed(10), Version: watukuytype.Field("version"), Handler: handler, Delivery: fast},
		watukuytype.Poller{Name: "customers", Partitions: []string{"acme", "eu:globex@1"}, Fetch: customers.ChangeFeed(10),
			Version: watukuytype.Field("version"), Handler: handler, Delivery: fast})
	env.Settle(10)
	if tokens == nil {
		tokens = []admintoken.Token{{ID: "ops", Secret: opsSecret}, {ID: "viewer", Secret: viewerSecret, ReadOnly: true}}
	}
	ts, err := admintoken.NewSet(tokens...)
	if err != nil {
		t.Fatal(err)
	}
	log := &bytes.Buffer{}
	login := admin.NewLogin(admin.LoginOptions{Tokens: ts, Now: env.Clock.Now, Policy: admin.LoginPolicy{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}})
	h := New(Options{Engine: env.Engine, Tokens: ts, Login: login, Logger: zerolog.New(log), MonitoringPath: "/monitoring/", Now: env.Clock.Now})
	return &world{env: env, h: h, log: log, tokens: ts, login: login}
}

// do sends one request to the page; secret, when set, logs in: the cookie holds a session of
// the token with that secret, or secret itself when no token has it (a session, a stale value).
func (w *world) do(t *testing.T, method, target, secret string, form url.Values, hdr ...string) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	r := httptest.NewRequest(method, target, body)
	r.RemoteAddr = "192.0.2.7:4242"
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if secret != "" {
		v := secret
		if tok, ok := w.tokens.Lookup(secret); ok {
			var err error
			if v, err = w.login.NewSession(tok); err != nil {
				t.Fatal(err)
			}
		}
		r.AddCookie(&http.Cookie{Name: admin.CookieName, Value: v})
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	w.h.ServeHTTP(rec, r)
	res := rec.Result()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// checkPage asserts what every HTML page must be: security headers set, nothing inline that
// the Content-Security-Policy would block, nothing loaded from another origin.
func checkPage(t *testing.T, res *http.Response, body string) {
	t.Helper()
	for h, want := range map[string]string{"X-Frame-Options": "DENY", "Cache-Control": "no-store", "Content-Type": "text/html; charset=utf-8"} {
		if got := res.Header.Get(h); got != want {
			t.Errorf("%s: %q, want %q", h, got, want)
		}
	}
	if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	if regexp.MustCompile(`(?i)\sstyle=|\son[a-z]+=|<style`).MatchString(body) {
		t.Error("the page has an inline style or event handler, which the CSP blocks")
	}
	for _, m := range regexp.MustCompile(`(?i)<script[^>]*>`).FindAllString(body, -1) {
		if !strings.Contains(m, `src="/status/assets/`) {
			t.Errorf("inline or foreign script %s", m)
		}
	}
	if regexp.MustCompile(`(?i)(src|href)="(https?:)?//`).MatchString(body) {
		t.Error("the page loads or links something from another origin")
	}
}

func TestLoginFlow(t *testing.T) {
	w := newWorld(t)
	res, body := w.do(t, "GET", "/status", "", nil)
	if res.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `action="/status/login"`) || !strings.Contains(body, `name="token"`) {
		t.Fatalf("logged out: %d\n%s", res.StatusCode, body)
	}
	checkPage(t, res, body)
	if strings.Contains(body, "data-keys") {
		t.Fatal("the keys are shown without a login")
	}

	res, _ = w.do(t, "POST", "/status/login", "", url.Values{"token": {opsSecret}, "next": {"/status"}}, "Origin", "http://example.com")
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/status" {
		t.Fatalf("login: %d to %q", res.StatusCode, res.Header.Get("Location"))
	}
	var cookie *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == admin.CookieName {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.Path != "/" || cookie.Secure ||
		cookie.MaxAge != int(admin.DefaultSessionTTL/time.Second) {
		t.Fatalf("login cookie %+v", cookie)
	}
	if strings.Contains(cookie.Value, opsSecret) {
		t.Fatal("the cookie holds the secret")
	}
	logged := w.log.String()
	if !strings.Contains(logged, `"token":"ops"`) || !strings.Contains(logged, "192.0.2.7:4242") || !strings.Contains(logged, `"level":"info"`) {
		t.Fatalf("login log: %s", logged)
	}
	if strings.Contains(logged, opsSecret) {
		t.Fatal("the secret was logged")
	}

	res, body = w.do(t, "GET", "/status", cookie.Value, nil)
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `data-who>ops<`) || strings.Contains(body, "data-readonly") {
		t.Fatalf("logged in: %d\n%s", res.StatusCode, body)
	}
	checkPage(t, res, body)
	if !strings.Contains(body, `href="/monitoring/"`) || !strings.Contains(body, `action="/status/logout"`) {
		t.Fatal("no asynqmon link or logout button")
	}

	res, _ = w.do(t, "POST", "/status/logout", cookie.Value, url.Values{})
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/status" {
		t.Fatalf("logout: %d", res.StatusCode)
	}
	cleared := false
	for _, c := range res.Cookies() {
		cleared = cleared || (c.Name == admin.CookieName && c.Value == "" && c.MaxAge < 0)
	}
	if !cleared || !strings.Contains(w.log.String(), "status page: logout") {
		t.Fatalf("logout did not clear the cookie: %v", res.Cookies())
	}

	// A login from a page that asked for a key's page goes back there.
	res, body = w.do(t, "GET", "/status/keys/orders/-", "", nil)
	if res.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `name="next" value="/status/keys/orders/-"`) {
		t.Fatalf("a key's page logged out: %d\n%s", res.StatusCode, body)
	}
	res, _ = w.do(t, "POST", "/status/login", "", url.Values{"token": {opsSecret}, "next": {"/status/keys/orders/-"}})
	if res.Header.Get("Location") != "/status/keys/orders/-" {
		t.Fatalf("login went to %q", res.Header.Get("Location"))
	}
	// A bearer token works as well as the cookie (scripts, curl).
	r := httptest.NewRequest("GET", "/status", nil)
	r.Header.Set("Authorization", "Bearer "+opsSecret)
	rec := httptest.NewRecorder()
	w.h.ServeHTTP(rec, r)
	if rec.Code != http.StatusOK {
		t.Fatalf("bearer: %d", rec.Code)
	}
}

func TestWrongToken(t *testing.T) {
	w := newWorld(t)
	res, body := w.do(t, "POST", "/status/login", "", url.Values{"token": {"not-the-secret-at-all-0000"}})
	if res.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "That token is not accepted") || !strings.Contains(body, `name="token"`) {
		t.Fatalf("wrong token: %d\n%s", res.StatusCode, body)
	}
	checkPage(t, res, body)
	if len(res.Cookies()) != 0 {
		t.Fatalf("a cookie was set: %v", res.Cookies())
	}
	if l := w.log.String(); !strings.Contains(l, `"level":"warn"`) || !strings.Contains(l, "failed login") || !strings.Contains(l, "192.0.2.7:4242") || strings.Contains(l, "not-the-secret") {
		t.Fatalf("failed login log: %s", l)
	}
	// A cookie whose token was removed is dropped, with a word why.
	res, body = w.do(t, "GET", "/status", "rotated-away-secret-000000", nil)
	if res.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "no longer accepted") {
		t.Fatalf("stale cookie: %d\n%s", res.StatusCode, body)
	}
	if cs := res.Cookies(); len(cs) != 1 || cs[0].MaxAge >= 0 {
		t.Fatalf("stale cookie not cleared: %v", cs)
	}
	// The secret itself is no cookie.
	r := httptest.NewRequest("GET", "/status", nil)
	r.AddCookie(&http.Cookie{Name: admin.CookieName, Value: opsSecret})
	rec := httptest.NewRecorder()
	w.h.ServeHTTP(rec, r)
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("the secret as the cookie: %d", rec.Code)
	}
}

// A session ends at its expiry and when its token is removed: the page asks for a login again
// and drops the cookie.
func TestSessionEnds(t *testing.T) {
	w := newWorld(t)
	tok, _ := w.tokens.Lookup(opsSecret)
	v, err := w.login.NewSession(tok)
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := w.do(t, "GET", "/status", v, nil); res.StatusCode != http.StatusOK {
		t.Fatalf("a fresh session: %d", res.StatusCode)
	}
	w.env.Clock.Advance(admin.DefaultSessionTTL)
	res, body := w.do(t, "GET", "/status", v, nil)
	if res.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "has expired") || len(res.Cookies()) != 1 || res.Cookies()[0].MaxAge >= 0 {
		t.Fatalf("an expired session: %d %v\n%s", res.StatusCode, res.Cookies(), body)
	}
	if v, err = w.login.NewSession(tok); err != nil {
		t.Fatal(err)
	}
	if err := w.tokens.Replace([]admintoken.Token{{ID: "viewer", Secret: viewerSecret, ReadOnly: true}}); err != nil {
		t.Fatal(err)
	}
	if res, _ := w.do(t, "GET", "/status", v, nil); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the session of a removed token: %d", res.StatusCode)
	}
}

// Failed logins slow the client down: past the free ones it gets 429 with Retry-After, even
// with the right token, until the wait is over; a login then clears the count. Behind a
// trusted proxy the client is X-Forwarded-For's, and the cookie is Secure under
// X-Forwarded-Proto: https.
func TestLoginSlowdown(t *testing.T) {
	w := newWorld(t)
	login := func(secret string, hdr ...string) *http.Response {
		t.Helper()
		res, _ := w.do(t, "POST", "/status/login", "", url.Values{"token": {secret}}, hdr...)
		return res
	}
	for i := range admin.DefaultFreeFailures {
		if res := login("not-the-secret-at-all-0000"); res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("failure %d: %d", i+1, res.StatusCode)
		}
	}
	res := login(opsSecret)
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != "1" || len(res.Cookies()) != 0 {
		t.Fatalf("while it waits: %d Retry-After %q %v", res.StatusCode, res.Header.Get("Retry-After"), res.Cookies())
	}
	if !strings.Contains(w.log.String(), "too many failed logins") {
		t.Fatalf("log: %s", w.log.String())
	}
	w.env.Clock.Advance(time.Second)
	if res := login("not-the-secret-at-all-0000"); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("after the wait: %d", res.StatusCode)
	}
	if res := login(opsSecret); res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != "2" {
		t.Fatalf("the second wait: %d %q", res.StatusCode, res.Header.Get("Retry-After"))
	}
	w.env.Clock.Advance(2 * time.Second)
	if res := login(opsSecret); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("the right token after the wait: %d", res.StatusCode)
	}
	if res := login("not-the-secret-at-all-0000"); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a login did not clear the count: %d", res.StatusCode)
	}
	if res := login(opsSecret); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("a login did not clear the count: %d", res.StatusCode)
	}
	// Behind the trusted proxy 10.0.0.0/8 (newWorld's): another client is not slowed down by
	// this one, and the cookie is Secure when the proxy says https.
	proxied := func(client, secret string) *http.Response {
		t.Helper()
		r := httptest.NewRequest("POST", "/status/login", strings.NewReader(url.Values{"token": {secret}}.Encode()))
		r.RemoteAddr = "10.0.0.2:4242"
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("X-Forwarded-For", client)
		r.Header.Set("X-Forwarded-Proto", "https")
		rec := httptest.NewRecorder()
		w.h.ServeHTTP(rec, r)
		return rec.Result()
	}
	for range admin.DefaultFreeFailures {
		proxied("203.0.113.9", "not-the-secret-at-all-0000")
	}
	if res := proxied("203.0.113.9", opsSecret); res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("the failing client behind the proxy: %d", res.StatusCode)
	}
	res = proxied("203.0.113.10", opsSecret)
	if res.StatusCode != http.StatusSeeOther || len(res.Cookies()) != 1 || !res.Cookies()[0].Secure {
		t.Fatalf("behind the proxy: %d %v", res.StatusCode, res.Cookies())
	}
}

func TestOriginChecked(t *testing.T) {
	w := newWorld(t)
	for _, o := range []string{"http://evil.example", "null"} {
		res, _ := w.do(t, "POST", "/status/login", "", url.Values{"token": {opsSecret}}, "Origin", o)
		if res.StatusCode != http.StatusForbidden || len(res.Cookies()) != 0 {
			t.Fatalf("login from %s: %d %v", o, res.StatusCode, res.Cookies())
		}
		res, _ = w.do(t, "POST", "/status/logout", opsSecret, url.Values{}, "Origin", o)
		if res.StatusCode != http.StatusForbidden || len(res.Cookies()) != 0 {
			t.Fatalf("logout from %s: %d", o, res.StatusCode)
		}
	}
	res, _ := w.do(t, "POST", "/status/login", "", url.Values{"token": {opsSecret}}, "Sec-Fetch-Site", "cross-site")
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-site login: %d", res.StatusCode)
	}
	// Never a redirect off the page after a login.
	for _, next := range []string{"//evil.example/status", "https://evil.example/status", `/\evil.example`, "/api/keys", "/status/logout", "/statusx"} {
		res, _ := w.do(t, "POST", "/status/login", "", url.Values{"token": {opsSecret}, "next": {next}})
		if loc := res.Header.Get("Location"); loc != "/status" {
			t.Errorf("next %q redirected to %q", next, loc)
		}
	}
}

func TestReadOnlyView(t *testing.T) {
	w := newWorld(t)
	res, body := w.do(t, "GET", "/status", viewerSecret, nil)
	if res.StatusCode != http.StatusOK || !strings.Contains(body, "data-who>viewer<") || !strings.Contains(body, "data-readonly") {
		t.Fatalf("read-only: %d\n%s", res.StatusCode, body)
	}
	if strings.Contains(body, "data-api") || !strings.Contains(body, `data-key="orders/-"`) {
		t.Fatal("a read-only token sees action buttons, or no keys")
	}
	res, body = w.do(t, "GET", "/status/keys/orders/-", viewerSecret, nil)
	if res.StatusCode != http.StatusOK || strings.Contains(body, "data-api") || !strings.Contains(body, "the sink refuses o2") {
		t.Fatalf("read-only detail: %d\n%s", res.StatusCode, body)
	}
}

// The page of a process whose engine was stopped says so on every page, above the keys it
// still reads.
func TestStoppedEngineShown(t *testing.T) {
	w := newWorld(t)
	if _, body := w.do(t, "GET", "/status", opsSecret, nil); strings.Contains(body, "data-stopped") {
		t.Fatal("a running engine's page says it is stopped")
	}
	if err := w.env.Engine.Stop(true, time.Second); err != nil {
		t.Fatal(err)
	}
	res, body := w.do(t, "GET", "/status", opsSecret, nil)
	if res.StatusCode != http.StatusOK || !strings.Contains(body, "data-stopped") {
		t.Fatalf("index of a stopped engine: %d\n%s", res.StatusCode, body)
	}
	checkPage(t, res, body)
	res, body = w.do(t, "GET", "/status/keys/orders/-", opsSecret, nil)
	if res.StatusCode != http.StatusOK || !strings.Contains(body, "data-stopped") || !strings.Contains(body, "the sink refuses o2") {
		t.Fatalf("key page of a stopped engine: %d\n%s", res.StatusCode, body)
	}
}

func TestTableShowsKeys(t *testing.T) {
	w := newWorld(t)
	res, body := w.do(t, "GET", "/status", opsSecret, nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("%d\n%s", res.StatusCode, body)
	}
	for _, want := range []string{
		`data-key="orders/-"`, `data-key="customers/acme"`, `data-key="customers/eu:globex@1"`,
		`href="/status/keys/orders/-"`, `href="/status/keys/customers/acme"`,
		`href="/status/keys/customers/eu:globex@1"`, // PathEscape keeps : and @ (the API unescapes either way)
		`href="/status?poller=customers"`,
		`data-api="/api/keys/orders/-/trigger"`, `data-api="/api/keys/orders/-/pause"`,
		">3 scheduled keys<", `<span class="badge ok">3 idle</span>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the table lacks %s", want)
		}
	}
	// The orders key has one parked row: its cell says 1 and is marked.
	if !regexp.MustCompile(`<td class="num warn" title="poison 1, invalid 0" data-parked>1</td>`).MatchString(body) {
		t.Errorf("orders' parked count not shown:\n%s", body)
	}
	// One poller only.
	_, body = w.do(t, "GET", "/status?poller=customers", opsSecret, nil)
	if strings.Contains(body, `data-key="orders/-"`) || !strings.Contains(body, `data-key="customers/acme"`) || !strings.Contains(body, ">2 scheduled keys<") {
		t.Fatalf("poller filter:\n%s", body)
	}
	// A paused key shows Resume instead of Pause.
	if err := w.env.Engine.Pause(t.Context(), watukuytype.Key{Poller: "customers", Partition: "acme"}); err != nil {
		t.Fatal(err)
	}
	_, body = w.do(t, "GET", "/status", opsSecret, nil)
	if !strings.Contains(body, `data-api="/api/keys/customers/acme/resume"`) || strings.Contains(body, `data-api="/api/keys/customers/acme/pause"`) ||
		!strings.Contains(body, `<span class="badge muted">1 paused</span>`) {
		t.Fatalf("paused key:\n%s", body)
	}
	// The script sends the header the API asks of cookie-authenticated actions.
	res, js := w.do(t, "GET", "/status/assets/status.js", "", nil)
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/javascript") || !strings.Contains(js, "'"+admin.RequestHeader+"'") ||
		!strings.Contains(js, "credentials: 'same-origin'") {
		t.Fatalf("status.js: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	r := httptest.NewRequest("GET", "/status/assets/status.js", nil)
	r.Header.Set("If-None-Match", res.Header.Get("ETag"))
	rec := httptest.NewRecorder()
	w.h.ServeHTTP(rec, r)
	if rec.Code != http.StatusNotModified {
		t.Fatalf("asset revalidation: %d", rec.Code)
	}
}

// The table pages by cursor: a next page link carries the last key shown (?after=), a later
// page links back to the first, and the scheduled count stays that of every page.
func TestTablePages(t *testing.T) {
	w := newWorld(t)
	w.h.(*handler).maxRows = 2
	keys := func(body string) []string {
		var out []string
		for _, m := range regexp.MustCompile(`data-key="([^"]+)"`).FindAllStringSubmatch(body, -1) {
			out = append(out, m[1])
		}
		return out
	}
	next := `href="/status?after=customers%7Ceu%3Aglobex%401"`
	_, body := w.do(t, "GET", "/status", opsSecret, nil)
	if got := keys(body); fmt.Sprint(got) != "[customers/acme customers/eu:globex@1]" || !strings.Contains(body, ">3 scheduled keys; on this page:<") ||
		!strings.Contains(body, "2 keys on this page") || !strings.Contains(body, next+">next page<") || strings.Contains(body, ">first page<") {
		t.Fatalf("first page %v:\n%s", got, body)
	}
	_, body = w.do(t, "GET", "/status?after="+url.QueryEscape("customers|eu:globex@1"), opsSecret, nil)
	if got := keys(body); fmt.Sprint(got) != "[orders/-]" || !strings.Contains(body, ">3 scheduled keys; on this page:<") ||
		!strings.Contains(body, `<a href="/status">first page</a>`) || strings.Contains(body, ">next page<") {
		t.Fatalf("second page %v:\n%s", got, body)
	}
	// A page that ends with the last key has no next page.
	_, body = w.do(t, "GET", "/status?poller=customers", opsSecret, nil)
	if got := keys(body); len(got) != 2 || strings.Contains(body, ">next page<") || strings.Contains(body, "data-pager") {
		t.Fatalf("one full page %v:\n%s", got, body)
	}
	// Past the last key: nothing, and the way back.
	res, body := w.do(t, "GET", "/status?after="+url.QueryEscape("zzz|"), opsSecret, nil)
	if got := keys(body); res.StatusCode != http.StatusOK || len(got) != 0 || !strings.Contains(body, "No keys after this point") || !strings.Contains(body, `<a href="/status">first page</a>`) {
		t.Fatalf("past the end %v:\n%s", got, body)
	}
	// A cursor that is not one, or of another poller than the table's: the first page.
	for _, q := range []string{"?after=nonsense", "?poller=customers&after=" + url.QueryEscape("orders|")} {
		if _, body := w.do(t, "GET", "/status"+q, opsSecret, nil); len(keys(body)) != 2 || strings.Contains(body, ">first page<") {
			t.Errorf("%s: %v", q, keys(body))
		}
	}
	// The poller's own pages keep ?poller=.
	w.h.(*handler).maxRows = 1
	_, body = w.do(t, "GET", "/status?poller=customers", opsSecret, nil)
	if !strings.Contains(body, `href="/status?after=customers%7Cacme&amp;poller=customers">next page<`) || !strings.Contains(body, ">2 scheduled keys; on this page:<") {
		t.Fatalf("a poller's first page:\n%s", body)
	}
}

func TestDetailPage(t *testing.T) {
	w := newWorld(t)
	rows, err := w.env.Engine.Parked().List(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}, "")
	if err != nil || len(rows) != 1 {
		t.Fatalf("parked: %v %v", rows, err)
	}
	res, body := w.do(t, "GET", "/status/keys/orders/-", opsSecret, nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("%d\n%s", res.StatusCode, body)
	}
	checkPage(t, res, body)
	for _, want := range []string{
		"<h2>Cursors</h2>", "<dt>live</dt>", "<h2>Lease</h2>", "<h2>Schedule</h2>", "<h2>Counters</h2>", "<h2>Backfill</h2>",
		"none started", "Parked rows (1)", `data-row="` + rows[0].ID + `"`, "the sink refuses o2", "<summary>event</summary>",
		`data-api="/api/keys/orders/-/parked/retry"`, `data-api="/api/keys/orders/-/parked/discard"`,
		`data-body="{&#34;ids&#34;:[&#34;` + rows[0].ID + `&#34;]}"`,
		`data-api="/api/keys/orders/-/trigger"`, `data-api="/api/keys/orders/-/pause"`, `data-api="/api/keys/orders/-/resume"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the detail page lacks %s", want)
		}
	}
	// An escaped partition resolves.
	res, body = w.do(t, "GET", "/status/keys/customers/"+url.PathEscape("eu:globex@1"), opsSecret, nil)
	if res.StatusCode != http.StatusOK || !strings.Contains(body, "No parked rows.") {
		t.Fatalf("escaped partition: %d\n%s", res.StatusCode, body)
	}
	res, _ = w.do(t, "GET", "/status/keys/customers/eu%3Aglobex%401", opsSecret, nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("encodeURIComponent's form: %d", res.StatusCode)
	}
}

// A key's parked rows page by id: a bounded first page with a link to the rows after its last
// one, and from a later page a link back to the first rows.
func TestDetailPageParkedPages(t *testing.T) {
	w := newWorld(t)
	api := fakeapi.New()
	api.PutMany(5, "r", nil)
	if err := w.env.Engine.Register(watukuytype.Poller{Name: "rejects", Fetch: api.ChangeFeed(10), Version: watukuytype.Field("version"),
		Handler:  func(context.Context, watukuytype.Event) error { return errors.New("refused") },
		Delivery: watukuytype.Delivery{Attempts: 1, RetryHorizon: -1, Backoff: watukuytype.Backoff{Base: time.Microsecond, Factor: 1, Max: time.Microsecond}}}); err != nil {
		t.Fatal(err)
	}
	w.env.Settle(3)
	all, err := w.env.Engine.Parked().List(t.Context(), watukuytype.Key{Poller: "rejects", Partition: ""}, "")
	if err != nil || len(all) != 5 {
		t.Fatalf("parked: %d %v", len(all), err)
	}
	w.h.(*handler).maxParked = 2
	rowsOf := func(body string) []string {
		var out []string
		for _, m := range regexp.MustCompile(`data-row="([^"]+)"`).FindAllStringSubmatch(body, -1) {
			out = append(out, m[1])
		}
		return out
	}
	var seen []string
	target := "/status/keys/rejects/-"
	for page := 0; ; page++ {
		if page > 5 {
			t.Fatalf("no end after %v", seen)
		}
		res, body := w.do(t, "GET", target, opsSecret, nil)
		if res.StatusCode != http.StatusOK || !strings.Contains(body, "Parked rows (5)") {
			t.Fatalf("%s: %d\n%s", target, res.StatusCode, body)
		}
		checkPage(t, res, body)
		rows := rowsOf(body)
		seen = append(seen, rows...)
		if first := strings.Contains(body, `<a href="/status/keys/rejects/-">first rows</a>`); first != (page > 0) {
			t.Fatalf("page %d: first rows link %v:\n%s", page, first, body)
		}
		m := regexp.MustCompile(`<a href="(/status/keys/rejects/-\?after=[^"]+)">next rows</a>`).FindStringSubmatch(body)
		if m == nil {
			if len(rows) != 1 {
				t.Fatalf("the last page shows %v", rows)
			}
			break
		}
		if len(rows) != 2 || m[1] != "/status/keys/rejects/-?after="+url.QueryEscape(rows[1]) {
			t.Fatalf("page %d: rows %v, next %s", page, rows, m[1])
		}
		target = strings.ReplaceAll(m[1], "&amp;", "&")
	}
	var want []string
	for _, r := range all {
		want = append(want, r.ID)
	}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("the pages showed %v, want %v", seen, want)
	}
	// Exactly a page of rows: no next link.
	w.h.(*handler).maxParked = 5
	if _, body := w.do(t, "GET", "/status/keys/rejects/-", opsSecret, nil); len(rowsOf(body)) != 5 || strings.Contains(body, "next rows") || strings.Contains(body, "data-parked-pager") {
		t.Fatalf("one full page:\n%s", body)
	}
}

func TestUnknownKey(t *testing.T) {
	w := newWorld(t)
	res, body := w.do(t, "GET", "/status/keys/nope/-", opsSecret, nil)
	if res.StatusCode != http.StatusNotFound || !strings.Contains(body, "Known pollers") ||
		!strings.Contains(body, `href="/status?poller=orders"`) || !strings.Contains(body, `href="/status?poller=customers"`) {
		t.Fatalf("unknown poller: %d\n%s", res.StatusCode, body)
	}
	checkPage(t, res, body)
	res, body = w.do(t, "GET", "/status/keys/customers/zzz", opsSecret, nil)
	if res.StatusCode != http.StatusNotFound || !strings.Contains(body, "Known partitions of customers") ||
		!strings.Contains(body, `href="/status/keys/customers/acme"`) || !strings.Contains(body, `has no partition &#34;zzz&#34;`) {
		t.Fatalf("unknown partition: %d\n%s", res.StatusCode, body)
	}
	res, body = w.do(t, "GET", "/status?poller=nope", opsSecret, nil)
	if res.StatusCode != http.StatusNotFound || !strings.Contains(body, "Known pollers") {
		t.Fatalf("unknown poller's table: %d\n%s", res.StatusCode, body)
	}
	for _, p := range []string{"/status/keys/orders", "/status/keys/a/b/c", "/status/nothing"} {
		if res, body := w.do(t, "GET", p, opsSecret, nil); res.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %d\n%s", p, res.StatusCode, body)
		}
	}
	if res, _ := w.do(t, "DELETE", "/status", opsSecret, nil); res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("DELETE /status: %d", res.StatusCode)
	}
}

func TestItemJSONIsEscaped(t *testing.T) {
	w := newWorld(t)
	// Through the engine: the parked event's item holds poisonName (Go's JSON writes it as
	// \u003c..., so this proves the page shows the stored form and adds nothing raw).
	_, body := w.do(t, "GET", "/status/keys/orders/-", opsSecret, nil)
	if strings.Contains(body, poisonName) || strings.Contains(body, "<script>alert") || !strings.Contains(body, `\u003cscript\u003ealert`) {
		t.Fatalf("the parked event's item:\n%s", body)
	}
	// Straight into the template: rows whose JSON and fields hold markup as it is.
	ki, err := w.env.Engine.Inspect(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""})
	if err != nil {
		t.Fatal(err)
	}
	rows := []watukuytype.ParkedInfo{
		{ID: `<b>id</b>`, Kind: "poison", Error: `<img src=x onerror=alert(1)>`, Errors: []string{"<i>1</i>", "<i>2</i>"}, Stack: "main.send\n</pre><script>alert(4)</script>",
			Identity: `"><script>alert(2)</script>`, Event: json.RawMessage(`{"name":"` + strings.ReplaceAll(poisonName, `"`, `\"`) + `"}`)},
		{ID: "inv1", Kind: "invalid", Error: "no identity", Item: mustRaw(t, `{"name":"</pre><script>alert(3)</script>"}`)},
	}
	p := &page{Title: "orders / -", Who: &admintoken.Token{ID: "<u>ops</u>"}, Key: newKeyDetail(ki, rows, w.env.Clock.Now())}
	rec := httptest.NewRecorder()
	w.h.(*handler).render(rec, httptest.NewRequest("GET", "/status/keys/orders/-", nil), http.StatusOK, "key", p)
	out := rec.Body.String()
	for _, raw := range []string{"<script>alert", "<img", "<b>id", "<i>1", "<u>ops", `"><script`, "</pre><script", "alert(4)</script>"} {
		if strings.Contains(out, raw) {
			t.Errorf("%s reached the page unescaped", raw)
		}
	}
	for _, esc := range []string{`&lt;script&gt;alert(\&#34;x\&#34;)&lt;/script&gt;`, "&lt;img src=x onerror=alert(1)&gt;", "&lt;/pre&gt;&lt;script&gt;alert(3)",
		`data-row="&lt;b&gt;id&lt;/b&gt;"`, "&lt;u&gt;ops&lt;/u&gt;", "<details data-stack><summary>stack</summary><pre>main.send\n&lt;/pre&gt;&lt;script&gt;alert(4)"} {
		if !strings.Contains(out, esc) {
			t.Errorf("the page lacks %s", esc)
		}
	}
	// The invalid item, kept as a JSON string of the API's text, is shown as that text.
	if !strings.Contains(out, "<summary>item</summary><pre data-json>{\n  &#34;name&#34;") {
		t.Errorf("the invalid item is not shown unwrapped:\n%s", out)
	}
}

func mustRaw(t *testing.T, s string) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestNoTokensConfigured(t *testing.T) {
	w := newWorld(t, []admintoken.Token{}...) // a set of no tokens: nobody can log in
	res, body := w.do(t, "GET", "/status", "", nil)
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "No admin token is configured") || strings.Contains(body, `name="token"`) {
		t.Fatalf("%d\n%s", res.StatusCode, body)
	}
	if res, _ := w.do(t, "POST", "/status/login", "", url.Values{"token": {opsSecret}}); res.StatusCode != http.StatusForbidden || len(res.Cookies()) != 0 {
		t.Fatalf("login with no tokens: %d", res.StatusCode)
	}
}

func TestRedisDown(t *testing.T) {
	w := newWorld(t)
	w.env.Mini.Close()
	res, body := w.do(t, "GET", "/status", opsSecret, nil)
	if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "Reading the keys failed") {
		t.Fatalf("%d\n%s", res.StatusCode, body)
	}
	if !strings.Contains(w.log.String(), `"level":"error"`) {
		t.Fatalf("not logged: %s", w.log.String())
	}
}
