package watukuy

// Real APIs over real HTTP: the fake API (internal/fakeapi) behind each cursor strategy,
// its faults, and the complaints that plague pollers (G6, G7, G8, ties, stalls).

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/watukuy/watukuy/httppoll"
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// server starts the fake API over HTTP; each request is stamped with the engines' clock.
func (e *env) server(opts fakeapi.ServerOptions) (*fakeapi.Server, func() []time.Time) {
	srv := fakeapi.NewServer(e.api, opts)
	e.t.Cleanup(srv.Close)
	var mu sync.Mutex
	var at []time.Time
	srv.OnRequest(func(n int, r *http.Request) {
		mu.Lock()
		at = append(at, e.clock.Now())
		mu.Unlock()
	})
	return srv, func() []time.Time {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(at)
	}
}

func timestampCursor(srv *fakeapi.Server, limit int, tieBreaker bool) *httppoll.TimestampCursor {
	c := &httppoll.TimestampCursor{Source: httppoll.Source{URL: srv.URL + "/items", Items: "data"}, Field: "updated_at",
		Param: "updated_since", LimitParam: "limit", Limit: limit, HasMore: "has_more"}
	if tieBreaker {
		c.TieBreaker = "after_id"
	}
	return c
}

func listCursor(srv *fakeapi.Server, size int) *httppoll.PageCursor {
	return &httppoll.PageCursor{Source: httppoll.Source{URL: srv.URL + "/list", Items: "data"}, Param: "page",
		SizeParam: "per_page", Size: size, HasMore: "has_more", CollectionETag: true}
}

func tokenCursor(srv *fakeapi.Server, limit int) *httppoll.TokenCursor {
	return &httppoll.TokenCursor{Source: httppoll.Source{URL: srv.URL + "/sync", Items: "data"}, Param: "cursor",
		Next: "next_cursor", HasMore: "has_more", LimitParam: "limit", Limit: limit}
}

// countPer counts delivered events per identity@version@type.
func countPer(evs []watukuytype.Event) map[string]int {
	m := map[string]int{}
	for _, ev := range evs {
		m[ev.Identity+"@"+ev.Version+"@"+string(ev.Type)]++
	}
	return m
}

// checkFinal asserts the delivered events reproduce the API's final state and that versions
// per identity never go backwards.
func checkFinal(t interface{ Errorf(string, ...any) }, e *env) {
	got, want := e.rec.final(), e.api.Final()
	for id, v := range want {
		if got[id] != strconv.Itoa(v) {
			t.Errorf("%s: delivered version %q, API has %d", id, got[id], v)
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			t.Errorf("%s: delivered as present, deleted in the API", id)
		}
	}
	last := map[string]int{}
	for _, ev := range e.rec.events() {
		if ev.Type == watukuytype.Deleted {
			continue
		}
		v, _ := strconv.Atoi(ev.Version)
		if v < last[ev.Identity] {
			t.Errorf("%s went back from v%d to v%d", ev.Identity, last[ev.Identity], v)
		}
		last[ev.Identity] = v
	}
}

