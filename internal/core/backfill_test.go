package core_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watukuy/watukuy/watukuytype"
)

// A backfill runs on the pages the live lane leaves: one page a cycle here, each committed
// with its progress (cursor, pages, fraction), the key due again at once until the target is
// reached; a forced backfill re-emits known items as updated, lane "backfill".
func TestBackfillProgress(t *testing.T) {
	w := newWorld(t)
	f := newFeed(2)
	f.putN(6)
	eng := w.engine(w.poller(f.fetch, func(p *watukuytype.Poller) {
		// The live lane takes one page a cycle once caught up (nothing new): one is left for
		// the backfill.
		p.MaxPagesPerCycle = 2
		p.CursorPosition = func(c string) (float64, bool) {
			n, err := strconv.ParseFloat(c, 64)
			return n, err == nil
		}
	}))
	w.run(eng) // the live lane reads 2 of the 3 pages (truncated: due again at once)
	w.run(eng)
	w.rec.take()
	bp, err := eng.Backfill(context.Background(), key, watukuytype.BackfillRequest{Force: true})
	if err != nil || bp.To != "6" || bp.Generation != 1 {
		t.Fatalf("backfill: %+v %v", bp, err)
	}
	for i, want := range []struct {
		cursor   string
		fraction float64
		done     bool
		events   []string
	}{
		{"2", 2.0 / 6, false, []string{"updated:i01", "updated:i02"}},
		{"4", 4.0 / 6, false, []string{"updated:i03", "updated:i04"}},
		{"6", 1, true, []string{"updated:i05", "updated:i06"}},
	} {
		now := w.clock.Now()
		rep := w.run(eng)
		evs := w.rec.take()
		ki := w.inspect(eng)
		b := ki.Backfill
		if rep.Err != nil || rep.Pages != 2 || b == nil || b.Cursor != want.cursor || b.Pages != i+1 || b.Done != want.done ||
			b.Fraction == nil || *b.Fraction != want.fraction || b.Events != 2*(i+1) {
			t.Fatalf("cycle %d: report %+v, progress %+v", i, rep, b)
		}
		if got := summary(evs); !slices.Equal(got, want.events) || evs[0].Lane != watukuytype.LaneBackfill {
			t.Fatalf("cycle %d: events %v (lane %s), want %v", i, got, evs[0].Lane, want.events)
		}
		// Pending: due again at once; done: the live schedule (Min 1s, changed).
		wantDue := now
		if want.done {
			wantDue = now.Add(time.Second)
		}
		if due := w.due(); !due.Equal(wantDue) {
			t.Fatalf("cycle %d: due in %v, want %v", i, due.Sub(now), wantDue.Sub(now))
		}
		if ki.Cursor != "6" {
			t.Fatalf("cycle %d: the backfill moved the live cursor to %q", i, ki.Cursor)
		}
	}
}

// A backfill stops at its target cursor even where the API has more, and its events do not
// move the live cursor.
func TestBackfillStopsAtItsTarget(t *testing.T) {
	w := newWorld(t)
	f := newFeed(2)
	f.putN(6)
	eng := w.engine(w.poller(f.fetch))
	w.run(eng)
	w.rec.take()
	to := "4"
	if _, err := eng.Backfill(context.Background(), key, watukuytype.BackfillRequest{To: &to, Force: true}); err != nil {
		t.Fatal(err)
	}
	rep := w.run(eng)
	b := w.inspect(eng).Backfill
	if rep.Pages != 3 || b == nil || !b.Done || b.Cursor != "4" || b.Pages != 2 {
		t.Fatalf("report %+v, progress %+v: want the live page and 2 backfill pages, done at 4", rep, b)
	}
	if got := summary(w.rec.take()); !slices.Equal(got, []string{"updated:i01", "updated:i02", "updated:i03", "updated:i04"}) {
		t.Fatalf("events %v", got)
	}
}

