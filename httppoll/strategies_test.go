package httppoll

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/watukuy/watukuy/watukuytype"
)

// tsItem is an item of the timestamp API, which orders by (updated_at, id).
type tsItem struct{ id, ts string }

// tsAPI answers ?since=T[&after_id=ID]&limit=N with the items at or after T (after ID at T
// itself), in order, as {"data": [...]}; ignoreAfter makes it ignore after_id.
func tsAPI(items []tsItem, ignoreAfter bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		since, after := q.Get("since"), q.Get("after_id")
		if ignoreAfter {
			after = ""
		}
		limit, _ := strconv.Atoi(q.Get("limit"))
		out := []map[string]string{}
		for _, it := range items {
			switch {
			case since == "" || it.ts > since: // RFC 3339 UTC strings order as times
			case it.ts == since && (after == "" || it.id > after):
			default:
				continue
			}
			if limit > 0 && len(out) == limit {
				break
			}
			out = append(out, map[string]string{"id": it.id, "updated_at": it.ts})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"data": out})
	}
}

func tsCursor(since, after string) string {
	b, _ := json.Marshal(struct {
		Since string `json:"since"`
		After string `json:"after,omitempty"`
	}{since, after})
	return string(b)
}

// A cycle pages by the largest change time with the last identity as tie-breaker; the next
// cycle's first request re-asks the cursor's time inclusively, without the tie-breaker.
func TestTimestampPaging(t *testing.T) {
	const t0, t1, t2, t3 = "2026-01-01T10:00:00Z", "2026-01-01T10:00:01Z", "2026-01-01T10:00:02Z", "2026-01-01T10:00:03Z"
	a := newAPI(t, tsAPI([]tsItem{{"a", t0}, {"b", t1}, {"c", t1}, {"d", t2}, {"e", t3}}, false))
	ts := &TimestampCursor{Source: Source{URL: a.URL, Items: "data"}, Field: "updated_at", Param: "since",
		LimitParam: "limit", Limit: 2, TieBreaker: "after_id"}
	cursor := ""
	for i, step := range []struct {
		page      int
		wantSince string // the since parameter sent ("" none)
		wantAfter string // the after_id parameter sent ("" none)
		wantIDs   []string
		wantNext  string
		wantMore  bool
	}{
		{0, "", "", []string{"a", "b"}, tsCursor(t1, "b"), true},
		{1, t1, "b", []string{"c", "d"}, tsCursor(t2, "d"), true},
		{2, t2, "d", []string{"e"}, tsCursor(t3, "e"), false},
		// the next cycle: its first page re-reads the cursor's second (inclusive, no tie-breaker)
		{0, t3, "", []string{"e"}, tsCursor(t3, "e"), false},
	} {
		p, err := ts.Fetch(t.Context(), watukuytype.FetchRequest{Key: listKey, Cursor: cursor, Page: step.page})
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		q := a.query(t, i)
		if q.Get("since") != step.wantSince || q.Get("after_id") != step.wantAfter || q.Get("limit") != "2" {
			t.Errorf("step %d: query %v, want since=%q after_id=%q limit=2", i, q, step.wantSince, step.wantAfter)
		}
		if !slices.Equal(ids(p), step.wantIDs) || p.Next != step.wantNext || p.HasMore != step.wantMore {
			t.Errorf("step %d: items %v next %s more %v; want %v %s %v", i, ids(p), p.Next, p.HasMore, step.wantIDs, step.wantNext, step.wantMore)
		}
		cursor = p.Next
	}
}