// G8: no request inside a Retry-After window (seconds or HTTP-date, on 429 and 503); a 429
// never counts as a failure nor opens the circuit; RateLimit headers spread the requests over
// the window before any 429.
func TestG8Politeness(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		srv, requestTimes := e.server(fakeapi.ServerOptions{})
		e.api.PutMany(3, "o", nil)
		eng := e.engine(e.poller(func(p *watukuytype.Poller) { p.Fetch = timestampCursor(srv, 50, false).Fetch; p.Failures = 2 }), nil)
		type window struct{ from, to time.Time }
		var windows []window
		throttledTick := func(want time.Duration) {
			t.Helper()
			from := e.clock.Now()
			e.tick(eng)
			ki, _ := eng.Inspect(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""})
			if ki.ThrottledUntil == nil || ki.Circuit != "closed" || ki.Failures != 0 || ki.LastError != nil || ki.Status != "throttled" {
				t.Fatalf("after a throttle: %+v", ki)
			}
			if d := ki.ThrottledUntil.Sub(from); d < want-2*time.Second || d > want+time.Second {
				t.Fatalf("throttled for %v, want about %v", d, want)
			}
			windows = append(windows, window{from, *ki.ThrottledUntil})
		}

		srv.Inject(fakeapi.Fault{Status: 429, RetryAfter: "30"})
		throttledTick(30 * time.Second)
		before := len(srv.Requests())
		for _, step := range []time.Duration{0, 29 * time.Second} { // due inside the window (a resume)
			e.clock.Advance(step)
			makeDue(t, eng, "orders", "")
			e.tick(eng)
		}
		if n := len(srv.Requests()); n != before {
			t.Fatalf("%d requests inside the Retry-After window", n-before)
		}
		e.clock.Advance(2 * time.Second)
		e.tick(eng)
		if len(e.rec.events()) != 3 {
			t.Fatalf("after the window: %d events", len(e.rec.events()))
		}

		srv.Inject(fakeapi.Fault{Status: 503, RetryAfter: time.Now().Add(60 * time.Second).UTC().Format(http.TimeFormat)})
		e.clock.Advance(2 * time.Minute)
		throttledTick(60 * time.Second)
		for i := 0; i < 5; i++ { // more 429s than the failure threshold (2)
			e.clock.Advance(2 * time.Minute)
			srv.Inject(fakeapi.Fault{Status: 429, RetryAfter: "10"})
			throttledTick(10 * time.Second)
		}
		for _, at := range requestTimes() {
			for _, w := range windows {
				if at.After(w.from) && at.Before(w.to) {
					t.Errorf("request at %v inside the window %v–%v", at, w.from, w.to)
				}
			}
		}
	})
}

// G8, pacing: with a quota of 4 requests a minute and 12 items in pages of 2, the engine
// spreads its requests by the RateLimit headers and never meets a 429.
func TestG8RateLimitPacing(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		srv, _ := e.server(fakeapi.ServerOptions{})
		srv.SetRateLimit(4, time.Minute)
		e.api.PutMany(12, "o", nil)
		for i := 0; i < 12; i++ {
			e.api.Advance(time.Second) // distinct times, so pages advance without ties
			e.api.Put(fmt.Sprintf("o%04d", i), nil)
		}
		eng := e.engine(e.poller(func(p *watukuytype.Poller) { p.Fetch = timestampCursor(srv, 2, true).Fetch }), nil)
		for i := 0; i < 120 && len(e.rec.final()) < 12; i++ {
			e.clock.Advance(5 * time.Second)
			e.api.Advance(5 * time.Second)
			e.tick(eng)
		}
		if n := len(e.rec.final()); n != 12 {
			t.Fatalf("delivered %d identities", n)
		}
		perWindow := map[int64]int{}
		start := srv.Requests()[0].At
		for _, r := range srv.Requests() {
			if r.Status == 429 {
				t.Fatalf("a 429 at %v: pacing failed", r.At)
			}
			perWindow[int64(r.At.Sub(start)/time.Minute)]++
		}
		for w, n := range perWindow {
			if n > 4 {
				t.Errorf("window %d saw %d requests, quota 4", w, n)
			}
		}
	})
}

// Ties at a page boundary: items sharing a time across pages are all delivered once, with
// and without a tie-breaker.
func TestTimestampTiesAtPageBoundary(t *testing.T) {
	for _, tb := range []bool{false, true} {
		t.Run(fmt.Sprintf("tieBreaker=%v", tb), func(t *testing.T) {
			redistest.Each(t, func(t *testing.T, b redistest.Backend) {
				e := newEnv(t, b)
				srv, _ := e.server(fakeapi.ServerOptions{TieBreaker: tb})
				e.api.PutMany(3, "a", nil) // t0: 3 items
				e.api.Advance(time.Second)
				e.api.PutMany(4, "b", nil) // t1: 4 items straddling the first page (5) boundary
				e.api.Advance(time.Second)
				e.api.PutMany(2, "c", nil)
				eng := e.engine(e.poller(func(p *watukuytype.Poller) { p.Fetch = timestampCursor(srv, 5, tb).Fetch }), nil)
				e.settle(eng)
				for k, n := range countPer(e.rec.events()) {
					if n != 1 {
						t.Errorf("%s delivered %d times", k, n)
					}
				}
				if got := len(e.rec.events()); got != 9 {
					t.Fatalf("delivered %d of 9", got)
				}
				checkFinal(t, e)
			})
		})
	}
}

