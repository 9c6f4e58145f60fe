package httppoll

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy/internal/leasectx"
	"github.com/watukuy/watukuy/watukuytype"
)

var testKey = watukuytype.Key{Poller: "orders", Partition: "t_1"}

// fakeNow is the fake clock of every Do test: Retry-After dates and epoch resets are relative
// to it, so no test waits.
var fakeNow = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func gz(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func asHTTPError(t *testing.T, err error) *watukuytype.HTTPError {
	t.Helper()
	var he *watukuytype.HTTPError
	if !errors.As(err, &he) {
		t.Fatalf("err = %v (%T); want *core.HTTPError", err, err)
	}
	return he
}

func asTooLarge(t *testing.T, err error) *BodyTooLargeError {
	t.Helper()
	var tl *BodyTooLargeError
	if !errors.As(err, &tl) {
		t.Fatalf("err = %v (%T); want *BodyTooLargeError", err, err)
	}
	return tl
}

func TestDo(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789"), 200) // 2000 bytes
	bomb := gz(t, make([]byte, 10<<20))            // 10 MiB of zeros, ~10 KiB gzipped

	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		client  Client  // HTTP and Now are filled in
		req     Request // URL is relative to the test server
		check   func(*testing.T, *Response, error, string)
	}{
		{
			name: "200 with JSON, next link, ETag and rate limit",
			handler: func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodGet || r.URL.Query().Get("since") != "5" || r.URL.Query().Get("limit") != "10" {
					http.Error(w, "bad request "+r.URL.String(), http.StatusBadRequest)
					return
				}
				if r.Header.Get("Accept-Encoding") != "gzip" || r.Header.Get("User-Agent") != "watukuy" ||
					r.Header.Get("Accept") != "application/json" || r.Header.Get("If-None-Match") != "" {
					http.Error(w, "bad headers", http.StatusBadRequest)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("ETag", `"v1"`)
				w.Header().Set("Link", `</items?page=2>; rel="next", </items?page=9>; rel="last"`)
				w.Header().Set("X-RateLimit-Limit", "100")
				w.Header().Set("X-RateLimit-Remaining", "7")
				w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(fakeNow.Add(time.Minute).Unix(), 10))
				_, _ = io.WriteString(w, `{"items":[{"id":1}]}`)
			},
			req: Request{URL: "/items?limit=10&since=1", Query: map[string][]string{"since": {"5"}},
				Header: http.Header{"Accept": {"application/json"}}},
			check: func(t *testing.T, resp *Response, err error, base string) {
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != 200 || string(resp.Body) != `{"items":[{"id":1}]}` || CheckJSON(resp.Body) != nil {
					t.Fatalf("resp = %d %q", resp.StatusCode, resp.Body)
				}
				if resp.ETag != `"v1"` || resp.NotModified || resp.Next != base+"/items?page=2" {
					t.Fatalf("ETag %q NotModified %v Next %q", resp.ETag, resp.NotModified, resp.Next)
				}
				if want := (watukuytype.RateLimit{Limit: 100, Remaining: 7, Reset: time.Minute}); resp.RateLimit == nil || *resp.RateLimit != want {
					t.Fatalf("RateLimit = %+v; want %+v", resp.RateLimit, want)
				}
				if resp.Elapsed <= 0 || resp.RetryAfter != 0 {
					t.Fatalf("Elapsed %v RetryAfter %v", resp.Elapsed, resp.RetryAfter)
				}
			},
		},
		{
			name: "method and Host header",
			handler: func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, r.Method+" "+r.Host)
			},
			req: Request{Method: http.MethodPost, URL: "/", Header: http.Header{"Host": {"api.example"}}},
			check: func(t *testing.T, resp *Response, err error, _ string) {
				if err != nil || string(resp.Body) != "POST api.example" {
					t.Fatalf("resp %q err %v", resp.Body, err)
				}
			},
		},
		{
			name: "429 with Retry-After seconds",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", "120")
				w.Header().Set("RateLimit", `"default";r=0;t=120`)
				w.Header().Set("RateLimit-Policy", `"default";q=50;w=3600`)
				http.Error(w, `{"error":"slow down"}`, http.StatusTooManyRequests)
			},
			req: Request{URL: "/items?page=3"},
			check: func(t *testing.T, resp *Response, err error, base string) {
				he := asHTTPError(t, err)
				if he.Key != testKey || he.StatusCode != 429 || he.URL != base+"/items?page=3" ||
					he.RetryAfter != 120*time.Second || he.Body != "{\"error\":\"slow down\"}\n" {
					t.Fatalf("HTTPError = %+v", he)
				}
				if want := (watukuytype.RateLimit{Limit: 50, Remaining: 0, Reset: 2 * time.Minute}); he.RateLimit == nil || *he.RateLimit != want {
					t.Fatalf("RateLimit = %+v; want %+v", he.RateLimit, want)
				}
				if resp == nil || resp.StatusCode != 429 || resp.RetryAfter != 120*time.Second {
					t.Fatalf("resp = %+v", resp)
				}
				if want := `watukuy: poller "orders", partition "t_1": HTTP 429 from ` + base + "/items?page=3"; err.Error() != want {
					t.Fatalf("Error() = %q; want %q", err, want)
				}
			},
		},
		{
			name: "503 with HTTP-date Retry-After",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", fakeNow.Add(90*time.Second).Format(http.TimeFormat))
				w.WriteHeader(http.StatusServiceUnavailable)
			},
			req: Request{URL: "/"},
			check: func(t *testing.T, resp *Response, err error, _ string) {
				he := asHTTPError(t, err)
				if he.StatusCode != 503 || he.RetryAfter != 90*time.Second || he.Body != "" || he.RateLimit != nil {
					t.Fatalf("HTTPError = %+v", he)
				}
			},
		},
		{
			name: "500 body snippet truncated to 512 bytes",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = w.Write(big)
			},
			req: Request{URL: "/"},
			check: func(t *testing.T, resp *Response, err error, _ string) {
				he := asHTTPError(t, err)
				if he.StatusCode != 500 || he.Body != string(big[:512]) || he.RetryAfter != 0 {
					t.Fatalf("HTTPError = %d %d bytes", he.StatusCode, len(he.Body))
				}
				if !bytes.Equal(resp.Body, big) {
					t.Fatalf("resp.Body has %d bytes; want %d", len(resp.Body), len(big))
				}
			},
		},
		{
			name: "500 snippet cut at a whole UTF-8 character",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = io.WriteString(w, "x"+strings.Repeat("é", 600))
			},
			req: Request{URL: "/"},
			check: func(t *testing.T, resp *Response, err error, _ string) {
				he := asHTTPError(t, err)
				if len(he.Body) != 511 || !utf8.ValidString(he.Body) {
					t.Fatalf("snippet has %d bytes, valid UTF-8 %v", len(he.Body), utf8.ValidString(he.Body))
				}
			},
		},
		{
			name: "500 with a body over the limit still reports the status",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusBadGateway)
				_, _ = w.Write(big)
			},
			client: Client{MaxBody: 1000},
			req:    Request{URL: "/"},
			check: func(t *testing.T, resp *Response, err error, _ string) {
				he := asHTTPError(t, err)
				if he.StatusCode != 502 || he.Body != string(big[:512]) || len(resp.Body) != 1000 {
					t.Fatalf("HTTPError %d body %d resp.Body %d", he.StatusCode, len(he.Body), len(resp.Body))
				}
			},
		},
		{
			name: "3xx not followed is an error",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusMultipleChoices)
			},
			req: Request{URL: "/"},
			check: func(t *testing.T, resp *Response, err error, _ string) {
				if he := asHTTPError(t, err); he.StatusCode != 300 {
					t.Fatalf("status %d", he.StatusCode)
				}
			},
		},
		{
			name: "redirect followed, next link resolved against the final URL",
			handler: func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/old/items" {
					http.Redirect(w, r, "/new/items", http.StatusMovedPermanently)
					return
				}
				w.Header().Set("Link", `<items?page=2>; rel=next`)
				_, _ = io.WriteString(w, "[]")
			},
			req: Request{URL: "/old/items"},
			check: func(t *testing.T, resp *Response, err error, base string) {
				if err != nil || resp.Next != base+"/new/items?page=2" {
					t.Fatalf("Next %q err %v", resp.Next, err)
				}
			},
		},
		{
			name: "gzip response",
			handler: func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Accept-Encoding") != "gzip" {
					http.Error(w, "no gzip asked", http.StatusBadRequest)
					return
				}
				w.Header().Set("Content-Encoding", "gzip")
				_, _ = w.Write(gz(t, []byte(`{"zipped":true}`)))
			},
			req: Request{URL: "/"},
			check: func(t *testing.T, resp *Response, err error, _ string) {
				if err != nil || string(resp.Body) != `{"zipped":true}` {
					t.Fatalf("body %q err %v", resp.Body, err)
				}
			},
		},
		{
			name: "gzip sent unasked is decoded",
			handler: func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Accept-Encoding") != "identity" {
					http.Error(w, "caller's Accept-Encoding overridden", http.StatusBadRequest)
					return
				}
				w.Header().Set("Content-Encoding", "x-gzip")
				_, _ = w.Write(gz(t, []byte(`[1,2,3]`)))
			},
			req: Request{URL: "/", Header: http.Header{"Accept-Encoding": {"identity"}}},
			check: func(t *testing.T, resp *Response, err error, _ string) {
				if err != nil || string(resp.Body) != `[1,2,3]` {
					t.Fatalf("body %q err %v", resp.Body, err)
				}
			},
		},
		{
			name: "gzip error body is decoded into the snippet",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Encoding", "gzip")
				w.WriteHeader(http.StatusBadRequest)
				_, _ = w.Write(gz(t, []byte(`{"error":"bad cursor"}`)))
			},
			req: Request{URL: "/"},
			check: func(t *testing.T, resp *Response, err error, _ string) {
				if he := asHTTPError(t, err); he.Body != `{"error":"bad cursor"}` {
					t.Fatalf("snippet %q", he.Body)
				}
			},
		},
		{
			name: "empty body labelled gzip",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Encoding", "gzip")
				w.WriteHeader(http.StatusNoContent)
			},
			req: Request{URL: "/"},
			check: func(t *testing.T, resp *Response, err error, _ string) {
				if err != nil || resp.StatusCode != 204 || len(resp.Body) != 0 {
					t.Fatalf("resp %+v err %v", resp, err)
				}
			},
		},
		{
			name: "corrupt gzip",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Encoding", "gzip")
				_, _ = io.WriteString(w, "not gzip at all")
			},
			req: Request{URL: "/"},
			check: func(t *testing.T, resp *Response, err error, _ string) {
				if err == nil || !strings.Contains(err.Error(), "gzip") || !strings.Contains(err.Error(), `poller "orders", partition "t_1"`) {
					t.Fatalf("err = %v", err)
				}
			},
		},
		{
			name: "unsupported Content-Encoding",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Encoding", "br")
				_, _ = io.WriteString(w, "\x1b\x00")
			},
			req: Request{URL: "/"},
			check: func(t *testing.T, resp *Response, err error, _ string) {
				if err == nil || !strings.Contains(err.Error(), `unsupported Content-Encoding "br"`) {
					t.Fatalf("err = %v", err)
				}
			},
		},
		{
			name: "gzip bomb hits the decompressed limit",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Encoding", "gzip")
				_, _ = w.Write(bomb)
			},
			client: Client{MaxBody: 64 << 10},
			req:    Request{URL: "/bomb?token=s3cr3t"},
			check: func(t *testing.T, resp *Response, err error, base string) {
				tl := asTooLarge(t, err)
				if tl.Limit != 64<<10 || tl.URL != base+"/bomb?token=[redacted]" {
					t.Fatalf("BodyTooLargeError = %+v", tl)
				}
				if resp == nil || resp.StatusCode != 200 || resp.Body != nil {
					t.Fatalf("resp = %+v", resp)
				}
			},
		},
		{
			name: "plain body over the limit, with Content-Length",
			handler: func(w http.ResponseWriter, r *http.Request) {
				_, _ = w.Write(big[:101])
			},
			client: Client{MaxBody: 100},
			req:    Request{URL: "/"},
			check: func(t *testing.T, resp *Response, err error, base string) {
				if tl := asTooLarge(t, err); tl.Limit != 100 || tl.URL != base+"/" {
					t.Fatalf("BodyTooLargeError = %+v", tl)
				}
			},
		},
		{
			name: "plain body over the limit, chunked",
			handler: func(w http.ResponseWriter, r *http.Request) {
				for range 20 {
					_, _ = w.Write(big[:10])
					w.(http.Flusher).Flush()
				}
			},
			client: Client{MaxBody: 100},
			req:    Request{URL: "/"},
			check: func(t *testing.T, resp *Response, err error, _ string) {
				asTooLarge(t, err)
			},
		},
		{
			name: "body exactly at the limit",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Encoding", "gzip")
				_, _ = w.Write(gz(t, big[:100]))
			},
			client: Client{MaxBody: 100},
			req:    Request{URL: "/"},
			check: func(t *testing.T, resp *Response, err error, _ string) {
				if err != nil || len(resp.Body) != 100 {
					t.Fatalf("body %d err %v", len(resp.Body), err)
				}
			},
		},
		{
			name:    "relative URL is refused",
			handler: func(w http.ResponseWriter, r *http.Request) {},
			req:     Request{URL: "ftp://x.example/?key=s3cr3t"},
			check: func(t *testing.T, resp *Response, err error, _ string) {
				if err == nil || resp != nil || strings.Contains(err.Error(), "s3cr3t") ||
					!strings.Contains(err.Error(), "not an absolute http(s) URL") {
					t.Fatalf("resp %v err %v", resp, err)
				}
			},
		},
		{
			name:    "unparseable URL is refused without quoting it",
			handler: func(w http.ResponseWriter, r *http.Request) {},
			req:     Request{URL: "https://x.example/%zz?key=s3cr3t"},
			check: func(t *testing.T, resp *Response, err error, _ string) {
				if err == nil || resp != nil || strings.Contains(err.Error(), "s3cr3t") ||
					!strings.Contains(err.Error(), "invalid request URL") {
					t.Fatalf("resp %v err %v", resp, err)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The API's clock is the fake one too: Retry-After dates and epoch resets are read
			// against its Date header.
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Date", fakeNow.Format(http.TimeFormat))
				tc.handler(w, r)
			}))
			defer srv.Close()
			c := tc.client
			c.HTTP = srv.Client()
			c.Now = func() time.Time { return fakeNow }
			req := tc.req
			req.Key = testKey
			if strings.HasPrefix(req.URL, "/") {
				req.URL = srv.URL + req.URL
			}
			resp, err := c.Do(context.Background(), req)
			tc.check(t, resp, err, srv.URL)
		})
	}
}

func TestDoETagRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name        string
		etagOn304   bool
		wantETag304 string
	}{
		{"server repeats the ETag on 304", true, `W/"v1"`},
		{"server omits the ETag on 304", false, `W/"v1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var seen []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				seen = append(seen, r.Header.Get("If-None-Match"))
				mu.Unlock()
				if r.Header.Get("If-None-Match") == `W/"v1"` {
					if tc.etagOn304 {
						w.Header().Set("ETag", `W/"v1"`)
					}
					w.WriteHeader(http.StatusNotModified)
					return
				}
				w.Header().Set("ETag", `W/"v1"`)
				_, _ = io.WriteString(w, `{"v":1}`)
			}))
			defer srv.Close()
			c := &Client{HTTP: srv.Client()}

			first, err := c.Do(context.Background(), Request{Key: testKey, URL: srv.URL})
			if err != nil || first.NotModified || first.ETag != `W/"v1"` || string(first.Body) != `{"v":1}` {
				t.Fatalf("first = %+v, %v", first, err)
			}
			second, err := c.Do(context.Background(), Request{Key: testKey, URL: srv.URL, ETag: first.ETag})
			if err != nil {
				t.Fatal(err)
			}
			if second.StatusCode != 304 || !second.NotModified || second.Body != nil || second.ETag != tc.wantETag304 {
				t.Fatalf("second = %+v", second)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(seen) != 2 || seen[0] != "" || seen[1] != `W/"v1"` {
				t.Fatalf("If-None-Match sent: %q", seen)
			}
		})
	}
}

// blockUntilGone is a handler that never answers: it waits for the client to give up, so
// the timeout tests need no sleep. With partial set it first sends headers and some body.
func blockUntilGone(partial bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if partial {
			w.Header().Set("Content-Length", "1000")
			_, _ = io.WriteString(w, `{"items":[`)
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done()
	}
}

func TestDoTimeout(t *testing.T) {
	for _, tc := range []struct {
		name    string
		client  Client
		req     Request
		partial bool
		want    string
	}{
		{"request timeout", Client{Timeout: time.Hour}, Request{Timeout: 50 * time.Millisecond}, false, "timeout after 50ms"},
		{"client timeout", Client{Timeout: 40 * time.Millisecond}, Request{}, false, "timeout after 40ms"},
		{"timeout while reading the body", Client{}, Request{Timeout: 50 * time.Millisecond}, true, "timeout after 50ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(blockUntilGone(tc.partial))
			defer srv.Close()
			c := tc.client
			c.HTTP = srv.Client()
			req := tc.req
			req.Key = testKey
			req.URL = srv.URL + "/slow?api_key=s3cr3t"
			resp, err := c.Do(context.Background(), req)
			if err == nil || resp != nil {
				t.Fatalf("resp %+v err %v", resp, err)
			}
			msg := err.Error()
			for _, part := range []string{`poller "orders", partition "t_1"`, srv.URL + "/slow?api_key=[redacted]", tc.want} {
				if !strings.Contains(msg, part) {
					t.Errorf("error %q does not contain %q", msg, part)
				}
			}
			if strings.Contains(msg, "s3cr3t") {
				t.Errorf("error leaks the secret: %q", msg)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("errors.Is(err, context.DeadlineExceeded) = false for %v", err)
			}
		})
	}
}

func TestDoCallerCancel(t *testing.T) {
	srv := httptest.NewServer(blockUntilGone(false))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{HTTP: srv.Client(), Logger: zerolog.Nop()}
	done := make(chan error, 1)
	go func() {
		_, err := c.Do(ctx, Request{Key: testKey, URL: srv.URL})
		done <- err
	}()
	cancel()
	err := <-done
	if !errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "timeout after") {
		t.Fatalf("err = %v; want a wrapped context.Canceled that is not called a timeout", err)
	}
}

func TestDoTransportError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now: connection refused
	c := &Client{}
	resp, err := c.Do(context.Background(), Request{Key: testKey, URL: "http://" + addr + "/x?secret=s3cr3t"})
	if err == nil || resp != nil {
		t.Fatalf("resp %v err %v", resp, err)
	}
	msg := err.Error()
	if !strings.Contains(msg, `poller "orders", partition "t_1"`) || !strings.Contains(msg, "http://"+addr+"/x?secret=[redacted]") ||
		strings.Contains(msg, "s3cr3t") || strings.Contains(msg, "timeout") {
		t.Fatalf("err = %q", msg)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) {
		t.Fatalf("cause not wrapped: %v", err)
	}
}

// TestDoNeverLeaksSecrets sends credentials in a header, in a query parameter and in userinfo,
// through a success, an error status whose body echoes them, and a timeout, and checks that
// neither the debug log nor any error text nor the error snippet contains them.
func TestDoNeverLeaksSecrets(t *testing.T) {
	const secret = "s3cr3t"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			_, _ = io.WriteString(w, `{"ok":true}`)
		case "/echo":
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error":"key `+r.URL.Query().Get("api_key")+` rejected for `+
				r.Header.Get("Authorization")+`"}`)
		default:
			<-r.Context().Done()
		}
	}))
	defer srv.Close()

	var buf bytes.Buffer
	c := &Client{
		HTTP:   srv.Client(),
		Logger: zerolog.New(&buf).Level(zerolog.DebugLevel),
		Now:    func() time.Time { return fakeNow },
	}
	hdr := http.Header{
		"Authorization": {"Bearer " + secret},
		"X-Api-Key":     {secret},
		"Accept":        {"application/json"},
	}
	withUser := strings.Replace(srv.URL, "http://", "http://user:"+secret+"@", 1)
	var texts []string
	for _, tc := range []struct {
		path    string
		base    string
		timeout time.Duration
		status  int
	}{
		{"/ok", srv.URL, 0, 200},
		{"/echo", srv.URL, 0, 401},
		{"/slow", srv.URL, 50 * time.Millisecond, 0},
		{"/ok", withUser, 0, 200},
	} {
		resp, err := c.Do(context.Background(), Request{
			Key: testKey, URL: tc.base + tc.path + "?api_key=" + secret + "&page=2",
			Header: hdr, Timeout: tc.timeout,
		})
		if tc.status == 0 {
			if err == nil {
				t.Fatalf("%s: no error", tc.path)
			}
		} else if resp == nil || resp.StatusCode != tc.status {
			t.Fatalf("%s: resp %+v err %v", tc.path, resp, err)
		}
		if err != nil {
			texts = append(texts, err.Error(), fmtErr(err))
			var he *watukuytype.HTTPError
			if errors.As(err, &he) {
				texts = append(texts, he.Body, he.URL)
				if !strings.Contains(he.Body, "[redacted]") {
					t.Errorf("snippet %q not scrubbed", he.Body)
				}
			}
		}
	}
	if hdr.Get("Authorization") != "Bearer "+secret {
		t.Fatal("Do modified the caller's headers")
	}
	logs := buf.String()
	texts = append(texts, logs)
	for _, s := range texts {
		if strings.Contains(s, secret) {
			t.Errorf("secret leaked in %q", s)
		}
	}
	lines := strings.Split(strings.TrimSpace(logs), "\n")
	if len(lines) != 4 {
		t.Fatalf("want one log line per request, got %d:\n%s", len(lines), logs)
	}
	for _, want := range []string{
		`"level":"debug"`, `"poller":"orders"`, `"partition":"t_1"`, `"method":"GET"`,
		`"url":"` + srv.URL + `/ok?api_key=[redacted]&page=2"`, `"status":200`, `"bytes":11`, `"elapsed":`,
		`"Authorization":["[redacted]"]`, `"X-Api-Key":["[redacted]"]`, `"Accept":["application/json"]`,
		`"status":401`, `"error":"watukuy: poller \"orders\", partition \"t_1\": HTTP 401 from`, "timeout after 50ms",
		`"url":"http://[redacted]@`,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %s:\n%s", want, logs)
		}
	}
}

