package core

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"

	"github.com/watukuy/watukuy/internal/statehash"
	"github.com/watukuy/watukuy/watukuytype"
)

// Backfill (re)starts the key's backfill lane: the live lane's logic from an older cursor,
// run with the page budget the live lane leaves, committing per page, events tagged lane
// "backfill". Calling it again replaces cursor and target. snapshotDiff pollers have no
// cursor to go back to and refuse with a *ConfigError.
func (e *Engine) Backfill(ctx context.Context, key watukuytype.Key, req watukuytype.BackfillRequest) (watukuytype.BackfillProgress, error) {
	t, err := e.resolve(ctx, key)
	if err != nil {
		return watukuytype.BackfillProgress{}, err
	}
	if t.info.Strategy == "snapshotDiff" {
		return watukuytype.BackfillProgress{}, &watukuytype.ConfigError{Poller: key.Poller, Field: "cursor.strategy",
			Msg: "snapshotDiff lists everything every cycle and has no cursor to backfill from; use reset-cursor --clear-snapshot to re-emit every item (with the ids they were emitted with)"}
	}
	var bp watukuytype.BackfillProgress
	err = e.withOpLease(ctx, t, func(c *cycle) error {
		now := c.now()
		bp = watukuytype.BackfillProgress{From: req.From, Cursor: req.From, Force: req.Force, StartedAt: now, UpdatedAt: now}
		if req.To != nil {
			bp.To = *req.To
		} else {
			bp.To = c.state.get(statehash.CursorLive)
		}
		if err := checkBackfill(t, bp, req.To != nil); err != nil {
			return err
		}
		if prev := c.state.backfill(); prev != nil {
			bp.Generation = prev.Generation
		}
		bp.Generation++
		raw, _ := json.Marshal(bp)
		// What the live side writes from now on is kept from the backfill's past (G3).
		_, err := e.store.CommitPoll(ctx, c.lease, Commit{State: map[string]string{statehash.Backfill: string(raw)}, ClearTouched: true})
		return err
	})
	if err != nil {
		return bp, keyErr("watukuy: backfill", key, err)
	}
	return bp, e.dueNow(ctx, key, "backfill")
}

// checkBackfill refuses, before anything is written, a range the poller's CursorPosition
// can check: a From or To it cannot place, and a From after the target. Without the
// poller's definition (an operator's process with only the Redis URL) or a CursorPosition,
// cursors are opaque and the backfill lane's first request is their check. toGiven says
// whether the caller set To or it defaulted to the live cursor: an error blames only what
// the caller gave (Field names the command's flag).
func checkBackfill(t target, bp watukuytype.BackfillProgress, toGiven bool) error {
	if t.p == nil || t.p.CursorPosition == nil {
		return nil
	}
	pos := t.p.CursorPosition
	bad := func(flag, cursor string) error {
		return &watukuytype.ConfigError{Poller: t.key.Poller, Field: flag,
			Msg: fmt.Sprintf("%q is not a cursor of this poller (it cannot place it): give a cursor as the poller writes it (`watukuy inspect` shows the live one), or null", cursor)}
	}
	from, fromOK := pos(bp.From)
	if bp.From != "" && !fromOK {
		return bad("--from", bp.From)
	}
	to, toOK := pos(bp.To)
	if toGiven && bp.To != "" && !toOK {
		return bad("--to", bp.To)
	}
	if bp.From == "" || !fromOK || !toOK || from <= to {
		return nil
	}
	if toGiven {
		return &watukuytype.ConfigError{Poller: t.key.Poller, Field: "--to", Msg: fmt.Sprintf("%q is before --from %q: nothing to backfill", bp.To, bp.From)}
	}
	return &watukuytype.ConfigError{Poller: t.key.Poller, Field: "--from",
		Msg: fmt.Sprintf("%q is after the live cursor %q, where a backfill stops by default: nothing to backfill (give an older --from, or --to null to run until the API has no more)", bp.From, bp.To)}
}

