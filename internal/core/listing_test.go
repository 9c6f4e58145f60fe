package core_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/watukuy/watukuy/watukuytype"
)

// G6 at the engine: what a snapshotDiff listing deletes. An identity missing from a complete
// listing is deleted once ConfirmDeletes consecutive listings missed it, or at once when the
// Detail request says it is gone; a listing that did not complete (failed midway, longer than
// maxPagesPerCycle) deletes nothing.
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

// A snapshot listing longer than maxPagesPerCycle never completes: nothing it did not reach is
// deleted, cycle after cycle.
func TestListingTruncatedDeletesNothing(t *testing.T) {
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
	for i := range 3 {
		w.clock.Advance(2 * time.Minute)
		rep := w.run(eng)
		for _, ev := range w.rec.take() {
			if ev.Type == watukuytype.Deleted {
				t.Fatalf("cycle %d deleted %s from a listing that never completed", i, ev.Identity)
			}
		}
		if rep.Err == nil || !strings.Contains(rep.Err.Error(), "longer than maxPagesPerCycle") || rep.Truncated {
			t.Fatalf("cycle %d: %+v", i, rep)
		}
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

// A reconcile listing longer than reconcile.maxPages deletes nothing and is a CONFIG error.
func TestReconcileTooLongDeletesNothing(t *testing.T) {
	w := newWorld(t)
	live, listing := newFeed(10), newFeed(1)
	live.putN(4)
	listing.putN(4)
	eng := w.engine(w.poller(live.fetch, func(p *watukuytype.Poller) {
		p.Reconcile = &watukuytype.Reconcile{Every: time.Minute, Fetch: listing.fetch, MaxPages: 2}
		p.ConfirmDeletes = 1
	}))
	w.run(eng)
	w.rec.take()
	listing.remove("i01")
	w.clock.Advance(2 * time.Minute)
	rep := w.run(eng)
	ki := w.inspect(eng)
	if got := w.rec.take(); len(got) != 0 || ki.Items != 4 || lastError(t, ki).Code != watukuytype.CodeConfig || rep.Err == nil {
		t.Fatalf("events %v, items %d, lastError %s, err %v", summary(got), ki.Items, ki.LastError, rep.Err)
	}
}
