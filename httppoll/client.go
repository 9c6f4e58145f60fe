package httppoll

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy/watukuytype"
)

// Defaults for the zero Client.
const (
	// DefaultTimeout bounds one request, headers and body, when neither the Request nor the
	// Client sets a timeout.
	DefaultTimeout = 30 * time.Second
	// DefaultMaxBody bounds a response body, before and after gzip decompression.
	DefaultMaxBody int64 = 32 << 20
	// errorBodyLimit bounds what is read of a non-2xx body: enough for any error document,
	// and a broken API streaming a huge error page costs no memory.
	errorBodyLimit int64 = 64 << 10
	// snippetLen is the size of HTTPError.Body (lastError must stay small).
	snippetLen = 512
	// userAgent is sent when the request has none, so API owners can tell who is calling.
	userAgent = "watukuy"
)

// defaultHTTP is used when Client.HTTP is nil: no client-level timeout, because the
// per-request context deadline already bounds every request; its connections run a cycle's
// lease check before every write (guard.go).
var defaultHTTP = newDefaultHTTP()

// Client sends requests for one poller. The zero value is ready to use; a Client is safe for
// concurrent use as long as its fields are not changed meanwhile.
type Client struct {
	// HTTP sends the requests; nil means a default client (no client-level timeout: the
	// per-request timeout applies).
	HTTP *http.Client
	// Timeout bounds each request, body included; 0 means DefaultTimeout (30s).
	Timeout time.Duration
	// MaxBody is the response size limit, wire and decompressed; 0 means DefaultMaxBody
	// (32 MiB).
	MaxBody int64
	// Logger gets one debug line per request. Credentials are never logged: URLs go through
	// RedactURL and headers through Redact.
	Logger zerolog.Logger
	// Now is the clock for Retry-After dates and epoch resets when the response carries no Date
	// header (the API's clock, preferred); nil means time.Now. Elapsed is always measured on
	// the real monotonic clock.
	Now func() time.Time
}

// Request is one HTTP request of a poller.
type Request struct {
	// Key is the poller key the request is for; errors and logs name it.
	Key watukuytype.Key
	// Method is the HTTP method; "" means GET.
	Method string
	// URL is the absolute http(s) URL. Query is merged into it.
	URL string
	// Query parameters replace same-named ones already in URL; the others in URL stay.
	Query url.Values
	// Header is sent as is (Host included), plus Accept-Encoding: gzip unless set here.
	Header http.Header
	// ETag, when non-empty, is sent verbatim as If-None-Match (pass Response.ETag back).
	ETag string
	// Timeout overrides Client.Timeout when > 0.
	Timeout time.Duration
}

// Response is an answer Do accepted (2xx or 304), or the answer behind an error.
type Response struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// Header are the response headers.
	Header http.Header
	// Body is the decompressed body, at most MaxBody bytes; nil for a 304. For a non-2xx
	// status it holds at most the first 64 KiB.
	Body []byte
	// NotModified is true for a 304 answer to If-None-Match.
	NotModified bool
	// ETag is the response's ETag header; on a 304 without one, the request's ETag.
	ETag string
	// Next is the absolute URL of the Link rel="next" target, "" if none.
	Next string
	// RetryAfter is the parsed Retry-After header (0 when absent or malformed).
	RetryAfter time.Duration
	// RateLimit is the parsed rate-limit headers, nil when none are usable.
	RateLimit *watukuytype.RateLimit
	// Elapsed is the time from sending the request to having read the body.
	Elapsed time.Duration
}

// BodyTooLargeError is a response body over Client.MaxBody, on the wire or once decompressed.
type BodyTooLargeError struct {
	// URL is the redacted request URL.
	URL string
	// Limit is the MaxBody in force.
	Limit int64
}

// Error names the redacted URL and the limit.
func (e *BodyTooLargeError) Error() string {
	return fmt.Sprintf("response body from %s exceeds the limit of %d bytes", e.URL, e.Limit)
}

// errTooLarge marks a body over the limit inside readBody.
var errTooLarge = errors.New("body too large")

// Do sends the request and reads the whole response body. It never retries.
//
// A 2xx or 304 returns the Response and a nil error. Any other status returns the Response
// together with a *watukuytype.HTTPError carrying the status, the redacted URL (query included, the
// values of sensitive parameters such as token, key, secret, signature, password or auth
// replaced), the first 512 bytes of the body, RetryAfter and RateLimit. A body over MaxBody
// returns the Response (Body nil) and an error that errors.As finds as *BodyTooLargeError.
// Transport errors and timeouts return a nil Response and an error that names the key and
// the redacted URL and wraps the cause with %w (errors.Is(err, context.DeadlineExceeded)
// holds for a timeout, whose message says "timeout after <d>").
//
// Under a recording span (a traced cycle's fetch) the request gets an HTTP client span of
// that span's provider, with the semantic conventions' attributes (trace.go).
func (c *Client) Do(ctx context.Context, req Request) (*Response, error) {
	start := time.Now()
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	u, err := buildURL(req)
	if err != nil {
		err = fmt.Errorf("watukuy: %s: %s: %w", req.Key.Describe(), method, err)
		c.logRequest(req.Key, method, RedactURL(req.URL), nil, nil, time.Since(start), err)
		return nil, err
	}
	shown := redactURL(u)
	ctx, span := startSpan(ctx, method, u, shown)
	resp, err := c.send(ctx, req, method, u, shown, start)
	endSpan(span, resp, err)
	return resp, err
}

