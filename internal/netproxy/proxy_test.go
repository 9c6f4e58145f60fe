package netproxy_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/netproxy"
	"github.com/watukuy/watukuy/internal/redistest"
)

func newTestProxy(t *testing.T) (*netproxy.Proxy, *redis.Client) {
	t.Helper()
	p := proxyTo(t, redistest.Miniredis(t).Mini.Addr())
	return p, newClient(t, &redis.Options{Addr: p.Addr()})
}

// proxyTo starts a proxy to target, closed when the test ends.
func proxyTo(t *testing.T, target string) *netproxy.Proxy {
	t.Helper()
	p, err := netproxy.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// newClient is a go-redis client closed when the test ends.
func newClient(t *testing.T, o *redis.Options) *redis.Client {
	t.Helper()
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestProxyForwardsRedisTraffic(t *testing.T) {
	_, c := newTestProxy(t)
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING through the proxy: %v", err)
	}
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got := c.Get(ctx, "k").Val(); got != "v" {
		t.Fatalf("GET through the proxy = %q, want v", got)
	}
}

// rawPing sends a PING (RESP array) on conn and reads the reply line.
func rawPing(conn net.Conn, r *bufio.Reader) (string, error) {
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return "", err
	}
	if _, err := conn.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return "", err
	}
	return r.ReadString('\n')
}

func TestProxyDropAllBreaksConnections(t *testing.T) {
	p, c := newTestProxy(t)
	conn, r := dialPinged(t, p, "before DropAll")
	if n := p.DropAll(); n < 1 {
		t.Fatalf("DropAll closed %d connections, want at least 1", n)
	}
	// The proxy closed its side: the next read ends (EOF or reset), never with a PONG.
	if got, err := rawPing(conn, r); err == nil {
		t.Fatalf("PING after DropAll answered %q on the dropped connection", got)
	}
	// A new connection works.
	dialPinged(t, p, "on a new connection after DropAll")
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("go-redis PING after DropAll: %v", err)
	}
}

func TestProxyStallDelaysTraffic(t *testing.T) {
	p, c := newTestProxy(t)
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil { // open the pooled connection first
		t.Fatal(err)
	}
	const stall = 600 * time.Millisecond
	start := time.Now()
	p.Stall(stall)
	done := make(chan error, 1)
	go func() { done <- c.Ping(ctx).Err() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("PING during a stall failed: %v", err)
		}
		if took := time.Since(start); took < stall*8/10 {
			t.Fatalf("PING during a %v stall took %v, want at least %v", stall, took, stall*8/10)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("PING did not come back within 10s of a 600ms stall")
	}
	// After the stall the traffic flows again without delay.
	start = time.Now()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > stall/2 {
		t.Fatalf("PING after the stall took %v", took)
	}
}

func TestProxyStallEndsEarlyAndClose(t *testing.T) {
	p, c := newTestProxy(t)
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p.Stall(time.Hour)
	done := make(chan error, 1)
	go func() { done <- c.Ping(ctx).Err() }()
	p.Stall(0) // ends the stall: the held PING goes through
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("PING after ending the stall: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Stall(0) did not end the stall")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("the proxy still accepts connections after Close")
	}
}

// isTimeout tells a client-side timeout (the read deadline passed).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// waitFor polls cond until it holds, failing the test after 5 s: for state that lands on
// the server asynchronously, with no event to wait on.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestProxyStallDirections(t *testing.T) {
	tests := []struct {
		name  string
		stall func(p *netproxy.Proxy, d time.Duration)
		// executed: the server ran the command the client timed out on.
		executed bool
	}{
		{"Stall holds the request", (*netproxy.Proxy).Stall, false},
		{"StallReplies holds only the reply", (*netproxy.Proxy).StallReplies, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := redistest.Miniredis(t)
			p := proxyTo(t, b.Mini.Addr())
			// No retries: the error is the first attempt's, and the command runs at most once.
			c := newClient(t, &redis.Options{Addr: p.Addr(), ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
			ctx := context.Background()
			if err := c.Ping(ctx).Err(); err != nil { // open the pooled connection first
				t.Fatal(err)
			}
			tt.stall(p, time.Hour)
			if err := c.Set(ctx, "k", "v", 0).Err(); !isTimeout(err) {
				t.Fatalf("SET during the stall: %v, want a client read timeout", err)
			}
			if tt.executed {
				waitFor(t, "the timed-out SET to be executed", func() bool { return b.Mini.Exists("k") })
			} else if b.Mini.Exists("k") {
				t.Fatal("the SET reached the server although requests were held")
			}
			tt.stall(p, 0)
			if err := c.Ping(ctx).Err(); err != nil {
				t.Fatalf("PING after the stall ended: %v", err)
			}
		})
	}
}

