package admin_test

// The adversary's tests of the admin API (issue 15): auth bypasses, the csrf rule, secrets in
// logs and answers, bad input, operators racing cycles and each other, Redis down. Each test
// says what it attacks; the report (the branch's commit message) says which held.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/internal/admin"
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/health"
	"github.com/watukuy/watukuy/internal/statehash"
)

// actRoutes are every route that acts, with a body each accepts.
var actRoutes = []struct{ method, path, body string }{
	{"POST", "/api/keys/orders/-/trigger", ""},
	{"POST", "/api/keys/orders/-/pause", ""},
	{"POST", "/api/keys/orders/-/resume", ""},
	{"POST", "/api/pollers/shops/trigger", ""},
	{"POST", "/api/pollers/shops/pause", ""},
	{"POST", "/api/pollers/shops/resume", ""},
	{"POST", "/api/keys/shops/eu/backfill", `{"from": null}`},
	{"POST", "/api/pollers/shops/backfill", `{"from": null}`},
	{"POST", "/api/keys/orders/-/replay", `{"from": "2026-01-01T00:00:00Z"}`},
	{"POST", "/api/keys/shops/eu/reset-cursor", `{"cursor": null}`},
	{"POST", "/api/keys/orders/-/parked/retry", `{"all": true}`},
	{"POST", "/api/keys/orders/-/parked/discard", `{"all": true}`},
	{"POST", "/api/pollers/shops/partitions", `{"partition": "ap"}`},
	{"DELETE", "/api/pollers/shops/partitions/us", ""},
	{"DELETE", "/api/pollers/shops/partitions/us?purge=true", ""},
}

