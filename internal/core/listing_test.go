package core_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sort"
	"strconv"
	"strings"
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

// G6 at the engine: what a snapshotDiff listing deletes. An identity missing from a complete
// listing is deleted once ConfirmDeletes consecutive listings missed it, or at once when the
// Detail request says it is gone; a listing that did not complete (failed midway) deletes nothing.
func TestListingDeletes(t *testing.T) {
	// detail answers of a round
	const (
		gone    = "gone"
		found   = "found"
		failing = "failing"
	)
	type round struct {
		change     func(f *feed) // the listing changes before the cycle
		detail     string        // what the Detail request answers in this round
		failPage   int           // > 0: the request for this page (from 0) fails
		want       []string      // events delivered
		candidates int           // CycleReport.DeleteCandidates
		items      int64         // KeyInfo.Items after the cycle
		err        string        // substring of CycleReport.Err, "" for none
	}
	drop := func(id string) func(f *feed) { return func(f *feed) { f.remove(id) } }
	for _, tc := range []struct {
		name    string
		confirm int
		detail  bool
		rounds  []round
	}{
		{name: "confirmDeletes 1 deletes at the first miss", confirm: 1, rounds: []round{
			{change: drop("i02"), want: []string{"deleted:i02"}, items: 3},
		}},
		{name: "confirmDeletes 2 waits for a second listing", rounds: []round{
			{change: drop("i02"), candidates: 1, items: 4},
			{want: []string{"deleted:i02"}, items: 3},
		}},
		{name: "an identity listed again ends its miss streak", rounds: []round{
			{change: drop("i02"), candidates: 1, items: 4},
			{change: func(f *feed) { f.put("i02", "1") }, items: 4},
			{change: drop("i02"), candidates: 1, items: 4},
		}},
		{name: "a listing that fails midway deletes nothing", confirm: 1, rounds: []round{
			{change: drop("i04"), failPage: 1, err: "page 1 refused", items: 4},
			{want: []string{"deleted:i04"}, items: 3},
		}},
		{name: "detail not found deletes at once", detail: true, rounds: []round{
			{change: drop("i02"), detail: gone, want: []string{"deleted:i02"}, items: 3},
		}},
		{name: "detail found keeps the item and diffs it", detail: true, rounds: []round{
			{change: drop("i02"), detail: found, want: []string{"updated:i02"}, items: 4},
		}},
		{name: "a failing detail request decides nothing", detail: true, rounds: []round{
			{change: drop("i02"), detail: failing, candidates: 1, items: 4},
			{detail: failing, candidates: 1, items: 4},
			{detail: failing, candidates: 1, items: 4},
			{detail: gone, want: []string{"deleted:i02"}, items: 3},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			f := newFeed(2)
			f.putN(4)
			var r round
			fetch := func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
				if r.failPage > 0 && req.Page == r.failPage {
					return watukuytype.Page{}, errors.New("page 1 refused")
				}
				return f.fetch(ctx, req)
			}
			detail := func(_ context.Context, k watukuytype.Key, id string) (json.RawMessage, bool, error) {
				switch r.detail {
				case found:
					return json.RawMessage(`{"id":"` + id + `","v":"2"}`), true, nil
				case gone:
					return nil, false, nil
				}
				return nil, false, errors.New("detail of " + id + " timed out")
			}
			eng := w.engine(w.poller(fetch, func(p *watukuytype.Poller) {
				p.Strategy = watukuytype.SnapshotDiff
				p.ConfirmDeletes = tc.confirm
				if tc.detail {
					p.Detail = detail
				}
			}))
			if rep := w.run(eng); rep.Events != 4 || rep.Err != nil {
				t.Fatalf("first listing: %+v", rep)
			}
			w.rec.take()
			for i, r0 := range tc.rounds {
				r = r0
				if r.change != nil {
					r.change(f)
				}
				w.clock.Advance(2 * time.Minute)
				rep := w.run(eng)
				got := summary(w.rec.take())
				ki := w.inspect(eng)
				if !slices.Equal(got, r.want) || rep.DeleteCandidates != r.candidates || ki.Items != r.items ||
					(rep.Err == nil) != (r.err == "") || rep.Err != nil && !strings.Contains(rep.Err.Error(), r.err) {
					t.Fatalf("round %d: events %v, candidates %d, items %d, err %v; want %v, %d, %d, %q",
						i, got, rep.DeleteCandidates, ki.Items, rep.Err, r.want, r.candidates, r.items, r.err)
				}
			}
		})
	}
}

