package watukuy

import (
	"context"
	"errors"
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
		eng, err := New(Options{Redis: b.Client, InstanceID: "long", wrapStore: func(s core.Store) core.Store { rs.Store = s; return rs }})
		if err != nil {
			t.Fatal(err)
		}
		if err := eng.Register(e.poller(func(p *Poller) { p.LeaseTTL = 150 * time.Millisecond })); err != nil {
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
		if err := eng.Register(e.poller(func(p *Poller) { p.LeaseTTL = 150 * time.Millisecond })); err != nil {
			t.Fatal(err)
		}
		rep, err := eng.Tick(t.Context(), time.Second)
		if err != nil || len(rep.Errors) != 1 || !errors.As(rep.Errors[0], new(*LeaseLostError)) {
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
		e.rec.setFail(func(ev Event) error {
			arrived <- ev.Identity
			<-release
			return nil
		})
		eng := e.engine(e.poller(func(p *Poller) {
			p.Delivery.Concurrency = n
			p.Delivery.OrderingKey = func(ev Event) string { return ev.Identity[:2] + string(ev.Identity[2]%2+'0') } // two keys
		}), nil)
		done := make(chan TickReport)
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
		var handler func(ctx context.Context, ev Event) error
		p := e.poller(func(p *Poller) {
			p.Delivery.Concurrency = 1
			p.Handler = func(ctx context.Context, ev Event) error { return handler(ctx, ev) }
		})
		handler = func(ctx context.Context, ev Event) error {
			inHandler <- struct{}{}
			<-ctx.Done() // holds until the engine cancels it
			return ctx.Err()
		}
		eng := e.engine(p, nil)
		done := make(chan TickReport)
		go func() { done <- e.tick(eng) }()
		<-inHandler
		if err := eng.Stop(false, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		<-done
		if rep, err := eng.Tick(t.Context(), time.Second); err != nil || rep.Ran != 0 {
			t.Fatalf("a stopped engine ran: %+v %v", rep, err)
		}
		if ki, _ := eng.Inspect(t.Context(), "orders", ""); ki.OutboxPending != 2 {
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
		handler = func(ctx context.Context, ev Event) error {
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
