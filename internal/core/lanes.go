package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/watukuy/watukuy/internal/diff"
	"github.com/watukuy/watukuy/internal/schedule"
	"github.com/watukuy/watukuy/internal/statehash"
	"github.com/watukuy/watukuy/watukuytype"
)

// lane is one pass over an API within a cycle.
type lane struct {
	name     watukuytype.Lane
	fetch    watukuytype.FetchFunc
	cursor   string // where the pass starts
	listing  bool   // a full listing: unlisted identities are deleted when it completes
	maxPages int
	// save returns the state to commit with a page (the lane's cursor) and whether the lane
	// is done although the API has more (a backfill at its target); nil commits nothing.
	save func(page watukuytype.Page, events int) (state map[string]string, done bool)
	// trim, when set, cuts a page to what the lane emits before it is processed (a
	// backfill's range).
	trim func(page *watukuytype.Page)
	// yield ends the lane, unfinished, whenever the API asks to slow down (backfill: the
	// live lane gets the remaining budget).
	yield bool
	// tagged lanes send and commit entity tags (the live lane); fresh ones send none (a
	// listing with delete candidates to confirm: a 304 confirms nothing).
	tagged, fresh bool
}

// laneResult is how a lane ended.
type laneResult struct {
	complete bool          // the API said there is no more (or the lane reached its end)
	paced    time.Duration // stopped early to respect the API's rate limit; wait this long
	pages    int
	// halted: an operator paused the key, or the engine asked its cycles to yield (stopping
	// process, Tick's deadline): the lane stopped at a page boundary or gave up its request
	halted bool
}

// longestInCycleWait is the longest pause between two pages that a cycle sits out itself;
// a longer pace ends the cycle and schedules the rest.
const longestInCycleWait = time.Second

// listingPos is where a complete listing that did not fit in one cycle goes on (state field
// statehash.ListingPrefix + lane); the identities it showed so far are the store's
// (Commit.Listed).
type listingPos struct {
	Cursor string `json:"cursor"`          // the next page's
	Pages  int    `json:"pages"`           // read so far
	Cycles int    `json:"cycles"`          // that it took so far
	Since  int64  `json:"since"`           // ms its first page was read
	Rev    string `json:"rev,omitempty"`   // the Poller.Revision it began under
	Fails  int    `json:"fails,omitempty"` // cycles in a row whose first request of it failed
}

// listingFailsToRestart is how many cycles in a row may fail to go on with a listing before it
// starts over: its position may have expired at the API (a page token, a scroll id).
const listingFailsToRestart = 3

// listingField is the state field of lane's listing position.
func listingField(lane watukuytype.Lane) string { return statehash.ListingPrefix + string(lane) }

// listing reads lane's listing position (nil: none).
func (s state) listing(lane watukuytype.Lane) *listingPos {
	v := s.get(listingField(lane))
	if v == "" { // most keys, most cycles: nothing allocated
		return nil
	}
	var p listingPos
	if json.Unmarshal([]byte(v), &p) != nil {
		return nil
	}
	return &p
}

// listingRun is a listing lane's pass in this cycle: what it showed (seen) and, for a listing
// that goes on from an earlier cycle, its position (on); for one that began in this cycle,
// where its last committed page left it.
type listingRun struct {
	seen    map[string]bool
	on      *listingPos // a listing begun in an earlier cycle (nil: begun in this one)
	next    string      // the cursor after the last committed page
	pages   int         // pages committed in this cycle
	started time.Time
	rev     string // the poller's Revision
}

// listingsLongAfter is how many cycles a listing may take before each cycle warns that it
// reads the listing slower than the API grows it (or the cycle's page budget is too small).
const listingsLongAfter = 100

