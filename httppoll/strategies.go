package httppoll

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/watukuy/watukuy/watukuytype"
)

// TimestampCursor pages through items changed since a time. The cursor is the largest change time
// seen; the query re-asks from that time inclusively (>=), so items sharing the time at a
// page boundary are never lost, and the items seen again are suppressed by the diff (G7).
// A full page in which every item has the cursor's own time cannot advance: with a
// TieBreaker parameter the last identity is sent along (on every page but a cycle's first,
// which re-reads the whole second so that items written in it later are not missed); without
// one the cycle stops with a *watukuytype.CursorStallError instead of asking the same page forever.
type TimestampCursor struct {
	Source
	// Field is the gjson path of the item's change time.
	Field string
	// Formats parse Field (see ParseTime); default RFC 3339, then epoch.
	Formats []string
	// Param is the query parameter that carries the cursor time (sent as the API wrote it).
	Param string
	// LimitParam and Limit ask for a page size; a full page means there is more.
	LimitParam string
	Limit      int
	// HasMore is an optional response path that says whether more pages follow.
	HasMore string
	// TieBreaker is the query parameter for the last identity at the cursor time, for APIs
	// that order by (time, identity) and support it (e.g. "after_id"); optional.
	TieBreaker string
	// Identity is the gjson path of an item's identity, for the tie-breaker; default "id".
	Identity string
}

// timestampCursor is the committed cursor of a TimestampCursor lane.
type timestampCursor struct {
	Since string `json:"since"`
	After string `json:"after,omitempty"`
}

// Fetch is the lane's FetchFunc.
func (t *TimestampCursor) Fetch(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
	cur, err := parseTimestampCursor(req.Cursor, t.Formats)
	if err != nil {
		return watukuytype.Page{}, &watukuytype.ConfigError{Poller: req.Key.Poller, Field: "cursor", Msg: err.Error()}
	}
	params := url.Values{}
	if cur.Since != "" {
		params.Set(t.Param, cur.Since)
		// A cycle's first request re-reads the cursor's whole second: items written in that
		// second after the last pass may sort before the tie-breaker (a smaller identity).
		if t.TieBreaker != "" && cur.After != "" && req.Page > 0 {
			params.Set(t.TieBreaker, cur.After)
		}
	}
	if t.LimitParam != "" && t.Limit > 0 {
		params.Set(t.LimitParam, strconv.Itoa(t.Limit))
	}
	r, err := t.get(ctx, req.Key, "", params, req.ETag)
	if err != nil {
		return watukuytype.Page{}, err
	}
	if r.NotModified {
		return r.page(req.Cursor, false), nil
	}
	next := cur
	var maxT time.Time
	if next.Since != "" {
		if maxT, err = ParseTime(next.Since, t.Formats); err != nil {
			return watukuytype.Page{}, &watukuytype.ConfigError{Poller: req.Key.Poller, Field: "cursor.field", Msg: err.Error()}
		}
	}
	allAtCursor := len(r.items) > 0
	idPath := t.Identity
	if idPath == "" {
		idPath = "id"
	}
	for _, it := range r.items {
		v := gjson.GetBytes(it, t.Field)
		if !v.Exists() {
			allAtCursor = false
			continue // an item without a change time cannot move the cursor; the diff still sees it
		}
		ts, err := ParseTime(v.String(), t.Formats)
		if err != nil {
			return watukuytype.Page{}, &watukuytype.ConfigError{Poller: req.Key.Poller, Field: "cursor.field",
				Msg: fmt.Sprintf("item field %q: %v", t.Field, err)}
		}
		switch {
		case ts.After(maxT):
			maxT, next.Since, next.After = ts, v.String(), gjson.GetBytes(it, idPath).String()
			allAtCursor = false
		case ts.Equal(maxT):
			next.After = gjson.GetBytes(it, idPath).String()
		default:
			allAtCursor = false
		}
	}
	hasMore, ok := r.boolAt(t.HasMore)
	if !ok {
		hasMore = t.Limit > 0 && len(r.items) >= t.Limit
	}
	sentAfter := params.Get(t.TieBreaker)
	if hasMore && allAtCursor && (t.TieBreaker == "" || sentAfter != "" && next.After == sentAfter) {
		why := "no tie-breaker parameter is set"
		if t.TieBreaker != "" {
			why = fmt.Sprintf("the API ignored the tie-breaker parameter %q", t.TieBreaker)
		}
		return watukuytype.Page{}, &watukuytype.CursorStallError{Key: req.Key, Cursor: req.Cursor, Msg: fmt.Sprintf(
			"a full page of %d items all at %s and %s, so the cursor cannot advance (set a tie-breaker or a larger page size)",
			len(r.items), cur.Since, why)}
	}
	if t.TieBreaker == "" {
		next.After = ""
	}
	return r.page(next.encode(), hasMore), nil
}

// parseTimestampCursor reads a committed cursor ({"since":...,"after":...}) or a bare time
// as an operator types it (backfill --from 2026-01-01T00:00:00Z).
func parseTimestampCursor(s string, formats []string) (timestampCursor, error) {
	var cur timestampCursor
	switch {
	case s == "":
	case strings.HasPrefix(s, "{"):
		if err := json.Unmarshal([]byte(s), &cur); err != nil {
			return cur, fmt.Errorf("cursor %q is not a timestamp cursor: %v", s, err)
		}
	default:
		if _, err := ParseTime(s, formats); err != nil {
			return cur, fmt.Errorf("cursor %q is neither a timestamp cursor nor a time: %v", s, err)
		}
		cur.Since = s
	}
	return cur, nil
}

