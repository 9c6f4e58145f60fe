package watukuy

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// The LeaseKeeper renews every TTL/3, so a cycle longer than its TTL keeps its lease and
// commits; these tests use the Redis server clock, not a fake one.
func TestLeaseKeeperRenewsLongCycles(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 3)
		rs := &renewStore{renewed: make(chan struct{}, 1)}
		e.api.OnFetch(func(ctx context.Context, req watukuytype.FetchRequest) error {
			for i := 0; i < 5; i++ { // 5 renewals of a 150ms lease: the fetch outlives the TTL
				select {
				case <-rs.renewed:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		})
		eng, err := newEngine(Options{Redis: b.Client, InstanceID: "long"}, seams{wrapStore: func(s core.Store) core.Store { rs.Store = s; return rs }})
		if err != nil {
			t.Fatal(err)
		}
		if err := eng.Register(e.poller(func(p *watukuytype.Poller) { p.LeaseTTL = 150 * time.Millisecond })); err != nil {
			t.Fatal(err)
		}
		rep, err := eng.Tick(t.Context(), time.Second)
		if err != nil || rep.Ran != 1 || rep.Events != 3 || len(rep.Errors) != 0 {
			t.Fatalf("long cycle: %+v %v", rep, err)
		}
	})
}

// When a renewal finds the epoch moved on, the keeper cancels the cycle at once: the fetch
// sees its context end and the cycle reports LeaseLost without writing.
func TestLeaseKeeperCancelsOnLeaseLost(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 3)
		eng, err := New(Options{Redis: b.Client, InstanceID: "lost"})
		if err != nil {
			t.Fatal(err)
		}
		lease := eng.store.Key(watukuytype.Key{Poller: "orders"}, "state") // holds the lease
		e.api.OnFetch(func(ctx context.Context, req watukuytype.FetchRequest) error {
			// Another instance takes over: the epoch moves on under this cycle.
			if err := b.Client.HIncrBy(ctx, lease, "epoch", 1).Err(); err != nil {
				return err
			}
			<-ctx.Done()
			return ctx.Err()
		})
		if err := eng.Register(e.poller(func(p *watukuytype.Poller) { p.LeaseTTL = 150 * time.Millisecond })); err != nil {
			t.Fatal(err)
		}
		rep, err := eng.Tick(t.Context(), time.Second)
		if err != nil || len(rep.Errors) != 1 || !errors.As(rep.Errors[0], new(*watukuytype.LeaseLostError)) {
			t.Fatalf("tick: %+v %v", rep, err)
		}
		if n := b.Client.XLen(t.Context(), eng.store.Key(watukuytype.Key{Poller: "orders"}, "outbox")).Val(); n != 0 || len(e.rec.events()) != 0 {
			t.Fatalf("a cycle that lost its lease wrote %d entries / delivered %d", n, len(e.rec.events()))
		}
	})
}

// Different ordering keys are delivered concurrently (up to Delivery.Concurrency), one
// ordering key strictly one event at a time.
func TestDeliveryConcurrencyAcrossKeys(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 8)
		const n = 4
		arrived := make(chan string, 8)
		release := make(chan struct{})
		e.rec.setFail(func(ev watukuytype.Event) error {
			arrived <- ev.Identity
			<-release
			return nil
		})
		eng := e.engine(e.poller(func(p *watukuytype.Poller) {
			p.Delivery.Concurrency = n
			p.Delivery.OrderingKey = func(ev watukuytype.Event) string { return ev.Identity[:2] + string(ev.Identity[2]%2+'0') } // two keys
		}), nil)
		done := make(chan watukuytype.TickReport)
		go func() { done <- e.tick(eng) }()
		// Two ordering keys: exactly two handlers run at once, never more.
		first, second := <-arrived, <-arrived
		select {
		case third := <-arrived:
			t.Fatalf("a third delivery (%s) started while %s and %s of two keys were in flight", third, first, second)
		default:
		}
		close(release)
		if rep := <-done; rep.Delivered != 8 {
			t.Fatalf("delivered %d", rep.Delivered)
		}
		if first[2]%2 == second[2]%2 {
			t.Fatalf("two events of one ordering key were in flight at once: %s %s", first, second)
		}
	})
}

