package httppoll

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"time"

	"github.com/watukuy/watukuy/watukuytype"
)

// guardedConn is a connection of the default transport that runs the current request's lease
// check (watukuytype.CheckLease) before every write: the last moment before bytes leave. A process
// frozen after the cycle's own checks and resumed past its lease then sends nothing.
type guardedConn struct {
	net.Conn
	check atomic.Pointer[func() error]
}

func (c *guardedConn) Write(b []byte) (int, error) {
	if g := c.check.Load(); g != nil {
		if err := (*g)(); err != nil {
			return 0, err
		}
	}
	return c.Conn.Write(b)
}

// newDefaultHTTP is the client of a Client without its own: the standard transport's
// settings, with guarded connections. HTTP/2 is off, since its connections carry several
// requests at once and a write could not be told apart by request.
func newDefaultHTTP() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ForceAttemptHTTP2 = false
	t.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &guardedConn{Conn: c}, nil
	}
	return &http.Client{Transport: t}
}

// guard arms the connection the request gets with ctx's lease check, until the returned
// function disarms it (once the request is written and its answer's headers are in).
func guard(ctx context.Context, hreq *http.Request) (*http.Request, func()) {
	check := func() error { return watukuytype.CheckLease(ctx) }
	var armed *guardedConn
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		conn := info.Conn
		if tc, ok := conn.(*tls.Conn); ok {
			conn = tc.NetConn()
		}
		if gc, ok := conn.(*guardedConn); ok {
			armed = gc
			gc.check.Store(&check)
		}
	}}
	return hreq.WithContext(httptrace.WithClientTrace(hreq.Context(), trace)), func() {
		if armed != nil {
			// Only this request's check: a connection back in the pool before Do returned (an
			// answer without a body) may already carry the next request's.
			armed.check.CompareAndSwap(&check, nil)
		}
	}
}
