package core_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/watukuytype"
)

// G4 at the dispatcher: an event that keeps failing is parked and holds its ordering key, so
// the later events of that key wait (held) while other keys' events are delivered; later
// cycles hold the key's new events too; retrying the parked event releases it and the held
// events, in their original order.
func TestDispatchHoldsAnOrderingKey(t *testing.T) {
	for _, concurrency := range []int{1, 4} {
		t.Run(map[int]string{1: "one key at a time", 4: "keys at once"}[concurrency], func(t *testing.T) {
			w := newWorld(t)
			f := newFeed(10)
			for _, it := range [][2]string{{"a1", "A"}, {"b1", "B"}, {"a2", "A"}, {"b2", "B"}, {"a3", "A"}} {
				f.put(it[0], "1", "group", it[1])
			}
			group := func(ev watukuytype.Event) string { return gjson.GetBytes(ev.Item, "group").String() }
			w.rec.setFail(func(ev watukuytype.Event) error {
				if ev.Identity == "a1" {
					return errors.New("sink refuses a1")
				}
				return nil
			})
			eng := w.engine(w.poller(f.fetch, func(p *watukuytype.Poller) {
				p.Delivery.OrderingKey = group
				p.Delivery.Concurrency = concurrency
				p.Delivery.RetryHorizon = -1 // poison after one try
			}))

			rep := w.run(eng)
			if rep.Events != 5 || rep.Delivered != 2 || rep.Parked != 1 || rep.Err != nil {
				t.Fatalf("first cycle: %+v", rep)
			}
			if got := summary(w.rec.take()); !slices.Equal(got, []string{"created:b1", "created:b2"}) {
				t.Fatalf("delivered %v, want only B's events", got)
			}
			ki := w.inspect(eng)
			if ki.ParkedPoison != 1 || ki.Held != 2 || ki.OutboxPending != 0 {
				t.Fatalf("after the first cycle: parked %d, held %d, pending %d", ki.ParkedPoison, ki.Held, ki.OutboxPending)
			}
			parked, err := eng.ListParked(context.Background(), key, "poison")
			if err != nil || len(parked) != 1 || parked[0].OrderingKey != "A" || parked[0].Identity != "a1" || parked[0].Attempts != 2 {
				t.Fatalf("parked rows: %+v %v", parked, err)
			}

			// A later cycle: A's new event joins the held ones, B's goes through.
			f.put("a4", "1", "group", "A")
			f.put("b3", "1", "group", "B")
			w.clock.Advance(time.Minute)
			rep = w.run(eng)
			if got := summary(w.rec.take()); !slices.Equal(got, []string{"created:b3"}) || rep.Delivered != 1 {
				t.Fatalf("second cycle delivered %v (%+v), want only b3", got, rep)
			}
			if ki := w.inspect(eng); ki.Held != 3 {
				t.Fatalf("held %d after a4 came, want 3", ki.Held)
			}

			// The sink is fixed: retrying a1 releases A's events in their order.
			w.rec.setFail(nil)
			if n, err := eng.RetryParked(context.Background(), key, []string{parked[0].ID}); err != nil || n != 1 {
				t.Fatalf("retry: %d %v", n, err)
			}
			rep = w.run(eng)
			if got := summary(w.rec.take()); !slices.Equal(got, []string{"created:a1", "created:a2", "created:a3", "created:a4"}) {
				t.Fatalf("after the retry delivered %v (%+v), want a1..a4 in order", got, rep)
			}
			if ki := w.inspect(eng); ki.Parked != 0 || ki.Held != 0 || ki.OutboxPending != 0 {
				t.Fatalf("after the retry: parked %d, held %d, pending %d", ki.Parked, ki.Held, ki.OutboxPending)
			}
		})
	}
}

