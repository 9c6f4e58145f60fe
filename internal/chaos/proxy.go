package chaos

import (
	"errors"
	"net"
	"sync"
	"time"
)

// Proxy is a TCP proxy on a loopback port that forwards every connection to one target (a
// Redis server) and can break the network on demand: DropAll closes every live connection,
// Stall stops forwarding bytes in both directions for a while, connections staying open.
// Processes under test connect to Addr instead of the target.
type Proxy struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup

	mu         sync.Mutex
	links      map[*link]struct{}
	stallUntil time.Time
	stallWake  chan struct{} // closed (and replaced) when the stall changes
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

// NewProxy listens on 127.0.0.1 (a free port) and forwards to target ("host:port").
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
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
func (p *Proxy) DropAll() int {
	p.mu.Lock()
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
	p.mu.Lock()
	p.stallUntil = time.Now().Add(d)
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
	s, err := net.DialTimeout("tcp", p.target, dialTimeout)
	if err != nil {
		_ = c.Close()
		return
	}
	l := &link{client: c, server: s, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.close()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.pipe(l, s, c)
	}()
	p.pipe(l, c, s)
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// pipe copies src to dst until either side fails, holding every chunk back while a stall
// lasts; then it closes both sides.
func (p *Proxy) pipe(l *link, dst, src net.Conn) {
	defer l.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.waitStall(l.done) {
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

// waitStall returns once no stall is in force (true), or when the link is closed (false).
func (p *Proxy) waitStall(done <-chan struct{}) bool {
	for {
		p.mu.Lock()
		until, wake := p.stallUntil, p.stallWake
		p.mu.Unlock()
		d := time.Until(until)
		if d <= 0 {
			return true
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-wake: // the stall changed: read it again
			t.Stop()
		case <-done:
			t.Stop()
			return false
		}
	}
}
