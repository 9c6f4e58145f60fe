package core_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/watukuy/watukuy/watukuytype"
)

// A sink that cannot be reached blocks the key's delivery: nothing is parked, the cycles keep
// polling and committing into the outbox, inspect shows the blockage, and when the sink is back
// (at its next try) every event is delivered once, in order, with no operator.
func TestDeliveryBlockedWhileTheSinkIsDown(t *testing.T) {
	w := newWorld(t)
	f := newFeed(10)
	f.putN(2)
	down := true
	w.rec.setFail(func(watukuytype.Event) error {
		if down {
			return &watukuytype.SinkError{Err: fmt.Errorf("dial tcp: %w", syscall.ECONNREFUSED), Unreachable: true}
		}
		return nil
	})
	eng := w.engine(w.poller(f.fetch, func(p *watukuytype.Poller) { p.Delivery.Concurrency = 1 }))
	rep := w.run(eng)
	ki := w.inspect(eng)
	if rep.Err != nil || rep.Parked != 0 || rep.Delivered != 0 || ki.Status != watukuytype.StatusBlocked || ki.Blocked == nil ||
		ki.Blocked.Tries != 1 || ki.OutboxPending != 2 || ki.Parked != 0 {
		t.Fatalf("first cycle: %+v; status %s, blocked %+v, outbox %d, parked %d", rep, ki.Status, ki.Blocked, ki.OutboxPending, ki.Parked)
	}
	if want := "connection refused"; !strings.Contains(ki.Blocked.Error, want) {
		t.Fatalf("blocked error %q does not say %q", ki.Blocked.Error, want)
	}
	// An outage of 10 minutes, 20 cycles: each polls and commits; the sink is tried again at
	// its next try only.
	tries := 0
	for i := range 20 {
		f.put(fmt.Sprintf("n%02d", i), "1")
		w.clock.Advance(30 * time.Second)
		before := w.inspect(eng).Blocked
		rep := w.run(eng)
		after := w.inspect(eng)
		if rep.Err != nil || rep.Events != 1 || rep.Parked != 0 || after.Blocked == nil || !after.Blocked.Since.Equal(ki.Blocked.Since) {
			t.Fatalf("cycle %d of the outage: %+v, blocked %+v", i, rep, after.Blocked)
		}
		if after.Blocked.Tries > before.Tries {
			tries++
		}
	}
	if tries == 0 || tries == 20 {
		t.Fatalf("the sink was tried in %d of 20 cycles of 30 s: want its waits, neither never nor every cycle", tries)
	}
	if got := w.rec.take(); len(got) != 0 {
		t.Fatalf("delivered during the outage: %v", summary(got))
	}
	// Back: the next try delivers everything, in commit order, and the blockage goes.
	down = false
	w.clock.Advance(time.Hour)
	w.run(eng)
	want := []string{"created:i01", "created:i02"}
	for i := range 20 {
		want = append(want, fmt.Sprintf("created:n%02d", i))
	}
	if got := summary(w.rec.take()); !slices.Equal(got, want) {
		t.Fatalf("after the outage delivered %v, want %v", got, want)
	}
	if ki := w.inspect(eng); ki.Blocked != nil || ki.Status == watukuytype.StatusBlocked || ki.OutboxPending != 0 || ki.Parked != 0 {
		t.Fatalf("after the outage: %+v", ki)
	}
}