// Discarding the parked event also releases its ordering key: the held events follow, in
// order, without it.
func TestDispatchDiscardReleasesTheHeldEvents(t *testing.T) {
	w := newWorld(t)
	f := newFeed(10)
	for _, id := range []string{"x1", "x2", "x3"} {
		f.put(id, "1", "group", "X")
	}
	w.rec.setFail(func(ev watukuytype.Event) error {
		if ev.Identity == "x1" {
			return errors.New("refused")
		}
		return nil
	})
	eng := w.engine(w.poller(f.fetch, func(p *watukuytype.Poller) {
		p.Delivery.OrderingKey = func(ev watukuytype.Event) string { return gjson.GetBytes(ev.Item, "group").String() }
		p.Delivery.RetryHorizon = -1
	}))
	if rep := w.run(eng); rep.Delivered != 0 || rep.Parked != 1 {
		t.Fatalf("first cycle: %+v", rep)
	}
	parked, err := eng.ListParked(context.Background(), key, "")
	if err != nil || len(parked) != 1 {
		t.Fatalf("parked: %+v %v", parked, err)
	}
	if n, err := eng.DiscardParked(context.Background(), key, []string{parked[0].ID}); err != nil || n != 1 {
		t.Fatalf("discard: %d %v", n, err)
	}
	w.run(eng)
	if got := summary(w.rec.take()); !slices.Equal(got, []string{"created:x2", "created:x3"}) {
		t.Fatalf("after the discard delivered %v, want x2, x3", got)
	}
}

