package core_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/core"
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
