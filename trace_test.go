package watukuy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/watukuy/watukuy/httppoll"
	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/internal/sink"
	"github.com/watukuy/watukuy/watukuytype"
)

// spanAttrs maps a span's attributes by key.
func spanAttrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// An HTTP poller traced end to end: each request is an HTTP client span (semantic-convention
// attributes, the API key redacted from url.full) under its fetch span, and the webhook sink
// sends the handler attempt's span as traceparent, in the cycle's trace; the receiver's
// refusal is the failed attempt's error status. A failing API is error.type 500.
func TestTracedHTTPPollerAndWebhook(t *testing.T) {
	var apiFails atomic.Bool
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if apiFails.Load() {
			http.Error(w, "boom", http.StatusInternalServerError)
			return
		}
		if r.URL.Query().Get("token") == "t1" {
			_, _ = w.Write([]byte(`{"data":[],"next":"t1"}`))
			return
		}
		_, _ = w.Write([]byte(`{"data":[{"id":"a","v":1},{"id":"b","v":1}],"next":"t1"}`))
	}))
	defer api.Close()
	type hit struct {
		status int
		parent trace.SpanContext
	}
	var mu sync.Mutex
	var hits []hit
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		h := hit{status: http.StatusNoContent,
			parent: trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier(r.Header)))}
		if len(hits) == 0 {
			h.status = http.StatusServiceUnavailable // the first attempt fails
		}
		hits = append(hits, h)
		w.WriteHeader(h.status)
	}))
	defer recv.Close()
	wh, err := sink.NewWebhook(sink.Webhook{URL: recv.URL, Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}})
	if err != nil {
		t.Fatal(err)
	}

	rec := tracetest.NewSpanRecorder()
	clock := newClock()
	eng, err := newEngine(Options{Redis: redistest.Miniredis(t).Client, InstanceID: "traced",
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))}, seams{clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	changes := &httppoll.TokenCursor{Source: httppoll.Source{URL: api.URL + "/changes?api_key=s3cret", Items: "data"}, Param: "token", Next: "next"}
	if err := eng.Register(watukuytype.Poller{Name: "orders", Fetch: changes.Fetch, Version: watukuytype.Field("v"), Handler: wh.Handle,
		Delivery: watukuytype.Delivery{Backoff: watukuytype.Backoff{Base: time.Microsecond, Factor: 1, Max: time.Microsecond}}}); err != nil {
		t.Fatal(err)
	}
	key := watukuytype.Key{Poller: "orders"}
	if rep := eng.RunCycle(context.Background(), key); rep.Err != nil || rep.Delivered != 2 {
		t.Fatalf("cycle: %+v", rep)
	}

	spans := rec.Ended()
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	var cycle sdktrace.ReadOnlySpan
	for _, s := range spans {
		byID[s.SpanContext().SpanID()] = s
		if s.Name() == core.SpanCycle {
			cycle = s
		}
	}
	if cycle == nil {
		t.Fatalf("no cycle span among %d", len(spans))
	}
	u, _ := url.Parse(api.URL)
	port, _ := strconv.Atoi(u.Port())
	var gets int
	for _, s := range spans {
		if s.Name() != http.MethodGet {
			continue
		}
		gets++
		a := spanAttrs(s)
		if s.SpanKind() != trace.SpanKindClient {
			t.Errorf("HTTP span kind %v, want client", s.SpanKind())
		}
		if p := byID[s.Parent().SpanID()]; p == nil || p.Name() != core.SpanFetch || p.Parent().SpanID() != cycle.SpanContext().SpanID() {
			t.Errorf("HTTP span's parent is not a fetch span of the cycle: %v", p)
		}
		full := a["url.full"].AsString()
		if !strings.HasPrefix(full, api.URL+"/changes?") || strings.Contains(full, "s3cret") {
			t.Errorf("url.full %q: the request's URL, with the api_key redacted", full)
		}
		if a["http.request.method"].AsString() != "GET" || a["server.address"].AsString() != "127.0.0.1" ||
			a["server.port"].AsInt64() != int64(port) || a["http.response.status_code"].AsInt64() != 200 {
			t.Errorf("HTTP span attributes: %v", a)
		}
		if _, ok := a["error.type"]; ok || s.Status().Code == codes.Error {
			t.Errorf("a 200 has error.type or an error status: %v %v", a, s.Status())
		}
	}
	if gets != 2 {
		t.Errorf("%d HTTP spans, want 2 (the page, then the empty page at the next token)", gets)
	}

	mu.Lock()
	got := append([]hit(nil), hits...)
	mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("the receiver got %d requests, want 3 (one refused, retried)", len(got))
	}
	for _, h := range got {
		if !h.parent.IsValid() || h.parent.TraceID() != cycle.SpanContext().TraceID() {
			t.Fatalf("traceparent %v is not of the cycle's trace %v", h.parent, cycle.SpanContext().TraceID())
		}
		hs := byID[h.parent.SpanID()]
		if hs == nil || hs.Name() != core.SpanHandler {
			t.Fatalf("traceparent's span %v is not a handler attempt's", h.parent.SpanID())
		}
		if failed := hs.Status().Code == codes.Error; failed != (h.status != http.StatusNoContent) {
			t.Errorf("the attempt answered %d has status %v", h.status, hs.Status())
		}
		if h.status != http.StatusNoContent && !strings.Contains(hs.Status().Description, "HTTP 503") {
			t.Errorf("refused attempt's status %q does not name the answer", hs.Status().Description)
		}
	}

	// The API fails: the HTTP span says 500 and the cycle span the FETCH failure.
	apiFails.Store(true)
	clock.Advance(time.Hour)
	rec2 := len(rec.Ended())
	if rep := eng.RunCycle(context.Background(), key); rep.Err == nil {
		t.Fatalf("cycle over a failing API: %+v", rep)
	}
	var failedGet, failedCycle bool
	for _, s := range rec.Ended()[rec2:] {
		a := spanAttrs(s)
		switch s.Name() {
		case http.MethodGet:
			failedGet = true
			if a["error.type"].AsString() != "500" || a["http.response.status_code"].AsInt64() != 500 || s.Status().Code != codes.Error {
				t.Errorf("HTTP span of a 500: %v %v", a, s.Status())
			}
		case core.SpanCycle:
			failedCycle = true
			if a[core.AttrResult].AsString() != "FETCH" || s.Status().Code != codes.Error {
				t.Errorf("cycle span of a failed fetch: %v %v", a, s.Status())
			}
		}
	}
	if !failedGet || !failedCycle {
		t.Errorf("spans of the failing cycle: HTTP %v, cycle %v", failedGet, failedCycle)
	}
}