// raw sends a request with mod applied and returns status, headers and body, whatever the
// content type; it never follows redirects.
func (s *site) raw(method, path, body string, mod func(*http.Request)) (int, http.Header, []byte) {
	s.t.Helper()
	req, err := http.NewRequest(method, s.srv.URL+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	if mod != nil {
		mod(req)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// dump is every key and value in Redis, to see that a refused request wrote nothing.
func (s *site) dump() map[string]string {
	s.t.Helper()
	d := s.b.Dump(s.t)
	return d
}

// unfenced is a state hash without its fences (the lease's fields and the incarnation).
func (s *site) unfenced(key string) map[string]string {
	s.t.Helper()
	h := s.b.Client.HGetAll(context.Background(), key).Val()
	maps.DeleteFunc(h, func(f, _ string) bool { return statehash.IsLeaseField(f) || f == statehash.Incarnation })
	return h
}

func sameDump(t *testing.T, before, after map[string]string, what string) {
	t.Helper()
	for k, v := range after {
		if before[k] != v {
			t.Errorf("%s wrote %s: %.200s (was %.200s)", what, k, v, before[k])
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			t.Errorf("%s removed %s", what, k)
		}
	}
}

func codeOf(b []byte) string {
	var e apiError
	_ = json.Unmarshal(b, &e)
	return e.Error.Code
}

// Header tricks: none gets a request past the token check or a read-only token past the
// read-only check; a wrong credential is never rescued by a good one sent alongside.
func TestAdvAuthHeaderTricks(t *testing.T) {
	s := newSite(t)
	pause := "/api/keys/orders/-/pause"
	cookie := func(v string) func(*http.Request) {
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
	if set, err := admin.NewTokens(env); err != nil || set.Len() != 2 {
		t.Errorf("env with newlines: %v", err)
	} else if tok, ok := set.Lookup(opsSecret); !ok || tok.ID != "env#1" {
		t.Errorf("env with newlines: lookup %+v %v", tok, ok)
	}
	if _, err := admin.NewTokens([]admin.Token{{ID: "nl", Secret: opsSecret + "\n"}}); err == nil {
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
func TestAdvAuthRawHeaderBytes(t *testing.T) {
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
func TestAdvCSRFEveryRoute(t *testing.T) {
	s := newSite(t)
	for _, r := range actRoutes {
		for _, hv := range []string{"", "absent"} {
			before := s.dump()
			code, _, b := s.raw(r.method, r.path, r.body, func(q *http.Request) {
				q.AddCookie(&http.Cookie{Name: admin.CookieName, Value: opsSecret})
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
func TestAdvReadOnlyNoAction(t *testing.T) {
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

// Path tricks: escaped slashes, dots and odd bytes in {poller} and {partition} name no other
// key, "-" is only the unpartitioned key, very long names are refused; nothing is written.
func TestAdvPathTricks(t *testing.T) {
	s := newSite(t)
	long := strings.Repeat("a", 200_000)
	for _, p := range []string{
		"/api/keys/shops%2Feu/-/pause",
		"/api/keys/shops/eu%2F..%2Fus/pause",
		"/api/keys/shops/eu%2Fpause/pause",
		"/api/keys/shops%7Ceu/-/pause",
		"/api/keys/shops/eu%7D/pause",
		"/api/keys/shops/%7Bshops%7Ceu%7D/pause",
		"/api/keys/shops/-/pause",
		"/api/keys/shops/%2D/pause",
		"/api/keys/shops/eu%00/pause",
		"/api/keys/shops/%FF%FE/pause",
		"/api/keys/shops/eu*/pause",
		"/api/keys/sh*/eu/pause",
		"/api/keys/" + long + "/-/pause",
		"/api/keys/shops/" + long + "/pause",
		"/api/keys/shops/eu/pause/",
		"/api/pollers/shops%2F..%2Forders/pause",
		"/api/pollers/shops/partitions/eu%2F..%2Fus?purge=true",
	} {
		before := s.dump()
		code, _, b := s.raw("POST", p, "", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+opsSecret) })
		if strings.Contains(p, "partitions/") {
			code, _, b = s.raw("DELETE", p, "", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+opsSecret) })
		}
		if code == 200 || code >= 500 {
			t.Errorf("%.80s: %d %.300s", p, code, b)
		}
		sameDump(t, before, s.dump(), fmt.Sprintf("%.80s", p))
	}
	// A long or odd partition given in a body is refused as a field, not stored.
	for _, name := range []string{strings.Repeat("p", 129), "-", "a/b", "a|b", "a}b", "{x}", "\xff\xfe", "a b", "", "%2F"} {
		body, _ := json.Marshal(map[string]string{"partition": name})
		before := s.dump()
		if e := s.fails("POST", "/api/pollers/shops/partitions", opsSecret, string(body), 400, "bad_request"); e.Field != "partitions" && e.Field != "partition" {
			t.Errorf("%q: field %q", name, e.Field)
		}
		sameDump(t, before, s.dump(), fmt.Sprintf("partitions add %q", name))
	}
}

// A partition the API adds, the API can address: "." and ".." match the partition pattern,
// and a path holding them as a literal segment is cleaned away (/api/keys/shops/../pause is
// /api/keys/pause); escaped as %2E they must still name the partition, through the API's own
// mux and through the listener's (health.Server), for inspect, pause and delete.
func TestAdvDotPartitionReachableEscaped(t *testing.T) {
	s := newSite(t)
	h := health.Server{API: s.srv.Config.Handler}
	outer := httptest.NewServer(h.Handler())
	defer outer.Close()
	auth := func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+opsSecret) }
	for _, name := range []string{".", ".."} {
		body, _ := json.Marshal(map[string]string{"partition": name})
		if code, _, b := s.raw("POST", "/api/pollers/shops/partitions", string(body), auth); code != 200 {
			t.Fatalf("add %q: %d %s", name, code, b)
		}
		esc := strings.ReplaceAll(name, ".", "%2E")
		for _, base := range []*httptest.Server{s.srv, outer} {
			ss := &site{t: t, srv: base, b: s.b}
			if code, _, b := ss.raw("GET", "/api/keys/shops/"+esc, "", auth); code != 200 || !strings.Contains(string(b), `"partition": "`+name+`"`) {
				t.Errorf("inspect %q as %s: %d %.200s", name, esc, code, b)
			}
		}
		if code, _, b := s.raw("POST", "/api/keys/shops/"+esc+"/pause", "", auth); code != 200 || !s.pausedInRedis("shops", name) {
			t.Errorf("pause %q: %d %.200s", name, code, b)
		}
		if code, _, b := s.raw("DELETE", "/api/pollers/shops/partitions/"+esc+"?purge=true", "", auth); code != 200 {
			t.Errorf("delete %q: %d %.200s", name, code, b)
		}
	}
}

// Secrets: whatever is sent, no answer and no log line (the action log, the failed-action
// log, the unknown-token log, the server's own error log) holds a secret.
func TestAdvSecretsNeverLeak(t *testing.T) {
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

// Bodies: a huge chunked body, deep nesting, many ids are refused with a 4xx quickly.
func TestAdvHugeAndNestedBodies(t *testing.T) {
	s := newSite(t)
	auth := func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+opsSecret) }
	// 1 GiB, chunked (no Content-Length), never fully sent.
	var sent atomic.Int64
	pr, pw := io.Pipe()
	go func() {
		chunk := []byte(`{"from": "` + strings.Repeat("x", 64<<10))
		for sent.Load() < 1<<30 {
			n, err := pw.Write(chunk)
			sent.Add(int64(n))
			if err != nil {
				return
			}
			chunk = []byte(strings.Repeat("x", 64<<10))
		}
		pw.Close()
	}()
	req, _ := http.NewRequest("POST", s.srv.URL+"/api/keys/shops/eu/backfill", pr)
	auth(req)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 413 {
			t.Errorf("1 GiB chunked: %d %s", resp.StatusCode, b)
		}
	}
	pr.CloseWithError(errors.New("done"))
	if d := time.Since(start); d > 5*time.Second || sent.Load() > 64<<20 {
		t.Errorf("1 GiB chunked: %v, %d bytes sent", d, sent.Load())
	}

	for _, body := range []string{
		`{"from": ` + strings.Repeat("[", 400) + strings.Repeat("]", 400) + `}`,
		`{"x": ` + strings.Repeat(`{"a":`, 150) + "1" + strings.Repeat("}", 150) + `}`,
		strings.Repeat("[", 1000),
		`{"from": null, "from": "1"}`,
		`{"from": "\ud800"}`,
	} {
		code, _, b := s.raw("POST", "/api/keys/shops/eu/backfill", body, auth)
		if code >= 500 {
			t.Errorf("%.40s: %d %s", body, code, b)
		}
	}
}

// newStdLogger is a *log.Logger on w, for http.Server.ErrorLog.
func newStdLogger(w io.Writer) *log.Logger { return log.New(w, "", 0) }

// addPoller registers p on the site's engine (defaults as newSite's pollers) and runs a tick
// so that its keys exist.
func (s *site) addPoller(p watukuy.Poller, api *fakeapi.API) {
	s.t.Helper()
	if p.Fetch == nil {
		p.Fetch = api.ChangeFeed(10)
	}
	if p.Version == nil {
		p.Version = watukuy.Field("version")
	}
	if p.Handler == nil {
		p.Handler = func(context.Context, watukuy.Event) error { return nil }
	}
	p.Schedule = watukuy.Schedule{Min: time.Second, Max: time.Minute}
	p.Delivery = watukuy.Delivery{Attempts: 1, RetryHorizon: -1, Backoff: watukuy.Backoff{Base: time.Microsecond, Factor: 1, Max: time.Microsecond}}
	if err := s.eng.Register(p); err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.eng.Tick(context.Background(), 5*time.Second); err != nil {
		s.t.Fatal(err)
	}
}

// parked retry with one id twice: the row is one row, released once, and its event goes back
// to delivery once (one held event, released) — an id given twice must not put the poison
// event back twice (delivered twice, and "released": 2 for one row).
func TestAdvParkedRetryDuplicateIDs(t *testing.T) {
	s := newSite(t)
	ctx := context.Background()
	rows := ok[struct{ Rows []parkedRow }](s, "GET", "/api/keys/orders/-/parked", "").Rows
	if len(rows) != 2 {
		t.Fatalf("parked: %+v", rows)
	}
	id := rows[0].ID
	ids, _ := json.Marshal(map[string][]string{"ids": {id, id, id}})
	res := ok[struct {
		Released int
		Keys     []struct{ IDs []string }
	}](s, "POST", "/api/keys/orders/-/parked/retry", string(ids))
	back := s.b.Client.XLen(ctx, "wk:{orders|}:outbox").Val() + s.b.Client.ZCard(ctx, "wk:{orders|}:held").Val()
	if res.Released != 1 || back != 1 {
		t.Errorf("retry of one row named three times: released %d, %d events back to delivery; want 1 and 1", res.Released, back)
	}
	s.healthy.Store(true)
	rep, err := s.eng.Tick(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Delivered != 1 {
		t.Errorf("the retried event was delivered %d times, want 1", rep.Delivered)
	}
}

// Two operators discard the same parked row at once: one discards it, the other is told it
// is gone (404), or that it was already done; neither answers 500. The API checks the id
// against a listing taken outside the key's lease, then the engine, under the lease, finds
// the row gone and fails with a plain error: 500 internal.
func TestAdvParkedConcurrentDiscard(t *testing.T) {
	s := newSite(t)
	rows := ok[struct{ Rows []parkedRow }](s, "GET", "/api/keys/orders/-/parked", "").Rows
	body := `{"ids": ["` + rows[0].ID + `"]}`
	var wg sync.WaitGroup
	codes := make([]int, 8)
	answers := make([][]byte, 8)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], answers[i] = s.do("POST", "/api/keys/orders/-/parked/discard", opsSecret, body)
		}()
	}
	wg.Wait()
	done := 0
	for i, c := range codes {
		switch {
		case c == 200:
			done++
		case c >= 500:
			t.Errorf("a concurrent discard of the same row: %d %s", c, answers[i])
		}
	}
	if done == 0 {
		t.Errorf("no discard succeeded: %v", codes)
	}
	if n := s.b.Client.HLen(context.Background(), "wk:{orders|}:parked").Val(); n != 1 {
		t.Errorf("%d parked rows left, want 1", n)
	}
}

// partitions add of a partition that exists is the operator's mistake, a conflict: 409, not
// 500 (the engine reports it as a *ConflictError).
func TestAdvPartitionAddExisting(t *testing.T) {
	s := newSite(t)
	before := s.dump()
	e := s.fails("POST", "/api/pollers/shops/partitions", opsSecret, `{"partition": "eu"}`, 409, "conflict")
	if !strings.Contains(e.Message, "eu") || !strings.Contains(e.Message, "resume") {
		t.Errorf("add existing: %+v", e)
	}
	sameDump(t, before, s.dump(), "partitions add of an existing partition")
	// A removed one too (resume brings it back); a deleted one comes back.
	ok[any](s, "DELETE", "/api/pollers/shops/partitions/eu", "")
	s.fails("POST", "/api/pollers/shops/partitions", opsSecret, `{"partition": "eu"}`, 409, "conflict")
	ok[any](s, "DELETE", "/api/pollers/shops/partitions/us?purge=true", "")
	if st := ok[keyStatus](s, "POST", "/api/pollers/shops/partitions", `{"partition": "us"}`); st.Partition != "us" {
		t.Errorf("add a deleted partition: %+v", st)
	}
}

// Replay with absurd times: a from far in the future (and no to) replays nothing, a from
// before 1970 replays everything; neither is a server error. The engine's own check of a
// to it defaults to now+1h was a plain error (500), and a time before the Unix epoch made
// a negative stream id that Redis refuses (500).
func TestAdvReplayAbsurdTimes(t *testing.T) {
	s := newSite(t)
	api := fakeapi.New()
	api.PutMany(3, "l", nil)
	s.addPoller(watukuy.Poller{Name: "logged", LogRetention: time.Hour}, api)
	if n := s.b.Client.XLen(context.Background(), "wk:{logged|}:log").Val(); n != 3 {
		t.Fatalf("log: %d entries", n)
	}
	for _, c := range []struct {
		body   string
		status int
		n      int
	}{
		{`{"from": "9999-12-31T23:59:59Z"}`, 400, 0},
		{`{"from": "3000-01-01T00:00:00Z", "to": "9999-12-31T23:59:59Z"}`, 200, 0},
		{`{"from": "0001-01-01T00:00:00Z"}`, 200, 3},
		{`{"from": "1969-12-31T23:59:59Z"}`, 200, 3},
		{`{"from": "0001-01-01T00:00:00Z", "to": "1960-01-01T00:00:00Z"}`, 200, 0},
		{`{"from": "2000-01-01T00:00:00+23:59"}`, 200, 3},
	} {
		code, b := s.do("POST", "/api/keys/logged/-/replay", opsSecret, c.body)
		if code != c.status {
			t.Errorf("replay %s: %d %s, want %d", c.body, code, b, c.status)
			continue
		}
		if code == 200 {
			var r struct{ Replayed int }
			_ = json.Unmarshal(b, &r)
			if r.Replayed != c.n {
				t.Errorf("replay %s: %d replayed, want %d", c.body, r.Replayed, c.n)
			}
		} else if codeOf(b) != "bad_request" || !strings.Contains(string(b), `"field": "from"`) {
			t.Errorf("replay %s: %s, want bad_request naming from", c.body, b)
		}
	}
}

// An action that needs the key's lease while a cycle holds it (a slow API): the engine
// waits 5 s, then gives up with "try again". That is a retryable condition, a 503 with
// Retry-After, not a 500 internal.
func TestAdvActionWhileCycleHoldsLease(t *testing.T) {
	s := newSite(t)
	api := fakeapi.New()
	api.PutMany(3, "w", nil)
	var slow atomic.Bool
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	api.OnFetch(func(ctx context.Context, _ watukuy.FetchRequest) error {
		if slow.Load() {
			select {
			case entered <- struct{}{}:
			default:
			}
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	})
	s.addPoller(watukuy.Poller{Name: "slow"}, api)
	slow.Store(true)
	ok[any](s, "POST", "/api/keys/slow/-/trigger", "")
	ctx, cancel := context.WithCancel(context.Background())
	ticked := make(chan struct{})
	go func() {
		defer close(ticked)
		_, _ = s.eng.Tick(ctx, 60*time.Second)
	}()
	defer func() { cancel(); <-ticked }()
	defer close(release)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the cycle did not start")
	}
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/api/keys/slow/-/reset-cursor", `{"cursor": null}`},
		{"DELETE", "/api/pollers/slow/partitions/-", ""},
	} {
		start := time.Now()
		code, h, b := s.raw(r.method, r.path, r.body, func(q *http.Request) { q.Header.Set("Authorization", "Bearer "+opsSecret) })
		if code != 503 || codeOf(b) != "key_busy" || h.Get("Retry-After") == "" {
			t.Errorf("%s %s while a cycle holds the key: %d (Retry-After %q) %s after %v; want 503 key_busy with Retry-After",
				r.method, r.path, code, h.Get("Retry-After"), b, time.Since(start).Round(time.Millisecond))
		}
	}
	if s.inspect("slow", "").Paused {
		t.Error("a refused remove paused the key")
	}
}

// readRoutes are the routes that read.
var readRoutes = []string{
	"/api/whoami", "/api/pollers", "/api/keys", "/api/keys?poller=shops", "/api/keys/orders/-",
	"/api/keys/shops/eu/backfill", "/api/parked", "/api/parked?poller=orders", "/api/keys/orders/-/parked",
	"/api/pollers/shops/partitions",
}

// downCheck sends every route with the ops token and wants 503 redis_unavailable (whoami:
// 200, it reads nothing) from each within bound.
func downCheck(t *testing.T, s *site, bound time.Duration) {
	t.Helper()
	type route struct{ method, path, body string }
	var all []route
	for _, p := range readRoutes {
		all = append(all, route{"GET", p, ""})
	}
	for _, r := range actRoutes {
		all = append(all, route(r))
	}
	for _, r := range all {
		start := time.Now()
		code, _, b := s.raw(r.method, r.path, r.body, func(q *http.Request) { q.Header.Set("Authorization", "Bearer "+opsSecret) })
		took := time.Since(start)
		want := 503
		switch {
		case r.path == "/api/whoami":
			want = 200
		case strings.HasPrefix(r.path, "/api/keys/orders/-/replay") && codeOf(b) == "replay_unavailable":
			want = 409 // orders keeps no log: the engine knows without Redis
		}
		if code != want || (want == 503 && codeOf(b) != "redis_unavailable") || took > bound {
			t.Errorf("%s %s with Redis down: %d after %v: %.300s", r.method, r.path, code, took.Round(time.Millisecond), b)
		}
	}
}

// Redis stopped under a running API (SHUTDOWN of the test's redis-server, its socket gone):
// every endpoint answers 503 redis_unavailable promptly.
func TestAdvRedisStopped(t *testing.T) {
	s := newSite(t)
	quietRedis()
	_ = s.b.Client.ShutdownNoSave(context.Background()).Err()
	downCheck(t, s, 10*time.Second)
}

// The engine pointed at a closed TCP port from the start: 503 redis_unavailable everywhere.
func TestAdvRedisClosedPort(t *testing.T) {
	quietRedis()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	eng, err := watukuy.New(watukuy.Options{Redis: c, InstanceID: "adv"})
	if err != nil {
		t.Fatal(err)
	}
	set, _ := admin.NewTokens([]admin.Token{{ID: "ops", Secret: opsSecret}})
	log := &syncBuffer{}
	srv := httptest.NewServer(admin.NewAPI(admin.Options{Engine: eng, Tokens: set, Logger: zerolog.New(log)}))
	defer srv.Close()
	downCheck(t, &site{t: t, srv: srv, log: log}, 10*time.Second)
}

// quietRedis drops go-redis' own log lines (one per failed dial) from the test output.
func quietRedis() { redis.SetLogger(nopRedisLogger{}) }

type nopRedisLogger struct{}

func (nopRedisLogger) Printf(context.Context, string, ...any) {}

// A hung Redis (every client paused, as a SIGSTOPped server or a cut link that drops
// packets): each request is answered 503 within a bound a client can wait for, and the work
// it started does not go on long after the client has left.
func TestAdvRedisHung(t *testing.T) {
	s := newSite(t)
	quietRedis()
	ctx := context.Background()
	// The pause outlasts the test; the server is killed at its end.
	if err := s.b.Client.Do(ctx, "CLIENT", "PAUSE", "30000", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/api/keys/orders/-", ""},
		{"POST", "/api/keys/orders/-/pause", ""},
		{"GET", "/api/keys", ""},
	} {
		start := time.Now()
		code, _, b := s.raw(r.method, r.path, r.body, func(q *http.Request) { q.Header.Set("Authorization", "Bearer "+opsSecret) })
		took := time.Since(start)
		t.Logf("%s %s: %d after %v: %.200s", r.method, r.path, code, took.Round(time.Millisecond), b)
		if code != 503 || took > 15*time.Second {
			t.Errorf("%s %s with Redis hung: %d after %v, want 503 within 15s", r.method, r.path, code, took.Round(time.Millisecond))
		}
	}
}

// raceSite is a site with poller "race" (partitions p1 and p2 on one change feed that a
// writer keeps changing) whose handler records the highest version delivered per partition
// and identity.
type raceSite struct {
	*site
	api *fakeapi.API
	mu  sync.Mutex
	got map[string]map[string]int // partition → identity → highest version delivered
}

func newRaceSite(t *testing.T) *raceSite {
	s := &raceSite{site: newSite(t), api: fakeapi.New(), got: map[string]map[string]int{}}
	s.api.PutMany(20, "r", nil)
	s.addPoller(watukuy.Poller{Name: "race", Partitions: []string{"p1", "p2"}, Handler: func(_ context.Context, ev watukuy.Event) error {
		var v int
		fmt.Sscan(ev.Version, &v)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.got[ev.Partition] == nil {
			s.got[ev.Partition] = map[string]int{}
		}
		s.got[ev.Partition][ev.Identity] = max(s.got[ev.Partition][ev.Identity], v)
		return nil
	}}, s.api)
	return s
}

// storm runs ops (method, path, body) from workers goroutines at random for d while a
// writer changes items and a loop ticks the engine; it returns every answer's status and
// code, counted.
func (s *raceSite) storm(d time.Duration, workers int, ops [][3]string) map[string]int {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // the API's items change
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			s.api.Put(fmt.Sprintf("r%04d", i%20), nil)
			time.Sleep(3 * time.Millisecond)
		}
	}()
	go func() { // a worker; its last tick ends by itself (a cancelled cycle would keep its lease)
		defer wg.Done()
		for ctx.Err() == nil {
			_, _ = s.eng.Tick(context.Background(), 300*time.Millisecond)
		}
	}()
	var mu sync.Mutex
	seen := map[string]int{}
	var ow sync.WaitGroup
	deadline := time.Now().Add(d)
	for w := range workers {
		ow.Add(1)
		go func() {
			defer ow.Done()
			for i := w; time.Now().Before(deadline); i += workers {
				op := ops[i%len(ops)]
				code, _, b := s.raw(op[0], op[1], op[2], func(q *http.Request) { q.Header.Set("Authorization", "Bearer "+opsSecret) })
				mu.Lock()
				k := fmt.Sprintf("%d %s", code, codeOf(b))
				seen[k]++
				if code >= 500 && codeOf(b) != "key_busy" {
					s.t.Errorf("%s %s during the storm: %d %.300s", op[0], op[1], code, b)
				}
				mu.Unlock()
			}
		}()
	}
	ow.Wait()
	cancel()
	wg.Wait()
	return seen
}

