package admin_test

// Bad input on the actions: huge, nested and odd bodies, absurd replay times and backfill
// cursors. Each is a 4xx or an answer that acts sensibly, never a 5xx.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/watukuytype"
)

// Bodies: a huge chunked body, deep nesting, many ids are refused with a 4xx quickly.
func TestHugeAndNestedBodies(t *testing.T) {
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

// Odd bodies on every action: wrong JSON types, nulls, arrays, bytes that are not JSON. Each
// is a 4xx (or 200 where the body is valid), never a 5xx or a dropped connection (a panic).
func TestOddBodies(t *testing.T) {
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

// Replay with absurd times: a from far in the future (and no to) replays nothing, a from before
// 1970 replays everything; a from the engine cannot take is a 400 naming the field, never a
// 500.
func TestReplayAbsurdTimes(t *testing.T) {
	s := newSite(t)
	api := fakeapi.New()
	api.PutMany(3, "l", nil)
	s.addPoller(watukuytype.Poller{Name: "logged", LogRetention: time.Hour}, api)
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

// Absurd backfill cursors (not a cursor of the API, control characters, near the body
// limit, a to before the from) are taken as opaque, as the CLI takes them, and must not
// stop the key: the live lane goes on polling and delivering, the circuit stays closed.
func TestBackfillAbsurdCursors(t *testing.T) {
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
