package watukuy

// One named test per guarantee (docs/design.md, Guarantees; G8 is in http_test.go). Each runs on
// miniredis and on a private redis-server.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

func putN(e *env, n int) {
	for i := 0; i < n; i++ {
		e.api.Put(fmt.Sprintf("o%02d", i), map[string]any{"total": i})
	}
}

func ids(evs []watukuytype.Event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.ID)
	}
	return out
}

// G1: events committed by an instance that dies before delivering them (K3), or after
// delivering but before acking (K4), are delivered by the next instance.
func TestG1NoLoss(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 12)
		a := e.engine(e.poller(), faulty(&faultyStore{dieCommit: 1}))
		e.tick(a) // commits the first page of 10, then dies
		if got := len(e.rec.events()); got != 0 {
			t.Fatalf("the dead instance delivered %d events", got)
		}
		// A second instance takes over after the lease and claim timeout pass; its first
		// delivery dies before the ack.
		bb := e.engine(e.poller(), faulty(&faultyStore{failAck: 1}))
		e.clock.Advance(3 * time.Minute)
		e.tick(bb)
		if got := len(e.rec.events()); got == 0 {
			t.Fatal("the second instance delivered nothing")
		}
		c := e.engine(e.poller(), nil)
		e.settle(c)
		delivered := map[string]bool{}
		for _, ev := range e.rec.events() {
			delivered[ev.Identity+"@"+ev.Version] = true
		}
		for _, ch := range e.api.Changes() {
			if !delivered[fmt.Sprintf("%s@%d", ch.ID, ch.Version)] {
				t.Errorf("change %s v%d was never delivered", ch.ID, ch.Version)
			}
		}
		ki, _ := c.Inspect(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""})
		if ki.OutboxPending != 0 {
			t.Errorf("outbox still holds %d entries", ki.OutboxPending)
		}
	})
}

// G2: the same change always has the same id: on redelivery and after the snapshot is cleared.
func TestG2DeterministicIDs(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 5)
		a := e.engine(e.poller(), faulty(&faultyStore{failAck: 1}))
		e.tick(a) // delivered, ack lost: redelivered below
		first := ids(e.rec.events())
		if len(first) != 5 {
			t.Fatalf("first delivery: %d events", len(first))
		}
		c := e.engine(e.poller(), nil)
		e.settle(c)
		redelivered := ids(e.rec.events()[5:])
		// Order across identities is free (G4 orders per key only): compare as sets.
		slices.Sort(first)
		slices.Sort(redelivered)
		if !reflect.DeepEqual(first, redelivered) {
			t.Fatalf("redelivery changed ids:\n%v\n%v", first, redelivered)
		}
		// Clear cursor and snapshot (what reset-cursor --clear-snapshot does): re-emitted as
		// created with the same ids.
		items := c.store.Key(watukuytype.Key{Poller: "orders"}, "items")
		state := c.store.Key(watukuytype.Key{Poller: "orders"}, "state")
		if err := b.Client.Del(t.Context(), items).Err(); err != nil {
			t.Fatal(err)
		}
		if err := b.Client.HDel(t.Context(), state, "cursor.live").Err(); err != nil {
			t.Fatal(err)
		}
		n := len(e.rec.events())
		e.settle(c)
		again := ids(e.rec.events()[n:])
		slices.Sort(again)
		if !reflect.DeepEqual(first, again) {
			t.Fatalf("re-emission after clearing the snapshot changed ids:\n%v\n%v", first, again)
		}
	})
}

// G3: the cursor never moves past a page whose events are not committed with it.
func TestG3NoSkippedChange(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 15)
		fs := &faultyStore{failCommt: 1}
		a := e.engine(e.poller(), faulty(fs))
		e.tick(a) // dies after the fetch, before the commit (K2)
		state := a.store.Key(watukuytype.Key{Poller: "orders"}, "state")
		if cur := b.Client.HGet(t.Context(), state, "cursor.live").Val(); cur != "" {
			t.Fatalf("cursor moved to %q without its page", cur)
		}
		outbox := a.store.Key(watukuytype.Key{Poller: "orders"}, "outbox")
		if n := b.Client.XLen(t.Context(), outbox).Val(); n != 0 {
			t.Fatalf("outbox has %d entries without a commit", n)
		}
		c := e.engine(e.poller(), nil)
		e.settle(c)
		for i := 0; i < 15; i++ {
			e.api.Put(fmt.Sprintf("o%02d", i), map[string]any{"total": -i})
			e.api.Put(fmt.Sprintf("n%02d", i), nil)
		}
		e.settle(c)
		if got, want := e.rec.final(), e.api.Final(); len(got) != len(want) {
			t.Fatalf("delivered %d identities, API has %d", len(got), len(want))
		} else {
			for id, v := range want {
				if got[id] != fmt.Sprint(v) {
					t.Errorf("%s: delivered version %q, API has %d", id, got[id], v)
				}
			}
		}
		// Every cursor stored corresponds to committed events: the outbox drained to zero and
		// every change in the ground-truth log was delivered.
		seen := map[string]bool{}
		for _, ev := range e.rec.events() {
			seen[ev.Identity+"@"+ev.Version] = true
		}
		for _, ch := range e.api.Changes() {
			if !seen[fmt.Sprintf("%s@%d", ch.ID, ch.Version)] {
				t.Errorf("skipped change %s v%d", ch.ID, ch.Version)
			}
		}
	})
}

