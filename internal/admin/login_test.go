package admin_test

// The status page's login: sessions in the cookie instead of the secret, when the cookie is
// Secure, which client a request counts for, and how failed logins slow a client down.

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/watukuy/watukuy/admintoken"
	"github.com/watukuy/watukuy/internal/admin"
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/fakeclock"
	"github.com/watukuy/watukuy/watukuytest"
	"github.com/watukuy/watukuy/watukuytype"
)

// loginWorld is a Login over the tokens ops and dashboards (read-only) on a clock the test
// moves.
type loginWorld struct {
	set   *admintoken.Set
	clock *fakeclock.Clock
	login *admin.Login
}

func newLoginWorld(t *testing.T, o admin.LoginOptions) *loginWorld {
	t.Helper()
	set, err := admintoken.NewSet(admintoken.Token{ID: "ops", Secret: opsSecret}, admintoken.Token{ID: "dashboards", Secret: readSecret, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	clock := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	o.Tokens, o.Now = set, clock.Now
	return &loginWorld{set: set, clock: clock, login: admin.NewLogin(o)}
}

// cookieOf logs tok in from a fresh request and returns the cookie the page would set.
func (w *loginWorld) cookieOf(t *testing.T, id string) *http.Cookie {
	t.Helper()
	tok, ok := w.set.Lookup(map[string]string{"ops": opsSecret, "dashboards": readSecret}[id])
	if !ok {
		t.Fatalf("no token %s", id)
	}
	c, err := w.login.Cookie(httptest.NewRequest("POST", "/status/login", nil), tok)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// with is a request carrying cookie value v.
func with(v string) *http.Request {
	r := httptest.NewRequest("GET", "/status", nil)
	r.AddCookie(&http.Cookie{Name: admin.CookieName, Value: v})
	return r
}

// The login cookie holds a session, never the secret: opaque, HttpOnly, SameSite=Strict, kept
// as long as the session lasts, and it authenticates as its token (read-only stays read-only).
func TestSessionCookie(t *testing.T) {
	w := newLoginWorld(t, admin.LoginOptions{})
	c := w.cookieOf(t, "ops")
	if c.Name != admin.CookieName || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Secure {
		t.Fatalf("cookie %+v", c)
	}
	if c.MaxAge != int(admin.DefaultSessionTTL/time.Second) {
		t.Fatalf("MaxAge %d, want the session's %v", c.MaxAge, admin.DefaultSessionTTL)
	}
	for _, form := range []string{opsSecret, hex.EncodeToString([]byte(opsSecret)), base64.RawURLEncoding.EncodeToString([]byte(opsSecret)),
		base64.StdEncoding.EncodeToString([]byte(opsSecret))} {
		if strings.Contains(c.Value, form) {
			t.Fatalf("the cookie holds the secret: %s", c.Value)
		}
	}
	raw, err := base64.RawURLEncoding.DecodeString(c.Value)
	if err != nil || strings.Contains(string(raw), opsSecret) {
		t.Fatalf("the cookie is not an opaque session: %v", err)
	}
	if again := w.cookieOf(t, "ops"); again.Value == c.Value {
		t.Fatal("two logins got the same session")
	}
	for id, ro := range map[string]bool{"ops": false, "dashboards": true} {
		tok, cred, ok := w.login.Authenticate(with(w.cookieOf(t, id).Value))
		if !ok || cred != admin.Cookie || tok.ID != id || tok.ReadOnly != ro {
			t.Errorf("%s: %+v %v %v", id, tok, cred, ok)
		}
	}
	// The bearer path is the package's: a header wins over the cookie, whatever either holds.
	r := with(c.Value)
	r.Header.Set("Authorization", "Bearer "+readSecret)
	if tok, cred, ok := w.login.Authenticate(r); !ok || cred != admin.Bearer || tok.ID != "dashboards" {
		t.Errorf("bearer with a cookie: %+v %v %v", tok, cred, ok)
	}
	r.Header.Set("Authorization", "Bearer "+opsSecret+"x")
	if _, cred, ok := w.login.Authenticate(r); ok || cred != admin.Bearer {
		t.Errorf("a wrong bearer rescued by the cookie: %v %v", cred, ok)
	}
	if _, cred, ok := w.login.Authenticate(httptest.NewRequest("GET", "/status", nil)); ok || cred != admin.NoCredential {
		t.Errorf("no credential: %v %v", cred, ok)
	}
}

// A session ends: at its expiry, when its token is removed or rotated away, when any of its
// bytes is changed; the secret itself, or a session another token signed, is no session.
func TestSessionEnds(t *testing.T) {
	flip := func(v string, at int) string {
		b, _ := base64.RawURLEncoding.DecodeString(v)
		b[at] ^= 1
		return base64.RawURLEncoding.EncodeToString(b)
	}
	for _, c := range []struct {
		name string
		// then changes the world after the login and returns the cookie value to present.
		then func(t *testing.T, w *loginWorld, v string) string
		ok   bool
	}{
		{"fresh", func(*testing.T, *loginWorld, string) string { return "" }, true},
		{"a second before expiry", func(_ *testing.T, w *loginWorld, _ string) string {
			w.clock.Advance(admin.DefaultSessionTTL - time.Second)
			return ""
		}, true},
		{"at expiry", func(_ *testing.T, w *loginWorld, _ string) string {
			w.clock.Advance(admin.DefaultSessionTTL)
			return ""
		}, false},
		{"a week later", func(_ *testing.T, w *loginWorld, _ string) string { w.clock.Advance(7 * 24 * time.Hour); return "" }, false},
		{"token removed", func(t *testing.T, w *loginWorld, _ string) string {
			replace(t, w.set, admintoken.Token{ID: "dashboards", Secret: readSecret, ReadOnly: true})
			return ""
		}, false},
		{"token rotated (same id, new secret)", func(t *testing.T, w *loginWorld, _ string) string {
			replace(t, w.set, admintoken.Token{ID: "ops", Secret: "ops-secret-rotated-0123456789"})
			return ""
		}, false},
		{"token removed and added back", func(t *testing.T, w *loginWorld, _ string) string {
			replace(t, w.set)
			replace(t, w.set, admintoken.Token{ID: "ops", Secret: opsSecret})
			return ""
		}, true},
		{"the secret itself", func(*testing.T, *loginWorld, string) string { return opsSecret }, false},
		{"version changed", func(_ *testing.T, _ *loginWorld, v string) string { return flip(v, 0) }, false},
		{"id changed", func(_ *testing.T, _ *loginWorld, v string) string { return flip(v, 3) }, false},
		{"fingerprint changed", func(_ *testing.T, _ *loginWorld, v string) string { return flip(v, 20) }, false},
		{"expiry moved", func(_ *testing.T, _ *loginWorld, v string) string { return flip(v, 30) }, false},
		{"signature changed", func(_ *testing.T, _ *loginWorld, v string) string { return flip(v, 50) }, false},
		{"cut short", func(_ *testing.T, _ *loginWorld, v string) string { return v[:len(v)-2] }, false},
		{"longer", func(_ *testing.T, _ *loginWorld, v string) string { return v + "AA" }, false},
		{"not base64", func(_ *testing.T, _ *loginWorld, v string) string { return strings.Repeat("!", len(v)) }, false},
		{"the read-only token's session with ops' fingerprint", func(t *testing.T, w *loginWorld, v string) string {
			own, _ := base64.RawURLEncoding.DecodeString(v)
			ro, _ := base64.RawURLEncoding.DecodeString(w.cookieOf(t, "dashboards").Value)
			copy(ro[17:25], own[17:25])
			return base64.RawURLEncoding.EncodeToString(ro)
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newLoginWorld(t, admin.LoginOptions{})
			v := w.cookieOf(t, "ops").Value
			if other := c.then(t, w, v); other != "" {
				v = other
			}
			tok, cred, ok := w.login.Authenticate(with(v))
			if ok != c.ok || cred != admin.Cookie || (ok && tok.ID != "ops") {
				t.Fatalf("%+v %v %v, want ok %v", tok, cred, ok, c.ok)
			}
		})
	}
}

func replace(t *testing.T, set *admintoken.Set, ts ...admintoken.Token) {
	t.Helper()
	if err := set.Replace(ts); err != nil {
		t.Fatal(err)
	}
}

// A token made read-only by a reload is read-only in the sessions it already has: the session
// names the token, not what it may do.
func TestSessionFollowsTheToken(t *testing.T) {
	w := newLoginWorld(t, admin.LoginOptions{})
	v := w.cookieOf(t, "ops").Value
	replace(t, w.set, admintoken.Token{ID: "ops", Secret: opsSecret, ReadOnly: true})
	if tok, _, ok := w.login.Authenticate(with(v)); !ok || !tok.ReadOnly {
		t.Fatalf("%+v %v", tok, ok)
	}
	// Another Login on the same tokens (another process, or this one restarted) takes it too.
	other := admin.NewLogin(admin.LoginOptions{Tokens: w.set, Now: w.clock.Now})
	if tok, _, ok := other.Authenticate(with(v)); !ok || tok.ID != "ops" {
		t.Fatalf("another Login: %+v %v", tok, ok)
	}
	// A shorter SessionTTL is what the cookie says and when the session ends.
	short := admin.NewLogin(admin.LoginOptions{Tokens: w.set, Now: w.clock.Now, SessionTTL: time.Hour})
	tok, _ := w.set.Lookup(opsSecret)
	c, err := short.Cookie(httptest.NewRequest("POST", "/status/login", nil), tok)
	if err != nil || c.MaxAge != 3600 {
		t.Fatalf("%v %+v", err, c)
	}
	w.clock.Advance(time.Hour)
	if _, _, ok := short.Authenticate(with(c.Value)); ok {
		t.Fatal("a session outlived its TTL")
	}
}

// The cookie is Secure when the page is reached over HTTPS: the request's own TLS, the
// secureCookies setting, or X-Forwarded-Proto https from a trusted proxy, never from anyone
// else. The logout cookie follows the same rule.
func TestSecureCookie(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}
	type req struct {
		remote string
		tls    bool
		proto  []string // X-Forwarded-Proto headers
	}
	for _, c := range []struct {
		name   string
		policy admin.LoginPolicy
		req    req
		secure bool
	}{
		{"plain HTTP", admin.LoginPolicy{}, req{remote: "192.0.2.7:4242"}, false},
		{"TLS", admin.LoginPolicy{}, req{remote: "192.0.2.7:4242", tls: true}, true},
		{"setting", admin.LoginPolicy{SecureCookies: true}, req{remote: "192.0.2.7:4242"}, true},
		{"https from a trusted proxy", admin.LoginPolicy{TrustedProxies: proxies}, req{remote: "10.1.2.3:5555", proto: []string{"https"}}, true},
		{"HTTPS in capitals", admin.LoginPolicy{TrustedProxies: proxies}, req{remote: "10.1.2.3:5555", proto: []string{" HTTPS "}}, true},
		{"https from a trusted IPv6 proxy", admin.LoginPolicy{TrustedProxies: proxies}, req{remote: "[2001:db8::5]:5555", proto: []string{"https"}}, true},
		{"https from an IPv4-mapped trusted proxy", admin.LoginPolicy{TrustedProxies: proxies}, req{remote: "[::ffff:10.1.2.3]:5555", proto: []string{"https"}}, true},
		{"https from an untrusted client", admin.LoginPolicy{TrustedProxies: proxies}, req{remote: "192.0.2.7:4242", proto: []string{"https"}}, false},
		{"https with no proxy configured", admin.LoginPolicy{}, req{remote: "10.1.2.3:5555", proto: []string{"https"}}, false},
		{"http from a trusted proxy", admin.LoginPolicy{TrustedProxies: proxies}, req{remote: "10.1.2.3:5555", proto: []string{"http"}}, false},
		{"no header from a trusted proxy", admin.LoginPolicy{TrustedProxies: proxies}, req{remote: "10.1.2.3:5555"}, false},
		{"the proxy's http after the client's https", admin.LoginPolicy{TrustedProxies: proxies}, req{remote: "10.1.2.3:5555", proto: []string{"https, http"}}, false},
		{"the proxy's https after the client's http", admin.LoginPolicy{TrustedProxies: proxies}, req{remote: "10.1.2.3:5555", proto: []string{"http", "https"}}, true},
		{"a remote address that is no address", admin.LoginPolicy{TrustedProxies: proxies}, req{remote: "pipe", proto: []string{"https"}}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newLoginWorld(t, admin.LoginOptions{Policy: c.policy})
			r := httptest.NewRequest("POST", "/status/login", nil)
			r.RemoteAddr = c.req.remote
			if c.req.tls {
				r.TLS = &tls.ConnectionState{}
			}
			for _, p := range c.req.proto {
				r.Header.Add("X-Forwarded-Proto", p)
			}
			tok, _ := w.set.Lookup(opsSecret)
			in, err := w.login.Cookie(r, tok)
			if err != nil {
				t.Fatal(err)
			}
			if in.Secure != c.secure || w.login.LogoutCookie(r).Secure != c.secure || w.login.Secure(r) != c.secure {
				t.Fatalf("Secure %v (logout %v), want %v", in.Secure, w.login.LogoutCookie(r).Secure, c.secure)
			}
		})
	}
	// A reload's policy applies to the next request.
	w := newLoginWorld(t, admin.LoginOptions{})
	r := httptest.NewRequest("GET", "/status", nil)
	w.login.SetPolicy(admin.LoginPolicy{SecureCookies: true})
	if !w.login.Secure(r) {
		t.Fatal("SetPolicy did not apply")
	}
	w.login.SetPolicy(admin.LoginPolicy{})
	if w.login.Secure(r) {
		t.Fatal("SetPolicy did not apply")
	}
}

// Client is the remote address, or behind trusted proxies the nearest X-Forwarded-For entry
// that is not one: what a client writes to the left of it is never believed.
func TestClient(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}
	for _, c := range []struct {
		name    string
		proxies []netip.Prefix
		remote  string
		xff     []string
		want    string
	}{
		{"direct", nil, "192.0.2.7:4242", nil, "192.0.2.7"},
		{"direct, header ignored", nil, "192.0.2.7:4242", []string{"203.0.113.9"}, "192.0.2.7"},
		{"untrusted sender, header ignored", proxies, "192.0.2.7:4242", []string{"203.0.113.9"}, "192.0.2.7"},
		{"behind a proxy", proxies, "10.0.0.2:80", []string{"203.0.113.9"}, "203.0.113.9"},
		{"behind two proxies", proxies, "10.0.0.2:80", []string{"203.0.113.9, 10.0.0.3"}, "203.0.113.9"},
		{"a forged entry left of the client", proxies, "10.0.0.2:80", []string{"198.51.100.1, 203.0.113.9"}, "203.0.113.9"},
		{"entries over two headers", proxies, "10.0.0.2:80", []string{"198.51.100.1", "203.0.113.9"}, "203.0.113.9"},
		{"an entry with a port", proxies, "10.0.0.2:80", []string{"203.0.113.9:5000"}, "203.0.113.9"},
		{"an IPv6 entry", proxies, "10.0.0.2:80", []string{"[2001:db9::1]:5000"}, "2001:db9::1"},
		{"a malformed entry stops the walk", proxies, "10.0.0.2:80", []string{"203.0.113.9, nonsense, 10.0.0.3"}, "10.0.0.3"},
		{"no header", proxies, "10.0.0.2:80", nil, "10.0.0.2"},
		{"only proxies", proxies, "10.0.0.2:80", []string{"10.0.0.5, 10.0.0.3"}, "10.0.0.5"},
		{"trusted IPv6 proxy", proxies, "[2001:db8::5]:80", []string{"203.0.113.9"}, "203.0.113.9"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := admin.NewLogin(admin.LoginOptions{Policy: admin.LoginPolicy{TrustedProxies: c.proxies}})
			r := httptest.NewRequest("POST", "/status/login", nil)
			r.RemoteAddr = c.remote
			for _, h := range c.xff {
				r.Header.Add("X-Forwarded-For", h)
			}
			if got := l.Client(r); got.String() != c.want {
				t.Fatalf("client %s, want %s", got, c.want)
			}
		})
	}
}

