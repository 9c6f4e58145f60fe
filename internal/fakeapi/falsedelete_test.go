package fakeapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

// listAll pages once through /list, by offset (advancing by the items received, as a
// snapshotDiff poller does) or by page number, and returns every id it saw.
func listAll(t *testing.T, s *Server, byOffset bool, size int) []string {
	t.Helper()
	var seen []string
	for n := 0; n < 100; n++ {
		u := fmt.Sprintf("%s/list?page=%d&per_page=%d", s.URL, n+1, size)
		if byOffset {
			u = fmt.Sprintf("%s/list?offset=%d&limit=%d", s.URL, len(seen), size)
		}
		p, _ := getPage(t, u)
		seen = append(seen, ids(p)...)
		if !p.HasMore {
			return seen
		}
	}
	t.Fatal("listing never ended")
	return nil
}

func itemIDs(nums ...int) []string {
	out := []string{}
	for _, n := range nums {
		out = append(out, fmt.Sprintf("i%04d", n))
	}
	return out
}

// Deletes between the pages of one listing shift later items onto pages already read: the
// listing completes without items that are still live and were never deleted, which a
// snapshotDiff poller would wrongly report deleted.
func TestDeleteWhilePagingHidesLiveItems(t *testing.T) {
	for _, tc := range []struct {
		name         string
		byOffset     bool
		times        int
		wantDeleted  []string // deleted by the fault, in order
		wantMissing  []string // live in Final, never deleted, yet not listed
		wantRequests int
	}{
		{"offset", true, 5, itemIDs(8, 9, 20, 21), itemIDs(10, 11, 22, 23), 3},
		{"page", false, 5, itemIDs(8, 9, 20, 21), itemIDs(10, 11, 22, 23), 3},
		{"offset, one request", true, 1, itemIDs(8, 9), itemIDs(10, 11), 3},
		{"page, one request", false, 1, itemIDs(8, 9), itemIDs(10, 11), 3},
		{"off", true, 0, nil, nil, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := New()
			a.PutMany(30, "i", nil)
			s := newServer(t, a, ServerOptions{})
			s.DeleteWhilePaging(2, tc.times)

			seen := listAll(t, s, tc.byOffset, 10)
			eq(t, "requests", len(s.Requests()), tc.wantRequests)

			var deleted []string
			for _, c := range a.Changes() {
				if c.Deleted {
					deleted = append(deleted, c.ID)
				}
			}
			eq(t, "deleted in the ground truth", deleted, tc.wantDeleted)
			eq(t, "DeletedWhilePaging", s.DeletedWhilePaging(), len(tc.wantDeleted))

			final := a.Final()
			eq(t, "live", len(final), 30-len(tc.wantDeleted))
			missing := []string{}
			for id := range final {
				if !slices.Contains(seen, id) {
					missing = append(missing, id)
				}
			}
			slices.Sort(missing)
			eq(t, "live but never listed", missing, append([]string{}, tc.wantMissing...))
			for _, id := range missing {
				if slices.Contains(deleted, id) {
					t.Fatalf("%s was deleted, so missing it is no false delete", id)
				}
			}
		})
	}
}

