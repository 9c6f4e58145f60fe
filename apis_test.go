package watukuy

// In-memory APIs of the shapes pollers meet: a change log, full listings, a feed of items as
// they are now, and a listing whose pages carry the collection's ETag.

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/watukuy/watukuy/watukuytype"
)

// changeLog is an API that serves every change as an entry (a change-log / events API: the
// same identity once per change, oldest first); the cursor is the index of the next entry.
type changeLog struct {
	mu      sync.Mutex
	entries []json.RawMessage
}

func (l *changeLog) add(id string, version int, state string) {
	l.addRaw(fmt.Sprintf(`{"id":%q,"version":"%d","state":%q}`, id, version, state))
}

// addRaw appends an entry as it is.
func (l *changeLog) addRaw(raw string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, json.RawMessage(raw))
}

func (l *changeLog) fetch(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	from := 0
	if req.Cursor != "" {
		if _, err := fmt.Sscan(req.Cursor, &from); err != nil {
			return watukuytype.Page{}, err
		}
	}
	to := min(from+2, len(l.entries))
	return watukuytype.Page{Items: append([]json.RawMessage(nil), l.entries[from:to]...), Next: fmt.Sprint(to), HasMore: to < len(l.entries)}, nil
}

// latest is a full listing of a change log's current state: each identity's last entry, in
// order of first appearance, one page (a reconcile listing of the same API).
func (l *changeLog) latest(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	last := map[string]json.RawMessage{}
	var order []string
	for _, raw := range l.entries {
		var it struct {
			ID      string `json:"id"`
			Deleted bool   `json:"deleted"`
		}
		_ = json.Unmarshal(raw, &it)
		if _, ok := last[it.ID]; !ok {
			order = append(order, it.ID)
		}
		if it.Deleted {
			last[it.ID] = nil
			continue
		}
		last[it.ID] = raw
	}
	var p watukuytype.Page
	for _, id := range order {
		if last[id] != nil {
			p.Items = append(p.Items, last[id])
		}
	}
	return p, nil
}

// rawListing is a full listing (snapshotDiff) of raw items, one page, no ETag.
type rawListing struct {
	mu    sync.Mutex
	items map[string]string // identity -> raw JSON
}

func (l *rawListing) set(id, raw string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if raw == "" {
		delete(l.items, id)
	} else {
		l.items[id] = raw
	}
}

func (l *rawListing) fetch(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var p watukuytype.Page
	for _, id := range slices.Sorted(maps.Keys(l.items)) {
		p.Items = append(p.Items, json.RawMessage(l.items[id]))
	}
	return p, nil
}

// listingAPI is a full listing (snapshotDiff): every item as it is now, one page.
type listingAPI struct {
	mu    sync.Mutex
	items map[string]string
}

func (a *listingAPI) put(id, raw string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.items == nil {
		a.items = map[string]string{}
	}
	a.items[id] = raw
}

func (a *listingAPI) fetch(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ids := make([]string, 0, len(a.items))
	for id := range a.items {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	items := make([]json.RawMessage, len(ids))
	for i, id := range ids {
		items[i] = json.RawMessage(a.items[id])
	}
	return watukuytype.Page{Items: items}, nil
}

// currentAPI lists items as they are now, over updated_since: each item's current state,
// ordered by the position (the second of its updated_at) of its last write; Fetch lists the
// items whose position is after the cursor, two a page (a position is never split), and the
// next cursor is the last position listed. A write whose position is at or before a cursor the
// live lane already passed models a write that became visible late (a read replica's lag, a
// long transaction that stamped updated_at when it began, a restore from a backup): the live
// lane never lists it, which is what the runbook's backfill is for ("Events are missing from a
// period the live lane passed").
type currentAPI struct {
	mu    sync.Mutex
	items map[string]currentItem
}

type currentItem struct {
	pos int
	raw string
}

// ts is the second-precision updated_at of position pos.
func ts(pos int) string { return fmt.Sprintf("2026-01-01T10:00:%02dZ", pos) }

// put sets id's current state: version ts(pos), state, last written at position pos.
func (a *currentAPI) put(id string, pos int, state string) {
	a.putRaw(id, pos, fmt.Sprintf(`{"id":%q,"version":%q,"state":%q}`, id, ts(pos), state))
}

func (a *currentAPI) putRaw(id string, pos int, raw string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.items == nil {
		a.items = map[string]currentItem{}
	}
	a.items[id] = currentItem{pos: pos, raw: raw}
}

func (a *currentAPI) fetch(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	from := -1
	if req.Cursor != "" {
		if _, err := fmt.Sscan(req.Cursor, &from); err != nil {
			return watukuytype.Page{}, err
		}
	}
	type entry struct {
		id string
		currentItem
	}
	var list []entry
	for id, it := range a.items {
		if it.pos > from {
			list = append(list, entry{id, it})
		}
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].pos != list[j].pos {
			return list[i].pos < list[j].pos
		}
		return list[i].id < list[j].id
	})
	if len(list) == 0 {
		return watukuytype.Page{Next: req.Cursor}, nil
	}
	n := min(2, len(list))
	for n < len(list) && list[n].pos == list[n-1].pos {
		n++
	}
	items := make([]json.RawMessage, n)
	for i := range n {
		items[i] = json.RawMessage(list[i].raw)
	}
	return watukuytype.Page{Items: items, Next: fmt.Sprint(list[n-1].pos), HasMore: n < len(list)}, nil
}

// taggedListing is a listing whose pages are fixed groups (page k lists the identities that
// start with k, so nothing shifts between pages) and whose every page carries the whole
// collection's tag, a hash of its content; a request with the current tag gets a 304. after
// runs once a page is served, to change the collection while the listing is paged.
type taggedListing struct {
	mu    sync.Mutex
	items map[string]string // identity -> version
	salt  string            // in the tag too: an API may change its tags without a change
	pages int
	after func(page int)
}

func (l *taggedListing) tag() string {
	ids := slices.Sorted(maps.Keys(l.items))
	h := sha256.New()
	h.Write([]byte(l.salt))
	for _, id := range ids {
		fmt.Fprintf(h, "%s=%s;", id, l.items[id])
	}
	return fmt.Sprintf("%x", h.Sum(nil)[:8])
}

func (l *taggedListing) set(id, version string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if version == "" {
		delete(l.items, id)
	} else {
		l.items[id] = version
	}
}

func (l *taggedListing) Fetch(_ context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
	l.mu.Lock()
	tag := l.tag()
	if req.ETag == tag {
		l.mu.Unlock()
		return watukuytype.Page{NotModified: true, ETag: tag}, nil
	}
	var p watukuytype.Page
	prefix := strconv.Itoa(req.Page)
	for _, id := range slices.Sorted(maps.Keys(l.items)) {
		if strings.HasPrefix(id, prefix) {
			p.Items = append(p.Items, json.RawMessage(fmt.Sprintf(`{"id":%q,"version":%s}`, id, l.items[id])))
		}
	}
	if p.ETag, p.HasMore = tag, req.Page+1 < l.pages; p.HasMore {
		p.Next = strconv.Itoa(req.Page + 1)
	}
	after := l.after
	l.mu.Unlock()
	if after != nil {
		after(req.Page)
	}
	return p, nil
}