// from is a login request from remote (via X-Forwarded-For when xff is set).
func from(remote, xff string) *http.Request {
	r := httptest.NewRequest("POST", "/status/login", nil)
	r.RemoteAddr = remote
	if xff != "" {
		r.Header.Set("X-Forwarded-For", xff)
	}
	return r
}

// Failed logins: the first few cost nothing, then each one doubles the wait up to a cap; a
// success, or an hour of quiet, starts the client over; other clients are not slowed down.
func TestLoginSlowdown(t *testing.T) {
	w := newLoginWorld(t, admin.LoginOptions{})
	alice, bob := from("192.0.2.7:1111", ""), from("192.0.2.8:2222", "")
	for i := 1; i < admin.DefaultFreeFailures; i++ {
		if d := w.login.Failed(alice); d != 0 || w.login.Wait(alice) != 0 {
			t.Fatalf("failure %d: wait %v", i, d)
		}
	}
	want := time.Second
	for i := admin.DefaultFreeFailures; i < admin.DefaultFreeFailures+12; i++ {
		d := w.login.Failed(alice)
		if d != want || w.login.Wait(alice) != want {
			t.Fatalf("failure %d: wait %v (Wait %v), want %v", i, d, w.login.Wait(alice), want)
		}
		if w.login.Wait(bob) != 0 {
			t.Fatal("another client waits")
		}
		w.clock.Advance(want / 2)
		if got := w.login.Wait(alice); got != want-want/2 {
			t.Fatalf("half way: %v", got)
		}
		w.clock.Advance(want - want/2)
		if got := w.login.Wait(alice); got != 0 {
			t.Fatalf("after the wait: %v", got)
		}
		want = min(2*want, admin.DefaultMaxFailureDelay)
	}
	if want != admin.DefaultMaxFailureDelay {
		t.Fatalf("the wait never reached its cap: %v", want)
	}
	// A success starts over.
	w.login.Succeeded(alice)
	if d := w.login.Failed(alice); d != 0 {
		t.Fatalf("after a success: %v", d)
	}
	// So does an hour without failures.
	for range admin.DefaultFreeFailures {
		w.login.Failed(bob)
	}
	w.clock.Advance(admin.DefaultFailureMemory)
	if d := w.login.Failed(bob); d != 0 {
		t.Fatalf("after an hour of quiet: %v", d)
	}
}