// A full page whose items all carry the cursor's own time cannot move the cursor: without a
// tie-breaker, or when the API ignores it, the lane stops with a CursorStallError instead of
// asking the same page forever.
func TestTimestampStall(t *testing.T) {
	const at = "2026-01-01T10:00:00Z"
	same := []tsItem{{"v", at}, {"w", at}, {"x", at}, {"y", at}, {"z", at}}
	for _, tc := range []struct {
		name        string
		tieBreaker  string
		ignoreAfter bool
		cursor      string
		page        int
		limit       int
		stall       string // substring of the stall's message; "" means no stall
		wantNext    string
	}{
		{name: "no tie-breaker, full page at the cursor", cursor: tsCursor(at, ""), page: 1, limit: 2,
			stall: "no tie-breaker parameter is set"},
		{name: "no tie-breaker, short page", cursor: tsCursor(at, ""), page: 1, limit: 10,
			wantNext: tsCursor(at, "")},
		{name: "tie-breaker ignored by the API", tieBreaker: "after_id", ignoreAfter: true, cursor: tsCursor(at, "w"), page: 1, limit: 2,
			stall: `ignored the tie-breaker parameter "after_id"`},
		{name: "tie-breaker honoured", tieBreaker: "after_id", cursor: tsCursor(at, "w"), page: 1, limit: 2,
			wantNext: tsCursor(at, "y")},
		{name: "a cycle's first page sends no tie-breaker and does not stall", tieBreaker: "after_id", cursor: tsCursor(at, "w"), page: 0, limit: 2,
			wantNext: tsCursor(at, "w")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAPI(t, tsAPI(same, tc.ignoreAfter))
			ts := &TimestampCursor{Source: Source{URL: a.URL, Items: "data"}, Field: "updated_at", Param: "since",
				LimitParam: "limit", Limit: tc.limit, TieBreaker: tc.tieBreaker}
			p, err := ts.Fetch(t.Context(), watukuytype.FetchRequest{Key: listKey, Cursor: tc.cursor, Page: tc.page})
			var se *watukuytype.CursorStallError
			switch {
			case tc.stall != "":
				if !errors.As(err, &se) || se.Cursor != tc.cursor || se.Key != listKey || !strings.Contains(se.Msg, tc.stall) {
					t.Fatalf("got %v (%T), want a stall saying %q", err, err, tc.stall)
				}
			case err != nil:
				t.Fatal(err)
			case p.Next != tc.wantNext:
				t.Fatalf("next %s, want %s", p.Next, tc.wantNext)
			}
		})
	}
}

