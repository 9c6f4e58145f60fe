package core_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/fakeclock"
	"github.com/watukuy/watukuy/internal/redisstore"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// Listings over several cycles under the adversary: deaths between an operation's writes,
// deletes behind a listing, definitions that change under it, chunk bounds, expired positions.

// advListWorld is newWorld with the Redis client kept, and the store behind a wrapper whose
// End can be made to fail (a process that dies between an operation's commit and its End).
type advEndStore struct {
	core.Store
	mu      sync.Mutex
	failEnd bool
	largest int // the most entries (rows, deletes, listed identities) one CommitPoll carried
}

func (s *advEndStore) CommitPoll(ctx context.Context, l core.Lease, c core.Commit) (core.CommitResult, error) {
	s.mu.Lock()
	s.largest = max(s.largest, len(c.Upserts)+len(c.Deletes)+len(c.Invalid)+len(c.Listed))
	s.mu.Unlock()
	return s.Store.CommitPoll(ctx, l, c)
}

func (s *advEndStore) End(ctx context.Context, l core.Lease, e core.EndRequest) error {
	s.mu.Lock()
	fail := s.failEnd
	s.mu.Unlock()
	if fail {
		return errors.New("killed before End")
	}
	return s.Store.End(ctx, l, e)
}

func (s *advEndStore) setFailEnd(v bool) {
	s.mu.Lock()
	s.failEnd = v
	s.mu.Unlock()
}