// fmtErr renders every error of err's chain, in case a wrapped one says more.
func fmtErr(err error) string {
	var b strings.Builder
	for e := err; e != nil; e = errors.Unwrap(e) {
		b.WriteString(e.Error())
		b.WriteByte('\n')
	}
	return b.String()
}

func TestDoZeroClientAndLogger(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	var c Client // nil HTTP, zero Logger (disabled), nil Now
	resp, err := c.Do(context.Background(), Request{URL: srv.URL})
	if err != nil || string(resp.Body) != "ok" {
		t.Fatalf("resp %+v err %v", resp, err)
	}
}

// TestReadBodyStopsEarly checks that a gzip bomb is not decompressed past the limit: only
// the first few KiB of the compressed stream are consumed.
func TestReadBodyStopsEarly(t *testing.T) {
	bomb := gz(t, make([]byte, 10<<20))
	wire := &countingReader{r: bytes.NewReader(bomb)}
	resp := &http.Response{
		Header:        http.Header{"Content-Encoding": {"gzip"}},
		Body:          io.NopCloser(wire),
		ContentLength: -1,
	}
	body, err := readBody(resp, 64<<10) // the whole bomb fits the wire limit; only decompression can stop early
	if !errors.Is(err, errTooLarge) || len(body) != 64<<10 {
		t.Fatalf("readBody = %d bytes, %v", len(body), err)
	}
	if wire.n > 8<<10 || len(bomb) < 10_000 {
		t.Fatalf("read %d of %d compressed bytes", wire.n, len(bomb))
	}
}