// A snapshot listing longer than maxPagesPerCycle goes on in the next cycle from where it
// stopped: the cycle that stops short deletes nothing and is due again at once; the one that
// reaches the end deletes what the whole listing lacked, and no item is created twice.
func TestListingSpansCycles(t *testing.T) {
	w := newWorld(t)
	f := newFeed(2)
	f.putN(4)
	eng := w.engine(w.poller(f.fetch, func(p *watukuytype.Poller) {
		p.Strategy = watukuytype.SnapshotDiff
		p.ConfirmDeletes = 1
		p.MaxPagesPerCycle = 2
	}))
	w.run(eng) // 2 pages: complete
	f.remove("i01")
	f.put("i05", "1")
	f.put("i06", "1") // 5 items: 3 pages of 2, the 3rd is beyond maxPagesPerCycle
	w.rec.take()
	w.clock.Advance(2 * time.Minute)
	rep := w.run(eng)
	if evs := w.rec.take(); rep.Err != nil || !rep.Truncated || len(evs) != 1 || evs[0].Type != watukuytype.Created {
		t.Fatalf("the cycle that stops short: %+v, events %v (want i05 created, nothing deleted)", rep, summary(evs))
	}
	if ki := w.inspect(eng); len(ki.Listings) != 1 || ki.Listings[0].Pages != 2 || ki.Listings[0].Lane != watukuytype.LaneLive {
		t.Fatalf("inspect during the listing: %+v", ki.Listings)
	}
	rep = w.run(eng) // due at once: the third page, then the deletes
	if got := summary(w.rec.take()); rep.Err != nil || rep.Truncated || !slices.Equal(got, []string{"created:i06", "deleted:i01"}) {
		t.Fatalf("the cycle that completes the listing: %+v, events %v", rep, got)
	}
	if ki := w.inspect(eng); len(ki.Listings) != 0 || ki.Items != 5 {
		t.Fatalf("after the listing: %+v, %d items", ki.Listings, ki.Items)
	}
	w.clock.Advance(2 * time.Minute)
	w.run(eng)
	w.run(eng)
	if got := w.rec.take(); len(got) != 0 {
		t.Fatalf("a quiet listing over two cycles emitted %v", summary(got))
	}
}

// The reconcile lane lists everything every Reconcile.Every beside a live change feed, and
// deletes what its complete listing lacks, with events of lane "reconcile".
func TestReconcileLaneDeletes(t *testing.T) {
	w := newWorld(t)
	live, listing := newFeed(10), newFeed(2)
	live.putN(3)
	listing.putN(3)
	eng := w.engine(w.poller(live.fetch, func(p *watukuytype.Poller) {
		p.Reconcile = &watukuytype.Reconcile{Every: 5 * time.Minute, Fetch: listing.fetch}
		p.ConfirmDeletes = 1
	}))
	w.run(eng)
	w.rec.take()
	if ki := w.inspect(eng); ki.ReconcileDue == nil || !ki.ReconcileDue.Equal(w.clock.Now().Add(5*time.Minute)) || listing.requestCount() != 0 {
		t.Fatalf("first cycle: reconcile due %v, listing requests %d (the first listing comes Every later)", ki.ReconcileDue, listing.requestCount())
	}
	listing.remove("i02")

	// Before Every is over the live lane runs alone.
	w.clock.Advance(2 * time.Minute)
	w.run(eng)
	if got := w.rec.take(); len(got) != 0 || listing.requestCount() != 0 {
		t.Fatalf("reconciled early: %v, %d listing requests", summary(got), listing.requestCount())
	}

	w.clock.Advance(4 * time.Minute)
	rep := w.run(eng)
	got := w.rec.take()
	if !slices.Equal(summary(got), []string{"deleted:i02"}) || got[0].Lane != watukuytype.LaneReconcile || rep.Pages != 2 {
		t.Fatalf("reconcile: %v (%+v)", summary(got), rep)
	}
	ki := w.inspect(eng)
	if ki.Items != 2 || ki.ReconcileDue == nil || !ki.ReconcileDue.Equal(w.clock.Now().Add(5*time.Minute)) ||
		!strings.Contains(string(ki.LastPoll), `"reconciled":true`) {
		t.Fatalf("after the reconcile: items %d, due %v, lastPoll %s", ki.Items, ki.ReconcileDue, ki.LastPoll)
	}
}

