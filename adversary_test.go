package watukuy

// Reproductions of an adversarial review (branch adversary). Each test is named for the
// guarantee it breaks and FAILS on the code it was written against; see the report for the
// mechanism of each.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// eachLight runs fn on miniredis and a private redis-server (not the cluster: the machine is
// small and these holes do not depend on the topology).
func eachLight(t *testing.T, fn func(t *testing.T, b redistest.Backend)) {
	t.Run("miniredis", func(t *testing.T) { fn(t, redistest.Miniredis(t)) })
	t.Run("redis-server", func(t *testing.T) { fn(t, redistest.Real(t)) })
}

// ---------------------------------------------------------------------------------------
// G8: a Begin whose REQUEST (not its reply) was late runs the cycle's clock ahead.
// ---------------------------------------------------------------------------------------

// lateBeginStore delays Begin's request: the engine took its send time, then the command
// sits in transit (a pool wait, a dial, a retry after a dropped connection) before the
// script runs. The test clock (Redis' and the engine's) moves on meanwhile.
type lateBeginStore struct {
	core.Store
	clock interface{ Advance(time.Duration) }
	delay time.Duration
	armed atomic.Bool
}

func (d *lateBeginStore) Begin(ctx context.Context, key watukuytype.Key, owner string, ttl time.Duration, op core.BeginMode) (core.BeginResult, error) {
	if d.armed.CompareAndSwap(true, false) {
		d.clock.Advance(d.delay)
	}
	return d.Store.Begin(ctx, key, owner, ttl, op)
}

// TestAdversaryG8LateBeginRequestSendsInsideTheWindow: cycle.now() is "server time at
// Begin + local time since Begin was SENT". When Begin's request is late by d, the server
// time it returns is already d past the send, and the cycle's clock runs d ahead of the
// server's: the throttle gate takes the Retry-After window for over d too early.
func TestAdversaryG8LateBeginRequestSendsInsideTheWindow(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 3)
		var mu sync.Mutex
		var window time.Time
		var inWindow []string
		throttle := true
		p := e.poller(func(p *Poller) {
			feed := e.api.ChangeFeed(10)
			p.Fetch = func(ctx context.Context, req FetchRequest) (Page, error) {
				mu.Lock()
				defer mu.Unlock()
				now := e.clock.Now()
				if now.Before(window) {
					inWindow = append(inWindow, fmt.Sprintf("request at %s, window until %s",
						now.Format("15:04:05.000"), window.Format("15:04:05.000")))
				}
				if throttle {
					throttle = false
					window = now.Add(5 * time.Second)
					return Page{}, &HTTPError{Key: req.Key, StatusCode: 429, RetryAfter: 5 * time.Second}
				}
				return feed(ctx, req)
			}
		})
		d := &lateBeginStore{clock: e.clock, delay: 2400 * time.Millisecond}
		eng := e.engine(p, func(s core.Store) core.Store { d.Store = s; return d })
		ctx := t.Context()
		key := Key{Poller: "orders"}
		if rep := eng.RunCycle(ctx, key); rep.Pages != 1 {
			t.Fatalf("first cycle: %+v", rep)
		}
		e.clock.Advance(time.Second)
		// Control: due inside the window, Begin on time: the gate holds.
		makeDue(t, eng, "orders", "")
		if rep := eng.RunCycle(ctx, key); rep.Pages != 0 {
			t.Fatalf("control cycle sent %d requests inside the window: %+v", rep.Pages, rep)
		}
		// Due again, Begin's request 2.4 s in transit (lease 30 s: still valid).
		makeDue(t, eng, "orders", "")
		d.armed.Store(true)
		eng.RunCycle(ctx, key)
		mu.Lock()
		defer mu.Unlock()
		if len(inWindow) > 0 {
			t.Fatalf("G8: requests inside the Retry-After window: %v", inWindow)
		}
	})
}