// The client is the one a trusted proxy names: clients behind one proxy are counted apart, and
// a client that writes a new X-Forwarded-For on each try is still one client. IPv6 clients
// are counted by their /64.
func TestLoginSlowdownClients(t *testing.T) {
	w := newLoginWorld(t, admin.LoginOptions{FreeFailures: 1, Policy: admin.LoginPolicy{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}})
	if d := w.login.Failed(from("10.0.0.2:80", "203.0.113.9")); d != time.Second {
		t.Fatalf("behind the proxy: %v", d)
	}
	if w.login.Wait(from("10.0.0.2:80", "203.0.113.10")) != 0 {
		t.Fatal("another client behind the same proxy waits")
	}
	if w.login.Wait(from("10.0.0.2:80", "198.51.100.1, 203.0.113.9")) == 0 {
		t.Fatal("a forged entry got the client out of its wait")
	}
	w.login.Failed(from("192.0.2.7:1", "203.0.113.1"))
	for i := range 5 {
		if w.login.Wait(from("192.0.2.7:1", "203.0.113."+strconv.Itoa(50+i))) == 0 {
			t.Fatal("an untrusted client escaped by writing X-Forwarded-For")
		}
	}
	w.login.Failed(from("[2001:db8:1:2::1]:1", ""))
	if w.login.Wait(from("[2001:db8:1:2::ffff]:1", "")) == 0 {
		t.Fatal("another address of the same /64 does not wait")
	}
	if w.login.Wait(from("[2001:db8:1:3::1]:1", "")) != 0 {
		t.Fatal("another /64 waits")
	}
}