// The backfill's failures are its own: a transient one is recorded and retried at the next
// cycle without counting against the key; a cursor stall stops the backfill for good.
func TestBackfillFailures(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		failed bool
	}{
		{"transient", errors.New("connection reset"), false},
		{"cursor stall", &watukuytype.CursorStallError{Key: key, Cursor: "0", Msg: "stuck"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			f := newFeed(2)
			f.putN(4)
			var failBackfill atomic.Bool
			fetch := func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
				if req.Lane == watukuytype.LaneBackfill && failBackfill.Load() {
					return watukuytype.Page{}, tc.err
				}
				return f.fetch(ctx, req)
			}
			eng := w.engine(w.poller(fetch))
			w.run(eng)
			if _, err := eng.Backfill(context.Background(), key, watukuytype.BackfillRequest{}); err != nil {
				t.Fatal(err)
			}
			failBackfill.Store(true)
			rep := w.run(eng)
			ki := w.inspect(eng)
			if rep.Err != nil || ki.Failures != 0 || ki.LastError != nil || ki.Circuit != watukuytype.CircuitClosed {
				t.Fatalf("the backfill's failure counted against the key: %+v, failures %d, lastError %s", rep, ki.Failures, ki.LastError)
			}
			if b := ki.Backfill; b == nil || b.LastError == "" || b.Failed != tc.failed || b.Done {
				t.Fatalf("progress %+v", b)
			}
			failBackfill.Store(false)
			w.clock.Advance(time.Minute)
			w.run(eng)
			if b := w.inspect(eng).Backfill; b.Done == tc.failed || b.Failed != tc.failed || !tc.failed && b.LastError != "" {
				t.Fatalf("after the fix: %+v", b)
			}
		})
	}
}

// A poller that places cursors has its backfill range checked before anything is written: a
// cursor it cannot place names the flag, and a --from after the target blames --to only when
// the caller gave it; a defaulted target is the live cursor and is named so.
func TestBackfillChecksRange(t *testing.T) {
	w := newWorld(t)
	f := newFeed(10)
	f.putN(6)
	eng := w.engine(w.poller(f.fetch, func(p *watukuytype.Poller) {
		p.CursorPosition = func(c string) (float64, bool) {
			n, err := strconv.ParseFloat(c, 64)
			return n, err == nil
		}
	}))
	w.run(eng) // live cursor "6"
	ctx := context.Background()
	to := func(s string) *string { return &s }
	for _, c := range []struct {
		req         watukuytype.BackfillRequest
		field, want string
	}{
		{watukuytype.BackfillRequest{From: "yesterday"}, "--from", `"yesterday" is not a cursor of this poller`},
		{watukuytype.BackfillRequest{From: "1", To: to("soon")}, "--to", `"soon" is not a cursor of this poller`},
		{watukuytype.BackfillRequest{From: "5", To: to("2")}, "--to", `"2" is before --from "5"`},
		{watukuytype.BackfillRequest{From: "9"}, "--from", `"9" is after the live cursor "6"`},
	} {
		_, err := eng.Backfill(ctx, key, c.req)
		var ce *watukuytype.ConfigError
		if !errors.As(err, &ce) || ce.Field != c.field || !strings.Contains(ce.Msg, c.want) {
			t.Fatalf("backfill %+v: %v, want %s: %s", c.req, err, c.field, c.want)
		}
		if ki := w.inspect(eng); ki.Backfill != nil {
			t.Fatalf("a refused backfill %+v was written: %+v", c.req, ki.Backfill)
		}
	}
	// Within range, to the end, and from the beginning pass.
	for _, req := range []watukuytype.BackfillRequest{{From: "2"}, {From: "9", To: to("")}, {From: "", To: to("3")}} {
		if _, err := eng.Backfill(ctx, key, req); err != nil {
			t.Fatalf("backfill %+v: %v", req, err)
		}
	}
}

// itemAt places a test item by its identity's number (i03 at 3): the feed's offsets.
func itemAt(raw json.RawMessage) (float64, bool) {
	var m map[string]string
	if json.Unmarshal(raw, &m) != nil || !strings.HasPrefix(m["id"], "i") {
		return 0, false
	}
	n, err := strconv.ParseFloat(m["id"][1:], 64)
	return n, err == nil
}

// cursorAt places a numeric cursor.
func cursorAt(c string) (float64, bool) {
	n, err := strconv.ParseFloat(c, 64)
	return n, err == nil
}

