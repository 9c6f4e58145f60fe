package watukuy

// Events held behind a parked event of their ordering key: the drain goes on past them (G9), a
// retry releases them in commit order (G4), none is lost (G1).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// A drain whose batch is all held (the hot ordering key of a parked event) goes on reading:
// entries of other keys wait behind it, and y1@1 is delivered before y1@2 and before any
// request.
func TestG9DrainGoesOnPastAHeldBatch(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		hot := func(p *watukuytype.Poller) {
			p.Fetch = e.api.ChangeFeed(5000)
			p.CommitMaxItems = 5000 // the page commits in one write, y1@1 with it
			p.Delivery.Attempts, p.Delivery.RetryHorizon = 1, -1
			p.Delivery.OrderingKey = func(ev watukuytype.Event) string {
				if strings.HasPrefix(ev.Identity, "x") {
					return "X"
				}
				return ev.Identity
			}
		}
		e.rec.setFail(func(ev watukuytype.Event) error {
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
			if !slices.ContainsFunc(e.rec.events(), func(ev watukuytype.Event) bool { return ev.Identity == "y1" }) {
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

// A death between the park of a poison event and the ack of the events delivered before it
// leaves an older, delivered but unacked event of the held key: after the retry, handler
// successes per ordering key never go back in commit order.
func TestG4RetryAfterDeathBetweenParkAndAck(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		sameKey := func(p *watukuytype.Poller) {
			p.Delivery.Attempts, p.Delivery.RetryHorizon = 1, -1
			p.Delivery.OrderingKey = func(ev watukuytype.Event) string { return "A" }
		}
		e.rec.setFail(func(ev watukuytype.Event) error {
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
		rows, err := eng.Parked().List(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}, "poison")
		if err != nil || len(rows) != 1 {
			t.Fatalf("parked: %v %v", rows, err)
		}
		if _, err := eng.Parked().Retry(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}, rows[0].ID); err != nil {
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

// The same death, then the retry of the poison event before any cycle ran since: the handler
// never sees a1 (committed first) after a2.
func TestG4RetryBeforeAnyCycleAfterDeathBetweenParkAndAck(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		sameKey := func(p *watukuytype.Poller) {
			p.Delivery.Attempts, p.Delivery.RetryHorizon = 1, -1
			p.Delivery.OrderingKey = func(ev watukuytype.Event) string { return "A" }
		}
		e.rec.setFail(func(ev watukuytype.Event) error {
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
		e.clock.Advance(3 * time.Minute) // the dead process's lease lapses; no cycle runs
		e.rec.setFail(nil)
		rows, err := eng.Parked().List(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}, "poison")
		if err != nil || len(rows) != 1 {
			t.Fatalf("parked: %v %v", rows, err)
		}
		if _, err := eng.Parked().Retry(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}, rows[0].ID); err != nil {
			t.Fatal(err)
		}
		e.settle(eng)
		var got []string
		for _, ev := range e.rec.events() {
			got = append(got, ev.Identity)
		}
		if i := slices.Index(got, "a2"); i < 0 || slices.Contains(got[i:], "a1") {
			t.Fatalf("handler successes %v: a1 (committed first) after a2", got)
		}
	})
}

// One hot ordering key: a poison event holding 700 later events (more than a read batch), a
// second poison among the released ones, new events committed while it is released: after the
// retries the handler's successes follow commit order, none missing.
func TestG4HeldHotKeyReleasedTwiceWithNewEvents(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		hot := func(p *watukuytype.Poller) {
			p.Delivery.Attempts, p.Delivery.RetryHorizon = 1, -1
			p.Delivery.OrderingKey = func(ev watukuytype.Event) string { return "A" }
			p.CommitMaxItems = 4
		}
		poison := map[string]bool{"i000": true}
		e.rec.setFail(func(ev watukuytype.Event) error {
			if poison[ev.Identity] {
				return errors.New("poison")
			}
			return nil
		})
		for i := range 700 {
			e.api.Put(fmt.Sprintf("i%03d", i), nil)
		}
		eng := e.engine(e.poller(hot), nil)
		e.settle(eng)
		retry := func() {
			rows, err := eng.Parked().List(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}, "poison")
			if err != nil || len(rows) != 1 {
				t.Fatalf("parked: %v %v", rows, err)
			}
			if _, err := eng.Parked().Retry(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}, rows[0].ID); err != nil {
				t.Fatal(err)
			}
		}
		e.rec.setFail(func(ev watukuytype.Event) error {
			if ev.Identity == "i300" {
				return errors.New("poison again")
			}
			return nil
		})
		retry()
		for i := 700; i < 720; i++ {
			e.api.Put(fmt.Sprintf("i%03d", i), nil)
		}
		e.settle(eng)
		e.rec.setFail(nil)
		retry()
		e.settle(eng)
		var got []string
		for _, ev := range e.rec.events() {
			got = append(got, ev.Identity)
		}
		if !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != 720 {
			t.Fatalf("%d successes, %d distinct, sorted %v", len(got), len(slices.Compact(slices.Clone(got))), slices.IsSorted(got))
		}
	})
}

// An ordering key with a newline (the default is the identity, which the API controls) does not
// end a held event's name early: once the key is released its events, and the partition's later
// changes, are delivered.
func TestG1NewlineInAnOrderingKeyDoesNotWedgeTheDrain(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		once := func(p *watukuytype.Poller) { p.Delivery.Attempts, p.Delivery.RetryHorizon = 1, -1 }
		const nl = "x\ny"
		e.rec.setFail(func(ev watukuytype.Event) error {
			if ev.Identity == nl {
				return errors.New("poison")
			}
			return nil
		})
		e.api.Put(nl, map[string]any{"n": 1})
		eng := e.engine(e.poller(once), nil)
		e.tick(eng) // created x\ny is parked: its ordering key is held
		e.api.Put(nl, map[string]any{"n": 2})
		e.clock.Advance(3 * time.Minute)
		e.tick(eng) // updated x\ny is committed into :held
		e.rec.setFail(nil)
		rows, err := eng.Parked().List(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}, "poison")
		if err != nil || len(rows) != 1 {
			t.Fatalf("parked: %v %v", rows, err)
		}
		if _, err := eng.Parked().Retry(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}, rows[0].ID); err != nil {
			t.Fatal(err)
		}
		e.api.Put("z", nil) // an unrelated change
		var errs []string
		for range 5 {
			e.clock.Advance(3 * time.Minute)
			rep := e.tick(eng)
			for _, ce := range rep.Errors {
				errs = append(errs, ce.Error())
			}
		}
		got := map[string]int{}
		for _, ev := range e.rec.events() {
			got[ev.Identity]++
		}
		if got[nl] != 2 || got["z"] != 1 {
			t.Fatalf("delivered %v, want x\\ny twice and z once; cycle errors: %.300q", got, errs)
		}
	})
}