// runLane fetches page by page, commits each page with its cursor (G3) and delivers it. A
// complete listing that does not fit in the cycle's pages goes on from where it stopped in the
// next cycle: its position and what it showed are committed with its pages, and its deletes
// wait until the whole listing completed (G6).
func (c *cycle) runLane(ctx context.Context, ln lane) (laneResult, *cycleError) {
	var lr *listingRun
	if ln.listing {
		lr = &listingRun{seen: map[string]bool{}, on: c.state.listing(ln.name), started: c.now(), rev: c.p.Revision}
		if lr.on != nil && lr.on.Rev != c.p.Revision {
			// Begun under another definition of the requests: its pages would not line up.
			if f := c.dropListing(ctx, ln.name); f != nil {
				return laneResult{}, f
			}
			lr.on = nil
		}
		if lr.on != nil {
			lr.on.Cycles++
			if lr.on.Cycles > listingsLongAfter {
				c.logger().Warn().Str("lane", string(ln.name)).Int("pages", lr.on.Pages).Int("cycles", lr.on.Cycles).
					Msg("a complete listing has taken more cycles than expected: the API grows it faster than it is read, or maxPagesPerCycle is small for it")
			}
		}
	}
	res, f := c.lanePages(ctx, ln, lr)
	if lr != nil && lr.on != nil && lr.pages == 0 && f != nil && f.phase != "store" && f.kind != schedule.ResultThrottled {
		// It could not go on from its position: after a few cycles, it starts over.
		if lr.on.Fails++; lr.on.Fails >= listingFailsToRestart {
			c.logger().Warn().Str("lane", string(ln.name)).Int("fails", lr.on.Fails).Msg("a listing could not go on from where it stopped: it starts over")
			if df := c.dropListing(ctx, ln.name); df != nil {
				return res, df
			}
		} else if _, err := c.commitPoll(ctx, Commit{State: map[string]string{listingField(ln.name): lr.position(lr.on.Cursor, 0, lr.on.Cycles)}}); err != nil {
			return res, storeErr(err)
		}
		return res, f
	}
	// A listing begun in this cycle keeps a position only when it stopped short for want of
	// pages or time, or was throttled; after any other failure it starts over.
	if lr == nil || lr.on != nil || res.complete || lr.pages == 0 || f != nil && f.kind != schedule.ResultThrottled {
		return res, f
	}
	// A listing begun in this cycle stops short: what it showed, then its position, go on to
	// the next cycle, in slices of a commit's items (a death before the position is written:
	// the next cycle lists from the start).
	ids := listedIDs(lr.seen)
	step := c.chunkItems()
	for from := 0; ; from += step {
		w := pageWrites{Commit: Commit{ListedLane: ln.name, ClearListed: from == 0, Listed: ids[from:min(from+step, len(ids))]}}
		last := from+step >= len(ids)
		if last {
			pos := lr.position(lr.next, lr.pages, 1)
			w.setState(listingField(ln.name), pos)
			c.state[listingField(ln.name)] = pos
		}
		if cf := c.commitAndDeliver(ctx, &w); cf != nil {
			return res, cf
		}
		if last {
			return res, f
		}
	}
}

// dropListing ends lane's listing under way, its position and what it showed, in one fenced
// write: it starts over when it next runs.
func (c *cycle) dropListing(ctx context.Context, lane watukuytype.Lane) *cycleError {
	if _, err := c.commitPoll(ctx, Commit{State: map[string]string{listingField(lane): ""}, ListedLane: lane, ClearListed: true}); err != nil {
		return storeErr(err)
	}
	c.state[listingField(lane)] = "" // End drops the field
	return nil
}

// dropStaleListings drops the listings under way of lanes the poller no longer lists
// (another strategy, no reconcile any more): nothing would go on with them, and what other
// lanes store would go on adding to what they showed.
func (c *cycle) dropStaleListings(ctx context.Context) *cycleError {
	for lane, lists := range map[watukuytype.Lane]bool{
		watukuytype.LaneLive:      c.p.Strategy == watukuytype.SnapshotDiff,
		watukuytype.LaneReconcile: c.p.Reconcile != nil,
	} {
		if !lists && c.state.listing(lane) != nil {
			if f := c.dropListing(ctx, lane); f != nil {
				return f
			}
		}
	}
	return nil
}

