package core_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/watukuytype"
)

// tracedEngine is w.engine with a tracer provider whose ended spans rec keeps.
func (w *world) tracedEngine(p watukuytype.Poller, tp trace.TracerProvider) *core.Engine {
	w.t.Helper()
	eng, err := core.NewEngine(core.Options{Store: w.store, InstanceID: "test", Clock: w.clock.Now, Rand: func() float64 { return 0.5 }, TracerProvider: tp})
	if err != nil {
		w.t.Fatal(err)
	}
	if err := eng.Register(p); err != nil {
		w.t.Fatal(err)
	}
	if err := eng.Setup(context.Background()); err != nil {
		w.t.Fatal(err)
	}
	return eng
}

// attrs maps a span's attributes by key.
func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// spansNamed returns the ended spans called name, in the order they ended.
func spansNamed(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// One cycle that fetches a page of three items and delivers them, the handler failing its
// first attempt at one: a root cycle span with the key, lane, epoch and outcome; begin,
// fetch, commit, drain and end its children; one handler span per attempt under drain, the
// failed one with status Error and the error recorded.
func TestCycleSpanTree(t *testing.T) {
	w := newWorld(t)
	f := newFeed(10)
	f.putN(3)
	failed := false
	w.rec.setFail(func(ev watukuytype.Event) error {
		if ev.Identity == "i02" && !failed {
			failed = true
			return errors.New("receiver down")
		}
		return nil
	})
	rec := tracetest.NewSpanRecorder()
	eng := w.tracedEngine(w.poller(f.fetch), sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	if rep := w.run(eng); rep.Err != nil || rep.Delivered != 3 {
		t.Fatalf("cycle: %+v", rep)
	}
	spans := rec.Ended()
	cycles := spansNamed(spans, core.SpanCycle)
	if len(cycles) != 1 {
		t.Fatalf("%d cycle spans, want 1 (spans: %v)", len(cycles), names(spans))
	}
	cyc := cycles[0]
	if cyc.Parent().IsValid() {
		t.Errorf("the cycle span has a parent %v: it must be a root", cyc.Parent())
	}
	ki := w.inspect(eng)
	a := attrs(cyc)
	for k, want := range map[attribute.Key]attribute.Value{
		core.AttrPoller: attribute.StringValue("orders"), core.AttrPartition: attribute.StringValue(""),
		core.AttrLane: attribute.StringValue("live"), core.AttrEpoch: attribute.Int64Value(ki.LeaseEpoch),
		core.AttrOutcome: attribute.StringValue("ran"), core.AttrResult: attribute.StringValue("ok"),
		core.AttrEvents: attribute.IntValue(3), core.AttrDelivered: attribute.IntValue(3),
	} {
		if a[k] != want {
			t.Errorf("cycle span %s = %v, want %v", k, a[k].Emit(), want.Emit())
		}
	}
	if ki.LeaseEpoch == 0 {
		t.Errorf("no epoch to compare: %+v", ki)
	}
	if cyc.Status().Code == codes.Error {
		t.Errorf("a cycle that ran through has status %v", cyc.Status())
	}
	children := map[string]int{}
	for _, s := range spans {
		if s.Parent().SpanID() == cyc.SpanContext().SpanID() {
			children[s.Name()]++
		}
		if s.SpanContext().TraceID() != cyc.SpanContext().TraceID() {
			t.Errorf("span %s is in another trace", s.Name())
		}
	}
	for name, n := range map[string]int{core.SpanBegin: 1, core.SpanFetch: 1, core.SpanCommit: 1, core.SpanDrain: 1, core.SpanEnd: 1} {
		if children[name] != n {
			t.Errorf("%d %s spans under the cycle, want %d (children: %v)", children[name], name, n, children)
		}
	}
	if a := attrs(spansNamed(spans, core.SpanBegin)[0]); a[core.AttrResult].AsString() != "granted" || a[core.AttrEpoch].AsInt64() != ki.LeaseEpoch {
		t.Errorf("begin span: %v", a)
	}
	if a := attrs(spansNamed(spans, core.SpanFetch)[0]); a[core.AttrLane].AsString() != "live" || a[core.AttrItems].AsInt64() != 3 || a[core.AttrPage].AsInt64() != 0 {
		t.Errorf("fetch span: %v", a)
	}
	if a := attrs(spansNamed(spans, core.SpanCommit)[0]); a[core.AttrLane].AsString() != "live" || a[core.AttrEvents].AsInt64() != 3 {
		t.Errorf("commit span: %v", a)
	}
	drain := spansNamed(spans, core.SpanDrain)[0]
	if a := attrs(drain); a[core.AttrEvents].AsInt64() != 3 || a[core.AttrDelivered].AsInt64() != 3 {
		t.Errorf("drain span: %v", a)
	}
	handlers := spansNamed(spans, core.SpanHandler)
	if len(handlers) != 4 {
		t.Fatalf("%d handler spans, want 4 (3 events, one of them twice)", len(handlers))
	}
	var errs, oks int
	for _, h := range handlers {
		if h.Parent().SpanID() != drain.SpanContext().SpanID() {
			t.Errorf("handler span's parent is %v, not the drain span", h.Parent().SpanID())
		}
		a := attrs(h)
		switch a[core.AttrHandlerResult].AsString() {
		case string(watukuytype.HandlerOK):
			oks++
			if h.Status().Code == codes.Error {
				t.Errorf("a handler attempt that succeeded has status %v", h.Status())
			}
		case string(watukuytype.HandlerError):
			errs++
			if h.Status().Code != codes.Error || h.Status().Description != "receiver down" || a[core.AttrAttempt].AsInt64() != 1 {
				t.Errorf("failed attempt: status %v, attrs %v", h.Status(), a)
			}
			if ev := h.Events(); len(ev) != 1 || ev[0].Name != "exception" {
				t.Errorf("failed attempt's error not recorded: %v", ev)
			}
		}
		if a[core.AttrEventID].AsString() == "" || a[core.AttrLane].AsString() != "live" {
			t.Errorf("handler span attrs: %v", a)
		}
	}
	if oks != 3 || errs != 1 {
		t.Errorf("handler results: %d ok, %d error; want 3 and 1", oks, errs)
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

// A cycle whose fetch fails: the fetch and cycle spans have status Error, the cycle's result is
// the failure's code. A skipped cycle (not due): outcome skipped_not_due, begin not_due, no
// epoch and no other child.
func TestCycleSpanFailureAndSkip(t *testing.T) {
	w := newWorld(t)
	f := newFeed(10)
	rec := tracetest.NewSpanRecorder()
	eng := w.tracedEngine(w.poller(f.fetch), sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	f.setErr(errors.New("connection reset"))
	if rep := w.run(eng); rep.Err == nil {
		t.Fatalf("cycle did not fail: %+v", rep)
	}
	cyc := spansNamed(rec.Ended(), core.SpanCycle)[0]
	if cyc.Status().Code != codes.Error || attrs(cyc)[core.AttrResult].AsString() != string(watukuytype.CodeFetch) || attrs(cyc)[core.AttrOutcome].AsString() != "ran" {
		t.Errorf("failed cycle span: status %v, attrs %v", cyc.Status(), attrs(cyc))
	}
	if fe := spansNamed(rec.Ended(), core.SpanFetch)[0]; fe.Status().Code != codes.Error {
		t.Errorf("failed fetch span: status %v", fe.Status())
	}

	rec2 := tracetest.NewSpanRecorder()
	eng2 := w.tracedEngine(w.poller(f.fetch), sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec2)))
	if rep := eng2.RunCycle(context.Background(), key); rep.Outcome != watukuytype.SkippedNotDue {
		t.Fatalf("cycle of a key not due: %+v", rep)
	}
	spans := rec2.Ended()
	if len(spans) != 2 {
		t.Fatalf("spans of a skipped cycle: %v, want begin and the cycle", names(spans))
	}
	cyc = spansNamed(spans, core.SpanCycle)[0]
	if a := attrs(cyc); a[core.AttrOutcome].AsString() != "skipped_not_due" || a[core.AttrEpoch].Type() != attribute.INVALID {
		t.Errorf("skipped cycle span: %v", a)
	}
	if a := attrs(spansNamed(spans, core.SpanBegin)[0]); a[core.AttrResult].AsString() != "not_due" {
		t.Errorf("begin span of a key not due: %v", a)
	}
}

// Without a tracer provider, or with the API's no-op one, a cycle starts no span: run under a
// caller's recording span, it adds no child to it and never ends it.
func TestCycleWithoutTracingStartsNoSpan(t *testing.T) {
	for name, tp := range map[string]trace.TracerProvider{"nil": nil, "noop": noop.NewTracerProvider()} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			f := newFeed(10)
			f.putN(2)
			caller := tracetest.NewSpanRecorder()
			ctx, span := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(caller)).Tracer("caller").Start(context.Background(), "caller")
			eng := w.tracedEngine(w.poller(f.fetch), tp)
			if _, err := w.store.ClaimDue(ctx, 1, 0, nil); err != nil {
				t.Fatal(err)
			}
			if rep := eng.RunCycle(ctx, key); rep.Err != nil || rep.Delivered != 2 {
				t.Fatalf("cycle: %+v", rep)
			}
			if ended := caller.Ended(); len(ended) != 0 {
				t.Fatalf("the engine ended spans without tracing: %v", names(ended))
			}
			span.End()
			if ended := caller.Ended(); len(ended) != 1 {
				t.Fatalf("spans under the caller's provider: %v, want the caller's own", names(ended))
			}
		})
	}
}
