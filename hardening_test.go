package watukuy

// Regression tests for the holes an adversarial review reproduced (issue "Guarantees that hold
// against an outside adversary"), each named for the guarantee it broke. Each fails when its
// fix is reverted; which fault catches which is in (docs/design.md, Guarantees under chaos).

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/netproxy"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// hookStore runs test code around chosen store calls, to land a fault or another instance's
// move at an exact point of a cycle.
type hookStore struct {
	core.Store
	afterBegin   func(b core.BeginResult)
	beforeCommit func(c core.Commit)
	afterCommit  func(c core.Commit, r core.CommitResult)
	beforeAck    func(l core.Lease, acked []core.Entry) error
	afterAck     func()
	afterPark    func()
}

func (h *hookStore) Begin(ctx context.Context, key watukuytype.Key, owner string, ttl time.Duration, op core.BeginMode) (core.BeginResult, error) {
	b, err := h.Store.Begin(ctx, key, owner, ttl, op)
	if err == nil && h.afterBegin != nil {
		h.afterBegin(b)
	}
	return b, err
}

func (h *hookStore) CommitPoll(ctx context.Context, l core.Lease, c core.Commit) (core.CommitResult, error) {
	if h.beforeCommit != nil {
		h.beforeCommit(c)
	}
	r, err := h.Store.CommitPoll(ctx, l, c)
	if err == nil && h.afterCommit != nil {
		h.afterCommit(c, r)
	}
	return r, err
}

func (h *hookStore) Ack(ctx context.Context, l core.Lease, acked []core.Entry) (bool, error) {
	if h.beforeAck != nil {
		if err := h.beforeAck(l, acked); err != nil {
			return false, err
		}
	}
	paused, err := h.Store.Ack(ctx, l, acked)
	if err == nil && h.afterAck != nil {
		h.afterAck()
	}
	return paused, err
}

func (h *hookStore) Park(ctx context.Context, l core.Lease, p core.Parking) error {
	err := h.Store.Park(ctx, l, p)
	if err == nil && h.afterPark != nil {
		h.afterPark()
	}
	return err
}

func hooked(h *hookStore) func(core.Store) core.Store {
	return func(s core.Store) core.Store { h.Store = s; return h }
}

// G9, G4 (hole 3): a drain whose batch of 512 is all held (the hot ordering key of a parked
// event) must go on reading: entries of other keys wait behind it. The old drain took the
// empty batch for "drained", fetched, and delivered y1@2 before y1@1.
func TestG9DrainGoesOnPastAHeldBatch(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		hot := func(p *Poller) {
			p.Fetch = e.api.ChangeFeed(5000)
			p.CommitMaxItems = 5000 // the page commits in one write, y1@1 with it
			p.Delivery.Attempts, p.Delivery.RetryHorizon = 1, -1
			p.Delivery.OrderingKey = func(ev Event) string {
				if strings.HasPrefix(ev.Identity, "x") {
					return "X"
				}
				return ev.Identity
			}
		}
		e.rec.setFail(func(ev Event) error {
			if ev.Identity == "x0000" {
				return errors.New("poison")
			}
			return nil
		})
		e.api.Put("x0000", nil)
		e.tick(e.engine(e.poller(hot), nil)) // x0000 parked: X is held
		// 1,099 more events of X, then y1@1, committed by an instance that dies before it
		// delivers anything (K3).
		e.api.PutMany(1100, "x", map[string]any{"n": 1})
		e.api.Put("y1", nil)
		e.clock.Advance(3 * time.Minute)
		e.tick(e.engine(e.poller(hot), faulty(&faultyStore{dieCommit: 1})))
		if got := len(e.rec.events()); got != 0 {
			t.Fatalf("%d events delivered before the drain", got)
		}
		e.api.Put("y1", nil) // y1@2
		var fetchedBeforeY1 bool
		e.api.OnFetch(func(ctx context.Context, req watukuytype.FetchRequest) error {
			if !slices.ContainsFunc(e.rec.events(), func(ev Event) bool { return ev.Identity == "y1" }) {
				fetchedBeforeY1 = true
			}
			return nil
		})
		e.clock.Advance(3 * time.Minute)
		e.tick(e.engine(e.poller(hot), nil))
		var ys []string
		for _, ev := range e.rec.events() {
			if ev.Identity == "y1" {
				ys = append(ys, ev.Version)
			}
		}
		if !slices.Equal(ys, []string{"1", "2"}) {
			t.Fatalf("y1 delivered as versions %v, want 1 then 2", ys)
		}
		if fetchedBeforeY1 {
			t.Fatal("a request was sent while y1@1 waited in the outbox behind a held batch (G9)")
		}
	})
}