// listingUnderWay is the listing lane other than lane whose listing goes on from an earlier
// cycle ("" for none). The reconcile lane never meets one: it runs only in a cycle whose live
// lane completed.
func (c *cycle) listingUnderWay(lane watukuytype.Lane) watukuytype.Lane {
	for _, l := range []watukuytype.Lane{watukuytype.LaneReconcile, watukuytype.LaneLive} {
		if l != lane && c.state.listing(l) != nil {
			return l
		}
	}
	return ""
}

// position encodes the listing's position after pages more pages, at cursor.
func (lr *listingRun) position(cursor string, pages, cycles int) string {
	p := listingPos{Cursor: cursor, Pages: pages, Cycles: cycles, Since: lr.started.UnixMilli(), Rev: lr.rev}
	if lr.on != nil {
		p.Pages, p.Cycles, p.Since, p.Rev = lr.on.Pages+pages, lr.on.Cycles, lr.on.Since, lr.on.Rev
		if pages == 0 {
			p.Fails = lr.on.Fails
		}
	}
	b, _ := json.Marshal(p)
	return string(b)
}

// listedIDs is seen as the store takes it.
func listedIDs(seen map[string]bool) []ListedID {
	out := make([]ListedID, 0, len(seen))
	for id, valid := range seen {
		out = append(out, ListedID{Identity: id, Valid: valid})
	}
	return out
}