// Stop without drain cancels running cycles; what was not acked stays and is delivered by
// the next instance (G1). Stop with drain lets the running cycle finish.
func TestStop(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 2)
		inHandler := make(chan struct{}, 4)
		var handler func(ctx context.Context, ev watukuytype.Event) error
		p := e.poller(func(p *watukuytype.Poller) {
			p.Delivery.Concurrency = 1
			p.Handler = func(ctx context.Context, ev watukuytype.Event) error { return handler(ctx, ev) }
		})
		handler = func(ctx context.Context, ev watukuytype.Event) error {
			inHandler <- struct{}{}
			<-ctx.Done() // holds until the engine cancels it
			return ctx.Err()
		}
		eng := e.engine(p, nil)
		done := make(chan watukuytype.TickReport)
		go func() { done <- e.tick(eng) }()
		<-inHandler
		if err := eng.Stop(false, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		<-done
		if rep, err := eng.Tick(t.Context(), time.Second); err != nil || rep.Ran != 0 {
			t.Fatalf("a stopped engine ran: %+v %v", rep, err)
		}
		if ki, _ := eng.Inspect(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}); ki.OutboxPending != 2 {
			t.Fatalf("cancelled deliveries must stay in the outbox: %d", ki.OutboxPending)
		}
		handler = e.rec.handle
		next := e.engine(p, nil)
		e.settle(next)
		if n := len(e.rec.events()); n != 2 {
			t.Fatalf("the next instance delivered %d, want 2", n)
		}

		// Drain: a cycle blocked in its handler finishes before Stop returns.
		e.api.Put("late", nil)
		release := make(chan struct{})
		handler = func(ctx context.Context, ev watukuytype.Event) error {
			inHandler <- struct{}{}
			<-release
			return e.rec.handle(ctx, ev)
		}
		e.clock.Advance(3 * time.Minute)
		go func() { done <- e.tick(next) }()
		<-inHandler
		stopped := make(chan error)
		go func() { stopped <- next.Stop(true, 10*time.Second) }()
		close(release)
		if err := <-stopped; err != nil {
			t.Fatal(err)
		}
		if rep := <-done; rep.Delivered != 1 {
			t.Fatalf("drained cycle delivered %d: %+v", rep.Delivered, rep)
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

// A lease is valid from when Begin was sent, not from when its reply arrived: with a reply 2.4
// s late on a 3 s lease, nothing is delivered after the lease expired on the server.
func TestG5ValidityCountsFromBeginsRequest(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 6)
		// One delivery at a time: each starts after the check before it (concurrent handlers
		// serialized by the recorder's lock would start later than their checks, an artifact).
		short := func(p *watukuytype.Poller) { p.LeaseTTL, p.Delivery.Concurrency = 3*time.Second, 1 }
		e.tick(e.engine(e.poller(short), faulty(&faultyStore{dieCommit: 1}))) // 6 events wait in the outbox
		var mu sync.Mutex
		var late []string
		var expires time.Time
		e.rec.setFail(func(ev watukuytype.Event) error {
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

// Leases follow the Redis server's clock, and no public option replaces it: a lease the server
// says is live is not taken over, one it says expired is.
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
	p := e.poller(func(p *watukuytype.Poller) {
		feed := e.api.ChangeFeed(10)
		p.Fetch = func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
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
	if rep := other.RunCycle(t.Context(), watukuytype.Key{Poller: "orders"}); rep.Outcome != watukuytype.SkippedLeased {
		t.Fatalf("a live lease was taken over: %+v", rep)
	}
	b.Mini.SetTime(start.Add(31 * time.Second)) // expired on the server
	if rep := other.RunCycle(t.Context(), watukuytype.Key{Poller: "orders"}); rep.Outcome != watukuytype.Ran {
		t.Fatalf("an expired lease was not taken over: %+v", rep)
	}
	close(hold)
	<-done
}

// CheckLease, which a handler calls before a side effect it cannot take back, fails once the
// lease is known lost: after the keeper's renewal was fenced off (another grant holds the key),
// and after the cycle ended and released its lease.
func TestG5CheckLeaseFailsOnceTheLeaseIsLost(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 2)
		var mu sync.Mutex
		var kept context.Context
		inHandler, proceed := make(chan struct{}), make(chan struct{})
		var once sync.Once
		var afterLoss error = errors.New("not called")
		p := e.poller(func(p *watukuytype.Poller) {
			p.LeaseTTL = 3 * time.Second // keeper renews every second (real time)
			p.Handler = func(ctx context.Context, ev watukuytype.Event) error {
				mu.Lock()
				kept = ctx
				mu.Unlock()
				once.Do(func() {
					close(inHandler)
					<-proceed
					<-ctx.Done() // the keeper found the lease lost and cancelled the cycle
					afterLoss = watukuytype.CheckLease(ctx)
				})
				return nil
			}
		})
		eng := e.engine(p, nil)
		done := make(chan struct{})
		go func() { defer close(done); eng.RunCycle(context.Background(), watukuytype.Key{Poller: "orders"}) }()
		<-inHandler
		// Another grant of the same key (as a lossy failover hands out): new token.
		lease := eng.store.Key(watukuytype.Key{Poller: "orders"}, "state") // holds the lease
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
		if err := eng.Trigger(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}); err != nil {
			t.Fatal(err)
		}
		if rep := eng.RunCycle(t.Context(), watukuytype.Key{Poller: "orders"}); rep.Delivered == 0 {
			t.Fatalf("second cycle: %+v", rep)
		}
		if live, _ := eng.store.LeaseLive(t.Context(), watukuytype.Key{Poller: "orders"}); live {
			t.Fatal("the lease is still live after the cycle ended")
		}
		mu.Lock()
		defer mu.Unlock()
		if err := watukuytype.CheckLease(kept); err == nil {
			t.Errorf("G5 (b): CheckLease answered nil for a cycle that had ended and released its lease")
		}
	})
}