// roundTripFunc lets a test answer without a server.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestDoCustomTransportWithoutRequest(t *testing.T) {
	c := &Client{HTTP: &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{
			StatusCode: 200,
			Header:     http.Header{"Link": {`<?page=2>; rel=next`}},
			Body:       io.NopCloser(strings.NewReader("[]")),
		}, nil // no Request set, as a hand-written RoundTripper may do
	})}}
	resp, err := c.Do(context.Background(), Request{Key: testKey, URL: "https://api.example/items?page=1"})
	if err != nil || resp.Next != "https://api.example/items?page=2" {
		t.Fatalf("resp %+v err %v", resp, err)
	}
}

// A request whose cycle lost its lease never reaches the API, even when the lease lapses after
// Do's own check, while the connection is taken (a process frozen there): the connection runs
// the check again before it writes.
func TestRequestCheckStopsTheWrite(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte(`[]`))
	}))
	defer srv.Close()
	lost := errors.New("lease lost")
	for _, tc := range []struct {
		name   string
		passes int // checks that pass before the lease is gone
	}{
		{"lost before Do", 0},
		{"lost after Do's check, before the write", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			ctx := leasectx.With(context.Background(), func() error {
				if calls.Add(1) > int64(tc.passes) {
					return lost
				}
				return nil
			})
			before := hits.Load()
			_, err := (&Client{}).Do(ctx, Request{URL: srv.URL})
			if !errors.Is(err, lost) {
				t.Fatalf("Do: %v, want the check's error", err)
			}
			if n := hits.Load() - before; n != 0 {
				t.Fatalf("the API got %d requests", n)
			}
		})
	}
	if _, err := (&Client{}).Do(context.Background(), Request{URL: srv.URL}); err != nil {
		t.Fatalf("a request outside a cycle: %v", err)
	}
	if hits.Load() != 1 {
		t.Fatalf("the API got %d requests, want 1", hits.Load())
	}
}

// An HTTP-date Retry-After names a moment on the API's clock and is measured against its Date
// header, not the worker's clock: a worker 2 minutes ahead still keeps the API's 60 s window
// (G8).
func TestG8RetryAfterDateReadAgainstTheAPIsDate(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now().UTC() // the API's clock
		w.Header().Set("Date", now.Format(http.TimeFormat))
		w.Header().Set("Retry-After", now.Add(60*time.Second).Format(http.TimeFormat))
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()
	ahead := func() time.Time { return time.Now().Add(2 * time.Minute) } // the worker's clock
	_, err := (&Client{Now: ahead}).Do(context.Background(), Request{URL: srv.URL})
	var he *watukuytype.HTTPError
	if !errors.As(err, &he) || he.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("Do: %v", err)
	}
	if he.RetryAfter < 50*time.Second {
		t.Fatalf("G8: the API asked for 60 s (Retry-After date vs its Date header); the helper saved a window of %v", he.RetryAfter)
	}
}
