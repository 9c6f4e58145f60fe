package httppoll

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/watukuy/watukuy/watukuytype"
)

// A request under a recording span gets a client span of that span's provider, child of it,
// with the semantic conventions' attributes; url.full is redacted. A timeout is error.type
// timeout; a request under no span (or a non-recording one) starts none.
func TestRequestSpans(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-r.Context().Done()
			return
		}
		w.WriteHeader(http.StatusNotModified)
	}))
	defer srv.Close()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ctx, parent := tp.Tracer("test").Start(context.Background(), "fetch")
	c := &Client{}
	if _, err := c.Do(ctx, Request{Key: watukuytype.Key{Poller: "p"}, URL: srv.URL + "/items?access_token=s3cret&page=2", ETag: `"v1"`}); err != nil {
		t.Fatal(err)
	}
	_, err := c.Do(ctx, Request{Key: watukuytype.Key{Poller: "p"}, URL: srv.URL + "/slow", Timeout: 20 * time.Millisecond})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("slow request: %v", err)
	}
	if _, err := c.Do(context.Background(), Request{URL: srv.URL + "/untraced"}); err != nil {
		t.Fatal(err)
	}
	parent.End()
	spans := rec.Ended()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want the two requests' and the parent", len(spans))
	}
	u, _ := url.Parse(srv.URL)
	for i, want := range []map[attribute.Key]string{
		{"http.request.method": "GET", "url.full": srv.URL + "/items?access_token=[redacted]&page=2", "server.address": "127.0.0.1",
			"server.port": u.Port(), "http.response.status_code": "304"},
		{"url.full": srv.URL + "/slow", "error.type": "timeout"},
	} {
		s := spans[i]
		if s.Name() != "GET" || s.SpanKind() != trace.SpanKindClient || s.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span %d: %s %v, parent %v", i, s.Name(), s.SpanKind(), s.Parent().SpanID())
		}
		got := map[attribute.Key]string{}
		for _, kv := range s.Attributes() {
			got[kv.Key] = kv.Value.Emit()
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("span %d: %s = %q, want %q", i, k, got[k], v)
			}
		}
		if failed := s.Status().Code == codes.Error; failed != (i == 1) {
			t.Errorf("span %d status %v", i, s.Status())
		}
	}
}

// BenchmarkUntracedRequestSpan: what an untraced request pays for tracing: looking for a
// recording span in a context as deep as a cycle's. Goal: no allocation.
func BenchmarkUntracedRequestSpan(b *testing.B) {
	ctx := context.Background()
	for range 8 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(context.WithValue(ctx, b, nil))
		defer cancel()
	}
	u, _ := url.Parse("https://api.example/items")
	resp := &Response{StatusCode: 200}
	b.ReportAllocs()
	for b.Loop() {
		_, span := startSpan(ctx, "GET", u, "https://api.example/items")
		endSpan(span, resp, nil)
	}
}
