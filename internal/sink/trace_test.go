package sink

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/watukuy/watukuy/webhook"
	"go.opentelemetry.io/otel/trace"
)

// The webhook carries the handler attempt's span as traceparent (W3C trace context): its trace
// and span ids, sampled; an attempt with no span in its context sends no traceparent. The
// signature covers the body alone, so the header changes nothing of it.
func TestWebhookPropagatesTraceparent(t *testing.T) {
	got := make(chan http.Header, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
	}))
	defer srv.Close()
	wh, err := NewWebhook(Webhook{URL: srv.URL, Secrets: []string{vecSecret}})
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
	if err := wh.Handle(trace.ContextWithSpanContext(context.Background(), sc), testEvent("ev_1")); err != nil {
		t.Fatal(err)
	}
	h := <-got
	if tp, want := h.Get("traceparent"), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"; tp != want {
		t.Errorf("traceparent = %q, want %q", tp, want)
	}
	if h.Get(webhook.HeaderSignature) == "" || h.Get(webhook.HeaderID) != "ev_1" {
		t.Errorf("the Standard Webhooks headers are gone: %v", h)
	}
	if err := wh.Handle(context.Background(), testEvent("ev_2")); err != nil {
		t.Fatal(err)
	}
	if h := <-got; h.Get("traceparent") != "" || h.Get("tracestate") != "" {
		t.Errorf("an untraced attempt sent trace headers: %v", h)
	}
}