// A reconcile listing longer than reconcile.maxPages goes on in the next cycle, due at once,
// and deletes what the whole listing lacked once it completed.
func TestReconcileSpansCycles(t *testing.T) {
	w, _, listing, eng := spanningReconcile(t, 10, nil)
	w.run(eng)
	w.rec.take()
	listing.remove("i01")
	w.clock.Advance(2 * time.Minute)
	rep := w.run(eng)
	if got := w.rec.take(); len(got) != 0 || rep.Err != nil || !rep.Truncated {
		t.Fatalf("the reconcile's first cycle: events %v, %+v", summary(got), rep)
	}
	rep = w.run(eng)
	if got := summary(w.rec.take()); !slices.Equal(got, []string{"deleted:i01"}) || rep.Err != nil {
		t.Fatalf("the reconcile's second cycle: events %v, %+v", got, rep)
	}
}

// An identity another lane stores while a reconcile listing is under way counts as shown by
// it: one that landed on a page the listing had already passed is not taken for deleted (G6).
func TestReconcileSpanningCyclesCountsWhatOtherLanesStore(t *testing.T) {
	w, live, listing, eng := spanningReconcile(t, 10, nil)
	w.run(eng)
	w.rec.take()
	w.clock.Advance(2 * time.Minute)
	if rep := w.run(eng); !rep.Truncated || rep.Err != nil {
		t.Fatalf("the reconcile's first cycle: %+v", rep)
	}
	// Created now, on the listing's first page (already read): the live lane stores it.
	live.put("n01", "1")
	listing.prepend("n01", "1")
	var got []string
	for i := 0; ; i++ {
		rep := w.run(eng)
		got = append(got, summary(w.rec.take())...)
		if rep.Err != nil || i == 5 {
			t.Fatalf("cycle %d of the reconcile: %+v", i+2, rep)
		}
		if !rep.Truncated {
			break
		}
	}
	if !slices.Equal(got, []string{"created:n01"}) {
		t.Fatalf("while and when the reconcile completed: events %v", got)
	}
}

// The same when the other lane is itself a listing: a snapshotDiff poller's live listing under
// way over several cycles while its reconcile listing is too.
func TestReconcileSpanningCyclesCountsWhatALiveListingStores(t *testing.T) {
	w, live, listing, eng := spanningReconcile(t, 1, func(p *watukuytype.Poller) {
		p.Strategy, p.MaxPagesPerCycle = watukuytype.SnapshotDiff, 2
	})
	for range 3 {
		w.run(eng)
	}
	w.rec.take()
	w.clock.Advance(2 * time.Minute)
	// The live listing completes in the second cycle, where the reconcile reads its first two
	// pages.
	for i := range 2 {
		if rep := w.run(eng); !rep.Truncated || rep.Err != nil {
			t.Fatalf("cycle %d: %+v", i, rep)
		}
	}
	if ki, err := eng.Inspect(t.Context(), key); err != nil || len(ki.Listings) != 1 || ki.Listings[0].Lane != watukuytype.LaneReconcile {
		t.Fatalf("the reconcile is not under way alone: %+v, %v", ki.Listings, err)
	}
	// Created now, first in both listings: the live listing's next pass stores it.
	live.prepend("n01", "1")
	listing.prepend("n01", "1")
	var got []string
	for i := 0; ; i++ {
		rep := w.run(eng)
		got = append(got, summary(w.rec.take())...)
		if rep.Err != nil || i == 10 {
			t.Fatalf("cycle %d after the create: %+v", i, rep)
		}
		if ki, _ := eng.Inspect(t.Context(), key); len(ki.Listings) == 0 {
			break
		}
	}
	if !slices.Equal(got, []string{"created:n01"}) {
		t.Fatalf("while and when the listings completed: events %v", got)
	}
}