// lanePages is runLane's pages; lr is the listing's run (nil for a lane that is no listing).
func (c *cycle) lanePages(ctx context.Context, ln lane, lr *listingRun) (laneResult, *cycleError) {
	var res laneResult
	var seen map[string]bool
	c.enterLane(ln.name)
	cursor := ln.cursor
	if lr != nil {
		seen = lr.seen
		if lr.on != nil {
			cursor = lr.on.Cursor
		}
	}
	// The first page's tag is committed when the pass is complete, changed nothing, ends at
	// the cursor it started from (a listing always does) and its last page carried the same tag: only then do the
	// rows hold all that tag names (a pass over pages while the API changes holds a mix).
	var firstTag, lastTag string
	quiet := true
	// A request, and a wait between pages, end at once when the cycle is asked to yield: a
	// read given up costs nothing, and the key is handed back due at once.
	yctx, stopYield := mergeCancel(ctx, c.yield)
	defer stopYield()
	for pages := 0; pages < ln.maxPages; pages++ {
		if c.halted() {
			res.halted = true
			return res, nil
		}
		if d, err := c.takeToken(yctx, ln.name); c.yielding(ctx) {
			res.halted = true
			return res, nil
		} else if err != nil {
			return res, storeErr(err)
		} else if d > 0 {
			res.paced = d // the budget's other keys go first; this key is due when it can serve it
			return res, nil
		}
		if f := c.beforeRequest(ctx, pages); f != nil {
			return res, f
		}
		if c.halted() {
			res.halted = true
			return res, nil
		}
		c.confirmed = false
		req := watukuytype.FetchRequest{Key: c.key, Cursor: cursor, Lane: ln.name, Page: pages}
		if ln.tagged && !ln.fresh && pages == 0 && (lr == nil || lr.on == nil) {
			req.ETag = c.tagFor(cursor)
		}
		sent := time.Now()
		fctx, span := c.startSpan(yctx, SpanFetch)
		page, err := ln.fetch(c.keeper.withLeaseCheck(fctx), req)
		endFetchSpan(span, ln.name, pages, page, err)
		if err != nil && c.yielding(ctx) && errors.Is(err, context.Canceled) {
			// Given up for the yield; an answer that came (a 429 among them) is handled below.
			res.halted = true
			return res, nil
		}
		if h := c.e.hooks.OnFetch; h != nil {
			h(c.key, ln.name, time.Since(sent), err)
		}
		c.rep.Pages++
		res.pages++
		if err != nil {
			return res, c.fetchFailure(ctx, ln, cursor, err)
		}
		c.answered = true
		if page.RateLimit != nil {
			c.rateLimit = page.RateLimit
			c.rateLimitAt = c.now()
			if page.RateLimit.Remaining <= 0 && page.RateLimit.Reset > 0 {
				if err := c.pauseBudget(ctx, page.RateLimit.Reset); err != nil {
					return res, storeErr(err)
				}
			}
		}
		if page.NotModified {
			c.rep.NotModified = true
			res.complete = true
			return res, nil // idle, and never a source of deletes (G6)
		}
		if ln.trim != nil {
			ln.trim(&page)
		}
		w := pageWrites{history: ln.name == watukuytype.LaneBackfill}
		valid := c.valid
		var pageSeen map[string]bool
		other := c.listingUnderWay(ln.name)
		if seen != nil || other != "" {
			pageSeen = map[string]bool{}
		}
		if err := c.process(ctx, ln.name, page.Items, pageSeen, &w); err != nil {
			return res, storeErr(err)
		}
		if seen != nil {
			for id, v := range pageSeen {
				seen[id] = seen[id] || v
			}
		}
		if other != "" {
			// Another lane's listing is under way over several cycles: what this lane stores
			// counts as shown by it, or it would take an identity stored after it passed its
			// page for one it missed (G6). A listing lane's page names its own listing's, so
			// the other's go first, on their own.
			if seen == nil {
				w.Listed, w.ListedLane = listedIDs(pageSeen), other
			} else if f := c.commitAndDeliver(ctx, &pageWrites{Commit: Commit{Listed: listedIDs(pageSeen), ListedLane: other}}); f != nil {
				return res, f
			}
		}
		done := false
		if ln.save != nil {
			w.State, done = ln.save(page, len(w.events))
		}
		if lr != nil && lr.on != nil && page.HasMore {
			// A listing from an earlier cycle: each page goes with its position and what it
			// showed, so the next cycle goes on from it.
			pos := lr.position(page.Next, lr.pages+1, lr.on.Cycles)
			w.setState(listingField(ln.name), pos)
			c.state[listingField(ln.name)] = pos
			w.Listed, w.ListedLane = listedIDs(pageSeen), ln.name
		}
		w.ClearTouched = w.history && !backfillActive(c.backfilling) // the backfill's last page
		if ln.tagged {
			if pages == 0 {
				firstTag = page.ETag
			}
			lastTag = page.ETag
			quiet = quiet && len(w.steps) == 0 && len(w.Invalid) == 0
		}
		w.progress = c.valid > valid
		if f := c.commitAndDeliver(ctx, &w); f != nil {
			return res, f
		}
		if lr != nil {
			lr.next, lr.pages = page.Next, lr.pages+1
		}
		cursor = page.Next
		if !page.HasMore || done {
			res.complete = true
			break
		}
		if gap := c.pace(); gap > 0 {
			if gap > longestInCycleWait || ln.yield {
				res.paced = gap
				return res, nil
			}
			if err := c.wait(yctx, gap); c.yielding(ctx) {
				res.halted = true
				return res, nil
			} else if err != nil {
				return res, storeErr(err)
			}
		}
	}
	tag := ""
	if ln.tagged && res.complete && quiet && (ln.listing || cursor == ln.cursor) && firstTag != "" && firstTag == lastTag && (lr == nil || lr.on == nil) {
		tag = c.encodeTag(ln.cursor, firstTag)
	}
	if res.complete && lr != nil {
		var done Commit
		if lr.on != nil {
			// The whole listing: what the earlier cycles of it showed too.
			shown, err := c.e.store.Listed(ctx, c.key, ln.name)
			if err != nil {
				return res, storeErr(err)
			}
			for id, v := range shown {
				seen[id] = seen[id] || v
			}
			done = Commit{ListedLane: ln.name, ClearListed: true, State: map[string]string{listingField(ln.name): ""}}
			c.state[listingField(ln.name)] = "" // End drops the field
		}
		return res, c.listingDeletes(ctx, ln.name, seen, tag, done)
	}
	if tag != "" {
		c.setTag(tag)
	}
	return res, nil
}

// liveTag is the live lane's committed entity tag: the tag of a pass's first answer, stored
// only while the rows hold all that answer said. Every commit that changes rows clears it in
// the same write, so a 304 always means "nothing beyond what is committed". A tag a worker
// kept in memory could outlive a commit that never happened, or be older than another
// worker's answer (G3).
type liveTag struct {
	Cursor string `json:"cursor"` // the request's cursor, on a pass's first page
	ETag   string `json:"etag"`
	// Schema is the poller's schema version when the rows took the answer in: after a bump
	// they must see the items again (a 304 would hide the schema change).
	Schema int `json:"schema,omitempty"`
}