// ---------------------------------------------------------------------------------------
// G6: an invalid listing between two listings that miss an item resets nothing.
// ---------------------------------------------------------------------------------------

// TestAdversaryG6InvalidListingDoesNotBreakTheMissStreak: ConfirmDeletes (default 2) must be
// CONSECUTIVE complete listings missing the identity. An item listed but invalid counts as
// present (no delete), but its row's miss count is not reset: listing 1 misses b (count 1),
// listing 2 lists b (invalid), listing 3 misses b (count 2): b is deleted although the
// listing just before showed it and the API never deleted it.
func TestAdversaryG6InvalidListingDoesNotBreakTheMissStreak(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		var mu sync.Mutex
		var listing []string
		set := func(items ...string) { mu.Lock(); listing = items; mu.Unlock() }
		p := e.poller(func(p *Poller) {
			p.Strategy = SnapshotDiff
			p.Version = nil
			p.Fetch = func(ctx context.Context, req FetchRequest) (Page, error) {
				mu.Lock()
				defer mu.Unlock()
				var pg Page
				for _, it := range listing {
					pg.Items = append(pg.Items, json.RawMessage(it))
				}
				return pg, nil
			}
			p.Validate = func(item json.RawMessage) error {
				var it struct {
					Name *string `json:"name"`
				}
				if err := json.Unmarshal(item, &it); err != nil || it.Name == nil {
					return fmt.Errorf("name is missing")
				}
				return nil
			}
		})
		eng := e.engine(p, nil)
		a, bOK, bBad := `{"id":"a","name":"A"}`, `{"id":"b","name":"B"}`, `{"id":"b"}`
		for i, l := range [][]string{
			{a, bOK},  // created a, b
			{a},       // b missed (a listing anomaly): candidate, 1 miss
			{a, bBad}, // b listed (invalid: parked, still present)
			{a},       // b missed again: not consecutive with the first miss
		} {
			set(l...)
			e.clock.Advance(3 * time.Minute)
			if rep := e.tick(eng); rep.Ran != 1 {
				t.Fatalf("listing %d: %+v", i, rep)
			}
		}
		for _, ev := range e.rec.events() {
			if ev.Type == Deleted {
				t.Fatalf("G6: %s deleted after two non-consecutive misses (the listing between them showed it); the API never deleted it", ev.Identity)
			}
		}
	})
}

// ---------------------------------------------------------------------------------------
// G2: a versioned poller whose version does not move while content comes back.
// ---------------------------------------------------------------------------------------

// TestAdversaryG2VersionThatRepeatsWithContent: with a version, the change count stays out of
// the id ("a version already names the change"). A second-granular updated_at does not name
// the change: closed → open → closed → open inside one second gives the second and the
// fourth observation one id, and a consumer that dedupes by id ends with "closed" while the
// API has "open".
func TestAdversaryG2VersionThatRepeatsWithContent(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		var mu sync.Mutex
		state := ""
		p := e.poller(func(p *Poller) {
			p.Strategy = SnapshotDiff
			p.Version = Field("updated_at")
			p.Fetch = func(ctx context.Context, req FetchRequest) (Page, error) {
				mu.Lock()
				defer mu.Unlock()
				return Page{Items: []json.RawMessage{json.RawMessage(fmt.Sprintf(
					`{"id":"o1","state":%q,"updated_at":"2026-11-30T10:00:00Z"}`, state))}}, nil
			}
		})
		eng := e.engine(p, nil)
		for _, s := range []string{"closed", "open", "closed", "open"} {
			mu.Lock()
			state = s
			mu.Unlock()
			e.clock.Advance(3 * time.Minute)
			e.tick(eng)
		}
		evs := e.rec.events()
		if len(evs) != 4 {
			t.Fatalf("%d events for 4 observed changes", len(evs))
		}
		seen := map[string]int{}
		applied := ""
		for i, ev := range evs {
			if j, dup := seen[ev.ID]; dup {
				t.Errorf("G2: event %d (%s %s) has the id of event %d (%s %s)", i, ev.Type, ev.Item, j, evs[j].Type, evs[j].Item)
				continue
			}
			seen[ev.ID] = i
			var it struct {
				State string `json:"state"`
			}
			_ = json.Unmarshal(ev.Item, &it)
			applied = it.State
		}
		if applied != "open" {
			t.Errorf("a consumer that dedupes by id ends with %q, the API has \"open\"", applied)
		}
	})
}

