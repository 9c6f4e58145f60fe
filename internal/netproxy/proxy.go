// Package netproxy is a TCP proxy for tests that breaks the network between a client and a
// server on demand: it drops connections, holds bytes back (both directions, or only the
// replies), cuts the link entirely, or sends new connections to another server (a
// failover). The chaos harness puts it between the processes under test and their Redis;
// redistest puts it on a replica's replication link.
package netproxy

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Proxy is a TCP proxy on a loopback port that forwards every connection to one target (a
// Redis server) and can break the network on demand: DropAll closes every live connection,
// Stall stops forwarding bytes in both directions for a while, connections staying open,
// StallReplies does so for the target's replies only, Cut refuses every connection until
// Restore, and Retarget moves new connections to another target. Processes under test
// connect to Addr instead of the target.
type Proxy struct {
	ln net.Listener
	wg sync.WaitGroup

	mu     sync.Mutex
	target string
	// epoch counts the drops (DropAll, Retarget, Cut, Close): a connection whose dial
	// began in an older epoch is closed on arrival, so no connection escapes a drop by
	// being half-open while it ran.
	epoch      uint64
	cut        bool
	links      map[*link]struct{}
	stallUntil time.Time     // both directions are held until then
	replyUntil time.Time     // the target-to-client direction is held until then
	stallWake  chan struct{} // closed (and replaced) when a stall changes
	closed     bool
}

// link is one proxied connection: the client's side and the target's side.
type link struct {
	client, server net.Conn
	done           chan struct{}
	once           sync.Once
}

func (l *link) close() {
	l.once.Do(func() {
		close(l.done)
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

// dialTimeout bounds a connection attempt to the target; a target that is down (a Redis
// being restarted) refuses at once, and the client's connection is then closed.
const dialTimeout = 2 * time.Second

// New listens on 127.0.0.1 (a free port) and forwards to target ("host:port").
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("netproxy: listen: %w", err)
	}
	p := &Proxy{target: target, ln: ln, links: map[*link]struct{}{}, stallWake: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening address, "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// DropAll closes every live connection (both sides); new connections are accepted as usual.
// It returns how many it closed.
func (p *Proxy) DropAll() int { return p.drop(func() {}) }

// Retarget sends new connections to target ("host:port") and drops every existing one, as
// a failover does: clients reconnect through the same address and reach the new server.
func (p *Proxy) Retarget(target string) { p.drop(func() { p.target = target }) }

// Cut drops every connection and refuses new ones (each is accepted and closed at once)
// until Restore: the link is down, the proxy's port still up.
func (p *Proxy) Cut() { p.drop(func() { p.cut = true }) }

// Restore ends a Cut: new connections are forwarded again. Connections dropped by the Cut
// stay closed; clients reconnect.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// drop applies change under the lock and closes every connection opened before it; it
// returns how many were live.
func (p *Proxy) drop(change func()) int {
	p.mu.Lock()
	change()
	p.epoch++
	ls := make([]*link, 0, len(p.links))
	for l := range p.links {
		ls = append(ls, l)
	}
	p.links = map[*link]struct{}{}
	p.mu.Unlock()
	for _, l := range ls {
		l.close()
	}
	return len(ls)
}

// Stall stops forwarding bytes in both directions, on every connection (also those opened
// meanwhile), for d from now; the connections stay open and whatever was sent during the
// stall is forwarded when it ends. A new call replaces the current stall; d <= 0 ends it.
func (p *Proxy) Stall(d time.Duration) {
	p.setStall(func(until time.Time) { p.stallUntil = until }, d)
}

// StallReplies is Stall for the target-to-client direction only: requests still reach the
// target and are executed, the replies are held back for d. A client whose read timeout is
// shorter gives up on a command the server did run, and may send it again. It is
// independent of Stall (a reply is held while either is in force); a new call replaces
// the current reply stall, d <= 0 ends it.
func (p *Proxy) StallReplies(d time.Duration) {
	p.setStall(func(until time.Time) { p.replyUntil = until }, d)
}

func (p *Proxy) setStall(set func(time.Time), d time.Duration) {
	p.mu.Lock()
	set(time.Now().Add(d))
	close(p.stallWake)
	p.stallWake = make(chan struct{})
	p.mu.Unlock()
}

// Close stops accepting, closes every connection and waits for the proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.DropAll()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // e.g. too many open files: do not spin
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	p.mu.Lock()
	target, epoch, cut := p.target, p.epoch, p.cut
	p.mu.Unlock()
	if cut {
		_ = c.Close()
		return
	}
	s, err := net.DialTimeout("tcp", target, dialTimeout)
	if err != nil {
		_ = c.Close()
		return
	}
	l := &link{client: c, server: s, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed || p.epoch != epoch { // dropped, cut or retargeted while dialling
		p.mu.Unlock()
		l.close()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.pipe(l, c, s, true)
	}()
	p.pipe(l, s, c, false)
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// pipe copies src to dst until either side fails, holding every chunk back while a stall
// lasts (reply tells the target-to-client direction); then it closes both sides.
func (p *Proxy) pipe(l *link, dst, src net.Conn, reply bool) {
	defer l.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.waitStall(l.done, reply) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// waitStall returns once no stall is in force for this direction (true), or when the link
// is closed (false).
func (p *Proxy) waitStall(done <-chan struct{}, reply bool) bool {
	for {
		p.mu.Lock()
		until, wake := p.stallUntil, p.stallWake
		if reply && p.replyUntil.After(until) {
			until = p.replyUntil
		}
		p.mu.Unlock()
		d := time.Until(until)
		if d <= 0 {
			return true
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-wake: // a stall changed: read it again
			t.Stop()
		case <-done:
			t.Stop()
			return false
		}
	}
}