// G4 (hole 4): the dispatcher parks the poison event, then acks the ones delivered before it;
// a death between the two leaves an older, delivered but unacked event of the held key in the
// outbox, which the next drain moves aside. A retry must requeue by sequence, the poison event
// included: handler successes per ordering key never go back in commit order.
func TestG4RetryAfterDeathBetweenParkAndAck(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		sameKey := func(p *Poller) {
			p.Delivery.Attempts, p.Delivery.RetryHorizon = 1, -1
			p.Delivery.OrderingKey = func(ev Event) string { return "A" }
		}
		e.rec.setFail(func(ev Event) error {
			if ev.Identity == "a2" {
				return errors.New("poison")
			}
			return nil
		})
		e.api.Put("a1", nil)
		e.api.Put("a2", nil)
		parked := false
		h := &hookStore{afterPark: func() { parked = true }, beforeAck: func(core.Lease, []core.Entry) error {
			if parked {
				return errKilled // the process dies between park and ack
			}
			return nil
		}}
		e.tick(e.engine(e.poller(sameKey), hooked(h)))
		if !parked {
			t.Fatal("a2 was not parked")
		}
		eng := e.engine(e.poller(sameKey), nil)
		e.clock.Advance(3 * time.Minute)
		e.tick(eng) // the drain moves the unacked a1 aside: A is held
		e.rec.setFail(nil)
		rows, err := eng.Parked().List(t.Context(), "orders", "", "poison")
		if err != nil || len(rows) != 1 {
			t.Fatalf("parked: %v %v", rows, err)
		}
		if _, err := eng.Parked().Retry(t.Context(), "orders", "", rows[0].ID); err != nil {
			t.Fatal(err)
		}
		e.settle(eng)
		var got []string
		for _, ev := range e.rec.events() {
			got = append(got, ev.Identity)
		}
		// a1 may come twice (delivered, never acked), a2 once, and never a1 after a2.
		if i := slices.Index(got, "a2"); i < 0 || slices.Contains(got[i:], "a1") {
			t.Fatalf("handler successes %v: a1 (committed first) after a2", got)
		}
	})
}

// delayStore makes Begin's reply arrive late: the test clock (the server's and this process's)
// moves on between the script's run and the reply.
type delayStore struct {
	core.Store
	clock interface{ Advance(time.Duration) }
	delay time.Duration
	once  sync.Once
}

func (d *delayStore) Begin(ctx context.Context, key watukuytype.Key, owner string, ttl time.Duration, op core.BeginMode) (core.BeginResult, error) {
	b, err := d.Store.Begin(ctx, key, owner, ttl, op)
	if err == nil && b.Status == core.BeginOK {
		d.once.Do(func() { d.clock.Advance(d.delay) })
	}
	return b, err
}

// G5 (hole 5): a lease is valid from when Begin was sent, not from when its reply arrived. With
// a reply 2.4 s late on a 3 s lease, the old engine believed it had 3 s left and delivered
// after the server-side expiry, when another instance may already hold the key.
func TestG5ValidityCountsFromBeginsRequest(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 6)
		// One delivery at a time: each starts after the check before it (concurrent handlers
		// serialized by the recorder's lock would start later than their checks, an artifact).
		short := func(p *Poller) { p.LeaseTTL, p.Delivery.Concurrency = 3*time.Second, 1 }
		e.tick(e.engine(e.poller(short), faulty(&faultyStore{dieCommit: 1}))) // 6 events wait in the outbox
		var mu sync.Mutex
		var late []string
		var expires time.Time
		e.rec.setFail(func(ev Event) error {
			mu.Lock()
			defer mu.Unlock()
			if now := e.clock.Now(); !now.Before(expires) {
				late = append(late, fmt.Sprintf("%s at %s, lease expired at %s", ev.Identity, now.Format("15:04:05.000"), expires.Format("15:04:05.000")))
			}
			e.clock.Advance(400 * time.Millisecond) // each delivery takes 0.4 s
			return nil
		})
		e.clock.Advance(3 * time.Minute)
		begun := e.clock.Now()
		mu.Lock()
		expires = begun.Add(3 * time.Second) // the server's expiry: counted from Begin's run
		mu.Unlock()
		e.tick(e.engine(e.poller(short), func(s core.Store) core.Store {
			return &delayStore{Store: s, clock: e.clock, delay: 2400 * time.Millisecond}
		}))
		if len(late) > 0 {
			t.Fatalf("delivered after the lease expired on the server: %v", late)
		}
	})
}

