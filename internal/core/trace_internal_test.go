package core

import (
	"context"
	"testing"

	"github.com/watukuy/watukuy/watukuytype"
)

// BenchmarkSpanCallsOff: the span calls an idle cycle makes (cycle, begin, fetch, end, lanes)
// with tracing off, under a context as deep as a cycle's: the part of BenchmarkIdleCycle
// tracing adds when it is off, too small to see through that benchmark's noise. Goal: no
// allocation.
func BenchmarkSpanCallsOff(b *testing.B) {
	e := &Engine{}
	ctx := context.Background()
	for range 8 { // the cycle's own layers: root, yield, lease check, deadlines
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(context.WithValue(ctx, b, nil))
		defer cancel()
	}
	key := watukuytype.Key{Poller: "idle"}
	b.ReportAllocs()
	for b.Loop() {
		cctx, span := e.startCycleSpan(ctx, key)
		c := &cycle{e: e, span: span}
		_, bspan := e.startSpan(cctx, SpanBegin)
		if bspan.IsRecording() {
			b.Fatal("recording")
		}
		bspan.End()
		c.enterLane(watukuytype.LaneLive)
		_, fspan := c.startSpan(cctx, SpanFetch)
		endFetchSpan(fspan, watukuytype.LaneLive, 0, watukuytype.Page{}, nil)
		_, espan := c.startSpan(cctx, SpanEnd)
		endSpan(espan, nil)
		endCycleSpan(span, watukuytype.CycleReport{})
	}
}
