package chaos

import (
	"bufio"
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/redistest"
)

func newTestProxy(t *testing.T) (*Proxy, *redis.Client) {
	t.Helper()
	b := redistest.Miniredis(t)
	p, err := NewProxy(b.Mini.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return p, c
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
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	if got, err := rawPing(conn, r); err != nil || got != "+PONG\r\n" {
		t.Fatalf("PING before DropAll = %q, %v", got, err)
	}
	if n := p.DropAll(); n < 1 {
		t.Fatalf("DropAll closed %d connections, want at least 1", n)
	}
	// The proxy closed its side: the next read ends (EOF or reset), never with a PONG.
	if got, err := rawPing(conn, r); err == nil {
		t.Fatalf("PING after DropAll answered %q on the dropped connection", got)
	}
	// A new connection works.
	conn2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	if got, err := rawPing(conn2, bufio.NewReader(conn2)); err != nil || got != "+PONG\r\n" {
		t.Fatalf("PING on a new connection after DropAll = %q, %v", got, err)
	}
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