// G8 (hole 6): an instance frozen between two pages past its lease must not send its next
// request when it resumes: another instance took the key meanwhile, got a 429 and saved a
// Retry-After window. The old engine checked only the window read at Begin, and never its
// lease, before a request. Here A pauses between pages as the API's rate limit asks, and its
// process is frozen meanwhile (held in its wait; the test clock, A's as well as Redis', jumps
// past the lease) until B has its 429.
func TestG8FrozenInstanceStaysOutOfTheNewOwnersWindow(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 20)
		var mu sync.Mutex
		var requests []string
		var window time.Time
		fetchAs := func(instance string, status int) func(p *Poller) {
			return func(p *Poller) {
				feed := e.api.ChangeFeed(10)
				p.Fetch = func(ctx context.Context, req FetchRequest) (Page, error) {
					mu.Lock()
					defer mu.Unlock()
					requests = append(requests, fmt.Sprintf("%s page %d at %s", instance, req.Page, e.clock.Now().Format("15:04:05")))
					if status == 429 {
						window = e.clock.Now().Add(time.Minute)
						return Page{}, &HTTPError{Key: req.Key, StatusCode: 429, RetryAfter: time.Minute}
					}
					page, err := feed(ctx, req)
					// One request left in a 900 ms window: the engine waits before page 2.
					page.RateLimit = &RateLimit{Limit: 2, Remaining: 1, Reset: 900 * time.Millisecond}
					return page, err
				}
			}
		}
		paged, resume := make(chan struct{}), make(chan struct{})
		var once sync.Once
		a, err := New(Options{Redis: b.Client, InstanceID: "instance-a", clock: e.clock.Now,
			wait: func(ctx context.Context, d time.Duration) error {
				once.Do(func() {
					close(paged)
					<-resume // A is frozen in its wait before page 2
				})
				return nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Register(e.poller(fetchAs("A", 200))); err != nil {
			t.Fatal(err)
		}
		done := make(chan TickReport)
		go func() { done <- e.tick(a) }()
		select {
		case <-paged: // page 1 delivered and acked: A waits for the rate limit
		case rep := <-done:
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("A's cycle ended without waiting for the rate limit: %+v; requests %v", rep, requests)
		}
		e.clock.Advance(31 * time.Second) // A is frozen past its 30 s lease
		bb := e.engine(e.poller(fetchAs("B", 429)), nil)
		if err := bb.Trigger(t.Context(), "orders", ""); err != nil {
			t.Fatal(err)
		}
		e.tick(bb)
		close(resume)
		<-done
		mu.Lock()
		defer mu.Unlock()
		if window.IsZero() {
			t.Fatalf("B never got its 429: %v", requests)
		}
		if got := requests[len(requests)-1]; !strings.HasPrefix(got, "B ") {
			t.Fatalf("after B's 429 (window until %s) the requests were %v", window.Format("15:04:05"), requests)
		}
	})
}

// G2 (hole 7): an id names one change, not one content. Without a version (fingerprint ids),
// content that comes back (closed → open → closed) and an identity deleted and created again
// got the ids of earlier changes, so a consumer that dedupes by id ended in a stale state.
func TestG2ContentThatComesBackGetsNewIDs(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		p := e.poller(stateOnly(e))
		eng := e.engine(p, nil)
		for _, s := range []string{"closed", "open", "closed", "open", "closed"} {
			e.api.Put("o1", map[string]any{"state": s})
			e.settle(eng)
		}
		e.api.Delete("o1")
		e.settle(eng)
		e.api.Put("o1", map[string]any{"state": "closed"}) // created again, same content
		e.settle(eng)
		e.api.Put("o1", map[string]any{"state": "open"})
		e.settle(eng)
		evs := e.rec.events()
		seen := map[string]int{}
		applied := map[string]string{} // a consumer that dedupes by id
		for i, ev := range evs {
			if j, dup := seen[ev.ID]; dup {
				t.Errorf("event %d (%s %s) repeats the id of event %d (%s %s)", i, ev.Type, ev.Item, j, evs[j].Type, evs[j].Item)
				continue
			}
			seen[ev.ID] = i
			if ev.Type == Deleted {
				delete(applied, ev.Identity)
				continue
			}
			var it struct {
				State string `json:"state"`
			}
			_ = json.Unmarshal(ev.Item, &it)
			applied[ev.Identity] = it.State
		}
		if len(evs) != 8 {
			t.Fatalf("%d events, want 8 (created, 4 updates, deleted, created, updated)", len(evs))
		}
		if applied["o1"] != "open" {
			t.Fatalf("a consumer that dedupes by id ends with o1 %q, the API has \"open\"", applied["o1"])
		}
	})
}

// G5 (hole 8): leases and throttle windows follow the Redis server's clock; no public option
// lets a caller's clock decide. An engine with a clock an hour ahead took a lease that Redis
// TIME said was live.
func TestG5LeasesFollowTheServerClock(t *testing.T) {
	var clocks []string
	var walk func(typ reflect.Type, path string)
	walk = func(typ reflect.Type, path string) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			if !f.IsExported() {
				continue
			}
			if f.Type == reflect.TypeOf(time.Now) {
				clocks = append(clocks, path+f.Name)
			}
			if f.Type.Kind() == reflect.Struct {
				walk(f.Type, path+f.Name+".")
			}
		}
	}
	walk(reflect.TypeOf(Options{}), "Options.")
	if len(clocks) > 0 {
		t.Fatalf("public options that replace the server clock: %v", clocks)
	}
	// The server's clock decides: miniredis' TIME is moved, the engines are not told.
	b := redistest.Miniredis(t)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b.Mini.SetTime(start)
	e := newEnv(t, b)
	putN(e, 1)
	hold := make(chan struct{})
	var first atomic.Bool
	began := make(chan struct{})
	p := e.poller(func(p *Poller) {
		feed := e.api.ChangeFeed(10)
		p.Fetch = func(ctx context.Context, req FetchRequest) (Page, error) {
			if first.CompareAndSwap(false, true) {
				close(began)
				<-hold // the first holder stays inside its lease
			}
			return feed(ctx, req)
		}
	})
	newEngine := func(id string) *Engine {
		eng, err := New(Options{Redis: b.Client, InstanceID: id})
		if err != nil {
			t.Fatal(err)
		}
		if err := eng.Register(p); err != nil {
			t.Fatal(err)
		}
		return eng
	}
	a := newEngine("a")
	done := make(chan struct{})
	go func() { defer close(done); _, _ = a.Tick(context.Background(), time.Second) }()
	<-began
	other := newEngine("b")
	b.Mini.SetTime(start.Add(29 * time.Second)) // the lease (30 s) is live on the server
	if rep := other.RunCycle(t.Context(), Key{Poller: "orders"}); rep.Outcome != watukuytype.SkippedLeased {
		t.Fatalf("a live lease was taken over: %+v", rep)
	}
	b.Mini.SetTime(start.Add(31 * time.Second)) // expired on the server
	if rep := other.RunCycle(t.Context(), Key{Poller: "orders"}); rep.Outcome != watukuytype.Ran {
		t.Fatalf("an expired lease was not taken over: %+v", rep)
	}
	close(hold)
	<-done
}

