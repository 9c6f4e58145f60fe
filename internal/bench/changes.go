package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/watukuytype"
)

// Page and rounds of PatchPage.
const (
	patchPageItems  = 1000
	patchPageRounds = 10
)

// PatchPage measures what Changes.Patch costs a cycle: a page of 1,000 orders of about 1 KB,
// every one changed, committed and delivered to a no-op handler by a key without it (the
// baseline) and by a key with it, each on a server of its own; ten rounds, one cycle of each
// in turn, so the machine's load weighs on both alike. With Patch the cycle also reads the
// orders as last emitted, diffs each against its new one and keeps it.
func PatchPage(ctx context.Context, o Options) (Result, error) {
	r, t0 := start("patch-page")
	r.Unit, r.BaselineOf = "items/s", "the same pages without Changes.Patch, same run"
	r.Goal = "<= 2x the time without"
	gen := 1
	page := func() []json.RawMessage {
		items := make([]json.RawMessage, patchPageItems)
		for i := range items {
			items[i] = orderKB(i, gen)
		}
		return items
	}
	items := page()
	var patches atomic.Int64
	var keys [2]struct {
		e   *env
		eng *core.Engine
	}
	for i, patch := range []bool{false, true} {
		e, st, err := openStore(ctx, o, fmt.Sprintf("patch-page-%t", patch))
		if err != nil {
			return r, err
		}
		defer e.close()
		p := watukuytype.Poller{Name: pollerName, Strategy: watukuytype.SnapshotDiff, Version: watukuytype.Field("version"), MaxPagesPerCycle: 2,
			Fetch: func(context.Context, watukuytype.FetchRequest) (watukuytype.Page, error) {
				return watukuytype.Page{Items: items}, nil
			},
			Handler: func(_ context.Context, ev watukuytype.Event) error {
				if len(ev.Changes) > 0 && string(ev.Changes) != "null" {
					patches.Add(1)
				}
				return nil
			},
			Changes: watukuytype.Changes{Patch: patch}}
		eng, err := newEngine(st, "bench", p, watukuytype.Hooks{})
		if err != nil {
			return r, err
		}
		keys[i].e, keys[i].eng = e, eng
	}
	key := watukuytype.Key{Poller: pollerName}
	cycle := func(eng *core.Engine, want int) (time.Duration, error) {
		if err := eng.Trigger(ctx, key); err != nil {
			return 0, fmt.Errorf("trigger %s: %w", key.Describe(), err)
		}
		t := time.Now()
		rep := eng.RunCycle(ctx, key)
		took := time.Since(t)
		if rep.Err != nil || rep.Outcome != watukuytype.Ran || rep.Events != want || rep.Delivered != want {
			return 0, fmt.Errorf("cycle of %s: outcome %v, %d events, %d delivered of %d: %w", key.Describe(), rep.Outcome, rep.Events, rep.Delivered, want, rep.Err)
		}
		return took, nil
	}
	for _, k := range keys { // every order created: no patch to make
		if _, err := cycle(k.eng, patchPageItems); err != nil {
			return r, err
		}
	}
	var took [2]time.Duration
	for range patchPageRounds {
		gen++
		items = page()
		for i, k := range keys {
			d, err := cycle(k.eng, patchPageItems)
			if err != nil {
				return r, err
			}
			took[i] += d
		}
	}
	if got, want := patches.Load(), int64(patchPageItems*patchPageRounds); got != want {
		return r, fmt.Errorf("%d updated events carried a patch, want %d", got, want)
	}
	n := float64(patchPageItems * patchPageRounds)
	ratio := took[1].Seconds() / took[0].Seconds()
	r.Value, r.Baseline = n/took[1].Seconds(), n/took[0].Seconds()
	r.meet(ratio <= 2)
	r.Details = map[string]float64{"items": patchPageItems, "rounds": patchPageRounds, "timeRatio": ratio,
		"cycleSeconds": took[1].Seconds() / patchPageRounds, "cycleSecondsPlain": took[0].Seconds() / patchPageRounds}
	r.Notes = fmt.Sprintf("a page of %d orders of about 1 KB, every one changed, committed and delivered; %d rounds, one cycle of each in turn: "+
		"%.1f ms a cycle with Changes.Patch, %.1f ms without, %.2fx the time", patchPageItems, patchPageRounds,
		1000*took[1].Seconds()/patchPageRounds, 1000*took[0].Seconds()/patchPageRounds, ratio)
	r.Duration = time.Since(t0)
	return r, nil
}
