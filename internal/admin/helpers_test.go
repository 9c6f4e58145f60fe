package admin_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/watukuytype"
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

// sameDump fails the test when after (a dump of Redis) differs from before: what wrote or
// removed.
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

// codeOf is the error code of an API answer (empty when it is not an error).
func codeOf(b []byte) string {
	var e apiError
	_ = json.Unmarshal(b, &e)
	return e.Error.Code
}

// addPoller registers p on the site's engine (defaults as newSite's pollers) and runs a tick
// so that its keys exist.
func (s *site) addPoller(p watukuytype.Poller, api *fakeapi.API) {
	s.t.Helper()
	if p.Fetch == nil {
		p.Fetch = api.ChangeFeed(10)
	}
	if p.Version == nil {
		p.Version = watukuytype.Field("version")
	}
	if p.Handler == nil {
		p.Handler = func(context.Context, watukuytype.Event) error { return nil }
	}
	p.Schedule = watukuytype.Schedule{Min: time.Second, Max: time.Minute}
	p.Delivery = watukuytype.Delivery{Attempts: 1, RetryHorizon: -1, Backoff: watukuytype.Backoff{Base: time.Microsecond, Factor: 1, Max: time.Microsecond}}
	if err := s.eng.Register(p); err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.eng.Tick(context.Background(), 5*time.Second); err != nil {
		s.t.Fatal(err)
	}
}

// session is the login cookie's value for the token whose secret is secret: a session of it
// when a token has it, else secret itself (which no cookie accepts).
func (s *site) session(secret string) string {
	s.t.Helper()
	tok, ok := s.tokens.Lookup(secret)
	if !ok {
		return secret
	}
	v, err := s.login.NewSession(tok)
	if err != nil {
		s.t.Fatal(err)
	}
	return v
}