// settle ticks until the race keys' outboxes are empty and every identity's final version
// has been delivered on each partition in parts, or fails.
func (s *raceSite) settle(parts ...string) {
	t := s.t
	t.Helper()
	final := s.api.Final()
	for range 30 {
		for _, p := range parts {
			if err := s.eng.Trigger(context.Background(), "race", p); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.eng.Tick(context.Background(), 2*time.Second); err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		missing := 0
		for _, p := range parts {
			for id, v := range final {
				if s.got[p][id] < v {
					missing++
				}
			}
		}
		s.mu.Unlock()
		if missing == 0 {
			return
		}
	}
	for _, p := range parts {
		ki := s.inspect("race", p)
		b, _ := json.Marshal(ki)
		t.Logf("%s: %s", p, b)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range parts {
		for id, v := range final {
			if s.got[p][id] < v {
				t.Errorf("%s %s: version %d was never delivered (highest %d)", p, id, v, s.got[p][id])
			}
		}
	}
}

// noOrphans checks that the repair sweep finds nothing to repair (every live key has its
// due entry) and that every due entry of poller names a key the engine knows.
func (s *site) noOrphans(poller string) {
	t := s.t
	t.Helper()
	ctx := context.Background()
	if rep, err := s.eng.RepairDue(ctx); err != nil || len(rep) > 0 {
		t.Errorf("RepairDue after the storm: %v %v (a key was left without a due entry)", rep, err)
	}
	keys, err := s.eng.Keys(ctx, poller)
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, k := range keys {
		known[k.String()] = true
	}
	for _, m := range s.b.Client.ZRange(ctx, "wk:{global}:due:"+poller, 0, -1).Val() {
		if !known[m] {
			t.Errorf("due entry %q names no key of %s (%v)", m, poller, keys)
		}
	}
}

// Operators act on a key while cycles run and items change: pause, resume, trigger (of the
// key and of the poller), backfill, reset-cursor, all at once. No answer is a 500 (a busy
// key is a retryable 503), and afterwards every change of the API reaches the handler on
// both partitions and every key has its due entry.
func TestAdvRaceOperatorsAndCycles(t *testing.T) {
	s := newRaceSite(t)
	seen := s.storm(4*time.Second, 4, [][3]string{
		{"POST", "/api/keys/race/p1/pause", ""},
		{"POST", "/api/keys/race/p1/resume", ""},
		{"POST", "/api/keys/race/p1/trigger", ""},
		{"POST", "/api/pollers/race/trigger", ""},
		{"POST", "/api/keys/race/p1/backfill", `{"from": null}`},
		{"POST", "/api/keys/race/p1/reset-cursor", `{"cursor": null}`},
		{"POST", "/api/pollers/race/pause", ""},
		{"POST", "/api/pollers/race/resume", ""},
		{"GET", "/api/keys?poller=race", ""},
	})
	t.Logf("answers: %v", seen)
	ok[any](s.site, "POST", "/api/pollers/race/resume", "")
	s.settle("p1", "p2")
	s.noOrphans("race")
}

// partitions delete, add and remove race pause, resume and trigger of one key, and its
// cycles. Allowed answers: 200, 404 (the key is deleted), 409 (it exists), 503 key_busy.
// Afterwards no key lacks a due entry, no due entry names a deleted key, and the key, added
// or resumed once more, polls and delivers again.
func TestAdvRacePartitionLifecycle(t *testing.T) {
	s := newRaceSite(t)
	ok[any](s.site, "POST", "/api/pollers/race/partitions", `{"partition": "p3"}`)
	seen := s.storm(4*time.Second, 6, [][3]string{
		{"POST", "/api/keys/race/p3/pause", ""},
		{"POST", "/api/keys/race/p3/resume", ""},
		{"POST", "/api/keys/race/p3/trigger", ""},
		{"DELETE", "/api/pollers/race/partitions/p3?purge=true", ""},
		{"POST", "/api/pollers/race/partitions", `{"partition": "p3"}`},
		{"DELETE", "/api/pollers/race/partitions/p3", ""},
		{"POST", "/api/keys/race/p1/trigger", ""},
	})
	t.Logf("answers: %v", seen)
	for k := range seen {
		switch k {
		case "200 ", "404 not_found", "409 conflict", "503 key_busy":
		default:
			t.Errorf("answer %q during the storm", k)
		}
	}
	for range 3 { // stale tasks and due entries of the storm play out
		_, _ = s.eng.Tick(context.Background(), time.Second)
	}
	s.noOrphans("race")
	// Bring p3 back, and see it work. (Deleted first: an action queued behind the storm's
	// last delete may have written into its deletion mark, TestAdvDeleteRacesQueuedAction.)
	if code, b := s.do("DELETE", "/api/pollers/race/partitions/p3?purge=true", opsSecret, ""); code != 200 && code != 404 {
		t.Fatalf("delete p3: %d %s", code, b)
	}
	ok[any](s.site, "POST", "/api/pollers/race/partitions", `{"partition": "p3"}`)
	s.mu.Lock()
	delete(s.got, "p3")
	s.mu.Unlock()
	s.settle("p1", "p3")
	if ki := s.inspect("race", "p3"); ki.Paused || ki.Items == 0 {
		t.Errorf("p3 after the storm: %+v", ki)
	}
	s.noOrphans("race")
}

// parked retry of an invalid item that still fails the poller's checks is the operator's
// expected outcome, not a server fault: 409 with the reason, the row kept. The engine's
// "still invalid" is a plain error: 500 internal.
func TestAdvParkedRetryStillInvalid(t *testing.T) {
	s := newSite(t)
	api := fakeapi.New()
	api.Put("good", nil)
	api.Put("bad", map[string]any{"bad": true})
	var strict atomic.Bool
	strict.Store(true)
	s.addPoller(watukuy.Poller{Name: "strict", Validate: func(item json.RawMessage) error {
		if strict.Load() && strings.Contains(string(item), `"bad":true`) {
			return errors.New("bad is true")
		}
		return nil
	}}, api)
	rows := ok[struct{ Rows []parkedRow }](s, "GET", "/api/keys/strict/-/parked?kind=invalid", "").Rows
	if len(rows) != 1 {
		t.Fatalf("parked invalid: %+v", rows)
	}
	e := s.fails("POST", "/api/keys/strict/-/parked/retry", opsSecret, `{"ids": ["`+rows[0].ID+`"]}`, 409, "conflict")
	if !strings.Contains(e.Message, "still invalid") || !strings.Contains(e.Message, "bad is true") {
		t.Errorf("retry of a still invalid row: %+v", e)
	}
	if n := s.inspect("strict", "").ParkedInvalid; n != 1 {
		t.Errorf("%d invalid rows parked after a refused retry, want 1", n)
	}
	strict.Store(false)
	if res := ok[struct{ Released int }](s, "POST", "/api/keys/strict/-/parked/retry", `{"ids": ["`+rows[0].ID+`"]}`); res.Released != 1 {
		t.Errorf("retry once valid: %+v", res)
	}
}

// Absurd backfill cursors (not a cursor of the API, control characters, near the body
// limit, a to before the from) are taken as opaque, as the CLI takes them, and must not
// stop the key: the live lane goes on polling and delivering, the circuit stays closed.
func TestAdvBackfillAbsurdCursors(t *testing.T) {
	s := newRaceSite(t)
	for _, body := range []string{
		`{"from": "not-a-number"}`,
		`{"from": "\u0000\u0001\u001f", "to": "-1"}`,
		`{"from": "` + strings.Repeat("9", 900) + `"}`,
		`{"from": "50", "to": "10"}`,
		`{"from": "-99999999999999999999"}`,
	} {
		if code, b := s.do("POST", "/api/keys/race/p1/backfill", opsSecret, body); code != 200 && code != 400 {
			t.Errorf("backfill %.60s: %d %s", body, code, b)
		}
		for i := range 5 {
			s.api.Put(fmt.Sprintf("r%04d", i), nil)
			ok[any](s.site, "POST", "/api/keys/race/p1/trigger", "")
			_, _ = s.eng.Tick(context.Background(), time.Second)
		}
		if ki := s.inspect("race", "p1"); ki.Circuit != "closed" {
			t.Errorf("after backfill %.60s: circuit %s, failures %d, last error %s", body, ki.Circuit, ki.Failures, ki.LastError)
		}
	}
	s.settle("p1", "p2")
}

// parked retry names ids of another key, thousands of ids, empty ids: each is a 404 naming
// the id (or 400), nothing is released, and the answer comes at once. The API's default body
// limit (64 KiB) lets through about 1,500 ids.
func TestAdvParkedForeignAndManyIDs(t *testing.T) {
	s := newSite(t)
	set, _ := admin.NewTokens([]admin.Token{{ID: "ops", Secret: opsSecret}})
	big := httptest.NewServer(admin.NewAPI(admin.Options{Engine: s.eng, Tokens: set, Logger: zerolog.New(s.log)}))
	defer big.Close()
	bs := &site{t: t, srv: big, b: s.b, eng: s.eng, log: s.log}
	orders := ok[struct{ Rows []parkedRow }](s, "GET", "/api/keys/orders/-/parked", "").Rows
	before := s.dump()
	body := func(ids []string) string { b, _ := json.Marshal(map[string][]string{"ids": ids}); return string(b) }
	bs.fails("POST", "/api/keys/shops/eu/parked/retry", opsSecret, body([]string{orders[0].ID}), 404, "not_found")
	bs.fails("POST", "/api/keys/shops/eu/parked/discard", opsSecret, body([]string{orders[0].ID}), 404, "not_found")
	many := make([]string, 1500)
	for i := range many {
		many[i] = fmt.Sprintf("ev_%032d", i)
	}
	start := time.Now()
	bs.fails("POST", "/api/keys/orders/-/parked/discard", opsSecret, body(many), 404, "not_found")
	bs.fails("POST", "/api/keys/orders/-/parked/discard", opsSecret, body(append([]string{orders[0].ID}, many...)), 404, "not_found")
	bs.fails("POST", "/api/keys/orders/-/parked/discard", opsSecret, body([]string{""}), 404, "not_found")
	bs.fails("POST", "/api/keys/orders/-/parked/discard", opsSecret, `{"ids": null}`, 400, "bad_request")
	bs.fails("POST", "/api/keys/orders/-/parked/discard", opsSecret, `{"ids": [1]}`, 400, "bad_request")
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("thousands of ids took %v", d)
	}
	sameDump(t, before, s.dump(), "refused releases")
	// The same known id 1,500 times is one row released once.
	same := make([]string, 1500)
	for i := range same {
		same[i] = orders[1].ID
	}
	res := ok[struct{ Released int }](bs, "POST", "/api/keys/orders/-/parked/discard", body(same))
	if res.Released != 1 || s.inspect("orders", "").Parked != 1 {
		t.Errorf("one id 1500 times: released %d, %d parked left", res.Released, s.inspect("orders", "").Parked)
	}
}

// The 404 of a path no endpoint takes must not send the client to another 404: it said
// "GET /api/ lists them", and GET /api/ is no endpoint. It now lists the endpoints in known.
func TestAdvUnknownPathNamesEndpoints(t *testing.T) {
	s := newSite(t)
	for _, p := range []string{"/api/", "/api/nothing", "/api/keys/orders"} {
		e := s.fails("GET", p, opsSecret, "", 404, "not_found")
		if strings.Contains(e.Message, "GET /api/ lists") || !slices.Contains(e.Known, "GET /api/whoami") ||
			!slices.Contains(e.Known, "DELETE /api/pollers/{poller}/partitions/{partition}") {
			t.Errorf("GET %s: %+v", p, e)
		}
	}
}

// A deleted partition of the config stays listed (as deleted) and comes back empty with
// partitions add. Every action on it answered 200 and wrote into its deletion mark: pause
// and remove left paused/removed, reset-cursor a live cursor, backfill a backfill, so that
// partitions add brought it back removed and paused, past items it never emitted (cursor
// "999"). Actions on a deleted partition are now 404 naming partitions add and write
// nothing; a poller-wide action skips it.
func TestAdvDeletedPartitionActions(t *testing.T) {
	s := newSite(t)
	const eu = "wk:{shops|eu}:state"
	ok[any](s, "DELETE", "/api/pollers/shops/partitions/eu?purge=true", "")
	for _, r := range [][3]string{
		{"POST", "/api/keys/shops/eu/pause", ""},
		{"POST", "/api/keys/shops/eu/resume", ""},
		{"POST", "/api/keys/shops/eu/trigger", ""},
		{"POST", "/api/keys/shops/eu/reset-cursor", `{"cursor": "999"}`},
		{"POST", "/api/keys/shops/eu/backfill", `{"from": "5"}`},
		{"POST", "/api/keys/shops/eu/parked/retry", `{"all": true}`},
		{"POST", "/api/keys/shops/eu/parked/discard", `{"all": true}`},
		{"DELETE", "/api/pollers/shops/partitions/eu", ""},
	} {
		before, state := s.dump(), s.unfenced(eu)
		code, _, b := s.raw(r[0], r[1], r[2], func(q *http.Request) { q.Header.Set("Authorization", "Bearer "+opsSecret) })
		if code != 404 || codeOf(b) != "not_found" || !strings.Contains(string(b), "partitions add") {
			t.Errorf("%s %s on a deleted partition: %d %.300s", r[0], r[1], code, b)
		}
		// The engine refuses before it writes: pause, resume and trigger on their look at the
		// state (pause again in its script), the others at a Begin that takes no lease.
		after := s.dump()
		delete(before, eu)
		delete(after, eu)
		sameDump(t, before, after, r[0]+" "+r[1]+" on a deleted partition")
		if now := s.unfenced(eu); !maps.Equal(now, state) {
			t.Errorf("%s %s on a deleted partition wrote its state: %v (was %v)", r[0], r[1], now, state)
		}
	}
	for _, op := range []string{"pause", "trigger", "resume", "pause"} {
		res := ok[struct{ Keys []keyStatus }](s, "POST", "/api/pollers/shops/"+op, "")
		if len(res.Keys) != 1 || res.Keys[0].Partition != "us" {
			t.Errorf("pollers/shops/%s acted on %+v", op, res.Keys)
		}
	}
	if st := ok[keyStatus](s, "POST", "/api/pollers/shops/partitions", `{"partition": "eu"}`); st.Status != "idle" {
		t.Errorf("the deleted partition came back %q", st.Status)
	}
	ki := s.inspect("shops", "eu")
	if ki.Paused || ki.Cursor != "" || ki.Backfill != nil {
		t.Errorf("the deleted partition came back with state: paused %v, cursor %q, backfill %+v", ki.Paused, ki.Cursor, ki.Backfill)
	}
	if _, err := s.eng.Tick(context.Background(), 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if ki := s.inspect("shops", "eu"); ki.Items != 2 {
		t.Errorf("the partition added again knows %d items, want 2 (every item, from the beginning)", ki.Items)
	}
}

// An action queued behind a partitions delete landed in the deletion mark. reset-cursor (as
// backfill, replay, parked retry/discard and partitions remove) takes the key's lease and
// waits up to 5 s for a holder; when the holder was partitions delete, the action ran on the
// deleted key as soon as the delete released the lease, and wrote its cursor into the
// deletion mark; partitions add then brought the partition back past cursor "999", so the
// items before it were never emitted. Fixed in the engine: an operation that holds the lease
// of a deleted key writes nothing and fails with a NotFoundError (Deleted).
func TestAdvDeleteRacesQueuedAction(t *testing.T) {
	s := newSite(t)
	for round := range 20 {
		var wg sync.WaitGroup
		var delCode, resetCode int
		wg.Add(2)
		go func() {
			defer wg.Done()
			delCode, _ = s.do("DELETE", "/api/pollers/shops/partitions/eu?purge=true", opsSecret, "")
		}()
		go func() {
			defer wg.Done()
			resetCode, _ = s.do("POST", "/api/keys/shops/eu/reset-cursor", opsSecret, `{"cursor": "999"}`)
		}()
		wg.Wait()
		if delCode != 200 {
			t.Fatalf("delete: %d", delCode)
		}
		ok[any](s, "POST", "/api/pollers/shops/partitions", `{"partition": "eu"}`)
		if ki := s.inspect("shops", "eu"); ki.Cursor != "" || ki.Paused {
			t.Fatalf("round %d: reset-cursor answered %d, and the partition deleted and added again came back with cursor %q, paused %v: not empty",
				round, resetCode, ki.Cursor, ki.Paused)
		}
	}
}

// Odd bodies on every action: wrong JSON types, nulls, arrays, bytes that are not JSON. Each
// is a 4xx (or 200 where the body is valid), never a 5xx or a dropped connection (a panic).
func TestAdvOddBodies(t *testing.T) {
	s := newSite(t)
	bodies := []string{
		`null`, `[]`, `"x"`, `1`, `true`, `{}`, "\x00", "\xff\xfe", `{"a":1}{"b":2}`, `{} x`,
		`{"from": {}}`, `{"from": []}`, `{"from": null, "to": {}}`, `{"from": "2026-13-01T00:00:00Z"}`,
		`{"from": "2026-01-01T00:00:00Z", "to": null}`, `{"from": null, "to": null}`,
		`{"ids": {}}`, `{"ids": [null]}`, `{"ids": [""]}`, `{"all": "true"}`, `{"all": true, "kind": 5}`,
		`{"all": false, "ids": []}`, `{"partition": null}`, `{"partition": 5}`, `{"partition": ""}`,
		`{"cursor": 5}`, `{"cursor": null, "clearSnapshot": "yes"}`, `{"force": null, "from": null}`,
	}
	for _, r := range actRoutes {
		for _, body := range bodies {
			req, _ := http.NewRequest(r.method, s.srv.URL+r.path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+opsSecret)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("%s %s %q: %v (a panic drops the connection)", r.method, r.path, body, err)
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode >= 500 {
				t.Errorf("%s %s %q: %d %s", r.method, r.path, body, resp.StatusCode, b)
			}
		}
		// Put back what the valid bodies changed.
		code, _ := s.do("POST", "/api/pollers/shops/partitions", opsSecret, `{"partition": "us"}`)
		if code != 200 {
			s.do("POST", "/api/pollers/shops/resume", opsSecret, "")
		}
	}
}
