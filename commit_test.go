package watukuy

// Commits (G3, G7): a large page is committed in chunks, and a commit that reaches Redis twice
// or late (re-sent by go-redis, held in the network) is applied once and never takes the key
// back.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/netproxy"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// dieAfterStore lets n commits with events through, then dies right after the next one is
// written (a crash between two chunks of one page).
type dieAfterStore struct {
	core.Store
	mu      sync.Mutex
	n       int
	largest int
}

func (d *dieAfterStore) CommitPoll(ctx context.Context, l core.Lease, c core.Commit) (core.CommitResult, error) {
	r, err := d.Store.CommitPoll(ctx, l, c)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.largest = max(d.largest, len(c.Events))
	if err == nil && len(c.Events) > 0 {
		if d.n == 0 {
			return core.CommitResult{}, errKilled
		}
		d.n--
	}
	return r, err
}

// A large page is committed in chunks of CommitMaxItems, only the last moving the cursor; a
// death between two chunks leaves the first chunks' events in the outbox, the re-fetch finds
// those items unchanged, and every change is delivered once.
func TestG3LargePageCommittedInChunks(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		e.api.PutMany(5000, "o", map[string]any{"n": 1})
		big := func(p *watukuytype.Poller) { p.Fetch = e.api.ChangeFeed(5000); p.CommitMaxItems = 1000 }
		d := &dieAfterStore{n: 1}
		e.tick(e.engine(e.poller(big), func(s core.Store) core.Store { d.Store = s; return d }))
		if d.largest > 1000 {
			t.Fatalf("a commit carried %d events, more than CommitMaxItems", d.largest)
		}
		eng := e.engine(e.poller(big), nil)
		state := eng.store.Key(watukuytype.Key{Poller: "orders"}, "state")
		if cur := b.Client.HGet(t.Context(), state, "cursor.live").Val(); cur != "" {
			t.Fatalf("the cursor moved to %q with two of five chunks committed", cur)
		}
		if n := b.Client.XLen(t.Context(), eng.store.Key(watukuytype.Key{Poller: "orders"}, "outbox")).Val(); n != 2000 {
			t.Fatalf("%d events in the outbox after two chunks, want 2000", n)
		}
		e.settle(eng)
		perID := map[string]int{}
		for _, ev := range e.rec.events() {
			perID[ev.ID]++
		}
		if len(perID) != 5000 || len(e.rec.events()) != 5000 {
			t.Fatalf("%d deliveries of %d events, want 5000 once each", len(e.rec.events()), len(perID))
		}
		checkFinal(t, e)
	})
}

// go-redis re-sends a command after a read timeout (MaxRetries), and the first attempt may have
// run: with Redis' replies held back past the client's 200 ms timeout, the page's events reach
// the outbox once and are delivered once.
func TestG7ResentCommitAppliedOnce(t *testing.T) {
	srv := redistest.RealTCP(t)
	proxy, err := netproxy.New(tcpAddr(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: 200 * time.Millisecond, MaxRetries: 3})
	t.Cleanup(func() { _ = rdb.Close() })
	e := newEnv(t, srv)
	var armed atomic.Bool
	h := &hookStore{beforeCommit: func(c core.Commit) {
		if len(c.Events) > 0 && armed.CompareAndSwap(true, false) {
			proxy.StallReplies(300 * time.Millisecond) // the commit runs; its reply comes after the client gave up
		}
	}}
	eng, err := newEngine(Options{Redis: rdb, InstanceID: "resend"}, seams{clock: e.clock.Now, wrapStore: hooked(h)})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Register(e.poller(func(p *watukuytype.Poller) { p.Fetch = e.api.ChangeFeed(100) })); err != nil {
		t.Fatal(err)
	}
	e.api.Put("warm-up", nil)
	e.settle(eng) // the scripts are loaded (a first EVALSHA would only get NOSCRIPT)
	outbox := eng.store.Key(watukuytype.Key{Poller: "orders"}, "outbox")
	// round commits 30 new events in one tick and returns the EVALSHA calls Redis ran and the
	// entries the outbox received meanwhile.
	round := func(arm bool) (calls, added int64) {
		t.Helper()
		putN(e, 30)
		calls0, added0 := evalshaCalls(t, srv), entriesAdded(t, srv, outbox)
		armed.Store(arm)
		e.clock.Advance(3 * time.Minute)
		if rep, err := eng.Tick(t.Context(), 10*time.Second); err != nil || rep.Events != 30 || len(rep.Errors) > 0 {
			t.Fatalf("tick: %+v %v", rep, err)
		}
		return evalshaCalls(t, srv) - calls0, entriesAdded(t, srv, outbox) - added0
	}
	plainCalls, _ := round(false)
	calls, added := round(true)
	if calls <= plainCalls {
		t.Fatalf("%d script calls reached Redis, as many as without the stall (%d): the client re-sent nothing", calls, plainCalls)
	}
	if added != 30 {
		t.Errorf("the outbox received %d entries for 30 events: the re-sent commit was applied again", added)
	}
	ids := map[string]int{}
	for _, ev := range e.rec.events() {
		ids[ev.ID]++
	}
	if len(ids) != 61 || len(e.rec.events()) != 61 {
		t.Errorf("delivered %d events (%d distinct), want 61 once each", len(e.rec.events()), len(ids))
	}
}