// G4: per ordering key, events are acked in commit order; a poison event holds the later
// events of its key until retried (or discarded), while other keys flow.
func TestG4PerKeyOrder(t *testing.T) {
	for _, action := range []string{"retry", "discard"} {
		t.Run(action, func(t *testing.T) {
			redistest.Each(t, func(t *testing.T, b redistest.Backend) {
				e := newEnv(t, b)
				e.api.Put("a", nil)
				e.api.Put("b", nil)
				e.rec.setFail(func(ev watukuytype.Event) error {
					if ev.Identity == "a" && ev.Version == "1" {
						return errors.New("downstream rejects a@1")
					}
					return nil
				})
				eng := e.engine(e.poller(func(p *watukuytype.Poller) { p.Delivery.Attempts, p.Delivery.RetryHorizon = 2, -1 }), nil)
				e.tick(eng)
				// a@2 and a@3 are observed in separate cycles, so both are committed.
				e.api.Put("a", nil)
				e.api.Put("b", nil)
				e.clock.Advance(3 * time.Minute)
				e.tick(eng)
				e.api.Put("a", nil)
				e.settle(eng)
				for _, ev := range e.rec.events() {
					if ev.Identity == "a" {
						t.Fatalf("a@%s was delivered while a@1 is parked", ev.Version)
					}
				}
				if got := len(e.rec.events()); got != 2 {
					t.Fatalf("key b should flow: %d events", got)
				}
				parked, err := eng.Parked().List(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}, "poison")
				if err != nil || len(parked) != 1 || parked[0].OrderingKey != "a" || parked[0].Attempts != 2 {
					t.Fatalf("parked: %+v %v", parked, err)
				}
				if ki, _ := eng.Inspect(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}); ki.Held != 2 || ki.Parked != 1 {
					t.Fatalf("inspect: held %d parked %d", ki.Held, ki.Parked)
				}
				e.rec.setFail(nil)
				var n int
				if action == "retry" {
					n, err = eng.Parked().Retry(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}, parked[0].ID)
				} else {
					n, err = eng.Parked().Discard(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}, parked[0].ID)
				}
				if err != nil || n != 1 {
					t.Fatalf("%s: n=%d err=%v", action, n, err)
				}
				e.settle(eng)
				var versions []string
				for _, ev := range e.rec.events() {
					if ev.Identity == "a" {
						versions = append(versions, ev.Version)
					}
				}
				want := []string{"1", "2", "3"}
				if action == "discard" {
					want = []string{"2", "3"}
				}
				if !slices.Equal(versions, want) {
					t.Fatalf("a delivered in order %v, want %v", versions, want)
				}
				if ki, _ := eng.Inspect(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}); ki.Held != 0 || ki.Parked != 0 || ki.OutboxPending != 0 {
					t.Fatalf("after %s: %+v", action, ki)
				}
			})
		})
	}
}