// encodeTag is the stored form of etag, the answer to a pass's first request at cursor.
func (c *cycle) encodeTag(cursor, etag string) string {
	b, _ := json.Marshal(liveTag{Cursor: cursor, ETag: etag, Schema: c.p.SchemaVersion})
	return string(b)
}

// tagFor is the committed tag of a pass's first request at cursor, if there is one.
func (c *cycle) tagFor(cursor string) string {
	var t liveTag
	if json.Unmarshal([]byte(c.state.get(statehash.LiveTag)), &t) != nil || t.Cursor != cursor || t.Schema != c.p.SchemaVersion {
		return ""
	}
	return t.ETag
}

// setTag records the live lane's tag (encoded, "" for none); it goes with the cycle's next
// commit that writes anything, or with its end.
func (c *cycle) setTag(v string) {
	if v != c.state.get(statehash.LiveTag) {
		c.state[statehash.LiveTag] = v
		c.tagPending = true
	}
}

// beforeRequest runs before every request a lane sends. The lease is confirmed first when
// nothing fenced confirmed it since the last request (an unchanged page) or the last
// confirmation is older than the validity margin (the process may have been frozen since): a
// confirmed lease means no other instance held the key since Begin, so the throttle window and
// pause flag this cycle knows are current. Then the lease must still be surely valid, and the
// request must not fall in the key's throttle window (G8).
func (c *cycle) beforeRequest(ctx context.Context, page int) *cycleError {
	if err := context.Cause(ctx); err != nil {
		return storeErr(err)
	}
	if (page > 0 && !c.confirmed) || c.keeper.stale() {
		if err := c.keeper.confirm(ctx); err != nil {
			return storeErr(err)
		}
	}
	if !c.keeper.valid() {
		return storeErr(&watukuytype.LeaseLostError{Key: c.key, Epoch: c.lease.Epoch, Reason: "the lease may have expired before a request (a pause past its validity)"})
	}
	if until := c.state.time(statehash.Throttled); c.serverNotLater().Before(until) {
		return &cycleError{phase: "fetch", code: watukuytype.CodeThrottled, kind: schedule.ResultThrottled, retryAfter: until.Sub(c.serverNotLater()),
			err: fmt.Errorf("%s is throttled until %s", c.key.Describe(), until.Format(time.RFC3339Nano))}
	}
	return nil
}

// pace is the gap the last rate-limit headers ask for before the next request, less the
// time already gone since they were read.
func (c *cycle) pace() time.Duration {
	if c.rateLimit == nil {
		return 0
	}
	return schedule.Pace(c.rateLimit.Remaining, c.rateLimit.Reset) - c.now().Sub(c.rateLimitAt)
}

func (c *cycle) wait(ctx context.Context, d time.Duration) error { return c.e.sleep(ctx, d) }

