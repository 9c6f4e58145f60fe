package admin_test

// Authentication and authorisation at every route: header tricks, raw header bytes, the csrf
// rule, read-only tokens, and secrets kept out of answers and logs.

import (
	"bufio"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/watukuy/watukuy/admintoken"
	"github.com/watukuy/watukuy/internal/admin"
	"github.com/watukuy/watukuy/internal/health"
)

// Header tricks: none gets a request past the token check or a read-only token past the
// read-only check; a wrong credential is never rescued by a good one sent alongside.
func TestAuthHeaderTricks(t *testing.T) {
	s := newSite(t)
	pause := "/api/keys/orders/-/pause"
	cookie := func(v string) func(*http.Request) {
		v = s.session(v)
		return func(r *http.Request) { r.AddCookie(&http.Cookie{Name: admin.CookieName, Value: v}) }
	}
	hdr := func(vs ...string) func(*http.Request) {
		return func(r *http.Request) {
			for _, v := range vs {
				r.Header.Add("Authorization", v)
			}
		}
	}
	both := func(fs ...func(*http.Request)) func(*http.Request) {
		return func(r *http.Request) {
			for _, f := range fs {
				f(r)
			}
		}
	}
	csrf := func(r *http.Request) { r.Header.Set(admin.RequestHeader, "1") }
	refused := []struct {
		name string
		mod  func(*http.Request)
		code string
	}{
		{"read-only first, acting second", hdr("Bearer "+readSecret, "Bearer "+opsSecret), "read_only"},
		{"wrong first, acting second", hdr("Bearer nope-nope-nope-nope", "Bearer "+opsSecret), "unauthorized"},
		{"empty bearer", hdr("Bearer"), "unauthorized"},
		{"empty bearer and a valid cookie", both(hdr("Bearer"), cookie(opsSecret), csrf), "unauthorized"},
		{"bearer of spaces and a valid cookie", both(hdr("Bearer    "), cookie(opsSecret), csrf), "unauthorized"},
		{"wrong bearer and a valid cookie", both(hdr("Bearer "+opsSecret+"x"), cookie(opsSecret), csrf), "unauthorized"},
		{"basic scheme and a valid cookie", both(func(r *http.Request) { r.SetBasicAuth("ops", opsSecret) }, cookie(opsSecret), csrf), "unauthorized"},
		{"read-only bearer and an acting cookie", both(hdr("Bearer "+readSecret), cookie(opsSecret), csrf), "read_only"},
		{"read-only cookie first, acting cookie second", both(cookie(readSecret), cookie(opsSecret), csrf), "read_only"},
		{"the secret as the scheme", hdr(opsSecret), "unauthorized"},
		{"tab between scheme and secret", hdr("Bearer\t" + opsSecret + "x"), "unauthorized"},
		{"two secrets in one header", hdr("Bearer " + readSecret + " " + opsSecret), "unauthorized"},
		{"secret, comma, secret", hdr("Bearer " + readSecret + "," + opsSecret), "unauthorized"},
		{"the secret's hash", hdr("Bearer " + fmt.Sprintf("%x", opsSecret)), "unauthorized"},
		{"token in the query", func(r *http.Request) { r.URL.RawQuery = "token=" + opsSecret + "&access_token=" + opsSecret }, "unauthorized"},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			before := s.dump()
			code, _, b := s.raw("POST", pause, "", c.mod)
			if code < 400 || codeOf(b) != c.code {
				t.Errorf("%d %s, want %s", code, b, c.code)
			}
			sameDump(t, before, s.dump(), c.name)
		})
	}
	// A secret with a trailing newline (a file read into a variable): the environment's
	// comma list trims it; a config or a Go caller's token with it is refused at load, not
	// silently never matched.
	env := admin.ParseEnv(opsSecret+"\n, "+readSecret+"\r\n", "env", false)
	if set, err := admintoken.NewSet(env...); err != nil || set.Len() != 2 {
		t.Errorf("env with newlines: %v", err)
	} else if tok, ok := set.Lookup(opsSecret); !ok || tok.ID != "env#1" {
		t.Errorf("env with newlines: lookup %+v %v", tok, ok)
	}
	if _, err := admintoken.NewSet([]admintoken.Token{{ID: "nl", Secret: opsSecret + "\n"}}...); err == nil {
		t.Error("a secret ending in a newline was taken")
	}
	// Accepted forms of the one good token: the scheme is case-insensitive (RFC 9110 11.1)
	// and spaces around the secret are not part of it.
	for _, h := range []string{"bearer " + opsSecret, "BEARER " + opsSecret, "Bearer    " + opsSecret, "Bearer " + opsSecret + "  \t"} {
		code, _, b := s.raw("GET", "/api/whoami", "", hdr(h))
		if code != 200 || !strings.Contains(string(b), `"ops"`) {
			t.Errorf("%q: %d %s", h, code, b)
		}
	}
}

// Raw header bytes a Go client will not send: a bare newline, a carriage return, a NUL
// after the secret. Each is refused or cut by the server's parser, and none acts.
func TestAuthRawHeaderBytes(t *testing.T) {
	s := newSite(t)
	addr := strings.TrimPrefix(s.srv.URL, "http://")
	for _, h := range []string{
		"Bearer " + opsSecret + "\x00",
		"Bearer " + opsSecret + "\rX-Watukuy-Request: 1",
		"Bearer " + readSecret + "\nAuthorization: Bearer " + opsSecret,
		"Bearer " + opsSecret[:8] + "\r\n " + opsSecret[8:], // obsolete line folding
	} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST /api/keys/orders/-/pause HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nAuthorization: %s\r\nConnection: close\r\n\r\n", h)
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				t.Errorf("%q acted: %d", h, resp.StatusCode)
			}
		}
		conn.Close()
		if s.pausedInRedis("orders", "") {
			t.Fatalf("%q paused the key", h)
		}
	}
}