// PoisonHalt keeps the failing event in the outbox and opens the circuit; nothing after it is
// delivered or parked.
func TestDispatchPoisonHalt(t *testing.T) {
	w := newWorld(t)
	f := newFeed(10)
	f.putN(3)
	w.rec.setFail(func(watukuytype.Event) error { return errors.New("sink down") })
	eng := w.engine(w.poller(f.fetch, func(p *watukuytype.Poller) {
		p.Delivery.Poison = watukuytype.PoisonHalt
		p.Delivery.Concurrency = 1
		p.Delivery.RetryHorizon = -1
	}))
	rep := w.run(eng)
	ki := w.inspect(eng)
	if rep.Delivered != 0 || rep.Parked != 0 || rep.Err == nil || ki.Circuit != watukuytype.CircuitOpen || ki.OutboxPending != 3 ||
		lastError(t, ki).Code != watukuytype.CodePoisonHalt {
		t.Fatalf("report %+v, circuit %s, pending %d, lastError %s", rep, ki.Circuit, ki.OutboxPending, ki.LastError)
	}
	// The probe (a trigger) drains the outbox before any request.
	w.rec.setFail(nil)
	if err := eng.Trigger(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	requests := f.requestCount()
	rep = w.run(eng)
	if got := summary(w.rec.take()); !slices.Equal(got, []string{"created:i01", "created:i02", "created:i03"}) || rep.Delivered != 3 {
		t.Fatalf("probe delivered %v (%+v)", got, rep)
	}
	if ki := w.inspect(eng); ki.Circuit != watukuytype.CircuitClosed || ki.OutboxPending != 0 || f.requestCount() != requests+1 {
		t.Fatalf("after the probe: circuit %s, pending %d, requests %d", ki.Circuit, ki.OutboxPending, f.requestCount()-requests)
	}
}

// outboxReads is a store that records how many events each outbox read asks for.
type outboxReads struct {
	core.Store
	asked []int
}

func (s *outboxReads) ReadOutbox(ctx context.Context, l core.Lease, n int) (core.Batch, error) {
	s.asked = append(s.asked, n)
	return s.Store.ReadOutbox(ctx, l, n)
}

// Delivery.Batch is how many events one outbox read takes (default 512): five replayed
// events with a batch of 2 are read 2, 2 and 1 at a time, and delivered in order.
func TestDeliveryBatchBoundsAnOutboxRead(t *testing.T) {
	for _, tc := range []struct {
		batch, asked, reads int
	}{
		{0, core.DefaultBatch, 2}, // all five, then nothing
		{2, 2, 4},                 // 2, 2, 1, then nothing
	} {
		t.Run(strconv.Itoa(tc.batch), func(t *testing.T) {
			w := newWorld(t)
			reads := &outboxReads{Store: w.store}
			w.store = reads
			f := newFeed(10)
			f.putN(5)
			eng := w.engine(w.poller(f.fetch, func(p *watukuytype.Poller) {
				p.Delivery.Batch, p.LogRetention = tc.batch, time.Hour
			}))
			if rep := w.run(eng); rep.Err != nil || rep.Events != 5 { // delivered as committed, and logged
				t.Fatalf("first cycle: %+v", rep)
			}
			w.rec.take()
			if n, err := eng.Replay(context.Background(), key, time.Unix(0, 0), w.clock.Now().Add(time.Hour)); err != nil || n != 5 {
				t.Fatalf("replay: %d, %v", n, err)
			}
			reads.asked = nil
			if rep := w.run(eng); rep.Err != nil {
				t.Fatalf("cycle: %+v", rep)
			}
			if got := summary(w.rec.take()); !slices.Equal(got, []string{"created:i01", "created:i02", "created:i03", "created:i04", "created:i05"}) {
				t.Fatalf("delivered %v", got)
			}
			if len(reads.asked) != tc.reads || slices.ContainsFunc(reads.asked, func(n int) bool { return n != tc.asked }) {
				t.Fatalf("outbox reads asked for %v, want %d reads of %d", reads.asked, tc.reads, tc.asked)
			}
		})
	}
}

// stackErr is an error that formats a stack with %+v, as github.com/pkg/errors does.
type stackErr struct{}

func (stackErr) Error() string { return "refused" }

func (e stackErr) Format(s fmt.State, verb rune) {
	_, _ = io.WriteString(s, e.Error())
	if verb == 'v' && s.Flag('+') {
		_, _ = io.WriteString(s, "\nexample.com/sink.send\n\tsink.go:42")
	}
}

// A parked row keeps the stack of the failure that parked it: a handler's panic (the stack
// where it panicked), an error that formats one (also wrapped), none for a plain error; a
// deep stack is cut at 8 KiB.
func TestParkedRowKeepsTheStack(t *testing.T) {
	var deep func(n int)
	deep = func(n int) {
		if n == 0 {
			panic("deep down")
		}
		deep(n - 1)
	}
	for _, tc := range []struct {
		name  string
		fail  func() error
		want  string // in the stack; "" for none
		error string
	}{
		{"panic", func() error { panic("boom") }, "TestParkedRowKeepsTheStack", "handler panic: boom"},
		{"deep panic", func() error { deep(2000); return nil }, "(cut at 8 KiB)", "handler panic: deep down"},
		{"error with a stack", func() error { return stackErr{} }, "sink.go:42", "refused"},
		{"wrapped", func() error { return fmt.Errorf("post: %w", stackErr{}) }, "sink.go:42", "post: refused"},
		{"plain error", func() error { return errors.New("refused") }, "", "refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			f := newFeed(10)
			f.putN(1)
			w.rec.setFail(func(watukuytype.Event) error { return tc.fail() })
			eng := w.engine(w.poller(f.fetch, func(p *watukuytype.Poller) { p.Delivery.RetryHorizon = -1 }))
			if rep := w.run(eng); rep.Parked != 1 {
				t.Fatalf("cycle: %+v", rep)
			}
			parked, err := eng.ListParked(context.Background(), key, "poison")
			if err != nil || len(parked) != 1 {
				t.Fatalf("parked: %+v %v", parked, err)
			}
			p := parked[0]
			if p.Error != tc.error || len(p.Stack) > 8<<10+32 {
				t.Fatalf("row error %q (want %q), stack of %d bytes", p.Error, tc.error, len(p.Stack))
			}
			if tc.want == "" && p.Stack != "" || !strings.Contains(p.Stack, tc.want) {
				t.Fatalf("stack %q, want one with %q", p.Stack, tc.want)
			}
		})
	}
}