// sleep waits d, or less when ctx ends (its cause); Options.Wait replaces it in tests.
func (e *Engine) sleep(ctx context.Context, d time.Duration) error {
	if e.wait != nil {
		return e.wait(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// fetchFailure classifies a failed request: 429 and 503 with Retry-After throttle (not a
// failure, G8); configuration problems and cursor stalls get their own codes.
func (c *cycle) fetchFailure(ctx context.Context, ln lane, cursor string, err error) *cycleError {
	if cause := context.Cause(ctx); cause != nil {
		return storeErr(cause)
	}
	if watukuytype.IsLeaseLost(err) {
		return storeErr(err) // the request never left: the cycle is abandoned
	}
	err = &keyError{op: string(ln.name) + " lane of", key: c.key, at: fmt.Sprintf(" at cursor %q", cursor), err: err}
	var he *watukuytype.HTTPError
	var ce *watukuytype.ConfigError
	var se *watukuytype.CursorStallError
	switch {
	case errors.As(err, &he) && (he.StatusCode == 429 || he.StatusCode == 503 && he.RetryAfter > 0):
		c.throttled = true
		if he.RateLimit != nil {
			c.rateLimit, c.rateLimitAt = he.RateLimit, c.now()
		}
		if err := c.pauseBudget(ctx, budgetPause(he.RetryAfter, he.RateLimit)); err != nil {
			return storeErr(err)
		}
		if he.RetryAfter > 0 {
			// Saved at once, not only at the end of the cycle: if this process dies first, the
			// next owner still keeps out of the window (G8).
			until := strconv.FormatInt(c.now().Add(he.RetryAfter).UnixMilli(), 10)
			if _, werr := c.commit(ctx, &pageWrites{Commit: Commit{State: map[string]string{statehash.Throttled: until}}}); werr != nil {
				return storeErr(werr)
			}
			c.state[statehash.Throttled] = until // whatever runs next in this cycle keeps out of it too
		}
		return &cycleError{phase: "fetch", code: watukuytype.CodeThrottled, kind: schedule.ResultThrottled, retryAfter: he.RetryAfter, err: err}
	case errors.As(err, &ce):
		return &cycleError{phase: "fetch", code: watukuytype.CodeConfig, kind: schedule.ResultFailed, err: err}
	case errors.As(err, &se):
		return &cycleError{phase: "fetch", code: watukuytype.CodeCursorStall, kind: schedule.ResultFailed, err: err}
	}
	return &cycleError{phase: "fetch", code: watukuytype.CodeFetch, kind: schedule.ResultFailed, err: err}
}

// listingDeletes handles the stored identities a complete listing did not show (G6). A
// listing that changes while it is paged can miss an item the API never deleted (a delete
// shifts later items onto pages already read), so an identity is deleted only when the
// poller's Detail request finds it gone (a failed Detail request decides nothing), or,
// without a Detail, once ConfirmDeletes consecutive complete listings have missed it; until
// then its row counts the misses. seen maps every listed identity to whether it was valid
// (and so is stored).
//
// tag is the listing's entity tag, committed when the deletes change nothing either; done is
// what the listing's end writes besides (a listing that spanned cycles: its position and what
// it showed go), with the last of the deletes' commits.
func (c *cycle) listingDeletes(ctx context.Context, lane watukuytype.Lane, seen map[string]bool, tag string, done Commit) *cycleError {
	stored := int64(0)
	for _, valid := range seen {
		if valid {
			stored++
		}
	}
	w := pageWrites{Commit: done}
	yctx, stopYield := mergeCancel(ctx, c.yield)
	defer stopYield()
	c.rep.DeleteCandidates = 0
	// A listing over several cycles may have shown identities deleted since: only reading
	// them all tells.
	if pending := c.state.int(statehash.DeleteCandidates); stored == c.items && !done.ClearListed {
		// Every stored identity was listed: skip reading them all.
		if pending > 0 {
			w.setState(statehash.DeleteCandidates, "0")
		}
		if tag != "" {
			c.setTag(tag)
		}
		return c.commitAndDeliver(ctx, &w)
	}
	all, err := c.e.store.Identities(ctx, c.key)
	if err != nil {
		return storeErr(err)
	}
	var missing, invalid []string
	for _, id := range all {
		switch valid, listed := seen[id]; {
		case !listed:
			missing = append(missing, id)
		case !valid:
			invalid = append(invalid, id)
		}
	}
	// Listed but invalid is still listed: a miss streak ends there too.
	if len(invalid) > 0 {
		rows, err := c.load(ctx, invalid, false)
		if err != nil {
			return storeErr(err)
		}
		for i, k := range rows {
			if k.row != nil && k.row.Missing > 0 {
				r := *k.row
				r.Missing = 0
				w.steps = append(w.steps, step{identity: invalid[i], row: diff.AppendRow(nil, r), event: -1})
			}
		}
	}
	known, err := c.load(ctx, missing, false)
	if err != nil {
		return storeErr(err)
	}
	var found []json.RawMessage
	for i, id := range missing {
		k := &known[i]
		if k.row == nil {
			continue
		}
		if c.p.Detail != nil {
			// A yield (a stopping worker, Tick's deadline), a pause or a budget with no token
			// for now: what is decided is committed, the rest waits for the next listing.
			if c.halted() {
				return c.commitAndDeliver(ctx, &w)
			}
			if d, err := c.takeToken(yctx, lane); c.yielding(ctx) || err == nil && d > 0 {
				return c.commitAndDeliver(ctx, &w)
			} else if err != nil {
				return storeErr(err)
			}
			item, ok, f := c.detail(ctx, id)
			switch {
			case f != nil && (f.kind == schedule.ResultThrottled || f.phase == "store"):
				// The rest waits for the next listing; the cycle ends as the failure says (a
				// throttle window stays in force).
				if cf := c.commitAndDeliver(ctx, &w); cf != nil {
					return cf
				}
				return f
			case f == nil && ok:
				found = append(found, item) // still there: diffed like a listed item
				continue
			case f == nil:
				c.delete(&w, lane, id, k)
				c.supersede(&w.Commit, id, k)
				continue
			}
			// The request failed: the identity stays a candidate until a Detail answer
			// says it is gone (a count of listings is no proof where a Detail can be had).
		}
		r := *k.row
		r.Missing++
		if r.Missing >= c.p.ConfirmDeletes && c.p.Detail == nil {
			c.delete(&w, lane, id, k)
			c.supersede(&w.Commit, id, k)
			continue
		}
		w.steps = append(w.steps, step{identity: id, row: diff.AppendRow(nil, r), event: -1})
		c.rep.DeleteCandidates++
	}
	c.items -= int64(len(w.events))
	// The next listing of a key with candidates must be a full one: a 304 confirms nothing.
	w.setState(statehash.DeleteCandidates, strconv.Itoa(c.rep.DeleteCandidates))
	if len(found) > 0 {
		if err := c.process(ctx, lane, found, nil, &w); err != nil {
			return storeErr(err)
		}
	}
	if tag != "" && len(w.steps) == 0 && len(w.Invalid) == 0 && c.rep.DeleteCandidates == 0 {
		c.setTag(tag)
	}
	return c.commitAndDeliver(ctx, &w)
}

// detail asks the poller's Detail request for one identity missing from a listing, under the
// same rules as any request (lease confirmed, throttle window respected).
func (c *cycle) detail(ctx context.Context, identity string) (json.RawMessage, bool, *cycleError) {
	if f := c.beforeRequest(ctx, 1); f != nil {
		return nil, false, f
	}
	c.confirmed = false
	sent := time.Now()
	dctx, span := c.startSpan(ctx, SpanFetch)
	item, found, err := c.p.Detail(c.keeper.withLeaseCheck(dctx), c.key, identity)
	if span.IsRecording() {
		span.SetAttributes(AttrLane.String("detail"))
	}
	endSpan(span, err)
	if h := c.e.hooks.OnFetch; h != nil {
		h(c.key, "detail", time.Since(sent), err)
	}
	if err != nil {
		return nil, false, c.fetchFailure(ctx, lane{name: "detail"}, identity, err)
	}
	return item, found, nil
}

// liveLane is the poller's live pass: from the committed cursor, or a full listing for
// snapshotDiff.
func (c *cycle) liveLane() lane {
	ln := lane{name: watukuytype.LaneLive, fetch: c.p.Fetch, cursor: c.state.get(statehash.CursorLive), maxPages: c.p.MaxPagesPerCycle, tagged: true}
	if c.p.Strategy == watukuytype.SnapshotDiff {
		ln.cursor, ln.listing = "", true
		ln.fresh = c.state.int(statehash.DeleteCandidates) > 0
		return ln
	}
	ln.save = func(page watukuytype.Page, _ int) (map[string]string, bool) {
		if page.Next == c.state.get(statehash.CursorLive) {
			return nil, false
		}
		c.state[statehash.CursorLive] = page.Next
		return map[string]string{statehash.CursorLive: page.Next}, false
	}
	return ln
}

// reconcileDue reports whether the reconcile lane runs in this cycle.
func (c *cycle) reconcileDue() bool {
	due := c.state.time(statehash.ReconcileDue)
	return c.p.Reconcile != nil && !due.IsZero() && !c.now().Before(due)
}
