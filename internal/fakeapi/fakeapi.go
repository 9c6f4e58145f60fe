// Package fakeapi is a programmable third-party API for tests, benchmarks and the demo. It
// keeps a collection of items, applies creates, updates and deletes, records each as ground
// truth, and serves them through Fetch functions: a change feed (custom cursor) and a full
// listing (snapshotDiff). Faults are injected per request with OnFetch.
//
// The same collection is also served over real HTTP by NewServer (server.go): a timestamp
// endpoint (/items), a token/delta endpoint (/sync), a paged full listing (/list) and a detail
// endpoint (/items/{id}, in-process: Detail) that a poller can use to confirm a delete, with
// scripted faults and a rate limiter (faults.go). Server.DeleteWhilePaging deletes items between
// the pages of one /list listing, so an offset-paged full listing misses live items: the
// setup of a snapshotDiff poller's false delete.
//
// The API has its own clock (SetNow, Advance, Now) that never moves by itself: every Put and
// Delete stamps the item's updated_at with it, so tests decide which items share a timestamp.
package fakeapi

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/watukuy/watukuy/watukuytype"
)

// Change is one ground-truth mutation.
type Change struct {
	Seq     int64
	ID      string
	Version int
	Deleted bool
	// At is the API clock when the change was made (the item's updated_at, to the second).
	At time.Time
}

type record struct {
	id      string
	version int
	seq     int64
	updated time.Time // API clock at the last Put/Delete, UTC, truncated to the second
	fields  map[string]any
	deleted bool
	gone    int // version at the item's latest deletion (0: never deleted)
}

// defaultNow is where a new API's clock starts.
var defaultNow = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// API is an in-process fake of a third-party API. It is safe for concurrent use.
type API struct {
	mu      sync.Mutex
	seq     int64
	items   map[string]*record
	log     []Change
	onFetch func(ctx context.Context, req watukuytype.FetchRequest) error
	fetches int
	now     time.Time
	idx     *index // sorted views for the HTTP server, valid while idx.seq == seq
}

// New returns an empty API whose clock stands at 2026-01-01T00:00:00Z.
func New() *API { return &API{items: map[string]*record{}, now: defaultNow} }

// Now returns the API clock. It moves only by SetNow and Advance.
func (a *API) Now() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.clock()
}

// SetNow sets the API clock.
func (a *API) SetNow(t time.Time) {
	a.mu.Lock()
	a.now = t
	a.mu.Unlock()
}

// Advance moves the API clock forward by d (backward when d < 0).
func (a *API) Advance(d time.Duration) {
	a.mu.Lock()
	a.now = a.clock().Add(d)
	a.mu.Unlock()
}

// clock is Now with a.mu held; the zero API (not made by New) starts at the default too.
func (a *API) clock() time.Time {
	if a.now.IsZero() {
		return defaultNow
	}
	return a.now
}

// stamp is the updated_at of a change made now: UTC, to the second.
func (a *API) stamp() time.Time { return a.clock().UTC().Truncate(time.Second) }

// Put creates or updates an item (its version goes up by one) and returns the new version.
// Its updated_at becomes the API clock. fields is copied (shallowly); fields named like the
// served keys (id, version, updated_seq, updated_at) override them in the JSON only.
func (a *API) Put(id string, fields map[string]any) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.put(id, fields)
}

// PutMany puts n items with the ids prefix0000, prefix0001, … (at least four digits), each with
// a copy of fields, all stamped with the same clock value: a run of timestamp ties.
func (a *API) PutMany(n int, prefix string, fields map[string]any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range n {
		a.put(fmt.Sprintf("%s%04d", prefix, i), fields)
	}
}

// PutEach puts the items ids in order under one lock, each with fields(id), all stamped with
// the same clock value: a request sees all of them or none. It returns their new versions.
func (a *API) PutEach(ids []string, fields func(id string) map[string]any) []int {
	a.mu.Lock()
	defer a.mu.Unlock()
	vs := make([]int, len(ids))
	for i, id := range ids {
		vs[i] = a.put(id, fields(id))
	}
	return vs
}

func (a *API) put(id string, fields map[string]any) int {
	if a.items == nil {
		a.items = map[string]*record{}
	}
	a.seq++
	r := a.items[id]
	if r == nil || r.deleted {
		v, gone := 0, 0
		if r != nil {
			v, gone = r.version, r.gone
		}
		r = &record{id: id, version: v, gone: gone}
		a.items[id] = r
	}
	r.version++
	r.seq = a.seq
	r.updated = a.stamp()
	r.fields = maps.Clone(fields)
	a.log = append(a.log, Change{Seq: a.seq, ID: id, Version: r.version, At: r.updated})
	return r.version
}

// Delete removes an item; it disappears from listings and the change feed.
func (a *API) Delete(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.delete(id)
}