// ---------------------------------------------------------------------------------------
// G7: a delayed first attempt of a commit chunk, applied after the NEXT chunk.
// ---------------------------------------------------------------------------------------

// holdDialer gives go-redis connections whose writes can be held back, as a TCP segment lost
// and retransmitted late would be: the client's write succeeds, the bytes reach Redis only
// when released. go-redis times the command out, closes the connection (the close waits

// heldClient is a client of srv whose connections go through a holdDialer, with go-redis
// re-sending a command after a 200 ms read timeout.
func heldClient(t *testing.T, srv redistest.Backend) (*redis.Client, *holdDialer) {
	hd := &holdDialer{}
	rdb := redis.NewClient(&redis.Options{Addr: tcpAddr(t, srv), ReadTimeout: 200 * time.Millisecond, MaxRetries: 3, Dialer: hd.dial})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb, hd
}

// behind the held bytes, as a FIN does) and re-sends on another connection.
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

// TestAdversaryG7DelayedChunkAppliedAfterTheNextChunk: the write-id check recognises a
// re-sent write only while it is the lease's LAST write. A page of 2,000 changes commits in
// two chunks; chunk 1's first attempt is delayed in the network, go-redis times out and
// re-sends it (applied once, write id w1), chunk 2 is applied (w2), then the delayed first
// attempt of chunk 1 arrives: write is w2, not w1, the fence passes (same epoch and token,
// live lease) and chunk 1 is applied a second time: 1,000 events enter the outbox twice.
func TestAdversaryG7DelayedChunkAppliedAfterTheNextChunk(t *testing.T) {
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
	eng, err := New(Options{Redis: rdb, InstanceID: "late", clock: e.clock.Now, wrapStore: hooked(h)})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Register(e.poller(func(p *Poller) { p.Fetch = e.api.ChangeFeed(5000); p.CommitMaxItems = 1000 })); err != nil {
		t.Fatal(err)
	}
	e.api.Put("warm-up", nil)
	e.settle(eng) // scripts loaded
	outbox := eng.store.Key(Key{Poller: "orders"}, "outbox")
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

// TestAdversaryG3DelayedCommitRewindsCursorAndRows: the same late first attempt, this time of
// a whole page's commit (the one that carries the cursor), arriving after a LATER page's
// commit. It is applied again: the cursor goes back and the rows it wrote overwrite newer
// ones. A poller without a version (fingerprint: state) whose item then comes back to the
// content of the stale row never emits that change: the consumer keeps "open", the API has
// "closed".
func TestAdversaryG3DelayedCommitRewindsCursorAndRows(t *testing.T) {
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
	eng, err := New(Options{Redis: rdb, InstanceID: "late", clock: e.clock.Now, wrapStore: hooked(h)})
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
	if err := eng.Register(e.poller(func(p *Poller) {
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

// TestAdversaryG2ClearSnapshotRepeatsAnEarlierLifesDelete: reset-cursor --clear-snapshot drops
// rows AND tombstones, so the identity's current life is renumbered life 0. Its next delete
// is then "deleted, life 0, change 2" again: the id of the first life's delete. A consumer that
// dedupes by id drops it and keeps o1, which the API deleted.
func TestAdversaryG2ClearSnapshotRepeatsAnEarlierLifesDelete(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		p := e.poller(stateOnly(e))
		eng := e.engine(p, nil)
		e.api.Put("o1", map[string]any{"state": "closed"})
		e.settle(eng)
		e.api.Delete("o1")
		e.settle(eng)
		e.api.Put("o1", map[string]any{"state": "closed"}) // a second life
		e.settle(eng)
		if err := eng.ResetCursor(t.Context(), "orders", "", "", true); err != nil {
			t.Fatal(err)
		}
		e.settle(eng) // o1 re-emitted as created (the runbook's "with its first id")
		e.api.Delete("o1")
		e.settle(eng)
		evs := e.rec.events()
		seen := map[string]int{}
		present := map[string]bool{}
		for i, ev := range evs {
			if j, dup := seen[ev.ID]; dup {
				if ev.Type == Deleted {
					t.Errorf("G2: event %d (%s) has the id of event %d (%s): the second life's delete named as the first's", i, ev.Type, j, evs[j].Type)
				}
				continue
			}
			seen[ev.ID] = i
			present[ev.Identity] = ev.Type != Deleted
		}
		if present["o1"] {
			t.Errorf("a consumer that dedupes by id still holds o1, which the API deleted")
		}
	})
}

// TestAdversaryG8DetailRetryAfterErasedAtEnd: a 429 on a Detail request (listingDeletes) is
// saved at once (a fenced commit of the window), but listingDeletes drops the throttled
// failure and returns nil; the cycle's state map never learns the window, so finish() finds no
// window in force and End deletes the field it just saved. The next cycle (here: a trigger,
// which the gate normally withstands, see the control) requests inside the Retry-After window.
func TestAdversaryG8DetailRetryAfterErasedAtEnd(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, detail429 := range []bool{false, true} {
			e := newEnv(t, b)
			var mu sync.Mutex
			watch := &windowWatch{clock: e.clock}
			listing := []string{`{"id":"a"}`, `{"id":"b"}`}
			throttleList := false
			p := e.poller(func(p *Poller) {
				p.Name = fmt.Sprintf("detail%v", detail429)
				p.Strategy = SnapshotDiff
				p.Version = nil
				p.Fetch = func(ctx context.Context, req FetchRequest) (Page, error) {
					mu.Lock()
					defer mu.Unlock()
					watch.note("listing request")
					if throttleList {
						throttleList = false
						return Page{}, watch.throttle(req.Key, time.Minute)
					}
					var pg Page
					for _, it := range listing {
						pg.Items = append(pg.Items, json.RawMessage(it))
					}
					return pg, nil
				}
				p.Detail = func(ctx context.Context, key Key, id string) (json.RawMessage, bool, error) {
					watch.note("detail request")
					return nil, false, watch.throttle(key, time.Minute)
				}
			})
			eng := e.engine(p, nil)
			ctx := t.Context()
			key := Key{Poller: p.Name}
			eng.RunCycle(ctx, key) // a and b created
			mu.Lock()
			if detail429 {
				listing = listing[:1] // b missing: its Detail request gets the 429
			} else {
				throttleList = true // control: the listing itself gets the 429
			}
			mu.Unlock()
			e.clock.Advance(time.Minute)
			if rep := eng.RunCycle(ctx, key); rep.Outcome != watukuytype.Ran {
				t.Fatalf("second cycle: %+v", rep)
			}
			ki, _ := eng.Inspect(ctx, p.Name, "")
			t.Logf("detail429=%v: after the 429, throttled until %v", detail429, ki.ThrottledUntil)
			e.clock.Advance(5 * time.Second)
			makeDue(t, eng, p.Name, "")
			eng.RunCycle(ctx, key)
			watch.check(t, fmt.Sprintf("429 on the detail request: %v", detail429))
		}
	})
}

// TestAdversaryG5CheckLeaseAfterTheLeaseIsKnownLost: CheckLease is what a handler calls right
// before a side effect it cannot take back. It only asks whether the local validity window
// has passed: (a) after the keeper's renewal was FENCED (another grant holds the key, the
// cycle's context is cancelled for LEASE_LOST) it still answers nil for the rest of the
// window; (b) after the cycle ended and released the lease (another instance may already run
// the key) it answers nil too.
func TestAdversaryG5CheckLeaseAfterTheLeaseIsKnownLost(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 2)
		var mu sync.Mutex
		var kept context.Context
		inHandler, proceed := make(chan struct{}), make(chan struct{})
		var once sync.Once
		var afterLoss error = errors.New("not called")
		p := e.poller(func(p *Poller) {
			p.LeaseTTL = 3 * time.Second // keeper renews every second (real time)
			p.Handler = func(ctx context.Context, ev Event) error {
				mu.Lock()
				kept = ctx
				mu.Unlock()
				once.Do(func() {
					close(inHandler)
					<-proceed
					<-ctx.Done() // the keeper found the lease lost and cancelled the cycle
					afterLoss = CheckLease(ctx)
				})
				return nil
			}
		})
		eng := e.engine(p, nil)
		done := make(chan struct{})
		go func() { defer close(done); eng.RunCycle(context.Background(), Key{Poller: "orders"}) }()
		<-inHandler
		// Another grant of the same key (as a lossy failover hands out): new token.
		lease := eng.store.Key(Key{Poller: "orders"}, "state") // holds the lease
		if err := b.Client.HSet(t.Context(), lease, "token", "someone-else").Err(); err != nil {
			t.Fatal(err)
		}
		close(proceed)
		<-done
		if afterLoss == nil {
			t.Errorf("G5 (a): CheckLease answered nil inside a handler after the engine found its lease fenced off (context: %v)", context.Cause(kept))
		}
		// (b) a cycle that ended normally: its handler's context still passes CheckLease.
		e.clock.Advance(3 * time.Minute)
		if err := b.Client.HDel(t.Context(), lease, "expiresAt").Err(); err != nil {
			t.Fatal(err)
		}
		e.api.Put("o99", nil)
		if err := eng.Trigger(t.Context(), "orders", ""); err != nil {
			t.Fatal(err)
		}
		if rep := eng.RunCycle(t.Context(), Key{Poller: "orders"}); rep.Delivered == 0 {
			t.Fatalf("second cycle: %+v", rep)
		}
		if live, _ := eng.store.LeaseLive(t.Context(), Key{Poller: "orders"}); live {
			t.Fatal("the lease is still live after the cycle ended")
		}
		mu.Lock()
		defer mu.Unlock()
		if err := CheckLease(kept); err == nil {
			t.Errorf("G5 (b): CheckLease answered nil for a cycle that had ended and released its lease")
		}
	})
}

// TestAdversaryG3ETagKeptFromAPageNeverCommitted: the HTTP cursors remember a response's ETag
// when the page ARRIVES, before its commit. When the commit then fails (a Redis timeout or
// blip; the process lives on), the next cycle of the same process asks with that ETag, gets
// 304, takes it for "idle", and the change is never emitted while the collection stays as it
// is (a listing with a collection ETag here; the same holds for any conditional request).
func TestAdversaryG3ETagKeptFromAPageNeverCommitted(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		srv, _ := e.server(fakeapi.ServerOptions{})
		e.api.PutMany(5, "i", nil)
		fs := &faultyStore{}
		eng := e.engine(e.poller(func(p *Poller) {
			p.Strategy = SnapshotDiff
			p.Fetch = listCursor(srv, 10).Fetch
		}), faulty(fs))
		e.settle(eng)
		e.api.Put("i0001", nil) // version 2
		fs.mu.Lock()
		fs.failCommt = 1 // this page's commit fails (Redis timed out); the process lives on
		fs.mu.Unlock()
		e.clock.Advance(3 * time.Minute)
		rep := e.tick(eng)
		t.Logf("cycle whose commit failed: %+v", rep)
		e.settle(eng)
		checkFinal(t, e)
	})
}
