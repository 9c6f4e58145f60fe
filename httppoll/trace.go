package httppoll

import (
	"context"
	"errors"
	"net/url"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/watukuy/watukuy/watukuytype"
)

// TracerName is the instrumentation scope of the HTTP client spans.
const TracerName = "github.com/watukuy/watukuy/httppoll"

// startSpan starts the client span of one request, named by its method as the HTTP semantic
// conventions ask, when ctx carries a recording span (a traced cycle's fetch): a request is
// traced exactly when its cycle is, with that span's provider, so the Client needs no
// setting and costs nothing untraced. url.full is the redacted URL: no secret reaches a
// trace. No traceparent is sent: the third-party API is not ours to join to our traces.
func startSpan(ctx context.Context, method string, u *url.URL, shown string) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, parent
	}
	return parent.TracerProvider().Tracer(TracerName).Start(ctx, method, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(semconv.HTTPRequestMethodKey.String(method), semconv.URLFull(shown),
			semconv.ServerAddress(u.Hostname()), semconv.ServerPort(port(u))))
}

// endSpan ends a request's span with the answer's status and, on failure, error.type: the
// status code for an error status (and span status Error), else the kind of failure.
func endSpan(span trace.Span, resp *Response, err error) {
	if !span.IsRecording() {
		return // the parent's span, not ours: never ended here
	}
	if resp != nil {
		span.SetAttributes(semconv.HTTPResponseStatusCode(resp.StatusCode))
	}
	if err != nil {
		span.SetAttributes(errorType(err))
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// errorType is error.type of a failed request: the status code of an error status, else a
// low-cardinality name of what failed.
func errorType(err error) attribute.KeyValue {
	var he *watukuytype.HTTPError
	switch {
	case errors.As(err, &he):
		return semconv.ErrorTypeKey.String(strconv.Itoa(he.StatusCode))
	case errors.As(err, new(*BodyTooLargeError)):
		return semconv.ErrorTypeKey.String("body_too_large")
	case watukuytype.IsLeaseLost(err):
		return semconv.ErrorTypeKey.String("lease_lost")
	case errors.Is(err, context.DeadlineExceeded):
		return semconv.ErrorTypeKey.String("timeout")
	case errors.Is(err, context.Canceled):
		return semconv.ErrorTypeKey.String("canceled")
	}
	return semconv.ErrorType(err)
}

// port is the URL's port, or its scheme's default.
func port(u *url.URL) int {
	if p, err := strconv.Atoi(u.Port()); err == nil {
		return p
	}
	if u.Scheme == "https" {
		return 443
	}
	return 80
}