// Changes while a listing is paged: items updated and created between the pages of one
// cycle are all delivered, and each identity's versions arrive in order.
func TestChangesDuringPaging(t *testing.T) {
	for _, strategy := range []string{"timestamp", "token"} {
		t.Run(strategy, func(t *testing.T) {
			redistest.Each(t, func(t *testing.T, b redistest.Backend) {
				e := newEnv(t, b)
				srv := fakeapi.NewServer(e.api, fakeapi.ServerOptions{TieBreaker: true})
				t.Cleanup(srv.Close)
				for i := 0; i < 20; i++ {
					e.api.Advance(time.Second)
					e.api.Put(fmt.Sprintf("o%02d", i), nil)
				}
				srv.OnRequest(func(n int, r *http.Request) {
					if n == 2 || n == 3 { // between pages: touch paged and unpaged items, add one
						e.api.Advance(time.Second)
						e.api.Put("o01", nil)
						e.api.Put("o15", nil)
						e.api.Put(fmt.Sprintf("new%d", n), nil)
					}
				})
				p := e.poller(func(p *watukuytype.Poller) { p.Fetch = timestampCursor(srv, 5, true).Fetch })
				if strategy == "token" {
					p.Fetch = tokenCursor(srv, 5).Fetch
					p.Tombstone = watukuytype.Flag("deleted")
				}
				eng := e.engine(p, nil)
				e.settle(eng)
				checkFinal(t, e)
				for k, n := range countPer(e.rec.events()) {
					if n != 1 {
						t.Errorf("%s delivered %d times (re-query duplicates must be suppressed)", k, n)
					}
				}
			})
		})
	}
}

// A full page of one timestamp without a tie-breaker is a stall: reported as CURSOR_STALL
// after one request, not an endless loop. With the tie-breaker every item arrives.
func TestCursorStallDetected(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		srv, _ := e.server(fakeapi.ServerOptions{})
		e.api.PutMany(12, "tie", nil)
		eng := e.engine(e.poller(func(p *watukuytype.Poller) { p.Fetch = timestampCursor(srv, 5, false).Fetch }), nil)
		e.tick(eng)
		e.clock.Advance(time.Minute)
		e.tick(eng)
		ki, _ := eng.Inspect(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""})
		if !strings.Contains(string(ki.LastError), "CURSOR_STALL") || !strings.Contains(string(ki.LastError), "tie-breaker") {
			t.Fatalf("lastError %s", ki.LastError)
		}
		if n := len(srv.Requests()); n > 4 {
			t.Fatalf("%d requests: the stall looped", n)
		}
		if n := len(e.rec.events()); n != 5 {
			t.Fatalf("the first full page must still be delivered: %d", n)
		}

		e2 := newEnv(t, b)
		srv2, _ := e2.server(fakeapi.ServerOptions{TieBreaker: true})
		e2.api.PutMany(12, "tie", nil)
		eng2 := e2.engine(e2.poller(func(p *watukuytype.Poller) { p.Name = "tb"; p.Fetch = timestampCursor(srv2, 5, true).Fetch }), nil)
		e2.settle(eng2)
		if n := len(e2.rec.events()); n != 12 {
			t.Fatalf("with a tie-breaker: %d of 12", n)
		}
	})
}