// backfillLane is the key's active backfill bp as a lane with budget pages, or false when the
// live lane has not caught up or left no page.
func (c *cycle) backfillLane(bp *watukuytype.BackfillProgress, live laneResult, budget int) (lane, bool) {
	if budget <= 0 || !live.complete || live.paced > 0 {
		return lane{}, false
	}
	pos := c.p.CursorPosition
	ln := lane{name: watukuytype.LaneBackfill, fetch: c.p.Fetch, cursor: bp.Cursor, maxPages: budget, yield: true}
	if pos != nil && c.p.ItemPosition != nil {
		ln.trim = func(page *watukuytype.Page) { c.trimBackfillPage(bp, page) }
	}
	ln.save = func(page watukuytype.Page, events int) (map[string]string, bool) {
		now := c.now()
		bp.Cursor = page.Next
		bp.Pages++
		bp.Items += len(page.Items)
		bp.Events += events
		bp.UpdatedAt, bp.LastError = now, ""
		reached := bp.To != "" && page.Next == bp.To
		if pos != nil && bp.To != "" {
			at, ok1 := pos(page.Next)
			end, ok2 := pos(bp.To)
			start, ok3 := pos(bp.From)
			if bp.From == "" {
				start, ok3 = 0, true
				if bp.Origin != nil {
					start = *bp.Origin
				}
			}
			if ok1 && ok2 {
				reached = reached || at >= end
				if ok3 && end > start {
					f := min(max((at-start)/(end-start), 0), 1)
					bp.Fraction = &f
				}
			}
		}
		if reached || !page.HasMore {
			bp.Done, bp.DoneAt = true, &now
			one := 1.0
			bp.Fraction = &one
		}
		raw, _ := json.Marshal(bp)
		return map[string]string{statehash.Backfill: string(raw)}, reached
	}
	c.force = 0
	if bp.Force {
		c.force = bp.Generation
	}
	c.backfilling = bp
	return ln, true
}

// maxTie bounds BackfillProgress.Tie: a longer tie at a page's end may be emitted twice (the
// same ids), never lost.
const maxTie = 100

// trimBackfillPage cuts a backfill's page to what the backfill emits (Poller.ItemPosition):
// items past its target are the live lane's, and the page then ends at the target (its
// cursor, and the backfill is done); items the page lists again at the position it resumed
// from, which the last page emitted (Tie), are not emitted twice. Items without a position
// stay. It records the page's own tie, and the origin of a backfill from the very beginning.
func (c *cycle) trimBackfillPage(bp *watukuytype.BackfillProgress, page *watukuytype.Page) {
	end, bounded := c.p.CursorPosition(bp.To)
	bounded = bounded && bp.To != ""
	from, resumed := c.p.CursorPosition(bp.Cursor)
	resumed = resumed && bp.Cursor != "" && len(bp.Tie) > 0
	kept := make([]json.RawMessage, 0, len(page.Items))
	at := make([]float64, 0, len(page.Items))
	cut := false
	for _, it := range page.Items {
		p, ok := c.p.ItemPosition(it)
		switch {
		case !ok:
			p = math.NaN()
		case bounded && p > end:
			cut = true
			continue
		case resumed && p == from:
			if id, err := c.p.Identity(it); err == nil && slices.Contains(bp.Tie, id) {
				continue
			}
		}
		if bp.From == "" && bp.Origin == nil && !math.IsNaN(p) {
			bp.Origin = &p
		}
		kept, at = append(kept, it), append(at, p)
	}
	page.Items = kept
	if cut {
		page.Next, page.HasMore = bp.To, false
	}
	bp.Tie = nil
	if last, ok := c.p.CursorPosition(page.Next); ok {
		for i, it := range kept {
			if at[i] == last && len(bp.Tie) < maxTie {
				if id, err := c.p.Identity(it); err == nil {
					bp.Tie = append(bp.Tie, id)
				}
			}
		}
	}
}

// active reports whether a backfill is waiting to run.
func backfillActive(bp *watukuytype.BackfillProgress) bool {
	return bp != nil && !bp.Done && !bp.Failed
}

// endBackfill records how the running backfill lane ended without a page: done (no failure:
// a 304 at its cursor), failed for good (a cursor the poller or API refuses), or a transient
// failure retried at the key's next cycle. The live lane's schedule is not affected.
func (c *cycle) endBackfill(ctx context.Context, f *cycleError) *cycleError {
	now := c.now()
	bp := c.backfilling
	bp.UpdatedAt = now
	switch {
	case f == nil:
		one := 1.0
		bp.Done, bp.DoneAt, bp.Fraction, bp.LastError = true, &now, &one, ""
	default:
		bp.LastError = string(f.code) + ": " + f.err.Error()
		bp.Failed = f.code == watukuytype.CodeConfig || f.code == watukuytype.CodeCursorStall
		c.logger().Warn().Err(f.err).Bool("stopped", bp.Failed).Msg("backfill request failed")
		if h := c.e.hooks.OnError; h != nil {
			h(c.key, "backfill", f.err)
		}
	}
	raw, _ := json.Marshal(bp)
	return c.commitAndDeliver(ctx, &pageWrites{Commit: Commit{State: map[string]string{statehash.Backfill: string(raw)}, ClearTouched: !backfillActive(bp)}})
}