// tcpAddr is the host:port a backend's single-node client dials.
func tcpAddr(t *testing.T, b redistest.Backend) string {
	t.Helper()
	c, ok := b.Client.(*redis.Client)
	if !ok {
		t.Fatalf("%s: not a single-node client", b.Name)
	}
	return c.Options().Addr
}

// G5 (hole 1): a failover that lost writes can grant one epoch twice. Primary and replica,
// the replication link cut, A begins (epoch 2 lands on the primary only), the primary dies, the
// replica is promoted as Sentinel would and the clients follow it: B begins and also gets
// epoch 2. The lease token tells the two grants apart: A's commit and end are refused while B
// holds the key, and A's end does not release B's lease.
func TestG5FailoverThatLostTheGrant(t *testing.T) {
	r := redistest.Replicas(t)
	ctx := t.Context()
	clients, err := netproxy.New(tcpAddr(t, r.Primary)) // where Sentinel sends the clients
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = clients.Close() })
	api := fakeapi.New()
	api.Put("o1", nil)
	var mu sync.Mutex
	var delivered []string
	var epochs []int64
	type gate struct{ in, out chan struct{} }
	gates := map[string]*gate{}
	instance := func(name string) *Engine {
		rdb := redis.NewClient(&redis.Options{Addr: clients.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		g := &gate{in: make(chan struct{}), out: make(chan struct{})}
		gates[name] = g
		armed := false
		h := &hookStore{afterBegin: func(b core.BeginResult) {
			if b.Status == core.BeginOK {
				mu.Lock()
				epochs = append(epochs, b.Lease.Epoch)
				mu.Unlock()
			}
		}}
		eng, err := New(Options{Redis: rdb, InstanceID: name, wrapStore: hooked(h)})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := eng.Setup(ctx); err != nil {
				t.Fatal(err)
			}
		}()
		feed := api.ChangeFeed(10)
		p := Poller{Name: "orders", Version: Field("version"), Schedule: Schedule{Min: time.Second, Max: time.Second},
			Fetch: func(ctx context.Context, req FetchRequest) (Page, error) {
				if armed {
					close(g.in) // inside its lease, the request sent
					<-g.out
				}
				return feed(ctx, req)
			},
			Handler: func(ctx context.Context, ev Event) error {
				mu.Lock()
				delivered = append(delivered, name+":"+ev.Identity+"@"+ev.Version)
				mu.Unlock()
				return nil
			}}
		if err := eng.Register(p); err != nil {
			t.Fatal(err)
		}
		armed = name != "setup"
		return eng
	}
	key := Key{Poller: "orders"}
	if rep := instance("setup").RunCycle(ctx, key); rep.Outcome != watukuytype.Ran || rep.Err != nil {
		t.Fatalf("first cycle: %+v", rep)
	}
	r.WaitSynced(t)
	r.CutLink()
	api.Put("o1", nil)
	a := instance("A")
	if err := a.Trigger(ctx, "orders", ""); err != nil {
		t.Fatal(err)
	}
	aDone := make(chan watukuytype.CycleReport)
	go func() { aDone <- a.RunCycle(context.Background(), key) }()
	<-gates["A"].in // A holds epoch 2, on the primary only
	r.KillPrimary()
	r.Promote(t)
	clients.Retarget(tcpAddr(t, r.Replica))
	bb := instance("B")
	if err := bb.Trigger(ctx, "orders", ""); err != nil {
		t.Fatal(err)
	}
	bDone := make(chan watukuytype.CycleReport)
	go func() { bDone <- bb.RunCycle(context.Background(), key) }()
	<-gates["B"].in // B holds the key on the promoted replica
	close(gates["A"].out)
	repA := <-aDone
	mu.Lock()
	if len(epochs) != 3 || epochs[1] != epochs[2] {
		t.Fatalf("grants %v: the failover did not repeat an epoch, the scenario did not happen", epochs)
	}
	mu.Unlock()
	if !errors.As(repA.Err, new(*LeaseLostError)) {
		t.Errorf("A's cycle on a lost grant of epoch %d: %+v, want LeaseLost", epochs[1], repA)
	}
	owner, err := r.Replica.Client.HGet(ctx, bb.store.Key(key, "state"), "owner").Result()
	if err != nil || owner != "B" {
		t.Errorf("B's lease after A's end: owner %q (%v)", owner, err)
	}
	close(gates["B"].out)
	if repB := <-bDone; repB.Outcome != watukuytype.Ran || repB.Err != nil {
		t.Errorf("B's cycle: %+v", repB)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, d := range delivered {
		if strings.HasPrefix(d, "A:") {
			t.Errorf("A delivered %s on a grant it lost", d)
		}
	}
	if !slices.Contains(delivered, "B:o1@2") {
		t.Errorf("deliveries %v: B never delivered o1@2", delivered)
	}
}

// G7 (hole 2): go-redis re-sends a command after a read timeout (MaxRetries), and the first
// attempt may have run: a commit must never be applied twice. The replies of Redis are held
// back (a proxy) past the client's 200 ms read timeout while its commit runs, so the client
// re-sends it; the page's events reach the outbox once, and are delivered once.
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
	eng, err := New(Options{Redis: rdb, InstanceID: "resend", clock: e.clock.Now, wrapStore: hooked(h)})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Register(e.poller(func(p *Poller) { p.Fetch = e.api.ChangeFeed(100) })); err != nil {
		t.Fatal(err)
	}
	e.api.Put("warm-up", nil)
	e.settle(eng) // the scripts are loaded (a first EVALSHA would only get NOSCRIPT)
	outbox := eng.store.Key(Key{Poller: "orders"}, "outbox")
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

// G6 (false deletes): a snapshotDiff poller pages a listing by offset while the API deletes
// items; later items shift onto pages already read, the listing completes without them, and
// the old engine emitted them as deleted although the API never deleted them. Each remedy is
// run: confirmDeletes (the default, 2: an identity must be missing from two complete listings
// in a row) and a detail request (404/410 = deleted). With confirmDeletes 1 the same listings
// do produce false deletes: the setup reproduces the hole.
func TestG6NoFalseDeletesWhileAListingShifts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		confirm int
		detail  bool
		every   bool // deletes while paging in every listing, not every other one
		false0  bool // false deletes expected (the hole, with the old setting)
	}{
		{"one listing decides (the old behaviour)", 1, false, false, true},
		{"confirmDeletes 2", 0, false, false, false},
		{"detail request", 0, true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			redistest.Each(t, func(t *testing.T, b redistest.Backend) {
				e := newEnv(t, b)
				srv, _ := e.server(fakeapi.ServerOptions{})
				e.api.PutMany(60, "i", nil)
				p := e.poller(func(p *Poller) {
					p.Strategy = SnapshotDiff
					p.Fetch = (&PageCursor{Source: HTTPSource{URL: srv.URL + "/list", Items: "data"}, Param: "offset", Offset: true,
						SizeParam: "limit", Size: 10, HasMore: "has_more"}).Fetch
					p.ConfirmDeletes = tc.confirm
					if tc.detail {
						p.Detail = (&DetailRequest{Source: HTTPSource{URL: srv.URL + "/items/{id}"}}).Fetch
					}
				})
				eng := e.engine(p, nil)
				e.settle(eng)
				for round := range 8 {
					if tc.every || round%2 == 0 {
						srv.DeleteWhilePaging(1, 5)
					} else {
						srv.DeleteWhilePaging(0, 0)
					}
					e.api.Put(fmt.Sprintf("n%02d", round), nil) // the listing changes, so it is read again
					e.clock.Advance(3 * time.Minute)
					e.tick(eng)
				}
				srv.DeleteWhilePaging(0, 0)
				e.settle(eng)
				deletedInAPI := map[string]bool{}
				for _, c := range e.api.Changes() {
					if c.Deleted {
						deletedInAPI[c.ID] = true
					}
				}
				var falseDeletes []string
				for _, ev := range e.rec.events() {
					if ev.Type == Deleted && !deletedInAPI[ev.Identity] {
						falseDeletes = append(falseDeletes, ev.Identity)
					}
				}
				if srv.DeletedWhilePaging() == 0 {
					t.Fatal("no item was deleted while a listing was paged: the setup did nothing")
				}
				switch {
				case tc.false0 && len(falseDeletes) == 0:
					t.Fatalf("%d items deleted while paging, no false delete: the setup does not reproduce the hole", srv.DeletedWhilePaging())
				case !tc.false0 && len(falseDeletes) > 0:
					t.Fatalf("deleted events for items the API never deleted: %v", falseDeletes)
				}
				if !tc.false0 {
					checkFinal(t, e)
				}
			})
		})
	}
}