// Deletes come from complete listings only: snapshotDiff over a page listing and the
// reconcile lane of a timestamp poller both emit them, a failed page or a 304 never does,
// and a 304 is an idle cycle.
func TestDeletesFromCompleteListingsOnly(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		srv, _ := e.server(fakeapi.ServerOptions{TieBreaker: true})
		e.api.PutMany(9, "o", nil)
		snap := e.poller(func(p *watukuytype.Poller) {
			p.Name = "snap"
			p.Strategy = watukuytype.SnapshotDiff
			p.Fetch = listCursor(srv, 4).Fetch
		})
		rec := e.poller(func(p *watukuytype.Poller) {
			p.Name = "rec"
			p.Fetch = timestampCursor(srv, 4, true).Fetch
			p.Reconcile = &watukuytype.Reconcile{Every: time.Hour, Fetch: listCursor(srv, 4).Fetch}
		})
		eng := e.engine(snap, nil)
		if err := eng.Register(rec); err != nil {
			t.Fatal(err)
		}
		e.settle(eng)
		if n := len(e.rec.events()); n != 18 {
			t.Fatalf("initial: %d events", n)
		}
		// 304: idle, the interval grows, nothing emitted.
		ki, _ := eng.Inspect(t.Context(), watukuytype.Key{Poller: "snap", Partition: ""})
		e.clock.Advance(3 * time.Minute)
		e.tick(eng)
		ki2, _ := eng.Inspect(t.Context(), watukuytype.Key{Poller: "snap", Partition: ""})
		if !strings.Contains(string(ki2.LastPoll), `"notModified":true`) || ki2.Interval < ki.Interval {
			t.Fatalf("304 must be idle: %s, interval %v -> %v", ki2.LastPoll, ki.Interval, ki2.Interval)
		}

		e.api.Delete("o0002")
		e.api.Delete("o0007")
		// A listing whose second page fails: no deletes from either poller.
		e.clock.Advance(2 * time.Hour)
		srv.Inject(fakeapi.Fault{Path: "/list", Status: 500, Times: 2})
		srv.Inject(fakeapi.Fault{Path: "/list", Status: 500, Times: 2})
		e.tick(eng)
		for _, ev := range e.rec.events()[18:] {
			if ev.Type == watukuytype.Deleted {
				t.Fatalf("a delete from a failed listing: %+v", ev)
			}
		}
		e.settle(eng)
		deleted := map[string][]string{}
		for _, ev := range e.rec.events()[18:] {
			if ev.Type == watukuytype.Deleted {
				deleted[ev.Poller] = append(deleted[ev.Poller], ev.Identity+"/"+string(ev.Lane))
			}
		}
		for _, p := range []string{"snap", "rec"} {
			slices.Sort(deleted[p])
		}
		if want := []string{"o0002/live", "o0007/live"}; !slices.Equal(deleted["snap"], want) {
			t.Errorf("snapshotDiff deletes %v, want %v", deleted["snap"], want)
		}
		if want := []string{"o0002/reconcile", "o0007/reconcile"}; !slices.Equal(deleted["rec"], want) {
			t.Errorf("reconcile deletes %v, want %v", deleted["rec"], want)
		}
	})
}

// Malformed JSON and items without identity are reported (lastError with the byte offset,
// parked invalid rows) and never crash or corrupt state.
func TestMalformedResponses(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		srv, _ := e.server(fakeapi.ServerOptions{})
		e.api.PutMany(3, "o", nil)
		eng := e.engine(e.poller(func(p *watukuytype.Poller) { p.Fetch = timestampCursor(srv, 50, true).Fetch }), nil)
		srv.Inject(fakeapi.Fault{Malformed: true})
		e.tick(eng)
		ki, _ := eng.Inspect(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""})
		if !strings.Contains(string(ki.LastError), "byte offset") || ki.Cursor != "" {
			t.Fatalf("malformed JSON: %s, cursor %q", ki.LastError, ki.Cursor)
		}
		srv.Inject(fakeapi.Fault{NoIdentity: true})
		e.clock.Advance(time.Hour)
		e.tick(eng)
		rows, _ := eng.Parked().List(context.Background(), watukuytype.Key{Poller: "orders", Partition: ""}, "invalid")
		if len(rows) != 1 || !strings.Contains(rows[0].Error, "no identity") {
			t.Fatalf("parked: %+v", rows)
		}
		if n := len(e.rec.events()); n != 2 {
			t.Fatalf("delivered %d, want the 2 valid items", n)
		}
	})
}

// A write in the cursor's own second that sorts before the tie-breaker (a smaller identity)
// is still found: each cycle's first request re-reads that whole second.
func TestTimestampSameSecondWriteBehindTieBreaker(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		srv, _ := e.server(fakeapi.ServerOptions{TieBreaker: true})
		e.api.PutMany(3, "b", nil)
		eng := e.engine(e.poller(func(p *watukuytype.Poller) { p.Fetch = timestampCursor(srv, 2, true).Fetch }), nil)
		e.settle(eng)
		e.api.Put("a0", nil)    // same second as the cursor, sorts before "b0002"
		e.api.Put("b0000", nil) // an update in the same second
		e.settle(eng)
		checkFinal(t, e)
		if n := len(e.rec.events()); n != 5 {
			t.Fatalf("delivered %d events, want 5", n)
		}
	})
}
