package fakeapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/watukuy/watukuy/watukuytype"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type response struct {
	status int
	header http.Header
	body   []byte
}

type page struct {
	Data       []map[string]any `json:"data"`
	HasMore    bool             `json:"has_more"`
	NextCursor string           `json:"next_cursor"`
	Total      *int             `json:"total"`
	Error      string           `json:"error"`
}

// get sends GET base+path with optional header pairs and reads the whole answer.
func get(t *testing.T, rawURL string, hdr ...string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: res.StatusCode, header: res.Header, body: b}
}

func (r response) page(t *testing.T) page {
	t.Helper()
	var p page
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("status %d body %q: %v", r.status, r.body, err)
	}
	return p
}

// getPage is get + a 200 check + decoding.
func getPage(t *testing.T, rawURL string, hdr ...string) (page, response) {
	t.Helper()
	r := get(t, rawURL, hdr...)
	if r.status != http.StatusOK {
		t.Fatalf("GET %s: status %d, body %s", rawURL, r.status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("GET %s: Content-Type %q", rawURL, ct)
	}
	return r.page(t), r
}

func ids(p page) []string {
	out := []string{}
	for _, it := range p.Data {
		id, _ := it["id"].(string)
		out = append(out, id)
	}
	return out
}

func eq[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

func newServer(t *testing.T, a *API, opts ServerOptions) *Server {
	t.Helper()
	s := NewServer(a, opts)
	t.Cleanup(s.Close)
	return s
}

func TestClockStampsItems(t *testing.T) {
	a := New()
	eq(t, "start", a.Now(), t0)
	a.Put("x", map[string]any{"n": 1})
	a.Advance(90*time.Second + 700*time.Millisecond)
	eq(t, "advanced", a.Now(), t0.Add(90*time.Second+700*time.Millisecond))
	a.Put("x", map[string]any{"n": 2})
	a.SetNow(time.Date(2026, 3, 1, 12, 0, 0, 0, time.FixedZone("X", 3600)))
	a.Delete("x")
	ch := a.Changes()
	eq(t, "change times", []time.Time{ch[0].At, ch[1].At, ch[2].At},
		[]time.Time{t0, t0.Add(90 * time.Second), time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC)})

	a = New()
	fields := map[string]any{"status": "open"}
	a.PutMany(3, "t", fields)
	fields["status"] = "mutated after the call"
	s := newServer(t, a, ServerOptions{})
	p, _ := getPage(t, s.URL+"/items")
	eq(t, "ids", ids(p), []string{"t0000", "t0001", "t0002"})
	for i, it := range p.Data {
		want := map[string]any{"id": fmt.Sprintf("t%04d", i), "version": 1.0, "updated_seq": float64(i + 1),
			"updated_at": "2026-01-01T00:00:00Z", "status": "open"}
		eq(t, "item", it, want)
	}
}

func TestItemsOrderAndPaging(t *testing.T) {
	a := New()
	a.Put("c", nil)
	a.Put("a", nil) // same second as c: ordered by id within it
	a.Advance(time.Minute)
	a.Put("b", nil)
	a.Advance(time.Minute)
	a.Put("z", nil)
	a.Put("c", nil) // c moves to the end (updated at t0+2m)
	a.Put("d", nil)
	a.Delete("d") // deleted items are not served
	s := newServer(t, a, ServerOptions{PageSize: 2})

	p, _ := getPage(t, s.URL+"/items")
	eq(t, "page 1", ids(p), []string{"a", "b"})
	eq(t, "has_more", p.HasMore, true)
	p, _ = getPage(t, s.URL+"/items?updated_since=2026-01-01T00:01:00Z")
	eq(t, "page 2 (inclusive: b again)", ids(p), []string{"b", "c"})
	p, _ = getPage(t, s.URL+"/items?limit=10&updated_since=2026-01-01T00:00:00Z")
	eq(t, "all", ids(p), []string{"a", "b", "c", "z"})
	eq(t, "has_more", p.HasMore, false)
	eq(t, "c's updated_at", p.Data[2]["updated_at"], any("2026-01-01T00:02:00Z"))
	p, _ = getPage(t, s.URL+"/items?updated_since=2026-01-01T00:03:00Z")
	eq(t, "past the end", ids(p), []string{})
	eq(t, "has_more", p.HasMore, false)

	// Other offsets and fractional seconds: 01:02:00+01:00 is 00:02:00Z.
	p, _ = getPage(t, s.URL+"/items?updated_since="+url.QueryEscape("2026-01-01T01:02:00+01:00"))
	eq(t, "offset", ids(p), []string{"c", "z"})
	p, _ = getPage(t, s.URL+"/items?updated_since=2026-01-01T01:02:00+01:00") // unescaped "+"
	eq(t, "unescaped offset", ids(p), []string{"c", "z"})
	p, _ = getPage(t, s.URL+"/items?updated_since=2026-01-01T00:01:59.5Z")
	eq(t, "fraction", ids(p), []string{"c", "z"})

	// Page size cap.
	s2 := newServer(t, a, ServerOptions{MaxPageSize: 3})
	p, _ = getPage(t, s2.URL+"/items?limit=500")
	eq(t, "capped", len(p.Data), 3)
}

func TestItemsSinceIsInclusive(t *testing.T) {
	a := New()
	a.Put("before", nil)
	a.Advance(time.Second)
	a.Put("exactly", nil)
	s := newServer(t, a, ServerOptions{})
	p, _ := getPage(t, s.URL+"/items?updated_since=2026-01-01T00:00:01Z")
	eq(t, "ids", ids(p), []string{"exactly"})
}

func TestItemsBadRequests(t *testing.T) {
	s := newServer(t, New(), ServerOptions{})
	for _, q := range []string{"updated_since=yesterday", "updated_since=1767225600", "limit=-1", "limit=ten"} {
		r := get(t, s.URL+"/items?"+q)
		eq(t, q+" status", r.status, http.StatusBadRequest)
		eq(t, q+" content type", r.header.Get("Content-Type"), "application/json")
		if p := r.page(t); p.Error == "" {
			t.Fatalf("%s: no error message in %s", q, r.body)
		}
	}
}

// A real timestamp API without a tie-breaker cannot page through more items of one timestamp
// than fit in a page: the client's inclusive re-query (updated_since = the last timestamp it
// saw) returns the same page again, forever. The engine must detect that stall.
func TestItemsTiesWithoutTieBreaker(t *testing.T) {
	a := New()
	a.PutMany(5, "t", nil)
	a.Advance(time.Second)
	a.Put("u", nil)
	s := newServer(t, a, ServerOptions{PageSize: 3, LinkHeader: true})

	p, r := getPage(t, s.URL+"/items?updated_since=2026-01-01T00:00:00Z")
	eq(t, "page 1", ids(p), []string{"t0000", "t0001", "t0002"})
	eq(t, "has_more", p.HasMore, true)
	next := p.Data[2]["updated_at"].(string)
	eq(t, "next since", next, "2026-01-01T00:00:00Z")
	link := nextLink(t, r)
	eq(t, "link has no after_id", link.Query().Has("after_id"), false)
	for range 3 {
		// after_id is ignored without the tie-breaker, like a real API that lacks it.
		p, _ = getPage(t, s.URL+"/items?after_id=t0002&updated_since="+next)
		eq(t, "same page again", ids(p), []string{"t0000", "t0001", "t0002"})
		p, _ = getPage(t, link.String())
		eq(t, "the Link loops too", ids(p), []string{"t0000", "t0001", "t0002"})
	}
	// A page larger than the run of ties gets past it.
	p, _ = getPage(t, s.URL+"/items?limit=6&updated_since="+next)
	eq(t, "bigger page", ids(p), []string{"t0000", "t0001", "t0002", "t0003", "t0004", "u"})
}

func TestItemsTiesWithTieBreaker(t *testing.T) {
	a := New()
	a.PutMany(5, "t", nil)
	a.Advance(time.Second)
	a.Put("u", nil)
	s := newServer(t, a, ServerOptions{PageSize: 3, TieBreaker: true, LinkHeader: true})

	var got []string
	q := url.Values{"updated_since": {"2026-01-01T00:00:00Z"}}
	for range 10 {
		p, _ := getPage(t, s.URL+"/items?"+q.Encode())
		got = append(got, ids(p)...)
		if !p.HasMore {
			break
		}
		last := p.Data[len(p.Data)-1]
		q = url.Values{"updated_since": {last["updated_at"].(string)}, "after_id": {last["id"].(string)}}
	}
	eq(t, "all items once", got, []string{"t0000", "t0001", "t0002", "t0003", "t0004", "u"})

	p, _ := getPage(t, s.URL+"/items?updated_since=2026-01-01T00:00:00Z&after_id=t0004")
	eq(t, "after the last tie: the next second", ids(p), []string{"u"})
	p, _ = getPage(t, s.URL+"/items?updated_since=2026-01-01T00:00:01Z&after_id=u")
	eq(t, "nothing after", ids(p), []string{})
}

func TestSyncTombstonesAndTokens(t *testing.T) {
	a := New()
	a.Put("a", nil) // seq 1
	a.Put("b", nil) // 2
	a.Put("c", nil) // 3
	a.Put("a", map[string]any{"v": 2})
	a.Delete("b") // 5
	s := newServer(t, a, ServerOptions{PageSize: 2})

	p, _ := getPage(t, s.URL+"/sync")
	eq(t, "page 1", ids(p), []string{"c", "a"})
	eq(t, "has_more", p.HasMore, true)
	eq(t, "a is current", p.Data[1]["v"], any(2.0))
	tok1 := p.NextCursor
	if tok1 == "" || strings.Contains(tok1, "4") {
		t.Fatalf("token %q should be opaque", tok1)
	}
	if _, err := strconv.Atoi(tok1); err == nil {
		t.Fatalf("token %q is a plain number", tok1)
	}

	p, _ = getPage(t, s.URL+"/sync?cursor="+url.QueryEscape(tok1))
	eq(t, "page 2", p.Data, []map[string]any{{"id": "b", "deleted": true, "updated_seq": 5.0}})
	eq(t, "has_more", p.HasMore, false)
	tok2 := p.NextCursor
	if tok2 == tok1 {
		t.Fatal("cursor did not move")
	}

	p, _ = getPage(t, s.URL+"/sync?cursor="+url.QueryEscape(tok2))
	eq(t, "caught up", ids(p), []string{})
	eq(t, "empty page keeps the cursor", p.NextCursor, tok2)

	a.Put("b", nil) // re-created
	a.Put("d", nil)
	p, _ = getPage(t, s.URL+"/sync?cursor="+url.QueryEscape(tok2)+"&limit=10")
	eq(t, "new changes", ids(p), []string{"b", "d"})
	eq(t, "b is live again", p.Data[0]["version"], any(2.0))

	p, _ = getPage(t, s.URL+"/sync?limit=100")
	eq(t, "from the start, each id once at its last change", ids(p), []string{"c", "a", "b", "d"})

	p, _ = getPage(t, newServer(t, New(), ServerOptions{}).URL+"/sync")
	if len(p.Data) != 0 || p.NextCursor == "" {
		t.Fatalf("empty API: %+v", p)
	}

	for _, c := range []string{"42", "!!", syncToken(3)[:3]} {
		r := get(t, s.URL+"/sync?cursor="+url.QueryEscape(c))
		eq(t, "bad cursor "+c, r.status, http.StatusBadRequest)
	}
}

func TestListPageAndOffset(t *testing.T) {
	a := New()
	for _, id := range []string{"e", "b", "d", "a", "c"} {
		a.Put(id, nil)
	}
	a.Put("x", nil)
	a.Delete("x")
	s := newServer(t, a, ServerOptions{PageSize: 2})

	var got []string
	for n := 1; ; n++ {
		p, _ := getPage(t, s.URL+"/list?page="+strconv.Itoa(n))
		eq(t, "total", *p.Total, 5)
		got = append(got, ids(p)...)
		if !p.HasMore {
			eq(t, "last page", n, 3)
			break
		}
	}
	eq(t, "by page", got, []string{"a", "b", "c", "d", "e"})

	p, _ := getPage(t, s.URL+"/list")
	eq(t, "no page = page 1", ids(p), []string{"a", "b"})
	p, _ = getPage(t, s.URL+"/list?page=2&per_page=3")
	eq(t, "per_page", ids(p), []string{"d", "e"})
	eq(t, "has_more", p.HasMore, false)
	p, _ = getPage(t, s.URL+"/list?page=9")
	eq(t, "past the end", ids(p), []string{})

	p, _ = getPage(t, s.URL+"/list?offset=1&limit=3")
	eq(t, "offset", ids(p), []string{"b", "c", "d"})
	eq(t, "has_more", p.HasMore, true)
	p, _ = getPage(t, s.URL+"/list?offset=4&limit=3")
	eq(t, "offset end", ids(p), []string{"e"})
	eq(t, "has_more", p.HasMore, false)

	for _, q := range []string{"page=0", "page=x", "offset=-1", "page=1&offset=0", "per_page=-2"} {
		eq(t, q, get(t, s.URL+"/list?"+q).status, http.StatusBadRequest)
	}
}

func TestListETag(t *testing.T) {
	a := New()
	a.PutMany(4, "i", nil)
	s := newServer(t, a, ServerOptions{PageSize: 2})

	_, r1 := getPage(t, s.URL+"/list?page=1")
	etag := r1.header.Get("ETag")
	if !strings.HasPrefix(etag, `"`) {
		t.Fatalf("ETag %q", etag)
	}
	_, r2 := getPage(t, s.URL+"/list?page=2")
	eq(t, "one ETag for the collection", r2.header.Get("ETag"), etag)

	r := get(t, s.URL+"/list?page=1", "If-None-Match", etag)
	eq(t, "304", r.status, http.StatusNotModified)
	eq(t, "no body", len(r.body), 0)
	eq(t, "304 carries the ETag", r.header.Get("ETag"), etag)
	eq(t, "weak and listed", get(t, s.URL+"/list?offset=2", "If-None-Match", `"nope", W/`+etag).status, http.StatusNotModified)
	eq(t, "other", get(t, s.URL+"/list", "If-None-Match", `"nope"`).status, http.StatusOK)

	a.Put("i0003", nil) // an update on page 2 changes the ETag of every page
	r = get(t, s.URL+"/list?page=1", "If-None-Match", etag)
	eq(t, "after update", r.status, http.StatusOK)
	etag2 := r.header.Get("ETag")
	if etag2 == etag {
		t.Fatal("ETag did not change")
	}
	a.Delete("i0000")
	r = get(t, s.URL+"/list?page=1", "If-None-Match", etag2)
	eq(t, "after delete", r.status, http.StatusOK)
	a.Advance(time.Hour) // the clock alone changes nothing
	eq(t, "clock", get(t, s.URL+"/list", "If-None-Match", r.header.Get("ETag")).status, http.StatusNotModified)

	// Statuses are recorded, 304 included.
	reqs := s.Requests()
	eq(t, "recorded 304", reqs[2].Status, http.StatusNotModified)
}

func TestFaultStatusRetryAfterAndBurst(t *testing.T) {
	a := New()
	a.Put("a", nil)
	s := newServer(t, a, ServerOptions{})
	date := "Thu, 01 Jan 2026 00:00:30 GMT"
	s.Inject(
		Fault{Status: 429, RetryAfter: "2"},
		Fault{Path: "/sync", Status: 503, RetryAfter: date, Times: 2},
		Fault{Status: 500, Times: 3},
	)
	eq(t, "pending", s.PendingFaults(), 6)

	r := get(t, s.URL+"/items")
	eq(t, "429", r.status, 429)
	eq(t, "Retry-After", r.header.Get("Retry-After"), "2")
	if r.page(t).Error == "" {
		t.Fatalf("no JSON error: %s", r.body)
	}

	// The /sync fault waits for /sync; /items takes the 500 burst meanwhile.
	r = get(t, s.URL+"/items")
	eq(t, "500", r.status, 500)
	eq(t, "no Retry-After", r.header.Get("Retry-After"), "")
	for range 2 {
		r = get(t, s.URL+"/sync")
		eq(t, "503", r.status, 503)
		eq(t, "HTTP-date", r.header.Get("Retry-After"), date)
	}
	eq(t, "500 burst", get(t, s.URL+"/list").status, 500)
	eq(t, "500 burst", get(t, s.URL+"/sync").status, 500)
	eq(t, "pending", s.PendingFaults(), 0)
	p, _ := getPage(t, s.URL+"/items")
	eq(t, "healthy again", ids(p), []string{"a"})
}

func TestFaultMalformedNoIdentityHeader(t *testing.T) {
	a := New()
	a.PutMany(3, "i", nil)
	s := newServer(t, a, ServerOptions{})
	s.Inject(
		Fault{Malformed: true},
		Fault{NoIdentity: true, Path: "/list"},
		Fault{Header: http.Header{"X-Ratelimit-Remaining": {"7"}}, RetryAfter: "5"},
	)

	r := get(t, s.URL+"/items")
	eq(t, "malformed status", r.status, 200)
	var v any
	if err := json.Unmarshal(r.body, &v); err == nil {
		t.Fatalf("body %q parses", r.body)
	}
	if !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") || !strings.HasPrefix(string(r.body), `{"data":[`) {
		t.Fatalf("malformed: %s %q", r.header, r.body)
	}

	p, _ := getPage(t, s.URL+"/list")
	eq(t, "no identity", ids(p), []string{"", "i0001", "i0002"})
	if _, ok := p.Data[0]["id"]; ok {
		t.Fatal("first item has an id")
	}
	eq(t, "rest of the item", p.Data[0]["version"], any(1.0))

	p, r = getPage(t, s.URL+"/sync")
	eq(t, "header fault keeps the page", ids(p), []string{"i0000", "i0001", "i0002"})
	eq(t, "extra header", r.header.Get("X-RateLimit-Remaining"), "7")
	eq(t, "Retry-After on a 200", r.header.Get("Retry-After"), "5")

	// NoIdentity on an empty page and Malformed on a would-be 304.
	_, r = getPage(t, s.URL+"/list")
	etag := r.header.Get("ETag")
	s.Inject(Fault{NoIdentity: true}, Fault{Malformed: true})
	p, _ = getPage(t, s.URL+"/items?updated_since=2027-01-01T00:00:00Z")
	eq(t, "empty page gets an item without id", p.Data, []map[string]any{{"version": 1.0}})
	r = get(t, s.URL+"/list", "If-None-Match", etag)
	eq(t, "malformed is a 200", r.status, 200)
}