// send is Do once the URL is built: it sends the request and reads the answer.
func (c *Client) send(ctx context.Context, req Request, method string, u *url.URL, shown string, start time.Time) (*Response, error) {
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = c.Timeout
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel() // only after the body is read: the deadline covers it too

	hreq, err := http.NewRequestWithContext(tctx, method, u.String(), nil)
	if err != nil {
		err = fmt.Errorf("watukuy: %s: %s %s: %w", req.Key.Describe(), method, shown, unwrapURLError(err))
		c.logRequest(req.Key, method, shown, nil, nil, time.Since(start), err)
		return nil, err
	}
	if req.Header != nil {
		hreq.Header = req.Header.Clone()
	}
	if host := hreq.Header.Get("Host"); host != "" {
		hreq.Host = host // net/http ignores a Host entry in Header
	}
	if hreq.Header.Get("Accept-Encoding") == "" {
		// Asking ourselves turns off the transport's transparent gzip, so the size limit
		// can be applied to the decompressed bytes.
		hreq.Header.Set("Accept-Encoding", "gzip")
	}
	if req.ETag != "" {
		hreq.Header.Set("If-None-Match", req.ETag)
	}
	if hreq.Header.Get("User-Agent") == "" {
		hreq.Header.Set("User-Agent", userAgent)
	}

	hc := c.HTTP
	if hc == nil {
		hc = defaultHTTP
	}
	// A cycle's lease may have lapsed since its own check (a frozen process): no request
	// leaves then. The default client checks once more before each write on the wire.
	if err := watukuytype.CheckLease(ctx); err != nil {
		err = fmt.Errorf("watukuy: %s: %s %s: %w", req.Key.Describe(), method, shown, err)
		c.logRequest(req.Key, method, shown, hreq.Header, nil, time.Since(start), err)
		return nil, err
	}
	hreq, disarm := guard(ctx, hreq)
	hresp, err := hc.Do(hreq)
	disarm()
	if err != nil {
		err = c.transportError(ctx, tctx, req.Key, method, shown, timeout, err)
		c.logRequest(req.Key, method, shown, hreq.Header, nil, time.Since(start), err)
		return nil, err
	}
	defer hresp.Body.Close()

	// Retry-After dates and epoch resets are the API's clock: measured against its Date header
	// when it sends one, a worker whose clock runs ahead does not cut the window short.
	now := c.now()
	if d, err := http.ParseTime(hresp.Header.Get("Date")); err == nil {
		now = d
	}
	resp := &Response{
		StatusCode: hresp.StatusCode,
		Header:     hresp.Header,
		ETag:       hresp.Header.Get("ETag"),
		RateLimit:  ParseRateLimit(hresp.Header, now),
	}
	resp.RetryAfter, _ = ParseRetryAfter(hresp.Header.Get("Retry-After"), now)
	limit := c.MaxBody
	if limit <= 0 {
		limit = DefaultMaxBody
	}

	switch code := hresp.StatusCode; {
	case code == http.StatusNotModified:
		resp.NotModified = true
		if resp.ETag == "" {
			resp.ETag = req.ETag
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(hresp.Body, errorBodyLimit)) // keep the connection reusable

	case code >= 200 && code <= 299:
		var body []byte
		var err error
		if hresp.ContentLength > limit {
			err = errTooLarge // refuse before reading a byte
		} else {
			body, err = readBody(hresp, limit)
		}
		if errors.Is(err, errTooLarge) {
			err = fmt.Errorf("watukuy: %s: %s: %w", req.Key.Describe(), method, &BodyTooLargeError{URL: shown, Limit: limit})
		} else if err != nil {
			err = c.transportError(ctx, tctx, req.Key, method, shown, timeout, fmt.Errorf("reading body: %w", err))
		}
		if err != nil {
			resp.Elapsed = time.Since(start)
			c.logRequest(req.Key, method, shown, hreq.Header, resp, resp.Elapsed, err)
			if errors.As(err, new(*BodyTooLargeError)) {
				return resp, err
			}
			return nil, err
		}
		resp.Body = body
		base := u // relative next links resolve against the final URL, after redirects
		if hresp.Request != nil && hresp.Request.URL != nil {
			base = hresp.Request.URL
		}
		resp.Next = NextLink(hresp.Header, base)

	default:
		// The status is the error; a body we cannot read in full only shortens the snippet.
		body, _ := readBody(hresp, min(limit, errorBodyLimit))
		resp.Body = body
		resp.Elapsed = time.Since(start)
		herr := &watukuytype.HTTPError{
			Key:        req.Key,
			StatusCode: code,
			URL:        shown,
			Body:       snippet(scrub(string(body), secretsOf(u, hreq.Header))),
			RetryAfter: resp.RetryAfter,
			RateLimit:  resp.RateLimit,
		}
		c.logRequest(req.Key, method, shown, hreq.Header, resp, resp.Elapsed, herr)
		return resp, herr
	}
	resp.Elapsed = time.Since(start)
	c.logRequest(req.Key, method, shown, hreq.Header, resp, resp.Elapsed, nil)
	return resp, nil
}