// G5: at most one instance mutates a key; a write with a stale epoch (another instance took
// over after the lease expired during a stop-the-world pause) fails with LEASE_LOST and
// leaves no trace.
func TestG5Fencing(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 3)
		entered, release := make(chan struct{}), make(chan struct{})
		var first atomic.Bool
		e.api.OnFetch(func(ctx context.Context, req watukuytype.FetchRequest) error {
			if first.CompareAndSwap(false, true) {
				close(entered)
				<-release
			}
			return nil
		})
		fa, fb := &faultyStore{}, &faultyStore{}
		a := e.engine(e.poller(), faulty(fa))
		bb := e.engine(e.poller(), faulty(fb))
		var repA watukuytype.TickReport
		done := make(chan struct{})
		go func() { repA = e.tick(a); close(done) }()
		<-entered // a holds the lease and is inside its fetch

		// Race: while a's lease is live, b cannot take the key.
		if err := a.core.Trigger(t.Context(), watukuytype.Key{Poller: "orders"}); err != nil {
			t.Fatal(err)
		}
		if rep := e.tick(bb); rep.SkippedLeased != 1 || fb.commitCount() != 0 {
			t.Fatalf("b ran while a held the lease: %+v commits %d", rep, fb.commitCount())
		}

		// Stop-the-world: a's lease expires; b takes over and commits.
		e.clock.Advance(31 * time.Second)
		if err := a.core.Trigger(t.Context(), watukuytype.Key{Poller: "orders"}); err != nil {
			t.Fatal(err)
		}
		if rep := e.tick(bb); rep.Ran != 1 || fb.commitCount() != 1 {
			t.Fatalf("b did not take over: %+v", rep)
		}
		before := b.Dump(t)
		close(release)
		<-done
		if len(repA.Errors) != 1 || !errors.As(repA.Errors[0], new(*watukuytype.LeaseLostError)) {
			t.Fatalf("a's stale commit: %+v", repA.Errors)
		}
		if fa.commitCount() != 0 {
			t.Fatal("a's stale commit was accepted")
		}
		if after := b.Dump(t); !reflect.DeepEqual(before, after) {
			for k := range after {
				if before[k] != after[k] {
					t.Errorf("key %s changed:\n before %s\n after  %s", k, before[k], after[k])
				}
			}
		}
		if n := len(e.rec.events()); n != 3 {
			t.Fatalf("delivered %d events, want 3 (b's only)", n)
		}
	})
}

// G6: deleted events only come from a complete listing (in one cycle or over several): never
// from the part of a listing a cycle read, a failed page, or a 304.
func TestG6NoFalseDeletes(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 12)
		var mu sync.Mutex
		mode := ""
		listing := e.api.Listing(5)
		fetch := func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
			mu.Lock()
			m := mode
			mu.Unlock()
			switch {
			case m == "304":
				return watukuytype.Page{NotModified: true}, nil
			case m == "fail" && req.Cursor == "5":
				return watukuytype.Page{}, errors.New("HTTP 502")
			}
			return listing(ctx, req)
		}
		p := e.poller(func(p *watukuytype.Poller) { p.Strategy = watukuytype.SnapshotDiff; p.Fetch = fetch })
		eng := e.engine(p, nil)
		e.settle(eng)
		if n := len(e.rec.events()); n != 12 {
			t.Fatalf("initial listing: %d events", n)
		}
		e.api.Delete("o00")
		e.api.Delete("o11")
		for _, m := range []string{"304", "fail"} {
			mu.Lock()
			mode = m
			mu.Unlock()
			e.clock.Advance(3 * time.Minute)
			e.tick(eng)
			if n := len(e.rec.events()); n != 12 {
				t.Fatalf("mode %s emitted %d events: %v", m, n-12, e.rec.events()[12:])
			}
		}
		mu.Lock()
		mode = ""
		mu.Unlock()
		// The failed page ended the listing: none goes on from it (the next starts over). A
		// listing longer than a cycle goes on from where it stopped, and completes.
		listings := func(eng *Engine) []watukuytype.ListingProgress {
			ki, err := eng.Inspect(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""})
			if err != nil {
				t.Fatal(err)
			}
			return ki.Listings
		}
		if l := listings(eng); len(l) != 0 {
			t.Fatalf("a listing stopped by a failed page: %+v", l)
		}
		trunc := e.engine(e.poller(func(p *watukuytype.Poller) {
			p.Strategy = watukuytype.SnapshotDiff
			p.Fetch = fetch
			p.MaxPagesPerCycle = 1
		}), nil)
		for i, want := range []int{1, 0} { // its first page; then completed
			e.clock.Advance(3 * time.Minute)
			if rep := trunc.core.RunCycle(t.Context(), watukuytype.Key{Poller: "orders"}); rep.Outcome != watukuytype.Ran || rep.Err != nil || len(e.rec.events()) != 12 {
				t.Fatalf("truncated listing, cycle %d: %+v, %d events", i, rep, len(e.rec.events()))
			}
			if l := listings(trunc); len(l) != want {
				t.Fatalf("truncated listing, cycle %d: listings %+v", i, l)
			}
		}
		e.settle(eng)
		var deleted []string
		for _, ev := range e.rec.events()[12:] {
			if ev.Type != watukuytype.Deleted {
				t.Errorf("unexpected %s %s", ev.Type, ev.Identity)
			}
			deleted = append(deleted, ev.Identity)
		}
		slices.Sort(deleted)
		if !slices.Equal(deleted, []string{"o00", "o11"}) {
			t.Fatalf("deleted %v, want o00 and o11", deleted)
		}
	})
}