func TestProxyStallRepliesMakesTheClientResend(t *testing.T) {
	b := redistest.Miniredis(t)
	p := proxyTo(t, b.Mini.Addr())
	var dials atomic.Int32
	c := newClient(t, &redis.Options{
		Addr: p.Addr(), ReadTimeout: 300 * time.Millisecond, MaxRetries: 1,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			// The second dial is the retry's fresh connection, so the first attempt has
			// timed out: let the replies through for the retry.
			if dials.Add(1) == 2 {
				p.StallReplies(0)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	})
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p.StallReplies(time.Hour)
	n, err := c.Incr(ctx, "n").Result()
	if err != nil {
		t.Fatalf("INCR: %v (its retry should have got the reply)", err)
	}
	// One INCR call, executed twice: the timed-out attempt and the retry.
	if got, _ := b.Mini.Get("n"); n != 2 || got != "2" {
		t.Fatalf("INCR returned %d, server holds %q; want 2 and \"2\"", n, got)
	}
}

func TestProxyCutRefusesUntilRestore(t *testing.T) {
	p, c := newTestProxy(t)
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	old, oldR := dialPinged(t, p, "before Cut")

	p.Cut()
	if got, err := rawPing(old, oldR); err == nil {
		t.Fatalf("PING after Cut answered %q on a connection opened before it", got)
	}
	fresh, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("dial while cut: %v (the port should stay up, connections closed at once)", err)
	}
	defer fresh.Close()
	if got, err := rawPing(fresh, bufio.NewReader(fresh)); err == nil {
		t.Fatalf("PING on a connection opened while cut answered %q", got)
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("go-redis PING succeeded while cut")
	}

	p.Restore()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("go-redis PING after Restore: %v", err)
	}
}

func TestProxyRetargetMovesClients(t *testing.T) {
	first, second := redistest.Miniredis(t), redistest.Miniredis(t)
	p := proxyTo(t, first.Mini.Addr())
	c := newClient(t, &redis.Options{Addr: p.Addr()})
	ctx := context.Background()
	if err := c.Set(ctx, "k", "first", 0).Err(); err != nil {
		t.Fatal(err)
	}
	old, oldR := dialPinged(t, p, "before Retarget")

	p.Retarget(second.Mini.Addr())
	if got, err := rawPing(old, oldR); err == nil {
		t.Fatalf("PING after Retarget answered %q on a connection to the old target", got)
	}
	if err := c.Set(ctx, "k", "second", 0).Err(); err != nil {
		t.Fatalf("SET after Retarget: %v", err)
	}
	for _, tc := range []struct {
		b    redistest.Backend
		name string
		want string
	}{{first, "first", "first"}, {second, "second", "second"}} {
		if got, _ := tc.b.Mini.Get("k"); got != tc.want {
			t.Errorf("k on the %s server = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// dialPinged opens a raw connection through p and checks that it answers a PING (what says
// when it is dialled, for the failure message).
func dialPinged(t *testing.T, p *netproxy.Proxy, what string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	r := bufio.NewReader(conn)
	if got, err := rawPing(conn, r); err != nil || got != "+PONG\r\n" {
		t.Fatalf("PING %s = %q, %v", what, got, err)
	}
	return conn, r
}