// Only a /list request for a later page that is answered with a page uses up one of the
// deleting requests; the first page, faulted answers and bad requests delete nothing.
func TestDeleteWhilePagingWhichRequests(t *testing.T) {
	a := New()
	a.PutMany(10, "i", nil)
	s := newServer(t, a, ServerOptions{})
	s.DeleteWhilePaging(1, 2)
	for _, step := range []struct {
		path        string
		fault       *Fault
		wantStatus  int
		wantDeleted int // DeletedWhilePaging after the request
		wantFirst   string
	}{
		{"/list?offset=0&limit=5", nil, 200, 0, "i0000"},
		{"/list?page=1&per_page=5", nil, 200, 0, "i0000"},
		{"/items", nil, 200, 0, "i0000"},
		{"/list?offset=5&limit=5", &Fault{Path: "/list", Status: 503}, 503, 0, ""},
		{"/list?offset=x", nil, 400, 0, ""},
		{"/list?offset=5&limit=5", nil, 200, 1, "i0006"},                  // i0004 deleted first
		{"/list?page=2&per_page=4", &Fault{NoIdentity: true}, 200, 2, ""}, // i0003 deleted first
		{"/list?page=2&per_page=4", nil, 200, 2, "i0006"},                 // used up
		{"/list?offset=1&limit=1", nil, 200, 2, "i0001"},
	} {
		if step.fault != nil {
			s.Inject(*step.fault)
		}
		r := get(t, s.URL+step.path)
		eq(t, step.path+" status", r.status, step.wantStatus)
		eq(t, step.path+" deleted", s.DeletedWhilePaging(), step.wantDeleted)
		if step.wantFirst != "" {
			eq(t, step.path+" first item", ids(r.page(t))[0], step.wantFirst)
		}
	}
	final := a.Final()
	_, live3 := final["i0003"]
	_, live4 := final["i0004"]
	eq(t, "live", []any{len(final), live3, live4}, []any{8, false, false})

	// Re-arming replaces the budget; the total keeps counting.
	s.DeleteWhilePaging(3, 1)
	p, _ := getPage(t, s.URL+"/list?offset=8")
	eq(t, "past the end after the deletes", ids(p), []string{})
	eq(t, "total", s.DeletedWhilePaging(), 5)
	s.DeleteWhilePaging(0, 10)
	getPage(t, s.URL+"/list?offset=1")
	eq(t, "n = 0 is off", s.DeletedWhilePaging(), 5)
}

// listed returns the items of a complete /list listing by id.
func listed(t *testing.T, s *Server) map[string]map[string]any {
	t.Helper()
	p, _ := getPage(t, s.URL+"/list?per_page=1000")
	out := map[string]map[string]any{}
	for _, it := range p.Data {
		out[it["id"].(string)] = it
	}
	return out
}

const oddID = "a/b c?#%ü+&"

func detailAPI() *API {
	a := New()
	a.Put("a", map[string]any{"n": 1, "tags": []any{"x"}})
	a.Advance(time.Second)
	a.Put(oddID, map[string]any{"k": "v"})
	a.Put("gone", nil)
	a.Delete("gone")
	a.Put("back", nil)
	a.Delete("back")
	a.Put("back", map[string]any{"again": true})
	return a
}

func TestDetailEndpoint(t *testing.T) {
	a := detailAPI()
	s := newServer(t, a, ServerOptions{})
	want := listed(t, s)
	for _, tc := range []struct {
		name   string
		path   string
		status int
		id     string // the item answered, when 200
	}{
		{"found", "/items/a", 200, "a"},
		{"escaped id", "/items/" + url.PathEscape(oddID), 200, oddID},
		{"re-created", "/items/back", 200, "back"},
		{"deleted", "/items/gone", 404, ""},
		{"never existed", "/items/nope", 404, ""},
		{"unescaped slash is another path", "/items/a/b%20c%3F%23%25%C3%BC+&", 404, ""},
		{"no id", "/items/", 404, ""},
		{"case matters", "/items/A", 404, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := get(t, s.URL+tc.path)
			eq(t, "status", r.status, tc.status)
			eq(t, "content type", r.header.Get("Content-Type"), "application/json")
			if tc.status != 200 {
				var e struct {
					Error  string `json:"error"`
					Status int    `json:"status"`
				}
				if err := json.Unmarshal(r.body, &e); err != nil || e.Error == "" || e.Status != tc.status {
					t.Fatalf("error body %s: %v", r.body, err)
				}
				return
			}
			var got map[string]any
			if err := json.Unmarshal(r.body, &got); err != nil {
				t.Fatalf("body %s: %v", r.body, err)
			}
			eq(t, "the listing's object", got, want[tc.id])
		})
	}
	eq(t, "re-created version", want["back"]["version"], any(2.0))

	// The timestamp feed is unchanged, and the log names the detail requests by id.
	p, _ := getPage(t, s.URL+"/items?limit=10")
	eq(t, "feed", ids(p), []string{"a", oddID, "back"})
	reqs := s.Requests()
	eq(t, "logged path", reqs[2].Path, "/items/"+oddID)
	eq(t, "logged status", reqs[2].Status, 200)
}

