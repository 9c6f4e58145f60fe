package brokertest

import (
	"bytes"
	"errors"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/watukuy/watukuy/internal/netproxy"
	"github.com/watukuy/watukuy/watukuytype"
)

// defaultPorts are the brokers' ports when a URL names none.
var defaultPorts = map[string]string{"nats": "4222", "tls": "4222", "amqp": "5672", "amqps": "5671", "postgres": "5432", "postgresql": "5432"}

// Proxied returns rawURL pointed at a proxy in front of its server (the first of a NATS list),
// and the proxy, closed when the test ends: Cut and Restore make the broker unreachable and
// back.
func Proxied(tb testing.TB, rawURL string) (string, *netproxy.Proxy) {
	tb.Helper()
	u, err := url.Parse(strings.Split(rawURL, ",")[0])
	if err != nil {
		tb.Fatal(err)
	}
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), defaultPorts[u.Scheme])
	}
	p, err := netproxy.New(target)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	u.Host = p.Addr()
	return u.String(), p
}

// ClosedAddr is a loopback host:port where nothing listens.
func ClosedAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// SinkError is err's *watukuytype.SinkError, failing the test when it has none.
func SinkError(tb testing.TB, err error) *watukuytype.SinkError {
	tb.Helper()
	var se *watukuytype.SinkError
	if !errors.As(err, &se) {
		tb.Fatalf("want a *watukuytype.SinkError, got %T: %v", err, err)
	}
	return se
}

// Logs is a log destination the engine's goroutines write to while the test reads it.
type Logs struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
