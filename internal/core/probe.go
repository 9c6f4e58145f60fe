package core

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"slices"

	"github.com/watukuy/watukuy/internal/budget"
	"github.com/watukuy/watukuy/watukuytype"
)

// Probe fetches the first page of p's live lane for partition, from the very beginning, and
// reports the identity, version and fingerprint of every item and the cursor the lane would
// commit. When the page says more follow, it asks for the next one too, to see whether the
// cursor stalls there (ProbeResult.Stall). It writes nothing anywhere: for checking a new API
// before it goes live.
func Probe(ctx context.Context, p watukuytype.Poller, partition string) (watukuytype.ProbeResult, error) {
	p, err := WithDefaults(p)
	if err != nil {
		return watukuytype.ProbeResult{}, err
	}
	key := watukuytype.Key{Poller: p.Name, Partition: partition}
	res := watukuytype.ProbeResult{Poller: p.Name, Partition: partition, Items: []watukuytype.ProbeItem{}}
	page, err := p.Fetch(ctx, watukuytype.FetchRequest{Key: key, Lane: watukuytype.LaneLive})
	if err != nil {
		return res, keyErr("watukuy: probe", key, err)
	}
	res.Next, res.HasMore, res.NotModified = page.Next, page.HasMore, page.NotModified
	c := &cycle{p: &p, key: key}
	for _, raw := range page.Items {
		o, issue := c.observe(raw)
		it := watukuytype.ProbeItem{Identity: o.identity, Version: o.version, Tombstone: o.tombstone, Issue: issue}
		if issue == "" && !o.tombstone {
			it.Fingerprint = hex.EncodeToString(o.vf[:])
		}
		if issue != "" {
			res.Invalid++
		}
		res.Items = append(res.Items, it)
	}
	if len(page.Items) > 0 {
		var first map[string]json.RawMessage
		if json.Unmarshal(page.Items[0], &first) == nil {
			res.Fields = slices.Sorted(maps.Keys(first))
		}
	}
	res.Stall, res.Repeated = probeNext(ctx, p, key, page)
	return res, nil
}

// probeNext asks for the page after page, as the live lane's next request would, and returns
// the message of the cursor stall it meets ("" for none), and whether it repeated page's items
// (an API that ignores the paging parameter). Both show only there: a full page whose items
// all share one change time is fine from the very beginning, but the request after it gets
// the same page back. Other errors of that request are left to the cycles: the probe reports
// the first page.
func probeNext(ctx context.Context, p watukuytype.Poller, key watukuytype.Key, page watukuytype.Page) (stall string, repeated bool) {
	if !page.HasMore || page.NotModified {
		return "", false
	}
	next, err := p.Fetch(ctx, watukuytype.FetchRequest{Key: key, Lane: watukuytype.LaneLive, Cursor: page.Next, Page: 1})
	var se *watukuytype.CursorStallError
	if errors.As(err, &se) {
		return se.Msg, false
	}
	return "", err == nil && len(page.Items) > 0 && slices.EqualFunc(page.Items, next.Items, func(a, b json.RawMessage) bool { return bytes.Equal(a, b) })
}

// ProbeListing reads the complete listings of p (a SnapshotDiff live lane, a Reconcile lane)
// for partition, up to maxPages pages each, and estimates the pages and cycles each takes. It
// writes nothing. A poller with neither has no listing: nil.
func ProbeListing(ctx context.Context, p watukuytype.Poller, partition string, maxPages int) ([]watukuytype.ListingEstimate, error) {
	p, err := WithDefaults(p)
	if err != nil {
		return nil, err
	}
	key := watukuytype.Key{Poller: p.Name, Partition: partition}
	var out []watukuytype.ListingEstimate
	type listing struct {
		lane    watukuytype.Lane
		fetch   watukuytype.FetchFunc
		inCycle int
	}
	var ls []listing
	if p.Strategy == watukuytype.SnapshotDiff {
		ls = append(ls, listing{watukuytype.LaneLive, p.Fetch, p.MaxPagesPerCycle})
	}
	if p.Reconcile != nil {
		ls = append(ls, listing{watukuytype.LaneReconcile, p.Reconcile.Fetch, min(p.MaxPagesPerCycle, p.Reconcile.MaxPages)})
	}
	for _, l := range ls {
		est := watukuytype.ListingEstimate{Lane: l.lane, PagesPerCycle: l.inCycle}
		cursor := ""
		for est.Pages < maxPages && !est.Complete {
			page, err := l.fetch(ctx, watukuytype.FetchRequest{Key: key, Lane: l.lane, Cursor: cursor, Page: est.Pages})
			if err != nil {
				return out, keyErr("watukuy: probe "+string(l.lane)+" listing", key, err)
			}
			est.Pages++
			est.Items += len(page.Items)
			est.Complete = !page.HasMore
			cursor = page.Next
		}
		est.Cycles = (est.Pages + est.PagesPerCycle - 1) / est.PagesPerCycle
		out = append(out, est)
	}
	return out, nil
}

// Probe is the package's Probe whose requests take their tokens from the budget p names
// (Poller.Budget), as the workers' requests do: a probe of an API the workers poll through a
// shared budget does not push it over its limit. It waits for each token (ctx bounds it).
func (e *Engine) Probe(ctx context.Context, p watukuytype.Poller, partition string) (watukuytype.ProbeResult, error) {
	return Probe(ctx, e.budgeted(p, partition), partition)
}

// ProbeListing is the package's ProbeListing whose requests take their tokens from the
// budget p names, as Engine.Probe.
func (e *Engine) ProbeListing(ctx context.Context, p watukuytype.Poller, partition string, maxPages int) ([]watukuytype.ListingEstimate, error) {
	return ProbeListing(ctx, e.budgeted(p, partition), partition, maxPages)
}

// budgeted is p with every fetch (live and reconcile) taking a token of p's budget first.
func (e *Engine) budgeted(p watukuytype.Poller, partition string) watukuytype.Poller {
	e.mu.Lock()
	b := e.budgetOf(&p)
	e.mu.Unlock()
	if b == nil {
		return p
	}
	// A probe goes after the workers' live and reconcile requests, as a backfill does.
	t := BudgetTake{Bucket: budget.Bucket(b.Name, partition), Key: watukuytype.Key{Poller: p.Name, Partition: partition},
		Interval: budget.Interval(b.budget()), Burst: b.Burst, Reserve: budget.Reserve(watukuytype.LaneBackfill, b.Burst)}
	wrap := func(fetch watukuytype.FetchFunc) watukuytype.FetchFunc {
		if fetch == nil {
			return nil
		}
		return func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
			for {
				g, err := e.store.TakeToken(ctx, t)
				if err != nil {
					return watukuytype.Page{}, keyErr("watukuy: probe: take a token of budget "+t.Bucket, t.Key, err)
				}
				if err := e.sleep(ctx, g.Wait); err != nil {
					return watukuytype.Page{}, err
				}
				if g.Taken {
					return fetch(ctx, req)
				}
			}
		}
	}
	p.Fetch = wrap(p.Fetch)
	if p.Reconcile != nil {
		r := *p.Reconcile
		r.Fetch = wrap(r.Fetch)
		p.Reconcile = &r
	}
	return p
}