// A trigger on a blocked key tries the sink at once.
func TestTriggerTriesABlockedSinkAtOnce(t *testing.T) {
	w := newWorld(t)
	f := newFeed(10)
	f.putN(1)
	down := true
	w.rec.setFail(func(watukuytype.Event) error {
		if down {
			return watukuytype.SinkUnavailable(errors.New("receiver down"))
		}
		return nil
	})
	eng := w.engine(w.poller(f.fetch))
	w.run(eng)
	if ki := w.inspect(eng); ki.Blocked == nil {
		t.Fatal("not blocked")
	}
	down = false
	w.run(eng) // its next try has not come: nothing is tried
	if got := w.rec.take(); len(got) != 0 {
		t.Fatalf("delivered before its next try: %v", summary(got))
	}
	if err := eng.Trigger(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	w.run(eng)
	if got := summary(w.rec.take()); !slices.Equal(got, []string{"created:i01"}) || w.inspect(eng).Blocked != nil {
		t.Fatalf("after the trigger: %v, blocked %+v", got, w.inspect(eng).Blocked)
	}
}

// One event that keeps failing while its sink works (the other events deliver) waits for its
// next tries, holding only its ordering key, and becomes poison once its retry horizon has
// passed; the events behind it follow when it is discarded.
func TestAFailingEventWaitsThenIsPoison(t *testing.T) {
	w := newWorld(t)
	f := newFeed(10)
	for _, it := range [][2]string{{"a1", "A"}, {"b1", "B"}, {"a2", "A"}, {"b2", "B"}} {
		f.put(it[0], "1", "group", it[1])
	}
	w.rec.setFail(func(ev watukuytype.Event) error {
		if ev.Identity == "a1" {
			return &watukuytype.SinkError{Err: errors.New("HTTP 500: cannot take a1")} // as a webhook's 5xx
		}
		return nil
	})
	eng := w.engine(w.poller(f.fetch, func(p *watukuytype.Poller) {
		p.Delivery.OrderingKey = func(ev watukuytype.Event) string { return gjson.GetBytes(ev.Item, "group").String() }
		p.Delivery.RetryHorizon = time.Hour
	}))
	rep := w.run(eng)
	ki := w.inspect(eng)
	if got := summary(w.rec.take()); !slices.Equal(got, []string{"created:b1", "created:b2"}) || rep.Parked != 0 || ki.Blocked != nil ||
		ki.Retrying != 1 || ki.NextRetryAt == nil || ki.Held != 2 {
		t.Fatalf("first cycle: delivered %v, %+v; blocked %+v, retrying %d at %v, held %d", got, rep, ki.Blocked, ki.Retrying, ki.NextRetryAt, ki.Held)
	}
	// B goes on while A waits.
	f.put("b3", "1", "group", "B")
	f.put("a3", "1", "group", "A")
	cycles := 0
	for ; cycles < 100 && w.inspect(eng).ParkedPoison == 0; cycles++ {
		w.clock.Advance(2 * time.Minute)
		w.run(eng)
	}
	got := summary(w.rec.take())
	if !slices.Equal(got, []string{"created:b3"}) {
		t.Fatalf("while a1 waited: delivered %v, want b3 only", got)
	}
	ki = w.inspect(eng)
	parked, err := eng.ListParked(context.Background(), key, "poison")
	if err != nil || len(parked) != 1 || parked[0].Identity != "a1" || parked[0].OrderingKey != "A" || parked[0].Attempts < 4 || ki.Held != 2 || ki.Retrying != 0 {
		t.Fatalf("after its horizon: parked %+v (%v), held %d, retrying %d", parked, err, ki.Held, ki.Retrying)
	}
	if cycles < 25 {
		t.Fatalf("poison after %d cycles of 2 min: before its 1 h horizon", cycles)
	}
	if _, err := eng.DiscardParked(context.Background(), key, []string{parked[0].ID}); err != nil {
		t.Fatal(err)
	}
	w.run(eng)
	if got := summary(w.rec.take()); !slices.Equal(got, []string{"created:a2", "created:a3"}) {
		t.Fatalf("after the discard: %v", got)
	}
}

// A failed event's wait that comes due while the same cycle is still draining (an outbox of
// 1,000 events left by a sink outage, delivered at 20 ms each) is tried again in that cycle:
// the cycle ends (a drain that skipped the released event would read it again for good).
func TestDrainDoesNotSpinOnAWaitThatComesDueInTheSameCycle(t *testing.T) {
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
// own; it waits for its tries and is poison after its horizon.
func TestOneEventsSinkErrorIsPoisonAfterTheHorizon(t *testing.T) {
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
func TestWrappedNetworkErrorOfOneEventDoesNotBlockTheKey(t *testing.T) {
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