func TestFaultDelay(t *testing.T) {
	a := New()
	a.Put("a", nil)
	s := newServer(t, a, ServerOptions{})
	arrived := make(chan int, 10)
	handled := make(chan int, 10)
	s.OnRequest(func(n int, r *http.Request) { arrived <- n })
	s.mu.Lock()
	s.afterHandle = func(n int) { handled <- n }
	s.mu.Unlock()

	// A short delay answers normally, late.
	s.Inject(Fault{Delay: 30 * time.Millisecond})
	start := time.Now()
	p, _ := getPage(t, s.URL+"/items")
	if el := time.Since(start); el < 30*time.Millisecond {
		t.Fatalf("answered after %v", el)
	}
	eq(t, "delayed page", ids(p), []string{"a"})
	<-arrived
	<-handled

	// A long delay is ended by the client going away (its timeout).
	s.Inject(Fault{Delay: time.Hour, Status: 503})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/items", nil)
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			res.Body.Close()
		}
		errc <- err
	}()
	n := <-arrived
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("client error %v", err)
	}
	eq(t, "handler returned", <-handled, n)
	eq(t, "nothing answered", s.Requests()[n-1].Status, 0)
	eq(t, "fault used up", s.PendingFaults(), 0)

	// Close ends a delayed answer too.
	s.Inject(Fault{Delay: time.Hour})
	go func() {
		res, err := http.Get(s.URL + "/items")
		if err == nil {
			res.Body.Close()
		}
		errc <- err
	}()
	<-arrived
	s.Close()
	<-handled
	<-errc
}