// The csrf rule: no route acts on the login cookie without the request header, whatever the
// method or route; the header must carry a value.
func TestCSRFEveryRoute(t *testing.T) {
	s := newSite(t)
	for _, r := range actRoutes {
		for _, hv := range []string{"", "absent"} {
			before := s.dump()
			code, _, b := s.raw(r.method, r.path, r.body, func(q *http.Request) {
				q.AddCookie(&http.Cookie{Name: admin.CookieName, Value: s.session(opsSecret)})
				q.Header.Set("Content-Type", "text/plain") // a cross-site form's
				if hv == "" {
					q.Header[admin.RequestHeader] = []string{""}
				}
			})
			if code != 403 || codeOf(b) != "csrf" {
				t.Errorf("%s %s with the cookie, header %q: %d %s", r.method, r.path, hv, code, b)
			}
			sameDump(t, before, s.dump(), r.method+" "+r.path)
		}
	}
	// HEAD, OPTIONS and friends on an action's path do nothing, with any credential.
	for _, m := range []string{"HEAD", "OPTIONS", "PUT", "PATCH", "TRACE", "GET"} {
		for _, r := range actRoutes {
			before := s.dump()
			code, _, _ := s.raw(m, r.path, r.body, func(q *http.Request) {
				q.Header.Set("Authorization", "Bearer "+opsSecret)
			})
			reads := r.path == "/api/pollers/shops/partitions" || r.path == "/api/keys/shops/eu/backfill" // GET routes too
			if code != 405 && !((m == "GET" || m == "HEAD") && code == 200 && reads) {
				t.Errorf("%s %s: %d", m, r.path, code)
			}
			sameDump(t, before, s.dump(), m+" "+r.path)
		}
	}
}

// A read-only token acts through no route, by any path spelling: every action answers 403
// read_only (or a path error) and Redis is unchanged.
func TestReadOnlyNoAction(t *testing.T) {
	s := newSite(t)
	h := health.Server{API: s.srv.Config.Handler}
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	for _, base := range []string{s.srv.URL, srv.URL} {
		for _, r := range actRoutes {
			for _, p := range []string{r.path, "/" + r.path, strings.Replace(r.path, "/api/", "/api/./", 1),
				strings.Replace(r.path, "/api/", "/api/x/../", 1), strings.Replace(r.path, "/api/", "/api//", 1)} {
				before := s.dump()
				req, _ := http.NewRequest(r.method, base+p, strings.NewReader(r.body))
				req.Header.Set("Authorization", "Bearer "+readSecret)
				resp, err := http.DefaultClient.Do(req) // follows redirects, as curl -L would
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					t.Errorf("read-only %s %s: %d %s", r.method, p, resp.StatusCode, b)
				}
				sameDump(t, before, s.dump(), "read-only "+r.method+" "+p)
			}
		}
	}
}

// Secrets: whatever is sent, no answer and no log line (the action log, the failed-action
// log, the unknown-token log, the server's own error log) holds a secret.
func TestSecretsNeverLeak(t *testing.T) {
	s := newSite(t)
	var serverLog syncBuffer
	srv := httptest.NewUnstartedServer(s.srv.Config.Handler)
	srv.Config.ErrorLog = newStdLogger(&serverLog) // the server's own lines: panics, bad requests
	srv.Start()
	defer srv.Close()
	s.srv = srv
	var answers strings.Builder
	send := func(method, path, body string, mod func(*http.Request)) {
		code, h, b := s.raw(method, path, body, mod)
		fmt.Fprintf(&answers, "%d %v %s\n", code, h, b)
	}
	for _, sec := range []string{opsSecret, readSecret, opsSecret + "x", opsSecret[:15], " " + opsSecret} {
		for _, r := range append(actRoutes[:], struct{ method, path, body string }{"GET", "/api/keys/nope/-", ""}) {
			send(r.method, r.path, r.body, func(q *http.Request) { q.Header.Set("Authorization", "Bearer "+sec) })
			send(r.method, r.path, r.body, func(q *http.Request) { q.Header.Set("Authorization", "Token "+sec) })
			send(r.method, r.path, r.body, func(q *http.Request) { q.AddCookie(&http.Cookie{Name: admin.CookieName, Value: sec}) })
		}
	}
	// Failing actions of every kind, with the good token: their messages are logged.
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/api/keys/orders/-/replay", `{"from": "yesterday"}`},
		{"POST", "/api/keys/nope/-/pause", ""},
		{"POST", "/api/keys/orders/-/parked/retry", `{"ids": ["nope"]}`},
		{"POST", "/api/pollers/shops/partitions", `{"partition": "eu"}`},
		{"POST", "/api/keys/shops/eu/backfill", `{"from": 1}`},
	} {
		send(r.method, r.path, r.body, func(q *http.Request) { q.Header.Set("Authorization", "Bearer "+opsSecret) })
	}
	for _, sec := range []string{opsSecret, readSecret} {
		for what, text := range map[string]string{"an answer": answers.String(), "the action log": s.log.String(), "the server log": serverLog.String()} {
			if i := strings.Index(text, sec); i >= 0 {
				t.Errorf("%s holds a secret: …%s…", what, text[max(0, i-200):min(len(text), i+100)])
			}
		}
	}
}

// newStdLogger is a *log.Logger on w, for http.Server.ErrorLog.
func newStdLogger(w io.Writer) *log.Logger { return log.New(w, "", 0) }