// Cursor and field edge cases of the timestamp strategy.
func TestTimestampCursorAndFields(t *testing.T) {
	for _, tc := range []struct {
		name      string
		body      string
		formats   []string
		hasMore   string
		cursor    string
		wantSince string // the since parameter sent
		wantNext  string
		wantMore  bool
		errField  string // a *watukuytype.ConfigError on this field
	}{
		{name: "a bare time is a cursor (backfill --from)", body: `{"data":[]}`, cursor: "2026-01-01T00:00:00Z",
			wantSince: "2026-01-01T00:00:00Z", wantNext: tsCursor("2026-01-01T00:00:00Z", "")},
		{name: "a malformed cursor", body: `{"data":[]}`, cursor: `{"since":`, errField: "cursor"},
		{name: "a cursor that is no time", body: `{"data":[]}`, cursor: "yesterday", errField: "cursor"},
		{name: "an item time that fits no format", body: `{"data":[{"id":"a","updated_at":"soon"}]}`, errField: "cursor.field"},
		{name: "an item without a time does not move the cursor",
			body: `{"data":[{"id":"a","updated_at":"2026-01-01T00:00:05Z"},{"id":"b"}]}`, wantNext: tsCursor("2026-01-01T00:00:05Z", "")},
		{name: "an earlier item does not move the cursor back",
			body:     `{"data":[{"id":"a","updated_at":"2026-01-01T00:00:05Z"},{"id":"b","updated_at":"2026-01-01T00:00:01Z"}]}`,
			wantNext: tsCursor("2026-01-01T00:00:05Z", "")},
		{name: "the cursor is sent as the API wrote it (epoch)", formats: []string{EpochS},
			body: `{"data":[{"id":"a","updated_at":1767225600},{"id":"b","updated_at":1767225599}]}`, cursor: tsCursor("1767225500", ""),
			wantSince: "1767225500", wantNext: tsCursor("1767225600", "")},
		{name: "the has-more path overrides the page size", hasMore: "more",
			body: `{"more":true,"data":[{"id":"a","updated_at":"2026-01-01T00:00:05Z"}]}`, wantNext: tsCursor("2026-01-01T00:00:05Z", ""), wantMore: true},
		{name: "a has-more path absent from the body falls back on the page size", hasMore: "more",
			body: `{"data":[{"id":"a","updated_at":"2026-01-01T00:00:05Z"}]}`, wantNext: tsCursor("2026-01-01T00:00:05Z", "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAPI(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, tc.body) })
			ts := &TimestampCursor{Source: Source{URL: a.URL, Items: "data"}, Field: "updated_at", Formats: tc.formats, Param: "since",
				LimitParam: "limit", Limit: 10, HasMore: tc.hasMore}
			p, err := ts.Fetch(t.Context(), watukuytype.FetchRequest{Key: listKey, Cursor: tc.cursor, Page: 1})
			if tc.errField != "" {
				var ce *watukuytype.ConfigError
				if !errors.As(err, &ce) || ce.Field != tc.errField || ce.Poller != listKey.Poller {
					t.Fatalf("got %v, want a config error on %s", err, tc.errField)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := a.query(t, 0).Get("since"); got != tc.wantSince {
				t.Errorf("since %q, want %q", got, tc.wantSince)
			}
			if p.Next != tc.wantNext || p.HasMore != tc.wantMore {
				t.Errorf("next %s more %v, want %s %v", p.Next, p.HasMore, tc.wantNext, tc.wantMore)
			}
		})
	}
}

// A 304 to the committed ETag keeps the cursor where it is.
func TestTimestampNotModified(t *testing.T) {
	a := newAPI(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("If-None-Match") == `"v7"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("ETag", `"v7"`)
		fmt.Fprint(w, `{"data":[]}`)
	})
	ts := &TimestampCursor{Source: Source{URL: a.URL, Items: "data"}, Field: "updated_at", Param: "since"}
	cur := tsCursor("2026-01-01T00:00:00Z", "")
	p, err := ts.Fetch(t.Context(), watukuytype.FetchRequest{Key: listKey, Cursor: cur, ETag: `"v7"`})
	if err != nil || !p.NotModified || p.Next != cur || p.HasMore || len(p.Items) != 0 {
		t.Fatalf("304: %+v %v", p, err)
	}
	p, err = ts.Fetch(t.Context(), watukuytype.FetchRequest{Key: listKey, Cursor: cur})
	if err != nil || p.NotModified || p.ETag != `"v7"` {
		t.Fatalf("200: %+v %v", p, err)
	}
}

// Position places a cursor on the time line in Unix seconds.
func TestTimestampPosition(t *testing.T) {
	ts := &TimestampCursor{}
	for _, tc := range []struct {
		cursor string
		want   float64
		ok     bool
	}{
		{tsCursor("1970-01-01T00:01:40Z", "x"), 100, true},
		{"1970-01-01T00:01:40.5Z", 100.5, true},
		{"", 0, false},
		{"{", 0, false},
		{"soon", 0, false},
	} {
		if got, ok := ts.Position(tc.cursor); got != tc.want || ok != tc.ok {
			t.Errorf("Position(%q) = %v, %v; want %v, %v", tc.cursor, got, ok, tc.want, tc.ok)
		}
	}
}

// ItemPosition places an item by its change time on Position's line: an item at a cursor's
// time is at the cursor's position, so a backfill can tell the items at its boundary.
func TestTimestampItemPosition(t *testing.T) {
	ts := &TimestampCursor{Field: "meta.updated", Formats: []string{"rfc3339", "epoch_ms"}}
	for _, tc := range []struct {
		item string
		want float64
		ok   bool
	}{
		{`{"meta":{"updated":"2026-12-03T20:38:10Z"}}`, mustPosition(t, ts, tsCursor("2026-12-03T20:38:10Z", "a")), true},
		{`{"meta":{"updated":1796330290000}}`, mustPosition(t, ts, "2026-12-03T20:38:10Z"), true},
		{`{"meta":{"updated":"1970-01-01T00:01:40.5Z"}}`, 100.5, true},
		{`{"meta":{}}`, 0, false},
		{`{"meta":{"updated":"soon"}}`, 0, false},
	} {
		if got, ok := ts.ItemPosition(json.RawMessage(tc.item)); got != tc.want || ok != tc.ok {
			t.Errorf("ItemPosition(%s) = %v, %v; want %v, %v", tc.item, got, ok, tc.want, tc.ok)
		}
	}
}

func mustPosition(t *testing.T, ts *TimestampCursor, cursor string) float64 {
	t.Helper()
	p, ok := ts.Position(cursor)
	if !ok {
		t.Fatalf("Position(%q) failed", cursor)
	}
	return p
}

// A token lane follows the body's next token until the API gives none (the cursor stays),
// or the has-more path says it is done.
func TestTokenPaging(t *testing.T) {
	pages := map[string]string{
		"":   `{"items":[{"id":"1"},{"id":"2"}],"next":"t1"}`,
		"t1": `{"items":[{"id":"3"}],"next":"t2"}`,
		"t2": `{"items":[],"next":""}`,
		"t3": `{"items":[{"id":"4"}],"next":"t4","more":false}`,
	}
	a := newAPI(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, pages[r.URL.Query().Get("cursor")]) })
	for _, tc := range []struct {
		cursor, hasMore string
		wantIDs         []string
		wantNext        string
		wantMore        bool
	}{
		{"", "", []string{"1", "2"}, "t1", true},
		{"t1", "", []string{"3"}, "t2", true},
		{"t2", "", []string{}, "t2", false}, // caught up: resume from the same token
		{"t3", "more", []string{"4"}, "t4", false},
	} {
		tok := &TokenCursor{Source: Source{URL: a.URL, Items: "items"}, Param: "cursor", Next: "next", HasMore: tc.hasMore, LimitParam: "n", Limit: 50}
		p, err := tok.Fetch(t.Context(), watukuytype.FetchRequest{Key: listKey, Cursor: tc.cursor})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids(p), tc.wantIDs) || p.Next != tc.wantNext || p.HasMore != tc.wantMore {
			t.Errorf("cursor %q: items %v next %q more %v; want %v %q %v", tc.cursor, ids(p), p.Next, p.HasMore, tc.wantIDs, tc.wantNext, tc.wantMore)
		}
	}
	if q := a.query(t, 1); q.Get("cursor") != "t1" || q.Get("n") != "50" {
		t.Errorf("second request's query %v", q)
	}
	if q := a.query(t, 0); q.Has("cursor") {
		t.Errorf("the first request sent a token: %v", q)
	}
}

// Without a Next path the token is the Link header's rel="next" URL, requested as it is.
func TestTokenLinkHeader(t *testing.T) {
	var a *api
	a = newAPI(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("page_token") == "" {
			w.Header().Set("Link", fmt.Sprintf(`<%s/feed?page_token=abc>; rel="next"`, a.URL))
			fmt.Fprint(w, `[{"id":"1"}]`)
			return
		}
		fmt.Fprint(w, `[{"id":"2"}]`)
	})
	tok := &TokenCursor{Source: Source{URL: a.URL + "/feed"}, LimitParam: "limit", Limit: 10}
	p, err := tok.Fetch(t.Context(), watukuytype.FetchRequest{Key: listKey})
	if err != nil || p.Next != a.URL+"/feed?page_token=abc" || !p.HasMore || !slices.Equal(ids(p), []string{"1"}) {
		t.Fatalf("first page: %+v %v", p, err)
	}
	p, err = tok.Fetch(t.Context(), watukuytype.FetchRequest{Key: listKey, Cursor: p.Next})
	if err != nil || p.Next != a.URL+"/feed?page_token=abc" || p.HasMore || !slices.Equal(ids(p), []string{"2"}) {
		t.Fatalf("last page: %+v %v", p, err)
	}
	if r := a.request(t, 1); r.URL.RawQuery != "page_token=abc" {
		t.Errorf("the Link URL was not requested as given: %q", r.URL.RawQuery)
	}
}

// A page lane walks page numbers or offsets and ends on a short or empty page (or the
// has-more path), with the cursor back at "" for the next pass.
func TestPagePaging(t *testing.T) {
	items := []string{"1", "2", "3", "4", "5"}
	serve := func(w http.ResponseWriter, r *http.Request, from int) {
		size, _ := strconv.Atoi(r.URL.Query().Get("size"))
		out := []map[string]any{}
		for i := from; i >= 0 && i < len(items) && len(out) < size; i++ {
			out = append(out, map[string]any{"id": items[i]})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"rows": out, "more": from+size < len(items)})
	}
	a := newAPI(t, func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Has("offset") {
			off, _ := strconv.Atoi(q.Get("offset"))
			serve(w, r, off)
			return
		}
		n, _ := strconv.Atoi(q.Get("page"))
		size, _ := strconv.Atoi(q.Get("size"))
		serve(w, r, (n-1)*size)
	})
	for _, tc := range []struct {
		name  string
		pager PageCursor
		steps [][]string // per page: ids..., then the next cursor
		more  []bool
	}{
		{"page numbers, short last page", PageCursor{SizeParam: "size", Size: 2},
			[][]string{{"1", "2", "2"}, {"3", "4", "3"}, {"5", ""}}, []bool{true, true, false}},
		{"page numbers, empty page after an exact fit", PageCursor{SizeParam: "size", Size: 5},
			[][]string{{"1", "2", "3", "4", "5", "2"}, {""}}, []bool{true, false}},
		{"a first page number of its own", PageCursor{SizeParam: "size", Size: 2, Start: 2},
			[][]string{{"3", "4", "3"}, {"5", ""}}, []bool{true, false}},
		{"offsets", PageCursor{Param: "offset", Offset: true, SizeParam: "size", Size: 2},
			[][]string{{"1", "2", "2"}, {"3", "4", "4"}, {"5", ""}}, []bool{true, true, false}},
		{"the has-more path ends a full page", PageCursor{SizeParam: "size", Size: 5, HasMore: "more"},
			[][]string{{"1", "2", "3", "4", "5", ""}}, []bool{false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pg := tc.pager
			pg.Source = Source{URL: a.URL, Items: "rows"}
			cursor := ""
			for i, step := range tc.steps {
				p, err := pg.Fetch(t.Context(), watukuytype.FetchRequest{Key: listKey, Cursor: cursor, Page: i})
				if err != nil {
					t.Fatal(err)
				}
				wantIDs, wantNext := step[:len(step)-1], step[len(step)-1]
				if !slices.Equal(ids(p), wantIDs) || p.Next != wantNext || p.HasMore != tc.more[i] {
					t.Fatalf("page %d: items %v next %q more %v; want %v %q %v", i, ids(p), p.Next, p.HasMore, wantIDs, wantNext, tc.more[i])
				}
				cursor = p.Next
			}
		})
	}
}

// Page cursors and collection ETags.
func TestPageCursorAndETag(t *testing.T) {
	a := newAPI(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"c1"`)
		if r.Header.Get("If-None-Match") == `"c1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		fmt.Fprint(w, `[{"id":"1"}]`)
	})
	pg := &PageCursor{Source: Source{URL: a.URL}}
	var ce *watukuytype.ConfigError
	if _, err := pg.Fetch(t.Context(), watukuytype.FetchRequest{Key: listKey, Cursor: "two"}); !errors.As(err, &ce) || ce.Field != "cursor" {
		t.Fatalf("a non-numeric cursor: %v", err)
	}
	// Without CollectionETag a page's tag says nothing of the collection: none sent, none kept.
	p, err := pg.Fetch(t.Context(), watukuytype.FetchRequest{Key: listKey, ETag: `"c1"`})
	if err != nil || p.NotModified || p.ETag != "" || a.request(t, 0).Header.Get("If-None-Match") != "" {
		t.Fatalf("without CollectionETag: %+v %v", p, err)
	}
	pg.CollectionETag = true
	p, err = pg.Fetch(t.Context(), watukuytype.FetchRequest{Key: listKey, ETag: `"c1"`})
	if err != nil || !p.NotModified || p.Next != "" || p.HasMore {
		t.Fatalf("first page with the collection's tag: %+v %v", p, err)
	}
	// Only the first page is conditional.
	p, err = pg.Fetch(t.Context(), watukuytype.FetchRequest{Key: listKey, Cursor: "2", ETag: `"c1"`})
	if err != nil || p.NotModified || p.ETag != `"c1"` || a.request(t, 2).Header.Get("If-None-Match") != "" {
		t.Fatalf("second page: %+v %v", p, err)
	}
}

// The Source expands ${partition}, finds the items by path and tells a misconfigured path
// from an empty page.
func TestSource(t *testing.T) {
	for _, tc := range []struct {
		name    string
		body    string
		status  int
		items   string
		wantIDs []string
		check   func(t *testing.T, err error)
	}{
		{name: "items at a path", body: `{"data":{"list":[{"id":"1"},{"id":"2"}]}}`, items: "data.list", wantIDs: []string{"1", "2"}},
		{name: "the body is the array", body: `[{"id":"1"}]`, wantIDs: []string{"1"}},
		{name: "an absent array is an empty page", body: `{"other":1}`, items: "data", wantIDs: []string{}},
		{name: "a path to a non-array is a config error", body: `{"data":{"id":"1"}}`, items: "data", check: func(t *testing.T, err error) {
			var ce *watukuytype.ConfigError
			if !errors.As(err, &ce) || ce.Field != "items" {
				t.Fatalf("got %v, want a config error on items", err)
			}
		}},
		{name: "a body that is no JSON", body: `{"data":[`, items: "data", check: func(t *testing.T, err error) {
			if err == nil || !strings.Contains(err.Error(), "response of") {
				t.Fatalf("got %v, want a JSON error naming the response", err)
			}
		}},
		{name: "an HTML page is named by its content type", body: "<!DOCTYPE html><title>Sign in</title>", items: "data", check: func(t *testing.T, err error) {
			var je *JSONError
			if !errors.As(err, &je) || !strings.Contains(err.Error(), "response of") || !strings.Contains(err.Error(), "the response is text/html, not JSON") {
				t.Fatalf("got %v, want the response named as text/html", err)
			}
		}},
		{name: "an HTTP error", status: http.StatusInternalServerError, body: `oops`, check: func(t *testing.T, err error) {
			var he *watukuytype.HTTPError
			if !errors.As(err, &he) || he.StatusCode != 500 || he.Key != listKey {
				t.Fatalf("got %v, want an HTTP 500 error of the key", err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAPI(t, func(w http.ResponseWriter, r *http.Request) {
				if tc.status != 0 {
					w.WriteHeader(tc.status)
				}
				fmt.Fprint(w, tc.body)
			})
			tok := &TokenCursor{Source: Source{URL: a.URL + "/t/${partition}/feed", Items: tc.items,
				Query: map[string][]string{"tenant": {"${partition}"}, "fixed": {"x"}}, Header: http.Header{"X-Tenant": {"id-${partition}"}}},
				Param: "cursor", Next: "next"}
			p, err := tok.Fetch(t.Context(), watukuytype.FetchRequest{Key: listKey})
			if tc.check != nil {
				tc.check(t, err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ids(p), tc.wantIDs) {
				t.Errorf("items %v, want %v", ids(p), tc.wantIDs)
			}
			r := a.request(t, 0)
			if r.URL.Path != "/t/t1/feed" || r.URL.Query().Get("tenant") != "t1" || r.URL.Query().Get("fixed") != "x" || r.Header.Get("X-Tenant") != "id-t1" {
				t.Errorf("${partition} not expanded: %s %v", r.URL, r.Header)
			}
		})
	}
}

// Detail: 404 and 410 mean gone, any other failure is an error (the listings decide), the
// identity is path-escaped into the URL.
func TestDetail(t *testing.T) {
	for _, tc := range []struct {
		name     string
		status   int
		body     string
		items    string
		identity string
		wantPath string // the request's escaped path
		found    bool
		item     string
		err      string // substring of the error
	}{
		{name: "found", body: `{"id":"a","v":2}`, identity: "a", wantPath: "/items/a", found: true, item: `{"id":"a","v":2}`},
		{name: "found at a path", body: `{"data":{"id":"a"}}`, items: "data", identity: "a", wantPath: "/items/a", found: true, item: `{"id":"a"}`},
		{name: "an identity is path-escaped", body: `{"id":"a/b c"}`, identity: "a/b c", wantPath: "/items/a%2Fb%20c", found: true, item: `{"id":"a/b c"}`},
		{name: "404 is gone", status: 404, body: `{"error":"not found"}`, identity: "a", wantPath: "/items/a"},
		{name: "410 is gone", status: 410, identity: "a", wantPath: "/items/a"},
		{name: "500 is an error", status: 500, identity: "a", wantPath: "/items/a", err: "HTTP 500"},
		{name: "no object is an error", body: `[{"id":"a"}]`, identity: "a", wantPath: "/items/a", err: "no item object"},
		{name: "no JSON is an error", body: `{`, identity: "a", wantPath: "/items/a", err: `detail of "a"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAPI(t, func(w http.ResponseWriter, r *http.Request) {
				if tc.status != 0 {
					w.WriteHeader(tc.status)
				}
				fmt.Fprint(w, tc.body)
			})
			d := &DetailRequest{Source: Source{URL: a.URL + "/items/{id}", Items: tc.items}}
			item, found, err := d.Fetch(t.Context(), listKey, tc.identity)
			if got := a.request(t, 0).URL.EscapedPath(); got != tc.wantPath {
				t.Errorf("path %s, want %s", got, tc.wantPath)
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || found {
					t.Fatalf("got %s %v %v, want an error with %q", item, found, err, tc.err)
				}
				return
			}
			if err != nil || found != tc.found || string(item) != tc.item {
				t.Fatalf("got %s %v %v, want %s %v", item, found, err, tc.item, tc.found)
			}
		})
	}
}

// Parse edge cases beyond parse_test.go: whitespace, the seconds/milliseconds boundary,
// negative and fractional epochs, the order of formats, zones in Go layouts.
func TestParseEdges(t *testing.T) {
	for _, tc := range []struct {
		v       string
		formats []string
		want    time.Time
	}{
		{" 2026-11-29T10:30:00Z\n", nil, time.Date(2026, 11, 29, 10, 30, 0, 0, time.UTC)},
		{"1000000000000", nil, time.UnixMilli(1_000_000_000_000).UTC()},            // 1e12: milliseconds
		{"999999999999", nil, time.UnixMilli(999_999_999_999_000).UTC()},           // below: seconds
		{"-1", []string{EpochS}, time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC)}, // before 1970
		{"1795948200000.9", []string{EpochMS}, time.UnixMilli(1_795_948_200_000).UTC()},
		{"0.25", []string{EpochS}, time.UnixMilli(250).UTC()},
		{"1795948200", []string{EpochMS, EpochS}, time.UnixMilli(1_795_948_200).UTC()}, // the first format that fits wins
		{"2026-11-29 11:30:00 +0100", []string{"2006-01-02 15:04:05 -0700"}, time.Date(2026, 11, 29, 10, 30, 0, 0, time.UTC)},
		{"2026-11-29T10:30:00.123456789Z", []string{}, time.Date(2026, 11, 29, 10, 30, 0, 123456789, time.UTC)},
	} {
		got, err := ParseTime(tc.v, tc.formats)
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("Parse(%q, %v) = %v, %v; want %v", tc.v, tc.formats, got, err, tc.want)
		}
	}
	for _, bad := range []struct {
		v       string
		formats []string
	}{
		{"Inf", []string{Epoch}},
		{"+Inf", []string{EpochMS}},
		{"1e400", []string{EpochS}},  // overflows to +Inf
		{"2026-11-29T10:30:00", nil}, // RFC 3339 needs a zone
		{"1795948200", []string{RFC3339}},
		{"2026-11-29T10:30:00Z", []string{EpochS, "2006-01-02"}},
	} {
		if got, err := ParseTime(bad.v, bad.formats); err == nil {
			t.Errorf("Parse(%q, %v) = %v, want an error", bad.v, bad.formats, got)
		}
	}
}