// The failure counts are bounded: past MaxClients the client that failed least recently is
// forgotten, whatever the number of clients that fail.
func TestLoginSlowdownBounded(t *testing.T) {
	w := newLoginWorld(t, admin.LoginOptions{FreeFailures: 1, MaxClients: 3})
	addr := func(i int) *http.Request { return from("192.0.2."+strconv.Itoa(i)+":1", "") }
	for i := 1; i <= 3; i++ {
		w.login.Failed(addr(i))
	}
	w.login.Failed(addr(1)) // 1 failed most recently: 2 is now the oldest
	w.login.Failed(addr(4))
	if w.login.Wait(addr(2)) != 0 {
		t.Fatal("the least recent client was kept past MaxClients")
	}
	for _, i := range []int{1, 3, 4} {
		if w.login.Wait(addr(i)) == 0 {
			t.Fatalf("client %d was forgotten", i)
		}
	}
	for i := 5; i < 1000; i++ {
		w.login.Failed(addr(i % 250))
	}
}

// Logins from many goroutines at once (run with -race).
func TestLoginConcurrent(t *testing.T) {
	w := newLoginWorld(t, admin.LoginOptions{MaxClients: 16})
	tok, _ := w.set.Lookup(opsSecret)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				r := from("192.0.2."+strconv.Itoa((g*200+i)%40)+":1", "")
				w.login.Failed(r)
				_ = w.login.Wait(r)
				if i%7 == 0 {
					w.login.Succeeded(r)
				}
				c, err := w.login.Cookie(r, tok)
				if err != nil {
					t.Error(err)
					return
				}
				if _, _, ok := w.login.Authenticate(with(c.Value)); !ok {
					t.Error("a fresh session refused")
				}
				if i%50 == 0 {
					w.login.SetPolicy(admin.LoginPolicy{SecureCookies: i%100 == 0})
				}
			}
		})
	}
	wg.Wait()
}