// Position places a cursor on the time line (Unix seconds), so a backfill knows when it has
// reached its target and how far it is (Poller.CursorPosition).
func (t *TimestampCursor) Position(cursor string) (float64, bool) {
	cur, err := parseTimestampCursor(cursor, t.Formats)
	if err != nil || cur.Since == "" {
		return 0, false
	}
	return t.place(cur.Since)
}

// ItemPosition places an item on Position's line by its change time (Field), so a backfill
// stops inside a page at its target and skips the items an inclusive query lists again
// (Poller.ItemPosition).
func (t *TimestampCursor) ItemPosition(item json.RawMessage) (float64, bool) {
	v := gjson.GetBytes(item, t.Field)
	if !v.Exists() {
		return 0, false
	}
	return t.place(v.String())
}

// place is a time as the API wrote it, in Unix seconds.
func (t *TimestampCursor) place(s string) (float64, bool) {
	ts, err := ParseTime(s, t.Formats)
	if err != nil {
		return 0, false
	}
	return float64(ts.UnixNano()) / 1e9, true
}

func (c timestampCursor) encode() string {
	if c.Since == "" {
		return ""
	}
	b, _ := json.Marshal(c)
	return string(b)
}

// TokenCursor follows an opaque next token (sync/delta semantics): the committed cursor is the
// last token, and an empty page keeps it. The token comes from a response path, or from the
// Link header's rel="next" (then the cursor is that URL).
type TokenCursor struct {
	Source
	// Param is the query parameter that carries the token.
	Param string
	// Next is the gjson path of the next token; "" follows the Link header.
	Next string
	// HasMore is an optional response path; without it a page that moved the token and was
	// not empty means there is more.
	HasMore string
	// LimitParam and Limit ask for a page size.
	LimitParam string
	Limit      int
}

// Fetch is the lane's FetchFunc.
func (t *TokenCursor) Fetch(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
	params := url.Values{}
	rawURL := ""
	switch {
	case t.Next == "" && req.Cursor != "":
		rawURL = req.Cursor // a Link URL carries its own query
	case req.Cursor != "":
		params.Set(t.Param, req.Cursor)
	}
	if t.LimitParam != "" && t.Limit > 0 && rawURL == "" {
		params.Set(t.LimitParam, strconv.Itoa(t.Limit))
	}
	r, err := t.get(ctx, req.Key, rawURL, params, req.ETag)
	if err != nil {
		return watukuytype.Page{}, err
	}
	if r.NotModified {
		return r.page(req.Cursor, false), nil
	}
	next := r.Response.Next
	if t.Next != "" {
		next = r.body.Get(t.Next).String()
	}
	if next == "" {
		next = req.Cursor // caught up: resume from the same place
	}
	hasMore, ok := r.boolAt(t.HasMore)
	if !ok {
		hasMore = len(r.items) > 0 && next != req.Cursor
	}
	return r.page(next, hasMore), nil
}

// PageCursor walks a listing by page number or offset, from the start each time: the live lane of
// a snapshotDiff poller and the reconcile lane. It stops on an empty or short page, or when
// the HasMore path says so. With CollectionETag the first page is asked with If-None-Match:
// use it only when the API's ETag covers the whole collection, since a 304 ends the listing.
type PageCursor struct {
	Source
	// Param carries the page number (default "page") or, with Offset, the item offset.
	Param  string
	Offset bool
	// Start is the first page number; default 1 (offsets start at 0).
	Start int
	// SizeParam and Size ask for a page size.
	SizeParam string
	Size      int
	// HasMore is an optional response path.
	HasMore string
	// CollectionETag: every page carries the collection's ETag; the first page is asked
	// with the committed one (see above).
	CollectionETag bool
}

// Fetch is the lane's FetchFunc.
func (p *PageCursor) Fetch(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
	pos := p.Start
	if p.Offset {
		pos = 0
	} else if pos == 0 {
		pos = 1
	}
	first := req.Cursor == ""
	if !first {
		n, err := strconv.Atoi(req.Cursor)
		if err != nil {
			return watukuytype.Page{}, &watukuytype.ConfigError{Poller: req.Key.Poller, Field: "cursor", Msg: fmt.Sprintf("page cursor %q is not a number", req.Cursor)}
		}
		pos = n
	}
	param := p.Param
	if param == "" {
		param = "page"
	}
	params := url.Values{param: {strconv.Itoa(pos)}}
	if p.SizeParam != "" && p.Size > 0 {
		params.Set(p.SizeParam, strconv.Itoa(p.Size))
	}
	etag := ""
	if first && p.CollectionETag {
		etag = req.ETag
	}
	r, err := p.get(ctx, req.Key, "", params, etag)
	if err != nil {
		return watukuytype.Page{}, err
	}
	if !p.CollectionETag {
		r.ETag = "" // a page's own tag says nothing of the collection
	}
	if r.NotModified {
		return r.page("", false), nil
	}
	next := pos + 1
	if p.Offset {
		next = pos + len(r.items)
	}
	hasMore, ok := r.boolAt(p.HasMore)
	if !ok {
		hasMore = len(r.items) > 0 && (p.Size <= 0 || len(r.items) >= p.Size)
	}
	if !hasMore {
		return r.page("", false), nil // the pass is over: a committed cursor starts the next one afresh
	}
	return r.page(strconv.Itoa(next), true), nil
}