func TestDetailInProcess(t *testing.T) {
	a := detailAPI()
	s := newServer(t, a, ServerOptions{})
	detail := a.Detail()
	for _, tc := range []struct {
		id    string
		found bool
	}{{"a", true}, {oddID, true}, {"back", true}, {"gone", false}, {"nope", false}, {"", false}} {
		item, found, err := detail(context.Background(), tc.id)
		if err != nil {
			t.Fatal(err)
		}
		eq(t, tc.id+" found", found, tc.found)
		if !found {
			eq(t, tc.id+" item", item, json.RawMessage(nil))
			continue
		}
		r := get(t, s.URL+"/items/"+url.PathEscape(tc.id))
		eq(t, tc.id+" same bytes as over HTTP", string(item), string(r.body))
	}
	eq(t, "not a fetch", a.Fetches(), 0)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, found, err := detail(ctx, "a"); err == nil || found {
		t.Fatalf("cancelled: found %v, err %v", found, err)
	}
}

// The detail endpoint goes through the same faults, rate limiter and request log as the others.
func TestDetailFaultsAndRateLimit(t *testing.T) {
	a := detailAPI()
	s := newServer(t, a, ServerOptions{})
	s.Inject(
		Fault{Path: "/items", Status: 500},
		Fault{Path: "/items/{id}", Status: 503, RetryAfter: "1"},
		Fault{Path: "/items/a", NoIdentity: true},
		Fault{Path: "/items/{id}", Malformed: true},
	)
	odd := "/items/" + url.PathEscape(oddID)
	for _, step := range []struct {
		path   string
		status int
		check  func(t *testing.T, r response)
	}{
		{"/items/a", 503, func(t *testing.T, r response) {
			eq(t, "Retry-After", r.header.Get("Retry-After"), "1")
			if !strings.Contains(string(r.body), `"status":503`) {
				t.Fatalf("body %s", r.body)
			}
		}},
		{"/items", 500, nil}, // "/items" is the feed only
		{odd, 200, func(t *testing.T, r response) { // "/items/a" waits for a
			var v any
			if json.Unmarshal(r.body, &v) == nil || !strings.HasPrefix(string(r.body), "{") {
				t.Fatalf("not malformed: %s", r.body)
			}
		}},
		{"/items/a", 200, func(t *testing.T, r response) {
			var it map[string]any
			if err := json.Unmarshal(r.body, &it); err != nil {
				t.Fatal(err)
			}
			eq(t, "no identity", it, map[string]any{"version": 1.0, "updated_seq": 1.0,
				"updated_at": "2026-01-01T00:00:00Z", "n": 1.0, "tags": []any{"x"}})
		}},
		{"/items/a", 200, nil},
	} {
		r := get(t, s.URL+step.path)
		eq(t, step.path+" status", r.status, step.status)
		if step.check != nil {
			step.check(t, r)
		}
	}
	eq(t, "faults used up", s.PendingFaults(), 0)

	s.SetRateLimit(1, time.Minute)
	r := get(t, s.URL+"/items/a")
	eq(t, "quota", []any{r.status, r.header.Get("RateLimit-Remaining")}, []any{200, "0"})
	r = get(t, s.URL+"/items/gone")
	eq(t, "exhausted", []any{r.status, r.header.Get("Retry-After")}, []any{429, "60"})

	s.SetRateLimit(0, 0)
	res, err := http.Post(s.URL+"/items/a", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	eq(t, "GET only", res.StatusCode, http.StatusMethodNotAllowed)
}