// The API with a Login takes the login cookie's session, with the csrf rule and the token's
// rights, and refuses a cookie that holds the secret; the bearer path is as without it.
func TestAPIWithLogin(t *testing.T) {
	api := fakeapi.New()
	api.Put("o1", nil)
	env := watukuytest.New(t, watukuytype.Poller{Name: "orders", Fetch: api.ChangeFeed(10), Version: watukuytype.Field("version"),
		Handler: func(context.Context, watukuytype.Event) error { return nil }})
	env.Settle(2)
	w := newLoginWorld(t, admin.LoginOptions{})
	srv := httptest.NewServer(admin.NewAPI(admin.Options{Engine: env.Engine, Tokens: w.set, Login: w.login}))
	defer srv.Close()
	send := func(method, path string, mod func(*http.Request)) (int, string) {
		t.Helper()
		r, err := http.NewRequest(method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		mod(r)
		res, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	cookie := func(v string, csrf bool) func(*http.Request) {
		return func(r *http.Request) {
			r.AddCookie(&http.Cookie{Name: admin.CookieName, Value: v})
			if csrf {
				r.Header.Set(admin.RequestHeader, "1")
			}
		}
	}
	ops, ro := w.cookieOf(t, "ops").Value, w.cookieOf(t, "dashboards").Value
	pause := "/api/keys/orders/-/pause"
	for _, c := range []struct {
		name, method, path string
		mod                func(*http.Request)
		status             int
		want               string
	}{
		{"whoami by session", "GET", "/api/whoami", cookie(ops, false), 200, `"ops"`},
		{"read-only session", "GET", "/api/whoami", cookie(ro, false), 200, `"dashboards"`},
		{"acting session without the header", "POST", pause, cookie(ops, false), 403, `"csrf"`},
		{"read-only session acting", "POST", pause, cookie(ro, true), 403, `"read_only"`},
		{"the secret as the cookie", "GET", "/api/whoami", cookie(opsSecret, true), 401, `"unauthorized"`},
		{"bearer", "GET", "/api/whoami", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+readSecret) }, 200, `"dashboards"`},
		{"acting session with the header", "POST", pause, cookie(ops, true), 200, ""},
	} {
		if code, b := send(c.method, c.path, c.mod); code != c.status || !strings.Contains(b, c.want) {
			t.Errorf("%s: %d %s, want %d %s", c.name, code, b, c.status, c.want)
		}
	}
	w.clock.Advance(admin.DefaultSessionTTL)
	if code, b := send("GET", "/api/whoami", cookie(ops, false)); code != 401 {
		t.Errorf("an expired session: %d %s", code, b)
	}
	fresh := w.cookieOf(t, "ops").Value
	replace(t, w.set, admintoken.Token{ID: "dashboards", Secret: readSecret, ReadOnly: true})
	if code, b := send("GET", "/api/whoami", cookie(fresh, false)); code != 401 {
		t.Errorf("a removed token's session: %d %s", code, b)
	}
}
