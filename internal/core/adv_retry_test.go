package core_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/watukuy/watukuy/watukuytype"
)

// A failed event's wait that comes due while the same cycle is still draining (an outbox of
// 1,000 events left by a sink outage, delivered at 20 ms each) is tried again in that cycle:
// the cycle ends (a drain that skipped the released event would read it again for good).
func TestAdvRetryDrainSpinsOnAWaitThatComesDueInTheSameCycle(t *testing.T) {
	w := newWorld(t)
	f := newFeed(2000)
	f.put("a1", "1", "group", "A")
	for i := range 1000 {
		f.put(fmt.Sprintf("b%04d", i), "1", "group", "B")
	}
	down := true
	w.rec.setFail(func(ev watukuytype.Event) error {
		switch {
		case down:
			return watukuytype.SinkUnavailable(errors.New("receiver down"))
		case ev.Identity == "a1":
			return errors.New("a1 is refused") // the event's own failure: it waits
		}
		w.clock.Advance(20 * time.Millisecond) // a delivery takes 20 ms
		return nil
	})
	eng := w.engine(w.poller(f.fetch, func(p *watukuytype.Poller) {
		p.LeaseTTL = 10 * time.Minute
		p.Delivery.OrderingKey = func(ev watukuytype.Event) string { return gjson.GetBytes(ev.Item, "group").String() }
	}))
	if rep := w.run(eng); rep.Err != nil || w.inspect(eng).Blocked == nil {
		t.Fatalf("first cycle: %+v", rep)
	}
	down = false
	w.clock.Advance(time.Minute) // the sink's next try has come
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := w.store.ClaimDue(ctx, 1, 0, nil); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rep := eng.RunCycle(ctx, key)
	if took := time.Since(start); took > 4*time.Second || rep.Err != nil {
		t.Fatalf("a cycle whose drain outlasted a1's wait: ran %s, delivered %d, ended with %v (want a prompt end, a1 tried again or waiting)",
			took.Round(time.Millisecond), len(w.rec.take()), rep.Err)
	}
}

// One event whose handler says its sink is unreachable while the other ordering keys' events
// are delivered in the same batches: the sink evidently works, so the failure is the event's
// own; it waits for its tries and is poison after its horizon (a blockage ended and begun again
// in each batch would never grow old enough).
func TestAdvRetryOneEventsSinkErrorBlocksPastTheHorizon(t *testing.T) {
	w := newWorld(t)
	f := newFeed(100)
	f.put("a1", "1", "group", "A")
	f.put("a2", "1", "group", "A")
	f.put("b1", "1", "group", "B")
	var mu sync.Mutex
	var got []string
	tries := 0
	handler := func(ctx context.Context, ev watukuytype.Event) error {
		if ev.Identity == "a1" {
			mu.Lock()
			tries++
			n := tries
			mu.Unlock()
			if n == 1 {
				return &watukuytype.SinkError{Err: errors.New("HTTP 500")} // other events deliver: a1 waits
			}
			time.Sleep(20 * time.Millisecond) // the other group is delivered meanwhile
			return watukuytype.SinkUnavailable(errors.New("connection reset by peer"))
		}
		mu.Lock()
		got = append(got, ev.Identity)
		mu.Unlock()
		return nil
	}
	eng := w.engine(w.poller(f.fetch, func(p *watukuytype.Poller) {
		p.Handler = handler
		p.Delivery.Concurrency = 2
		p.Delivery.Attempts = 1
		p.Delivery.OrderingKey = func(ev watukuytype.Event) string { return gjson.GetBytes(ev.Item, "group").String() }
		p.Delivery.Retry = watukuytype.Backoff{Base: time.Second, Factor: 1, Max: time.Second}
		p.Delivery.RetryHorizon = 30 * time.Minute
	}))
	w.run(eng)
	// Three hours: a B event each 2 minutes, every one delivered.
	for i := range 90 {
		f.put(fmt.Sprintf("b%03d", i+2), "1", "group", "B")
		w.clock.Advance(2 * time.Minute)
		w.run(eng)
	}
	ki := w.inspect(eng)
	mu.Lock()
	delivered, n := len(got), tries
	mu.Unlock()
	if ki.ParkedPoison != 1 {
		since := "-"
		if ki.Blocked != nil {
			since = w.clock.Now().Sub(ki.Blocked.Since).String()
		}
		t.Fatalf("a1 failed %d tries over 3 h (horizon 30 min) while %d other events were delivered: parked poison %d (want a1 poison), blocked since %s ago",
			n, delivered, ki.ParkedPoison, since)
	}
}

// A handler whose own dependency fails for one event, wrapping the network error as Go code
// does, is that event's failure, not the sink's: only an unwrapped network error (or a
// SinkError) blocks the key; the other ordering keys' events are delivered.
func TestAdvRetryWrappedNetworkErrorOfOneEventBlocksTheKey(t *testing.T) {
	w := newWorld(t)
	f := newFeed(10)
	f.put("a1", "1", "group", "A")
	f.put("b1", "1", "group", "B")
	f.put("c1", "1", "group", "C")
	w.rec.setFail(func(ev watukuytype.Event) error {
		if ev.Identity == "a1" {
			return fmt.Errorf("enrich a1: %w", &net.DNSError{Err: "no such host", Name: "img.a1.example", IsNotFound: true})
		}
		return nil
	})
	eng := w.engine(w.poller(f.fetch, func(p *watukuytype.Poller) {
		p.Delivery.OrderingKey = func(ev watukuytype.Event) string { return gjson.GetBytes(ev.Item, "group").String() }
	}))
	w.run(eng)
	ki := w.inspect(eng)
	if got := summary(w.rec.take()); !slices.Equal(got, []string{"created:b1", "created:c1"}) || ki.Blocked != nil {
		t.Fatalf("a1's handler failed with its own wrapped lookup error: delivered %v, blocked %+v (want b1, c1 delivered, a1 waiting)", got, ki.Blocked)
	}
}