// G7: an item re-observed with the same version and fingerprint produces no event; a change
// in a field the fingerprint ignores is not a change.
func TestG7Suppression(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		var mu sync.Mutex
		items := map[string]map[string]any{
			"x": {"id": "x", "status": "open", "last_seen_at": 1},
			"y": {"id": "y", "status": "open", "last_seen_at": 1},
		}
		fetch := func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
			mu.Lock()
			defer mu.Unlock()
			var p watukuytype.Page
			for _, k := range []string{"x", "y"} {
				raw, _ := json.Marshal(items[k])
				p.Items = append(p.Items, raw)
			}
			return p, nil
		}
		fingerprint := func(item json.RawMessage) ([]byte, error) {
			var m map[string]any
			if err := json.Unmarshal(item, &m); err != nil {
				return nil, err
			}
			return []byte(fmt.Sprint(m["status"])), nil
		}
		eng := e.engine(e.poller(func(p *watukuytype.Poller) { p.Fetch = fetch; p.Version = nil; p.Fingerprint = fingerprint }), nil)
		for i := 0; i < 3; i++ {
			e.clock.Advance(3 * time.Minute)
			e.tick(eng)
		}
		if n := len(e.rec.events()); n != 2 {
			t.Fatalf("re-observation emitted: %d events", n)
		}
		mu.Lock()
		items["x"]["last_seen_at"] = 2
		mu.Unlock()
		e.settle(eng)
		if n := len(e.rec.events()); n != 2 {
			t.Fatalf("an ignored field emitted: %d events", n)
		}
		mu.Lock()
		items["y"]["status"] = "paid"
		mu.Unlock()
		e.settle(eng)
		evs := e.rec.events()
		if len(evs) != 3 || evs[2].Type != watukuytype.Updated || evs[2].Identity != "y" {
			t.Fatalf("a real change: %+v", evs)
		}
	})
}

// G9: a cycle delivers the key's pending outbox before it sends any request.
func TestG9DrainBeforeFetch(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		putN(e, 6)
		var mu sync.Mutex
		var trace []string
		e.api.OnFetch(func(ctx context.Context, req watukuytype.FetchRequest) error {
			mu.Lock()
			trace = append(trace, "fetch")
			mu.Unlock()
			return nil
		})
		e.rec.setFail(func(ev watukuytype.Event) error {
			mu.Lock()
			trace = append(trace, "deliver "+ev.Identity)
			mu.Unlock()
			return nil
		})
		a := e.engine(e.poller(), faulty(&faultyStore{dieCommit: 1}))
		e.tick(a) // commits 6 events and dies before delivering them
		putN(e, 3)
		mu.Lock()
		trace = nil
		mu.Unlock()
		c := e.engine(e.poller(), nil)
		e.clock.Advance(3 * time.Minute)
		e.tick(c)
		mu.Lock()
		defer mu.Unlock()
		first := slices.Index(trace, "fetch")
		if first != 6 {
			t.Fatalf("the first request came at step %d, want after the 6 pending deliveries: %v", first, trace)
		}
	})
}

// G4 across a crash: a newer event of a held ordering key that a dying instance committed but
// never delivered waits in the outbox; a retry of the parked event puts it after the parked one.
func TestG4RetryAfterCrashKeepsOrder(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newEnv(t, b)
		e.api.Put("a", nil)
		e.rec.setFail(func(ev watukuytype.Event) error {
			if ev.Version == "1" {
				return errors.New("downstream rejects a@1")
			}
			return nil
		})
		p := e.poller(func(p *watukuytype.Poller) { p.Delivery.Attempts, p.Delivery.RetryHorizon = 1, -1 })
		first := e.engine(p, nil)
		e.tick(first) // a@1 parked, "a" held
		e.api.Put("a", nil)
		dying := e.engine(p, faulty(&faultyStore{dieCommit: 1}))
		e.clock.Advance(3 * time.Minute)
		e.tick(dying) // commits a@2, dies before delivering it
		e.rec.setFail(nil)
		next := e.engine(p, nil)
		e.clock.Advance(3 * time.Minute) // past the dead instance's lease
		parked, err := next.Parked().List(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}, "poison")
		if err != nil || len(parked) != 1 {
			t.Fatalf("parked: %v %v", parked, err)
		}
		if _, err := next.Parked().Retry(t.Context(), watukuytype.Key{Poller: "orders", Partition: ""}, parked[0].ID); err != nil {
			t.Fatal(err)
		}
		e.settle(next)
		var versions []string
		for _, ev := range e.rec.events() {
			versions = append(versions, ev.Version)
		}
		if !slices.Equal(versions, []string{"1", "2"}) {
			t.Fatalf("a delivered in order %v, want [1 2]", versions)
		}
	})
}