func TestRateLimit(t *testing.T) {
	a := New()
	a.Put("a", nil)
	a.Advance(15 * time.Second)
	s := newServer(t, a, ServerOptions{})

	r := get(t, s.URL+"/items")
	eq(t, "off by default", r.header.Get("RateLimit-Limit"), "")

	s.SetRateLimit(3, time.Minute) // window [00:15, 01:15)
	for i, rem := range []int{2, 1, 0} {
		r = get(t, s.URL+"/items")
		eq(t, "status", r.status, 200)
		eq(t, "limit", r.header.Get("RateLimit-Limit"), "3")
		eq(t, "remaining", r.header.Get("RateLimit-Remaining"), strconv.Itoa(rem))
		eq(t, "reset", r.header.Get("RateLimit-Reset"), strconv.Itoa(60-10*i))
		eq(t, "draft RateLimit", r.header.Get("RateLimit"), fmt.Sprintf(`"default";r=%d;t=%d`, rem, 60-10*i))
		eq(t, "draft policy", r.header.Get("RateLimit-Policy"), `"default";q=3;w=60`)
		a.Advance(10 * time.Second)
	}
	// 00:45: exhausted, 30 s to the window's end.
	r = get(t, s.URL+"/sync")
	eq(t, "exhausted", r.status, 429)
	eq(t, "Retry-After", r.header.Get("Retry-After"), "30")
	eq(t, "remaining", r.header.Get("RateLimit-Remaining"), "0")
	a.Advance(29*time.Second + 500*time.Millisecond)
	r = get(t, s.URL+"/list")
	eq(t, "still exhausted", r.status, 429)
	eq(t, "Retry-After rounds up", r.header.Get("Retry-After"), "1")

	// Wall time does not reset the window; the API clock does.
	a.Advance(500 * time.Millisecond) // 01:15: a new window
	r = get(t, s.URL+"/items")
	eq(t, "new window", r.status, 200)
	eq(t, "remaining", r.header.Get("RateLimit-Remaining"), "2")
	eq(t, "reset", r.header.Get("RateLimit-Reset"), "60")

	a.Advance(3*time.Minute + 20*time.Second) // 04:35: windows stay aligned to 00:15 + k·60 s
	r = get(t, s.URL+"/items")
	eq(t, "aligned reset", r.header.Get("RateLimit-Reset"), "40")

	// A scripted fault wins over the limiter but still consumes quota and carries its headers.
	s.Inject(Fault{Status: 503, Header: http.Header{"RateLimit-Remaining": {"99"}}})
	r = get(t, s.URL+"/items")
	eq(t, "fault", r.status, 503)
	eq(t, "fault header wins", r.header.Get("RateLimit-Remaining"), "99")
	eq(t, "limiter header", r.header.Get("RateLimit"), `"default";r=1;t=40`)
	eq(t, "last unit", get(t, s.URL+"/items").status, 200)
	eq(t, "then exhausted", get(t, s.URL+"/items").status, 429)

	s.SetRateLimit(0, 0)
	r = get(t, s.URL+"/items")
	eq(t, "disabled", r.status, 200)
	eq(t, "no headers", r.header.Get("RateLimit"), "")
}