// buildURL parses the request URL and merges the query; its errors never quote the URL.
func buildURL(req Request) (*url.URL, error) {
	u, err := url.Parse(req.URL)
	if err != nil {
		return nil, fmt.Errorf("invalid request URL: %w", unwrapURLError(err))
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("request URL %s is not an absolute http(s) URL", redactURL(u))
	}
	if len(req.Query) > 0 {
		q := u.Query()
		for k, vs := range req.Query {
			q[k] = append([]string(nil), vs...)
		}
		u.RawQuery = q.Encode()
	}
	return u, nil
}

// unwrapURLError drops the *url.Error layer, whose message repeats the raw URL with its
// secrets.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// transportError names the key and the redacted URL, and says "timeout after <d>" when our
// own per-request deadline (not the caller's context) ended the request.
func (c *Client) transportError(parent, tctx context.Context, key watukuytype.Key, method, shown string, timeout time.Duration, err error) error {
	err = unwrapURLError(err)
	if errors.Is(tctx.Err(), context.DeadlineExceeded) && parent.Err() == nil {
		return fmt.Errorf("watukuy: %s: %s %s: timeout after %s: %w", key.Describe(), method, shown, timeout, err)
	}
	return fmt.Errorf("watukuy: %s: %s %s: %w", key.Describe(), method, shown, err)
}

// readBody reads at most limit bytes of the decompressed body. Over the limit, on the wire
// or decompressed, it returns the first limit bytes and errTooLarge: a gzip bomb stops after
// limit+1 decompressed bytes instead of filling memory.
func readBody(resp *http.Response, limit int64) ([]byte, error) {
	wire := &countingReader{r: io.LimitReader(resp.Body, limit+1)}
	var r io.Reader = wire
	switch enc := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip", "x-gzip":
		// Decoded whether we asked or not: some servers send gzip to anyone.
		zr, err := gzip.NewReader(wire)
		if errors.Is(err, io.EOF) {
			return []byte{}, nil // an empty body labelled gzip (e.g. 204 or HEAD)
		}
		if err != nil {
			if wire.n > limit {
				return nil, errTooLarge
			}
			return nil, fmt.Errorf("gzip: %w", err)
		}
		defer zr.Close()
		r = zr
	default:
		return nil, fmt.Errorf("unsupported Content-Encoding %q", enc)
	}
	body, err := io.ReadAll(io.LimitReader(r, limit+1))
	if wire.n > limit || int64(len(body)) > limit {
		return body[:min(int64(len(body)), limit)], errTooLarge
	}
	return body, err
}

// countingReader counts the bytes read from the wire.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// snippet is the first snippetLen bytes of s, cut back to a whole UTF-8 character.
func snippet(s string) string {
	if len(s) <= snippetLen {
		return s
	}
	s = s[:snippetLen]
	for i := 0; i < utf8.UTFMax && len(s) > 0; i++ {
		r, size := utf8.DecodeLastRuneInString(s)
		if r != utf8.RuneError || size != 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return s
}

func (c *Client) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// logRequest writes the one debug line of a request. Nothing in it holds a secret: shown is
// the redacted URL, sent goes through Redact, and every error built here quotes only the
// redacted URL.
func (c *Client) logRequest(key watukuytype.Key, method, shown string, sent http.Header, resp *Response, elapsed time.Duration, err error) {
	e := c.Logger.Debug()
	if e == nil {
		return // disabled: skip the Redact copy
	}
	e = e.Str("poller", key.Poller).Str("partition", key.Partition).
		Str("method", method).Str("url", shown)
	if resp != nil {
		e = e.Int("status", resp.StatusCode).Int("bytes", len(resp.Body))
		if resp.NotModified {
			e = e.Bool("not_modified", true)
		}
	}
	e = e.Dur("elapsed", elapsed)
	if sent != nil {
		e = e.Interface("request_headers", Redact(sent))
	}
	if err != nil {
		e.AnErr("error", err).Msg("http request failed")
		return
	}
	e.Msg("http request")
}