func advListWorld(t *testing.T) (*world, *advEndStore, redis.UniversalClient) {
	t.Helper()
	clk := fakeclock.New(time.UnixMilli(1_800_000_000_000))
	b := redistest.Miniredis(t)
	st, err := redisstore.New(b.Client, redisstore.Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	es := &advEndStore{Store: st}
	return &world{t: t, clock: clk, store: es, redis: st, rec: &recorder{}}, es, b.Client
}

// keysetFeed is a listing paged by identity (cursor: the last identity of the page), so an
// identity removed behind the cursor shifts nothing.
type keysetFeed struct {
	mu    sync.Mutex
	items map[string]string // id -> v
	size  int
}

func (k *keysetFeed) fetch(_ context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	ids := make([]string, 0, len(k.items))
	for id := range k.items {
		if id > req.Cursor {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	n := min(k.size, len(ids))
	var page watukuytype.Page
	for _, id := range ids[:n] {
		raw, _ := json.Marshal(map[string]string{"id": id, "v": k.items[id]})
		page.Items = append(page.Items, raw)
	}
	if n > 0 {
		page.Next = ids[n-1]
	}
	page.HasMore = n < len(ids)
	return page, nil
}

// pageNumberFeed is a listing paged by page number at a page size the poller's config gives
// (PageCursor with Param "page" and Size).
type pageNumberFeed struct {
	f    *feed
	size int
}

func (p pageNumberFeed) fetch(_ context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
	n := 0
	if req.Cursor != "" {
		n, _ = strconv.Atoi(req.Cursor)
	}
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	off := min(n*p.size, len(p.f.items))
	end := min(off+p.size, len(p.f.items))
	return watukuytype.Page{Items: slices.Clone(p.f.items[off:end]), Next: strconv.Itoa(n + 1), HasMore: end < len(p.f.items)}, nil
}

// G6: ResetCursor drops a live listing under way, its position and what it showed, in one
// fenced write: a death before its End leaves no position whose identities are gone (the next
// cycle would take every item of the earlier pages for missing).
func TestAdvListingG6ResetCursorDeathBeforeEndDeletesListedItems(t *testing.T) {
	w, es, _ := advListWorld(t)
	f := newFeed(2)
	f.putN(6) // 3 pages
	eng := w.engine(w.poller(f.fetch, func(p *watukuytype.Poller) {
		p.Strategy = watukuytype.SnapshotDiff
		p.ConfirmDeletes = 1
		p.MaxPagesPerCycle = 2
		p.LeaseTTL = 30 * time.Second
	}))
	w.run(eng)
	w.run(eng) // the first listing completes over two cycles
	if got := w.rec.take(); len(got) != 6 {
		t.Fatalf("first listing: %v", summary(got))
	}
	w.clock.Advance(2 * time.Minute)
	if rep := w.run(eng); !rep.Truncated || rep.Err != nil {
		t.Fatalf("second listing's first cycle: %+v", rep)
	}
	if ki := w.inspect(eng); len(ki.Listings) != 1 {
		t.Fatalf("no listing under way: %+v", ki.Listings)
	}
	// The operator resets the cursor; the process dies after the commit, before End.
	es.setFailEnd(true)
	err := eng.ResetCursor(context.Background(), key, "", false)
	es.setFailEnd(false)
	if err == nil {
		t.Fatal("ResetCursor with a failing End succeeded")
	}
	w.clock.Advance(time.Minute) // the operation's lease expires
	var got []string
	for i := 0; i < 4; i++ {
		w.run(eng)
		got = append(got, summary(w.rec.take())...)
		if ki := w.inspect(eng); len(ki.Listings) == 0 {
			break
		}
	}
	if len(got) != 0 {
		t.Fatalf("nothing changed in the API, yet the listing after the reset emitted %v", got)
	}
}

// A reconcile over several cycles completes with identities the live lane deleted since it
// listed them: the shortcut "every stored identity was listed" is not taken (it would count
// the deleted ones and skip the delete of one gone without a change-log entry).
func TestAdvListingReconcileSkipsDeleteWhenListedIdentityWasDeletedMeanwhile(t *testing.T) {
	w := newWorld(t)
	live := newFeed(10)
	live.putN(4)
	listing := &keysetFeed{items: map[string]string{"i01": "1", "i02": "1", "i03": "1"}, size: 1} // i04 gone silently
	eng := w.engine(w.poller(live.fetch, func(p *watukuytype.Poller) {
		p.Tombstone = watukuytype.Flag("deleted")
		p.Reconcile = &watukuytype.Reconcile{Every: time.Minute, Fetch: listing.fetch, MaxPages: 2}
		p.ConfirmDeletes = 1
	}))
	w.run(eng)
	w.rec.take()
	w.clock.Advance(2 * time.Minute)
	if rep := w.run(eng); !rep.Truncated || rep.Err != nil {
		t.Fatalf("the reconcile's first cycle: %+v", rep)
	}
	// i01 (already listed) is deleted, with a change-log entry.
	live.put("i01", "2", "deleted", "true")
	listing.mu.Lock()
	delete(listing.items, "i01")
	listing.mu.Unlock()
	rep := w.run(eng)
	got := summary(w.rec.take())
	if rep.Err != nil || !slices.Equal(got, []string{"deleted:i01", "deleted:i04"}) {
		t.Fatalf("the cycle that completes the reconcile: %v (%+v); want deleted:i01, deleted:i04", got, rep)
	}
}

// G6: a listing under way that began under another Revision of the poller's requests (another
// page size, as in a rolling deploy where old and new workers take turns) starts over: a
// page-number position from the other would skip items, and two such listings would delete
// them.
func TestAdvListingG6PageSizeChangeMidListingDeletesLiveItems(t *testing.T) {
	w := newWorld(t)
	f := newFeed(0)
	f.putN(6)
	mk := func(size int) *core.Engine {
		return w.engine(w.poller(pageNumberFeed{f: f, size: size}.fetch, func(p *watukuytype.Poller) {
			p.Strategy = watukuytype.SnapshotDiff
			p.MaxPagesPerCycle = 2
			p.Revision = "size " + strconv.Itoa(size) // what the config sets from its settings
		}))
	}
	old, upgraded := mk(2), mk(3)
	w.run(upgraded) // pages 0, 1 of 3: the whole listing
	if got := w.rec.take(); len(got) != 6 {
		t.Fatalf("first listing: %v", summary(got))
	}
	var got []string
	for range 2 {
		w.clock.Advance(2 * time.Minute)
		if rep := w.run(old); !rep.Truncated || rep.Err != nil { // pages 0, 1 of 2: i01..i04
			t.Fatalf("old worker: %+v", rep)
		}
		w.run(upgraded) // page 2 of 3: items 6.. (none): complete
		got = append(got, summary(w.rec.take())...)
	}
	if len(got) != 0 {
		t.Fatalf("nothing changed in the API, yet the listings emitted %v", got)
	}
}

// Resource bound: a reconcile listing under way when the poller's Reconcile is removed is
// dropped, its position and what it showed; kept, the live lane's pages would go on adding to
// what it showed, for good.
func TestAdvListingReconcileRemovedLeavesListedGrowing(t *testing.T) {
	w, _, rdb := advListWorld(t)
	live, listing := newFeed(50), newFeed(1)
	live.putN(4)
	listing.putN(4)
	base := func(p *watukuytype.Poller) { p.ConfirmDeletes = 1 }
	eng := w.engine(w.poller(live.fetch, base, func(p *watukuytype.Poller) {
		p.Reconcile = &watukuytype.Reconcile{Every: time.Minute, Fetch: listing.fetch, MaxPages: 2}
	}))
	w.run(eng)
	w.clock.Advance(2 * time.Minute)
	if rep := w.run(eng); !rep.Truncated {
		t.Fatalf("the reconcile did not span: %+v", rep)
	}
	// The reconcile is taken out of the config.
	eng = w.engine(w.poller(live.fetch, base))
	for round := range 10 {
		for i := range 20 {
			live.put("n"+strconv.Itoa(round*20+i), "1")
		}
		w.clock.Advance(2 * time.Minute)
		w.run(eng)
	}
	keys, err := rdb.Keys(context.Background(), "*listed*").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := int64(0)
	for _, k := range keys {
		n += rdb.HLen(context.Background(), k).Val()
	}
	if ki := w.inspect(eng); len(ki.Listings) != 0 || n != 0 {
		t.Fatalf("a poller without a reconcile: listings under way %+v, %d identities in %v", ki.Listings, n, keys)
	}
}

// Resource bound: what a listing showed counts in a commit's CommitMaxItems like rows do: a
// page of a listing that goes on from an earlier cycle (or of any lane while a listing is
// under way) writes no script above that many entries.
func TestAdvListingListedBypassesCommitChunks(t *testing.T) {
	w, es, _ := advListWorld(t)
	f := newFeed(500)
	for i := range 1500 {
		f.put("i"+strconv.Itoa(10000+i), "1")
	}
	eng := w.engine(w.poller(f.fetch, func(p *watukuytype.Poller) {
		p.Strategy = watukuytype.SnapshotDiff
		p.MaxPagesPerCycle = 1
		p.CommitMaxItems = 10
	}))
	for range 3 {
		w.run(eng)
	}
	if got := len(w.rec.take()); got != 1500 {
		t.Fatalf("%d events, want 1500", got)
	}
	if es.largest > 10 {
		t.Fatalf("one commit script carried %d entries (CommitMaxItems 10)", es.largest)
	}
}

// expiringFeed pages a listing by opaque page tokens that the API forgets after ttl (as
// scroll ids, query locators and many pageTokens do); failAt > 0 fails that request (counted
// from 1) with a 500.
type expiringFeed struct {
	f        *feed
	clock    *fakeclock.Clock
	ttl      time.Duration
	mu       sync.Mutex
	issued   map[string]time.Time // token -> when
	offsets  map[string]string    // token -> the feed's offset
	n        int
	requests int
	failAt   int
}

func (e *expiringFeed) fetch(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.requests++; e.requests == e.failAt {
		return watukuytype.Page{}, &watukuytype.HTTPError{StatusCode: 500}
	}
	inner := req
	if req.Cursor != "" {
		at, ok := e.issued[req.Cursor]
		if !ok || e.clock.Now().Sub(at) > e.ttl {
			return watukuytype.Page{}, &watukuytype.HTTPError{StatusCode: 410}
		}
		inner.Cursor = e.offsets[req.Cursor]
	}
	page, err := e.f.fetch(ctx, inner)
	if err != nil || !page.HasMore {
		return page, err
	}
	e.n++
	tok := "tok" + strconv.Itoa(e.n)
	e.issued[tok], e.offsets[tok] = e.clock.Now(), page.Next
	page.Next = tok
	return page, nil
}

// Liveness: a listing that met a transient error midway starts over rather than keep a
// position (an opaque page token the API may forget); one that goes on from an earlier cycle
// and keeps failing there starts over after a few cycles.
func TestAdvListingExpiredPositionWedgesTheKey(t *testing.T) {
	w := newWorld(t)
	f := newFeed(2)
	f.putN(6)
	api := &expiringFeed{f: f, clock: w.clock, ttl: 5 * time.Minute, issued: map[string]time.Time{}, offsets: map[string]string{}}
	eng := w.engine(w.poller(api.fetch, func(p *watukuytype.Poller) {
		p.Strategy = watukuytype.SnapshotDiff
	}))
	if rep := w.run(eng); rep.Err != nil || rep.Truncated {
		t.Fatalf("first listing: %+v", rep)
	}
	w.rec.take()
	w.clock.Advance(2 * time.Minute)
	f.put("n01", "1")
	api.mu.Lock()
	api.failAt = api.requests + 2 // page 2 of the next listing fails once
	api.mu.Unlock()
	if rep := w.run(eng); rep.Err == nil {
		t.Fatalf("the failing page did not fail the cycle: %+v", rep)
	}
	var lastErr error
	for i := 0; i < 10; i++ {
		w.clock.Advance(10 * time.Minute) // backoff, a throttle window: the token expires
		rep := w.run(eng)
		lastErr = rep.Err
		if ki := w.inspect(eng); rep.Err == nil && len(ki.Listings) == 0 {
			if got := summary(w.rec.take()); slices.Contains(got, "created:n01") {
				return
			}
		}
	}
	t.Fatalf("the listing never completed again after one failed page: last error %v, listings %+v", lastErr, w.inspect(eng).Listings)
}