// evalshaCalls reads how many EVALSHA commands the server has run.
func evalshaCalls(t *testing.T, b redistest.Backend) int64 {
	t.Helper()
	info, err := b.Client.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
			n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			return n
		}
	}
	return 0
}

// entriesAdded reads how many entries the server's streams received so far (XADD calls,
// INFO commandstats; the commands a script runs count too). Not XINFO STREAM entries-added:
// an outbox is deleted once drained and made again for its next event, which restarts that
// count. The tests that use it run without a replay log, so every XADD is an outbox entry.
func entriesAdded(t *testing.T, b redistest.Backend, _ string) int64 {
	t.Helper()
	info, err := b.Client.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_xadd:calls="); ok {
			n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			return n
		}
	}
	return 0
}

// holdDialer gives go-redis connections whose writes can be held back, as a TCP segment lost
// and retransmitted late would be: the client's write succeeds, the bytes reach Redis only when
// released. go-redis times the command out, closes the connection (the close waits behind the
// held bytes, as a FIN does) and re-sends on another connection.
type holdDialer struct {
	mu    sync.Mutex
	armed bool
	held  *holdConn
}

type holdConn struct {
	net.Conn
	d       *holdDialer
	mu      sync.Mutex
	holding bool
	buf     []byte
	closed  bool
}

// heldClient is a client of srv whose connections go through a holdDialer, with go-redis
// re-sending a command after a 200 ms read timeout.
func heldClient(t *testing.T, srv redistest.Backend) (*redis.Client, *holdDialer) {
	hd := &holdDialer{}
	rdb := redis.NewClient(&redis.Options{Addr: tcpAddr(t, srv), ReadTimeout: 200 * time.Millisecond, MaxRetries: 3, Dialer: hd.dial})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb, hd
}

func (d *holdDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &holdConn{Conn: c, d: d}, nil
}

func (d *holdDialer) arm() { d.mu.Lock(); d.armed = true; d.mu.Unlock() }

// pending reports whether bytes are held (or about to be).
func (d *holdDialer) pending() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.armed || d.held != nil
}

func (c *holdConn) Write(b []byte) (int, error) {
	c.d.mu.Lock()
	if c.d.armed {
		c.d.armed = false
		c.holding = true
		c.d.held = c
	}
	c.d.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holding {
		c.buf = append(c.buf, b...)
		return len(b), nil
	}
	return c.Conn.Write(b)
}

func (c *holdConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holding {
		c.closed = true // the FIN goes after the held bytes
		return nil
	}
	return c.Conn.Close()
}

