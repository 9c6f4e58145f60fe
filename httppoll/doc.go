// Package httppoll polls HTTP APIs for watukuy: the cursor strategies a poller's Fetch is
// made of (TimestampCursor, TokenCursor, PageCursor, each over a Source, and DetailRequest,
// which confirms a delete), and the Client they send with. The config file's pollers are
// built from the same parts, so a Go poller reads an API exactly as a YAML one does:
//
//	orders := &httppoll.TimestampCursor{
//		Source: httppoll.Source{URL: "https://api.example.com/orders", Items: "data"},
//		Param:  "updated_since", Field: "updated_at",
//	}
//	err := eng.Register(watukuytype.Poller{Name: "orders", Fetch: orders.Fetch, Handler: onEvent})
//
// A Fetch of your own can use the Client (Do) and the header helpers (ParseRateLimit,
// ParseRetryAfter, NextLink) for an API no strategy reads.
//
// The Client sends one request per call of Client.Do with a per-request timeout, gzip, a
// response size limit, ETag / If-None-Match, Link rel="next", and the Retry-After and
// rate-limit headers the scheduler paces by (docs/design.md, Scheduling). It never retries:
// retrying, throttling and backoff are the scheduler's decisions, taken from the Response or
// the *watukuytype.HTTPError Do returns.
//
// Decisions the design left open, written down here:
//
//   - Do returns a non-nil *Response whenever a response arrived, also together with an
//     error (a non-2xx status, or a body over the limit), so callers can still read its
//     headers; on transport errors and timeouts the Response is nil.
//   - Request.Query replaces same-named parameters already in Request.URL and keeps the
//     others; without Query the URL is sent byte for byte (a Link rel="next" target stays
//     exactly as the API wrote it).
//   - Error statuses: at most 64 KiB of the body is read (Response.Body), and
//     HTTPError.Body is its first 512 bytes, cut back to a whole UTF-8 character, with the
//     request's own secrets (sensitive query values, credential headers) replaced by
//     "[redacted]" because some APIs echo the key back in their error messages.
//   - A 304 without an ETag header keeps the request's ETag in Response.ETag, so a caller that
//     stores Response.ETag never loses its validator.
//   - Content-Encoding gzip (or x-gzip) is decoded whether or not it was asked for; any other
//     encoding is an error rather than silently corrupt bytes. The size limit applies to the
//     wire bytes and to the decompressed bytes.
//   - Secrets are never logged or put in errors: URLs go through RedactURL (userinfo, the
//     fragment and the values of sensitive query parameters are replaced), headers through
//     Redact, and transport errors are unwrapped from *url.Error, whose message would repeat
//     the raw URL.
//   - Retry-After dates and delay-seconds are capped at 24h; a date in the past means "retry
//     now" (0, true). RFC 850 dates take their century from now (RFC 9110 §5.6.7: a two-digit
//     year more than 50 years ahead is in the past century).
//   - A request made under a recording span gets an HTTP client span from that span's
//     provider (http.request.method, url.full redacted, server.address, server.port,
//     http.response.status_code, error.type); without one, nothing is traced and nothing is
//     built. No traceparent goes to the API: a third party is not joined to our traces.
//   - Reset values in every rate-limit header family go through the same magnitude rule as
//     X-RateLimit-Reset (see ParseRateLimit): a delta of 31+ years is never meant, an epoch is.
package httppoll