// Pause (hole 12): the runbook says nothing reaches the API once a key is paused. A cycle
// running when the pause lands stops at its next step: no further request, no further
// delivery batch. The old cycle read the pause flag only at Begin: 9 more requests and 45
// deliveries followed a pause.
func TestPauseStopsARunningCycle(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 50)
		var mu sync.Mutex
		paused, resumed := false, false
		var after []string
		ops, err := New(Options{Redis: b.Client, clock: e.clock.Now}) // an operator: the Redis URL only
		if err != nil {
			t.Fatal(err)
		}
		p := e.poller(func(p *Poller) {
			feed := e.api.ChangeFeed(10)
			p.Delivery.Concurrency = 1
			p.Fetch = func(ctx context.Context, req FetchRequest) (Page, error) {
				mu.Lock()
				if paused {
					after = append(after, fmt.Sprintf("request page %d", req.Page))
				}
				mu.Unlock()
				return feed(ctx, req)
			}
			p.Handler = func(ctx context.Context, ev Event) error {
				mu.Lock()
				defer mu.Unlock()
				if paused {
					after = append(after, "deliver "+ev.Identity)
				}
				if ev.Identity == "o12" && !paused && !resumed { // page 2 is being delivered
					if err := ops.Pause(ctx, "orders", ""); err != nil {
						return err
					}
					paused = true
				}
				return e.rec.handle(ctx, ev)
			}
		})
		eng := e.engine(p, nil)
		e.tick(eng)
		mu.Lock()
		defer mu.Unlock()
		for _, a := range after {
			if strings.HasPrefix(a, "request") {
				t.Fatalf("after the pause returned: %v", after)
			}
		}
		if len(after) > 9 { // at most the rest of page 2's batch
			t.Fatalf("after the pause returned, %d more deliveries: %v", len(after), after)
		}
		ki, _ := eng.Inspect(t.Context(), "orders", "")
		if ki.Status != "paused" || ki.Cursor != "20" {
			t.Fatalf("after the cycle: status %s, cursor %q (want paused at page 2's end)", ki.Status, ki.Cursor)
		}
		paused, resumed = false, true
		mu.Unlock()
		if err := ops.Resume(t.Context(), "orders", ""); err != nil {
			t.Fatal(err)
		}
		e.settle(eng)
		mu.Lock()
		if got := len(e.api.Final()); len(e.rec.final()) != got {
			t.Fatalf("after resume: %d identities delivered, the API has %d", len(e.rec.final()), got)
		}
	})
}