// A backfill whose target falls inside a page emits nothing past it: the page is cut at
// the target, where its cursor ends, and the items beyond are left to the live lane.
func TestBackfillStopsAtATargetInsideAPage(t *testing.T) {
	w := newWorld(t)
	f := newFeed(2)
	f.putN(6)
	eng := w.engine(w.poller(f.fetch, func(p *watukuytype.Poller) {
		p.CursorPosition, p.ItemPosition = cursorAt, itemAt
	}))
	w.run(eng)
	w.rec.take()
	to := "3"
	if _, err := eng.Backfill(context.Background(), key, watukuytype.BackfillRequest{To: &to, Force: true}); err != nil {
		t.Fatal(err)
	}
	w.run(eng)
	ki := w.inspect(eng)
	if b := ki.Backfill; b == nil || !b.Done || b.Cursor != "3" || b.Fraction == nil || *b.Fraction != 1 {
		t.Fatalf("progress %+v: want done with its cursor at the target 3", b)
	}
	if got := summary(w.rec.take()); !slices.Equal(got, []string{"updated:i01", "updated:i02", "updated:i03"}) {
		t.Fatalf("events %v, want i01..i03: nothing past the target", got)
	}
	if ki.Cursor != "6" {
		t.Fatalf("the backfill moved the live cursor to %q", ki.Cursor)
	}
}

// inclusiveFeed lists items {"id", "t"} by t from the cursor on, the cursor's own t included
// (an API's "updated since"), size a page; Next is the page's last t.
func inclusiveFeed(size int, ts ...int) watukuytype.FetchFunc {
	return func(_ context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
		from := -1
		if req.Cursor != "" {
			n, err := strconv.Atoi(req.Cursor)
			if err != nil {
				return watukuytype.Page{}, err
			}
			from = n
		}
		var page watukuytype.Page
		page.Next = req.Cursor
		for i, at := range ts {
			if at < from {
				continue
			}
			if len(page.Items) == size {
				page.HasMore = true
				break
			}
			raw, _ := json.Marshal(map[string]string{"id": fmt.Sprintf("i%02d", i+1), "v": "1", "t": strconv.Itoa(at)})
			page.Items, page.Next = append(page.Items, raw), strconv.Itoa(at)
		}
		return page, nil
	}
}

// timeOf places an inclusiveFeed item by its t.
func timeOf(raw json.RawMessage) (float64, bool) {
	var m map[string]string
	if json.Unmarshal(raw, &m) != nil {
		return 0, false
	}
	n, err := strconv.ParseFloat(m["t"], 64)
	return n, err == nil
}

// A forced backfill over an inclusive "since" query sees each page's last item again at the
// start of the next page: it is emitted once, and an item of the same time that the last page
// did not hold is emitted. From the very beginning, how far the backfill is counts from its
// first item, not from 0.
func TestForcedBackfillEmitsAPageBoundaryOnce(t *testing.T) {
	w := newWorld(t)
	fetch := inclusiveFeed(3, 1001, 1002, 1003, 1003, 1005, 1006)
	eng := w.engine(w.poller(fetch, func(p *watukuytype.Poller) {
		p.CursorPosition, p.ItemPosition = cursorAt, timeOf
		p.MaxPagesPerCycle = 2
	}))
	for i := 0; i < 8; i++ { // the live lane catches up
		w.run(eng)
	}
	w.rec.take()
	bp, err := eng.Backfill(context.Background(), key, watukuytype.BackfillRequest{Force: true})
	if err != nil || bp.To != "1006" {
		t.Fatalf("backfill: %+v %v", bp, err)
	}
	var evs []string
	for i := 0; i < 20; i++ {
		w.run(eng)
		evs = append(evs, summary(w.rec.take())...)
		b := w.inspect(eng).Backfill
		if b.Done {
			break
		}
		if b.Fraction == nil || *b.Fraction > 0.9 || *b.Fraction < 0 { // at most 4 of 5 seconds in
			t.Fatalf("a running backfill at cursor %s reports fraction %v", b.Cursor, b.Fraction)
		}
	}
	want := []string{"updated:i01", "updated:i02", "updated:i03", "updated:i04", "updated:i05", "updated:i06"}
	if !slices.Equal(evs, want) {
		t.Fatalf("events %v, want each item once: %v", evs, want)
	}
}