// ProbeListing reads each complete listing of a poller, its snapshotDiff live lane and its
// reconcile, up to the pages it is given, and estimates the cycles each takes at the pages a
// cycle reads of it.
func TestProbeListingEstimatesPagesAndCycles(t *testing.T) {
	f := newFeed(3)
	f.putN(25) // 9 pages of 3
	w := newWorld(t)
	p := w.poller(f.fetch, func(p *watukuytype.Poller) {
		p.Strategy, p.MaxPagesPerCycle = watukuytype.SnapshotDiff, 4
		p.Reconcile = &watukuytype.Reconcile{Every: time.Hour, Fetch: f.fetch, MaxPages: 2}
	})
	got, err := core.ProbeListing(t.Context(), p, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	want := []watukuytype.ListingEstimate{
		{Lane: watukuytype.LaneLive, Pages: 9, Items: 25, Complete: true, PagesPerCycle: 4, Cycles: 3},
		{Lane: watukuytype.LaneReconcile, Pages: 9, Items: 25, Complete: true, PagesPerCycle: 2, Cycles: 5},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("estimates %+v, want %+v", got, want)
	}
	// Read in part: the fewest cycles it takes.
	got, err = core.ProbeListing(t.Context(), p, "", 5)
	if err != nil || len(got) != 2 || got[0].Complete || got[0].Pages != 5 || got[0].Items != 15 || got[0].Cycles != 2 {
		t.Fatalf("read in part: %+v, %v", got, err)
	}
	// A poller with no complete listing has nothing to estimate.
	p.Strategy, p.Reconcile = watukuytype.Custom, nil
	if got, err := core.ProbeListing(t.Context(), p, "", 5); err != nil || got != nil {
		t.Fatalf("no listing: %+v, %v", got, err)
	}
}

// endStore is a store whose End can be made to fail (a process that dies between an operation's
// commit and its End); it records the most entries (rows, deletes, listed identities) one
// CommitPoll carried.
type endStore struct {
	core.Store
	mu      sync.Mutex
	failEnd bool
	largest int // the most entries (rows, deletes, listed identities) one CommitPoll carried
}

func (s *endStore) CommitPoll(ctx context.Context, l core.Lease, c core.Commit) (core.CommitResult, error) {
	s.mu.Lock()
	s.largest = max(s.largest, len(c.Upserts)+len(c.Deletes)+len(c.Invalid)+len(c.Listed))
	s.mu.Unlock()
	return s.Store.CommitPoll(ctx, l, c)
}

func (s *endStore) End(ctx context.Context, l core.Lease, e core.EndRequest) error {
	s.mu.Lock()
	fail := s.failEnd
	s.mu.Unlock()
	if fail {
		return errors.New("killed before End")
	}
	return s.Store.End(ctx, l, e)
}

func (s *endStore) setFailEnd(v bool) {
	s.mu.Lock()
	s.failEnd = v
	s.mu.Unlock()
}

// endStoreWorld is newWorld on miniredis with its store behind an endStore, and the Redis
// client.
func endStoreWorld(t *testing.T) (*world, *endStore, redis.UniversalClient) {
	t.Helper()
	clk := fakeclock.New(time.UnixMilli(1_800_000_000_000))
	b := redistest.Miniredis(t)
	st, err := redisstore.New(b.Client, redisstore.Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	es := &endStore{Store: st}
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
func TestG6ResetCursorDeathBeforeEndDeletesNothing(t *testing.T) {
	w, es, _ := endStoreWorld(t)
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
func TestReconcileDeletesWhenAListedIdentityWasDeletedMeanwhile(t *testing.T) {
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
// page size, old and new workers taking turns in a rolling deploy) starts over: a page-number
// position from the other would skip items, and two such listings would delete them.
func TestG6PageSizeChangeMidListingStartsOver(t *testing.T) {
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
func TestReconcileRemovedDropsItsListing(t *testing.T) {
	w, _, rdb := endStoreWorld(t)
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
func TestListedCountsInCommitChunks(t *testing.T) {
	w, es, _ := endStoreWorld(t)
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
func TestExpiredListingPositionStartsOver(t *testing.T) {
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

// spanningReconcile is a world whose poller lists i01..i04 live (liveSize a page) and in a
// reconcile of one item a page and two pages a cycle, so the reconcile spans cycles; a miss
// deletes at once. mod adjusts the poller.
func spanningReconcile(t *testing.T, liveSize int, mod func(p *watukuytype.Poller)) (w *world, live, listing *feed, eng *core.Engine) {
	w = newWorld(t)
	live, listing = newFeed(liveSize), newFeed(1)
	live.putN(4)
	listing.putN(4)
	eng = w.engine(w.poller(live.fetch, func(p *watukuytype.Poller) {
		p.Reconcile = &watukuytype.Reconcile{Every: time.Minute, Fetch: listing.fetch, MaxPages: 2}
		p.ConfirmDeletes = 1
		if mod != nil {
			mod(p)
		}
	}))
	return w, live, listing, eng
}