// Memory (hole 11): the outbox's consumer group kept one consumer per process lifetime for
// good (200 lifetimes left 199 consumers). Every lease holder now reads as one consumer.
func TestBoundedMemoryOneOutboxConsumer(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		var eng *Engine
		for range 200 {
			// A new process each time: it drains what the last one left in the outbox (a
			// reader of the group), then commits one event and dies before delivering it.
			e.api.Put("o1", nil)
			e.clock.Advance(3 * time.Minute)
			eng = e.engine(e.poller(), faulty(&faultyStore{dieCommit: 1}))
			e.tick(eng)
		}
		// The last process died with its event in the outbox: the group is there, with the
		// consumers 200 lifetimes left in it.
		outbox := eng.store.Key(Key{Poller: "orders"}, "outbox")
		cs, err := b.Client.XInfoConsumers(t.Context(), outbox, "dispatch").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) > 1 {
			t.Fatalf("%d consumers in the outbox group after 200 process lifetimes", len(cs))
		}
		e.clock.Advance(3 * time.Minute)
		eng = e.engine(e.poller(), nil)
		e.settle(eng)
		// A drained outbox is deleted (issue 14), its group and consumers with it.
		if n := b.Client.Exists(t.Context(), outbox).Val(); n != 0 {
			t.Fatalf("the outbox is still there once every event was delivered (%d entries)", b.Client.XLen(t.Context(), outbox).Val())
		}
		if n := len(e.rec.events()); n != 200 {
			t.Fatalf("%d events delivered, want 200", n)
		}
	})
}

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