func TestRequestsRecorded(t *testing.T) {
	a := New()
	s := newServer(t, a, ServerOptions{})
	before := time.Now()
	get(t, s.URL+"/items?limit=5", "X-Test", "1")
	a.Advance(time.Minute)
	res, err := http.Post(s.URL+"/sync", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	get(t, s.URL+"/nope")

	reqs := s.Requests()
	eq(t, "count", len(reqs), 3)
	r := reqs[0]
	eq(t, "method", r.Method, "GET")
	eq(t, "path", r.Path, "/items")
	eq(t, "query", r.Query, url.Values{"limit": {"5"}})
	eq(t, "header", r.Header.Get("X-Test"), "1")
	eq(t, "status", r.Status, 200)
	eq(t, "at", r.At, t0)
	if r.Wall.Before(before) || r.Wall.After(time.Now()) {
		t.Fatalf("wall %v", r.Wall)
	}
	eq(t, "second", []any{reqs[1].Method, reqs[1].Path, reqs[1].Status, reqs[1].At},
		[]any{"POST", "/sync", 405, t0.Add(time.Minute)})
	eq(t, "404", reqs[2].Status, 404)
}

// Offset paging over a collection that changes between pages: an item inserted before the
// current position shifts the listing, so one item is served twice and, symmetrically, a delete
// makes one item skipped. A single listing is therefore not a consistent snapshot.
func TestOnRequestChangesWhilePaging(t *testing.T) {
	a := New()
	a.PutMany(4, "b", nil)
	s := newServer(t, a, ServerOptions{PageSize: 2})
	var seen []int
	var mu sync.Mutex
	s.OnRequest(func(n int, r *http.Request) {
		mu.Lock()
		seen = append(seen, n)
		mu.Unlock()
		if n == 2 { // before page 2 is answered
			a.Put("a", nil)
		}
	})
	var got []string
	for n := 1; ; n++ {
		p, _ := getPage(t, s.URL+"/list?page="+strconv.Itoa(n))
		got = append(got, ids(p)...)
		if !p.HasMore {
			break
		}
	}
	eq(t, "listing", got, []string{"b0000", "b0001", "b0001", "b0002", "b0003"})
	eq(t, "hook calls", seen, []int{1, 2, 3})

	s.OnRequest(func(n int, r *http.Request) {
		if n == 5 {
			a.Delete("a")
		}
	})
	got = nil
	for n := 1; ; n++ {
		p, _ := getPage(t, s.URL+"/list?page="+strconv.Itoa(n))
		got = append(got, ids(p)...)
		if !p.HasMore {
			break
		}
	}
	eq(t, "delete while paging skips b0001", got, []string{"a", "b0000", "b0002", "b0003"})
}

func nextLink(t *testing.T, r response) *url.URL {
	t.Helper()
	l := r.header.Get("Link")
	if !strings.HasPrefix(l, "<") || !strings.HasSuffix(l, `>; rel="next"`) {
		t.Fatalf("Link %q", l)
	}
	u, err := url.Parse(strings.TrimSuffix(strings.TrimPrefix(l, "<"), `>; rel="next"`))
	if err != nil || !u.IsAbs() {
		t.Fatalf("Link %q: %v", l, err)
	}
	return u
}

func TestLinkHeader(t *testing.T) {
	a := New()
	a.PutMany(3, "t", nil)
	a.Advance(time.Second)
	a.PutMany(2, "u", nil)
	a.Delete("t0001")
	s := newServer(t, a, ServerOptions{PageSize: 2, LinkHeader: true, TieBreaker: true})

	follow := func(start string) (all []string, links []string) {
		u := s.URL + start
		for range 10 {
			p, r := getPage(t, u)
			all = append(all, ids(p)...)
			if !p.HasMore {
				eq(t, "no Link on the last page", r.header.Get("Link"), "")
				return
			}
			l := nextLink(t, r)
			if !strings.HasPrefix(l.String(), s.URL+"/") {
				t.Fatalf("Link %s not under %s", l, s.URL)
			}
			links = append(links, l.RequestURI())
			u = l.String()
		}
		t.Fatal("too many pages")
		return
	}
	all, links := follow("/items")
	eq(t, "items", all, []string{"t0000", "t0002", "u0000", "u0001"})
	eq(t, "items links", links, []string{
		"/items?after_id=t0002&limit=2&updated_since=2026-01-01T00%3A00%3A00Z"})

	all, links = follow("/sync?limit=2")
	eq(t, "sync", all, []string{"t0000", "t0002", "u0000", "u0001", "t0001"})
	eq(t, "sync links", len(links), 2)
	eq(t, "sync link query", links[0], "/sync?cursor="+syncToken(3)+"&limit=2")

	all, links = follow("/list?per_page=2")
	eq(t, "list pages", all, []string{"t0000", "t0002", "u0000", "u0001"})
	eq(t, "list page links", links, []string{"/list?page=2&per_page=2"})

	all, links = follow("/list?offset=1&limit=2")
	eq(t, "list offsets", all, []string{"t0002", "u0000", "u0001"})
	eq(t, "list offset links", links, []string{"/list?limit=2&offset=3"})

	off := newServer(t, a, ServerOptions{PageSize: 2})
	_, r := getPage(t, off.URL+"/list")
	eq(t, "LinkHeader off", r.header.Get("Link"), "")
}

func TestConcurrentRequestsAndWrites(t *testing.T) {
	a := New()
	s := newServer(t, a, ServerOptions{PageSize: 10})
	s.SetRateLimit(1000, time.Minute)
	s.OnRequest(func(n int, r *http.Request) {})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 20 {
				a.Put(fmt.Sprintf("w%d-%02d", w, i), nil)
				for _, p := range []string{"/items", "/sync", "/list"} {
					res, err := http.Get(s.URL + p)
					if err != nil {
						t.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
				}
			}
		})
	}
	wg.Wait()
	eq(t, "requests", len(s.Requests()), 4*20*3)
	p, _ := getPage(t, s.URL+"/list")
	eq(t, "total", *p.Total, 80)
}

// The in-process fetchers keep working and now carry updated_at.
func TestFetchFuncsCarryUpdatedAt(t *testing.T) {
	a := New()
	a.Put("a", map[string]any{"n": 1})
	a.Advance(time.Second)
	a.Put("b", nil)
	pg, err := a.ChangeFeed(10)(context.Background(), watukuytype.FetchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "next", pg.Next, "2")
	var it map[string]any
	if err := json.Unmarshal(pg.Items[1], &it); err != nil {
		t.Fatal(err)
	}
	eq(t, "b", it, map[string]any{"id": "b", "version": 1.0, "updated_seq": 2.0, "updated_at": "2026-01-01T00:00:01Z"})
	pg, err = a.Listing(1)(context.Background(), watukuytype.FetchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "listing", []any{len(pg.Items), pg.Next, pg.HasMore}, []any{1, "1", true})
	eq(t, "fetches", a.Fetches(), 2)
}