// delete is Delete with a.mu held; it reports whether a live item was deleted.
func (a *API) delete(id string) bool {
	r := a.items[id]
	if r == nil || r.deleted {
		return false
	}
	a.seq++
	r.deleted, r.gone = true, r.version
	r.seq = a.seq
	r.updated = a.stamp()
	a.log = append(a.log, Change{Seq: a.seq, ID: id, Version: r.version, Deleted: true, At: r.updated})
	return true
}

// DeletedSince reports whether the API has so far deleted the item at version v or a later
// one: a deleted event that names version v is the API's own only then.
func (a *API) DeletedSince(id string, v int) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.items[id]
	return r != nil && r.gone > 0 && r.gone >= v
}

// Changes returns the ground-truth log.
func (a *API) Changes() []Change {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Change(nil), a.log...)
}

// Final returns the version of every live item.
func (a *API) Final() map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := map[string]int{}
	for id, r := range a.items {
		if !r.deleted {
			m[id] = r.version
		}
	}
	return m
}

// Fetches counts the Fetch calls served.
func (a *API) Fetches() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.fetches
}

// OnFetch installs a hook run before each request; a non-nil error fails the request.
func (a *API) OnFetch(f func(ctx context.Context, req watukuytype.FetchRequest) error) {
	a.mu.Lock()
	a.onFetch = f
	a.mu.Unlock()
}

func (a *API) enter(ctx context.Context, req watukuytype.FetchRequest) error {
	a.mu.Lock()
	a.fetches++
	hook := a.onFetch
	a.mu.Unlock()
	if hook != nil {
		return hook(ctx, req)
	}
	return nil
}

func (r *record) json() json.RawMessage {
	m := map[string]any{"id": r.id, "version": r.version, "updated_seq": r.seq,
		"updated_at": r.updated.Format(time.RFC3339)}
	for k, v := range r.fields {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	return b
}

// ChangeFeed serves the items changed after the cursor (a sequence number), oldest first,
// pageSize at a time: a custom-cursor API. Deleted items do not appear.
func (a *API) ChangeFeed(pageSize int) watukuytype.FetchFunc {
	return func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
		if err := a.enter(ctx, req); err != nil {
			return watukuytype.Page{}, err
		}
		after := int64(0)
		if req.Cursor != "" {
			n, err := strconv.ParseInt(req.Cursor, 10, 64)
			if err != nil {
				return watukuytype.Page{}, fmt.Errorf("fakeapi: bad cursor %q", req.Cursor)
			}
			after = n
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		var recs []*record
		for _, r := range a.items {
			if !r.deleted && r.seq > after {
				recs = append(recs, r)
			}
		}
		sort.Slice(recs, func(i, j int) bool { return recs[i].seq < recs[j].seq })
		p := watukuytype.Page{Next: req.Cursor}
		for i, r := range recs {
			if i == pageSize {
				p.HasMore = true
				break
			}
			p.Items = append(p.Items, r.json())
			p.Next = strconv.FormatInt(r.seq, 10)
		}
		return p, nil
	}
}

// Listing serves every live item ordered by id, pageSize per page, the cursor being the
// offset: the full listing a snapshotDiff poller reads.
func (a *API) Listing(pageSize int) watukuytype.FetchFunc {
	return func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
		if err := a.enter(ctx, req); err != nil {
			return watukuytype.Page{}, err
		}
		off := 0
		if req.Cursor != "" {
			n, err := strconv.Atoi(req.Cursor)
			if err != nil {
				return watukuytype.Page{}, fmt.Errorf("fakeapi: bad offset %q", req.Cursor)
			}
			off = n
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		var ids []string
		for id, r := range a.items {
			if !r.deleted {
				ids = append(ids, id)
			}
		}
		sort.Strings(ids)
		p := watukuytype.Page{}
		end := min(off+pageSize, len(ids))
		for _, id := range ids[min(off, len(ids)):end] {
			p.Items = append(p.Items, a.items[id].json())
		}
		p.Next = strconv.Itoa(end)
		p.HasMore = end < len(ids)
		return p, nil
	}
}

// Detail returns the in-process equivalent of GET /items/{id}: the live item with that
// identity as it appears in the listings, found = false when it was never created or is
// deleted. err is non-nil only when ctx is done. It neither counts as a Fetch nor runs the
// OnFetch hook (a detail request is not a page); wrap the returned function to inject
// failures.
func (a *API) Detail() func(ctx context.Context, identity string) (json.RawMessage, bool, error) {
	return func(ctx context.Context, identity string) (json.RawMessage, bool, error) {
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
		item, found := a.detail(identity)
		return item, found, nil
	}
}

// detail returns the live item with that id as served, found = false when there is none.
func (a *API) detail(id string) (json.RawMessage, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.items[id]
	if r == nil || r.deleted {
		return nil, false
	}
	return r.json(), true
}