// G3, G7 (hole 2): a large page is committed in chunks, so no script holds Redis for long;
// only the last chunk moves the cursor, and each chunk writes its items' rows with its events.
// A death between two chunks leaves the first chunks' events in the outbox, and the re-fetch
// finds those items unchanged: every change delivered, none committed twice.
func TestG3LargePageCommittedInChunks(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		e.api.PutMany(5000, "o", map[string]any{"n": 1})
		big := func(p *Poller) { p.Fetch = e.api.ChangeFeed(5000); p.CommitMaxItems = 1000 }
		d := &dieAfterStore{n: 1}
		e.tick(e.engine(e.poller(big), func(s core.Store) core.Store { d.Store = s; return d }))
		if d.largest > 1000 {
			t.Fatalf("a commit carried %d events, more than CommitMaxItems", d.largest)
		}
		eng := e.engine(e.poller(big), nil)
		state := eng.store.Key(Key{Poller: "orders"}, "state")
		if cur := b.Client.HGet(t.Context(), state, "cursor.live").Val(); cur != "" {
			t.Fatalf("the cursor moved to %q with two of five chunks committed", cur)
		}
		if n := b.Client.XLen(t.Context(), eng.store.Key(Key{Poller: "orders"}, "outbox")).Val(); n != 2000 {
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

// G3 under a lossy failover (found by the process chaos's failover): Redis replicates
// asynchronously, so a failover can lose a commit whose events were already delivered, and
// the consumer is then ahead of watukuy's state: here it got "created i3", the promoted replica
// never had i3, and when the API deleted i3 nothing emitted the delete. With WaitReplicas, a
// commit's events are delivered only once a replica has it: the cut-off commit delivers
// nothing (REPLICATION), and after the failover the consumer ends in the API's state.
func TestG3FailoverNeverLosesADeliveredCommit(t *testing.T) {
	r := redistest.Replicas(t)
	ctx := t.Context()
	clients, err := netproxy.New(tcpAddr(t, r.Primary))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = clients.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: clients.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	api := fakeapi.New()
	rec := &recorder{}
	eng, err := New(Options{Redis: rdb, InstanceID: "w", WaitReplicas: 1, WaitTimeout: 2 * time.Second}) // a loaded machine acks late
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Register(Poller{Name: "orders", Strategy: SnapshotDiff, Fetch: api.Listing(10), Version: Field("version"),
		ConfirmDeletes: 1, Handler: rec.handle, Schedule: Schedule{Min: time.Second, Max: time.Second}}); err != nil {
		t.Fatal(err)
	}
	if err := eng.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	key := Key{Poller: "orders"}
	cycle := func() watukuytype.CycleReport {
		t.Helper()
		if err := eng.Trigger(ctx, "orders", ""); err != nil {
			t.Fatal(err)
		}
		return eng.RunCycle(ctx, key)
	}
	api.Put("i1", nil)
	api.Put("i2", nil)
	if rep := cycle(); rep.Delivered != 2 || rep.Err != nil {
		t.Fatalf("first cycle: %+v", rep)
	}
	r.WaitSynced(t)
	r.CutLink()
	api.Put("i3", nil)
	rep := cycle()
	if rep.Delivered != 0 || rep.Events != 1 {
		t.Fatalf("a commit no replica has was delivered: %+v", rep)
	}
	if ki, _ := eng.Inspect(ctx, "orders", ""); !strings.Contains(string(ki.LastError), "REPLICATION") {
		t.Fatalf("lastError after an unreplicated commit: %s", ki.LastError)
	}
	r.KillPrimary()
	r.Promote(t)
	clients.Retarget(tcpAddr(t, r.Replica))
	if rep := cycle(); rep.Delivered != 0 {
		t.Fatalf("delivered %d events with no replica to confirm them", rep.Delivered)
	}
	r.Reattach(t) // redundancy restored: deliveries go on
	api.Delete("i3")
	api.Put("i4", nil)
	for range 3 {
		cycle()
	}
	got, want := rec.final(), api.Final()
	if len(got) != len(want) {
		t.Fatalf("the consumer holds %v, the API %v", got, want)
	}
	for id, v := range want {
		if got[id] != strconv.Itoa(v) {
			t.Fatalf("the consumer holds %v, the API %v", got, want)
		}
	}
}

// stateOnly makes the test poller a snapshot listing without a version whose content is the
// items' state field alone (no timestamp in the fingerprint), so content can come back.
func stateOnly(e *env) func(p *Poller) {
	return func(p *Poller) {
		p.Version = nil
		p.Fingerprint = func(item json.RawMessage) ([]byte, error) {
			var it struct {
				State string `json:"state"`
			}
			err := json.Unmarshal(item, &it)
			return []byte(it.State), err
		}
		p.Strategy = SnapshotDiff
		p.Fetch = e.api.Listing(10)
		p.ConfirmDeletes = 1
	}
}

// taggedListing is a listing whose pages are fixed groups (page k lists the identities that
// start with k, so nothing shifts between pages) and whose every page carries the whole
// collection's tag, a hash of its content; a request with the current tag gets a 304. after
// runs once a page is served, to change the collection while the listing is paged.
type taggedListing struct {
	mu    sync.Mutex
	items map[string]string // identity -> version
	salt  string            // in the tag too: an API may change its tags without a change
	pages int
	after func(page int)
}

func (l *taggedListing) tag() string {
	ids := slices.Sorted(maps.Keys(l.items))
	h := sha256.New()
	h.Write([]byte(l.salt))
	for _, id := range ids {
		fmt.Fprintf(h, "%s=%s;", id, l.items[id])
	}
	return fmt.Sprintf("%x", h.Sum(nil)[:8])
}

func (l *taggedListing) set(id, version string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if version == "" {
		delete(l.items, id)
	} else {
		l.items[id] = version
	}
}

func (l *taggedListing) Fetch(_ context.Context, req FetchRequest) (Page, error) {
	l.mu.Lock()
	tag := l.tag()
	if req.ETag == tag {
		l.mu.Unlock()
		return Page{NotModified: true, ETag: tag}, nil
	}
	var p Page
	prefix := strconv.Itoa(req.Page)
	for _, id := range slices.Sorted(maps.Keys(l.items)) {
		if strings.HasPrefix(id, prefix) {
			p.Items = append(p.Items, json.RawMessage(fmt.Sprintf(`{"id":%q,"version":%s}`, id, l.items[id])))
		}
	}
	if p.ETag, p.HasMore = tag, req.Page+1 < l.pages; p.HasMore {
		p.Next = strconv.Itoa(req.Page + 1)
	}
	after := l.after
	l.mu.Unlock()
	if after != nil {
		after(req.Page)
	}
	return p, nil
}

// The committed tag names a collection state the rows hold whole: a listing paged while the
// collection changes commits none, even when its first and last pages carry the same tag (an
// item created and deleted again in between: the rows have it, the tag's state has not) or
// when nothing changed in the rows (an item deleted before the first page and written back,
// the same, before the second: the first tag's state has not got it). Otherwise a 304 to the
// first tag, once the collection is back to that state, hides a delete.
func TestG3TagOfAListingPagedWhileTheCollectionChanged(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before func(l *taggedListing) // before the listing
		during func(l *taggedListing, page int)
		then   func(l *taggedListing) // after it: the collection is back in the first tag's state
	}{
		{"created and deleted again while paged: first and last tags agree",
			func(l *taggedListing) { l.salt = "deployed" }, // a new tag, the same content: listed again
			func(l *taggedListing, page int) {
				switch page {
				case 0:
					l.set("1y", "1")
				case 1:
					l.set("1y", "")
				}
			},
			nil},
		{"deleted before the listing, back while paged: the rows do not change",
			func(l *taggedListing) { l.set("1a", "") },
			func(l *taggedListing, page int) {
				if page == 0 {
					l.set("1a", "1")
				}
			},
			func(l *taggedListing) { l.set("1a", "") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachLight(t, func(t *testing.T, b redistest.Backend) {
				e := newEnv(t, b)
				l := &taggedListing{items: map[string]string{"0a": "1", "0b": "1", "1a": "1", "2a": "1"}, pages: 3}
				eng := e.engine(e.poller(func(p *Poller) {
					p.Strategy = SnapshotDiff
					p.Fetch = l.Fetch
					p.ConfirmDeletes = 1
				}), nil)
				e.settle(eng)
				if tc.before != nil {
					tc.before(l)
				}
				l.mu.Lock()
				l.after = func(page int) { tc.during(l, page) }
				l.mu.Unlock()
				e.clock.Advance(3 * time.Minute)
				t.Logf("the listing paged while the collection changes: %+v", e.tick(eng))
				l.mu.Lock()
				l.after = nil
				l.mu.Unlock()
				if tc.then != nil {
					tc.then(l)
				}
				e.settle(eng)
				got := e.rec.final()
				l.mu.Lock()
				defer l.mu.Unlock()
				for id := range got {
					if _, ok := l.items[id]; !ok {
						t.Errorf("G3: %s delivered as present, the API deleted it (a 304 to a tag the rows do not hold)", id)
					}
				}
				if len(got) != len(l.items) {
					t.Errorf("delivered %v, the API has %v", got, l.items)
				}
			})
		})
	}
}

// G2: a lane that passes a change log's history again (a backfill, reset-cursor) sees each
// version of o1 once more while the row holds the last. A backfill skips entries whose
// versions order before the row's; otherwise each comes out again as the next change, with a
// new id, and a consumer that dedupes by id replays the history to the API's state. Ids that named the version alone sent such a
// consumer back to v1 (the first version's re-emission, now "updated", took a new id; the
// later ones repeated theirs); dropping history older than the row as stale lost changes when
// versions start over (TestAdversary4G3RecreatedItemWithARevisionThatStartsOverIsStale).
func TestG2HistoryPassedAgain(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, opaque := range []bool{false, true} {
			for _, how := range []string{"backfill", "reset-cursor"} {
				name := fmt.Sprintf("%s-opaque-%v", how, opaque)
				e := newEnv(t, b)
				log := &changeLog{}
				eng := e.engine(e.poller(func(p *Poller) {
					p.Name, p.Fetch = name, log.fetch
					p.History = true // a change log: a backfill places its entries by version
					if opaque {
						p.Version = func(item json.RawMessage) (string, error) {
							sum := sha256.Sum256(item)
							return fmt.Sprintf("%x", sum[:8]), nil
						}
					}
				}), nil)
				for v, s := range []string{"new", "paid", "shipped"} {
					log.add("o1", v+1, s)
					e.settle(eng)
				}
				first := len(e.rec.events())
				if how == "backfill" {
					if _, err := eng.Backfill(t.Context(), name, "", BackfillRequest{From: ""}); err != nil {
						t.Fatal(err)
					}
				} else if err := eng.ResetCursor(t.Context(), name, "", "", false); err != nil {
					t.Fatal(err)
				}
				e.settle(eng)
				evs := e.rec.events()
				again := len(evs) - first
				want := 3
				if how == "backfill" && !opaque {
					want = 0 // a backfill skips entries older than the rows
				}
				switch got, repeats := dedupingConsumer(evs); {
				case again != want || len(repeats) != 0:
					t.Errorf("%s: %d events passed again, %d with an earlier id; want %d new ones", name, again, len(repeats), want)
				case got["o1"] != "shipped":
					t.Errorf("G2 (%s): a consumer that dedupes by id holds o1 %q, the API %q", name, got["o1"], "shipped")
				}
			}
		}
	})
}
