package core

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/watukuy/watukuy/watukuytype"
)

// TracerName is the instrumentation scope of the engine's spans.
const TracerName = "github.com/watukuy/watukuy"

// The spans of a cycle. SpanCycle is a root span (a worker's task carries no parent); the
// others are its children, SpanHandler a child of SpanDrain. The HTTP client span of a
// request (package httppoll) is a child of SpanFetch.
const (
	SpanCycle   = "watukuy.cycle" // one cycle of one key
	SpanBegin   = "begin"         // begin.lua: the lease taken, or why not
	SpanFetch   = "fetch"         // one call of a lane's Fetch (or of Detail)
	SpanCommit  = "commit"        // one commit script (a page, or one chunk of a large page)
	SpanDrain   = "drain"         // one batch of outbox events delivered, acked and parked
	SpanHandler = "handler"       // one handler attempt
	SpanEnd     = "end"           // end.lua and the due write
)

// Span attributes. The cycle span carries the key, the epoch, the lanes it ran, the outcome
// and its counters; children carry what is theirs.
const (
	AttrPoller    = attribute.Key("watukuy.poller")    // the key's poller
	AttrPartition = attribute.Key("watukuy.partition") // the key's partition ("" for none)
	// AttrLane is the lane of a fetch or commit; on the cycle span, the lanes it ran in order,
	// comma-separated ("live", "live,backfill").
	AttrLane  = attribute.Key("watukuy.lane")
	AttrEpoch = attribute.Key("watukuy.epoch") // the lease's epoch, once Begin granted it
	// AttrOutcome is the CycleReport's outcome: ran, skipped_not_due, skipped_leased,
	// skipped_paused or failed (the labels of the cycles metric).
	AttrOutcome = attribute.Key("watukuy.outcome")
	// AttrResult is what the key's last poll records ("ok" or the failure's code, e.g.
	// FETCH, THROTTLED, INVALID_ITEMS); on a begin span, what Begin found (granted, paused,
	// not_due, leased, deleted).
	AttrResult    = attribute.Key("watukuy.result")
	AttrPage      = attribute.Key("watukuy.page")      // a fetch's page number within its lane pass
	AttrPages     = attribute.Key("watukuy.pages")     // pages fetched by the cycle
	AttrItems     = attribute.Key("watukuy.items")     // items read (a fetch, a cycle) or rows written (a commit)
	AttrEvents    = attribute.Key("watukuy.events")    // events committed (a commit, a cycle) or to deliver (a drain)
	AttrDelivered = attribute.Key("watukuy.delivered") // events delivered and acked
	AttrParked    = attribute.Key("watukuy.parked")    // events parked as poison
	// AttrNotModified marks a fetch answered 304 (nothing new at the committed ETag).
	AttrNotModified = attribute.Key("watukuy.not_modified")
	AttrHasMore     = attribute.Key("watukuy.has_more") // the page said more follow
	AttrAttempt     = attribute.Key("watukuy.attempt")  // a handler attempt's number, from 1
	// AttrHandlerResult is a handler attempt's result: ok, error, panic, timeout or fenced.
	AttrHandlerResult = attribute.Key("watukuy.handler.result")
	AttrEventID       = attribute.Key("watukuy.event.id")   // the event's id
	AttrEventType     = attribute.Key("watukuy.event.type") // created, updated or deleted
)

// tracerOf is the engine's tracer: nil when tp is nil or the API's no-op provider, so that a
// cycle without tracing starts no span and builds no attribute.
func tracerOf(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	if _, off := tp.(noop.TracerProvider); off {
		return nil
	}
	return tp.Tracer(TracerName)
}

// noSpan records nothing, and ending it ends nothing: what the span helpers return when
// tracing is off (never the caller's own span, which ending would end).
func noSpan() trace.Span { return trace.SpanFromContext(context.Background()) }

// startCycleSpan starts a cycle's root span, linked to the span ctx carries, if any.
func (e *Engine) startCycleSpan(ctx context.Context, key watukuytype.Key) (context.Context, trace.Span) {
	if e.tracer == nil {
		return ctx, noSpan()
	}
	opts := []trace.SpanStartOption{trace.WithNewRoot(),
		trace.WithAttributes(AttrPoller.String(key.Poller), AttrPartition.String(key.Partition))}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	return e.tracer.Start(ctx, SpanCycle, opts...)
}

// startSpan starts a child of the span ctx carries, only while that one records: a cycle's
// steps, never an operation's (no cycle span) nor a cycle the sampler dropped.
func (e *Engine) startSpan(ctx context.Context, name string) (context.Context, trace.Span) {
	if e.tracer == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, noSpan()
	}
	return e.tracer.Start(ctx, name)
}

// startSpan starts a child of the span ctx carries while the cycle's own span records (an
// operation's cycle has none, a probe's no engine).
func (c *cycle) startSpan(ctx context.Context, name string) (context.Context, trace.Span) {
	if c.span == nil || !c.span.IsRecording() {
		return ctx, noSpan()
	}
	return c.e.tracer.Start(ctx, name)
}

// endSpan ends span, with an error status when err is not nil.
func endSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// endCycleSpan ends a cycle's span with its report.
func endCycleSpan(span trace.Span, rep watukuytype.CycleReport) {
	if !span.IsRecording() {
		span.End()
		return
	}
	span.SetAttributes(AttrOutcome.String(outcomeLabel(rep.Outcome)), AttrPages.Int(rep.Pages), AttrItems.Int(rep.Items),
		AttrEvents.Int(rep.Events), AttrDelivered.Int(rep.Delivered), AttrParked.Int(rep.Parked))
	endSpan(span, rep.Err)
}

// enterLane records on the cycle's span that lane runs.
func (c *cycle) enterLane(lane watukuytype.Lane) {
	c.lane = lane
	if c.span.IsRecording() {
		c.lanes = append(c.lanes, string(lane))
		c.span.SetAttributes(AttrLane.String(strings.Join(c.lanes, ",")))
	}
}

// outcomeLabel names a cycle outcome as the cycles metric does.
func outcomeLabel(o watukuytype.Outcome) string {
	switch o {
	case watukuytype.Ran:
		return "ran"
	case watukuytype.SkippedNotDue:
		return "skipped_not_due"
	case watukuytype.SkippedLeased:
		return "skipped_leased"
	case watukuytype.SkippedPaused:
		return "skipped_paused"
	}
	return "failed"
}

// beginLabel names what Begin found.
func beginLabel(s BeginStatus) string {
	switch s {
	case BeginOK:
		return "granted"
	case BeginPaused:
		return "paused"
	case BeginNotDue:
		return "not_due"
	case BeginLeased:
		return "leased"
	case BeginDeleted:
		return "deleted"
	}
	return "unknown"
}

// endFetchSpan ends the span of a lane's fetch of page number n.
func endFetchSpan(span trace.Span, lane watukuytype.Lane, n int, page watukuytype.Page, err error) {
	if span.IsRecording() {
		span.SetAttributes(AttrLane.String(string(lane)), AttrPage.Int(n))
		if err == nil {
			span.SetAttributes(AttrItems.Int(len(page.Items)), AttrHasMore.Bool(page.HasMore), AttrNotModified.Bool(page.NotModified))
		}
	}
	endSpan(span, err)
}