// release delivers the held bytes to Redis, waits for its reply (so the command surely ran)
// and closes the connection. It returns the first line of the reply.
func (d *holdDialer) release(t *testing.T) string {
	t.Helper()
	d.mu.Lock()
	c := d.held
	d.held = nil
	d.mu.Unlock()
	if c == nil {
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holding = false
	_ = c.Conn.SetDeadline(time.Now().Add(5 * time.Second)) // go-redis' deadlines have passed
	if _, err := c.Conn.Write(c.buf); err != nil {
		t.Errorf("release: %v", err)
		return ""
	}
	line, err := bufio.NewReader(c.Conn).ReadString('\n')
	if err != nil {
		t.Errorf("release: reading the reply: %v", err)
		return ""
	}
	_ = c.Conn.Close()
	return line
}

// A chunk's first attempt held in the network and applied after the next chunk (go-redis timed
// it out and re-sent it meanwhile) is recognised as a repeat: 2,000 events enter the outbox
// once each and are delivered once.
func TestG7DelayedChunkAppliedOnce(t *testing.T) {
	srv := redistest.RealTCP(t)
	rdb, hd := heldClient(t, srv)
	e := newEnv(t, srv)
	var chunks atomic.Int32
	var released atomic.Value
	h := &hookStore{
		beforeCommit: func(c core.Commit) {
			if len(c.Events) == 1000 && chunks.Add(1) == 1 {
				hd.arm() // chunk 1's first attempt is held in the network
			}
		},
		afterCommit: func(c core.Commit, r core.CommitResult) {
			if len(c.Events) == 1000 && chunks.Load() == 2 {
				released.Store(hd.release(t)) // after chunk 2: the late attempt arrives
			}
		},
	}
	eng, err := newEngine(Options{Redis: rdb, InstanceID: "late"}, seams{clock: e.clock.Now, wrapStore: hooked(h)})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Register(e.poller(func(p *watukuytype.Poller) { p.Fetch = e.api.ChangeFeed(5000); p.CommitMaxItems = 1000 })); err != nil {
		t.Fatal(err)
	}
	e.api.Put("warm-up", nil)
	e.settle(eng) // scripts loaded
	outbox := eng.store.Key(watukuytype.Key{Poller: "orders"}, "outbox")
	added0 := entriesAdded(t, srv, outbox)
	e.api.PutMany(2000, "o", map[string]any{"n": 1})
	e.clock.Advance(3 * time.Minute)
	e.tick(eng)
	if chunks.Load() < 2 {
		t.Fatalf("the page was committed in %d chunks of 1,000 events", chunks.Load())
	}
	t.Logf("late attempt of chunk 1 answered %v", released.Load())
	e.settle(eng)
	if added := entriesAdded(t, srv, outbox) - added0; added != 2000 {
		t.Errorf("G7: the outbox received %d entries for 2,000 events: a chunk was applied twice", added)
	}
	perID := map[string]int{}
	for _, ev := range e.rec.events() {
		perID[ev.ID]++
	}
	dups := 0
	for _, n := range perID {
		if n > 1 {
			dups++
		}
	}
	if dups > 0 {
		t.Errorf("G7: %d events delivered twice (%d deliveries of %d distinct events)", dups, len(e.rec.events()), len(perID))
	}
}

// A page commit's first attempt held in the network and applied after a later page's commit
// does not take the cursor and rows back: when x1 returns to that older content the change is
// emitted, and a consumer that dedupes by id holds what the API has.
func TestG3DelayedCommitDoesNotRewindCursorOrRows(t *testing.T) {
	srv := redistest.RealTCP(t)
	rdb, hd := heldClient(t, srv)
	e := newEnv(t, srv)
	var armed atomic.Bool
	var commits atomic.Int32
	h := &hookStore{
		beforeCommit: func(c core.Commit) {
			if len(c.Events) > 0 && armed.CompareAndSwap(true, false) {
				hd.arm() // page 1's commit: its first attempt is held in the network
			}
		},
		afterCommit: func(c core.Commit, r core.CommitResult) {
			if len(c.Events) > 0 && hd.pending() && commits.Add(1) == 3 {
				t.Logf("late attempt of page 1's commit answered %q", hd.release(t)) // after page 3's commit
			}
		},
	}
	eng, err := newEngine(Options{Redis: rdb, InstanceID: "late"}, seams{clock: e.clock.Now, wrapStore: hooked(h)})
	if err != nil {
		t.Fatal(err)
	}
	stateOf := func(item json.RawMessage) string {
		var it struct {
			State string `json:"state"`
		}
		_ = json.Unmarshal(item, &it)
		return it.State
	}
	if err := eng.Register(e.poller(func(p *watukuytype.Poller) {
		p.Fetch = e.api.ChangeFeed(1)
		p.Version = nil
		p.Fingerprint = func(item json.RawMessage) ([]byte, error) { return []byte(stateOf(item)), nil }
	})); err != nil {
		t.Fatal(err)
	}
	e.api.Put("warm-up", map[string]any{"state": "x"})
	e.settle(eng) // scripts loaded
	e.api.Put("x1", map[string]any{"state": "closed"})
	e.api.Put("y1", map[string]any{"state": "closed"})
	var once sync.Once
	e.api.OnFetch(func(ctx context.Context, req watukuytype.FetchRequest) error {
		if req.Page == 1 {
			once.Do(func() { e.api.Put("x1", map[string]any{"state": "open"}) }) // x1 changes while paged
		}
		return nil
	})
	armed.Store(true)
	e.clock.Advance(3 * time.Minute)
	e.tick(eng) // page 1: x1 closed; page 2: y1; page 3: x1 open
	e.api.OnFetch(nil)
	if commits.Load() < 3 {
		t.Fatalf("%d commits with events, want 3", commits.Load())
	}
	e.api.Put("x1", map[string]any{"state": "closed"}) // x1 comes back to closed
	e.settle(eng)
	// A consumer that dedupes by id (what G2's ids are for).
	got, seen := map[string]string{}, map[string]bool{}
	var hist []string
	for _, ev := range e.rec.events() {
		if ev.Identity == "x1" {
			hist = append(hist, fmt.Sprintf("%s %s seq %s id %s", ev.Type, stateOf(ev.Item), ev.Seq, ev.ID[:10]))
		}
		if seen[ev.ID] {
			continue
		}
		seen[ev.ID] = true
		got[ev.Identity] = stateOf(ev.Item)
	}
	t.Logf("x1 deliveries: %v", hist)
	if got["x1"] != "closed" {
		t.Fatalf("G3: a consumer that dedupes by id holds x1 %q, the API %q; x1 deliveries: %v", got["x1"], "closed", hist)
	}
}
