package watukuy

// partitions delete and add at run time: a partition added again repeats no id of its deleted
// incarnation (G2) and comes back with none of its old state.

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// A partition deleted (rows and tombstones dropped) and added again while the API holds o1 at
// its first content (A) emits o1 under a new id, and a consumer that dedupes by id follows the
// API (the control comes back at a content never emitted, C).
func TestG2PartitionDeletedAndAddedAgainGetsNewIDs(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, back := range []string{"C", "A"} {
			t.Run("back-to-"+back, func(t *testing.T) {
				e := newEnv(t, b)
				name := "readd-" + back
				l := &rawListing{items: map[string]string{}}
				eng := e.engine(e.poller(func(p *watukuytype.Poller) {
					p.Name = name
					p.Partitions = []string{"t1"}
					p.Strategy = watukuytype.SnapshotDiff
					p.ConfirmDeletes = 1
					p.Fetch = l.fetch
					p.Version = nil
					p.Fingerprint = stateFingerprint
				}), nil)
				for _, s := range []string{"A", "B"} {
					l.set("o1", fmt.Sprintf(`{"id":"o1","state":%q}`, s))
					e.settle(eng)
				}
				if err := eng.Partitions().Delete(t.Context(), watukuytype.Key{Poller: name, Partition: "t1"}); err != nil {
					t.Fatal(err)
				}
				l.set("o1", fmt.Sprintf(`{"id":"o1","state":%q}`, back))
				if err := eng.Partitions().Add(t.Context(), watukuytype.Key{Poller: name, Partition: "t1"}); err != nil {
					t.Fatal(err)
				}
				e.settle(eng)
				evs := e.rec.events()
				got, repeats := dedupingConsumer(evs)
				for _, r := range repeats {
					t.Logf("repeat: %s", r)
				}
				if got["o1"] != back {
					t.Errorf("G2: a consumer that dedupes by id holds o1 %q, the API %q (%d events, %d ids repeated)", got["o1"], back, len(evs), len(repeats))
				}
			})
		}
	})
}

// A partition added back after its deletion mark expired (nothing left of it but its poller's
// high-water marks) starts its identities' lives above the deleted partition's: o1, back at A,
// gets a new id (the control adds back while the mark lives).
func TestG2PartitionAddedBackAfterItsDeletionWasForgotten(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, forgotten := range []bool{false, true} {
			t.Run(fmt.Sprintf("mark-expired-%v", forgotten), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("readd-forgotten-%v", forgotten)
				l := &rawListing{items: map[string]string{}}
				eng := e.engine(e.poller(func(p *watukuytype.Poller) {
					p.Name = name
					p.Partitions = []string{"t1"}
					p.Strategy = watukuytype.SnapshotDiff
					p.ConfirmDeletes = 1
					p.Fetch = l.fetch
					p.Version = nil
					p.Fingerprint = stateFingerprint
				}), nil)
				ctx := t.Context()
				for _, s := range []string{"A", "B"} {
					l.set("o1", fmt.Sprintf(`{"id":"o1","state":%q}`, s))
					e.settle(eng)
				}
				if err := eng.Partitions().Delete(ctx, watukuytype.Key{Poller: name, Partition: "t1"}); err != nil {
					t.Fatal(err)
				}
				if forgotten {
					state := "wk:{" + name + "|t1}:state"
					if err := b.Client.Del(ctx, state).Err(); err != nil {
						t.Fatal(err)
					}
					if n := b.Client.Keys(ctx, "wk:{"+name+"|t1}:*").Val(); len(n) != 0 {
						t.Fatalf("left of the deleted partition: %v", n)
					}
				}
				l.set("o1", `{"id":"o1","state":"A"}`)
				if err := eng.Partitions().Add(ctx, watukuytype.Key{Poller: name, Partition: "t1"}); err != nil {
					t.Fatal(err)
				}
				e.settle(eng)
				got, repeats := dedupingConsumer(e.rec.events())
				if got["o1"] != "A" {
					t.Errorf("G2: a consumer that dedupes by id holds o1 %q, the API %q; repeats: %q", got["o1"], "A", repeats)
				}
			})
		}
	})
}

// Lives can run ahead of the clock (x deleted and created again three times in a millisecond):
// a partition deleted within those milliseconds and added again starts above them, so x's new
// "created A" repeats no id of the deleted incarnation (the control deletes a minute later).
func TestG2PartitionAddedAgainStartsAboveTheDeletedLives(t *testing.T) {
	eachLight(t, func(t *testing.T, b redistest.Backend) {
		for _, gap := range []time.Duration{time.Minute, time.Millisecond} {
			t.Run(fmt.Sprintf("deleted-%v-after", gap), func(t *testing.T) {
				e := newEnv(t, b)
				name := fmt.Sprintf("incar-%d", gap.Milliseconds())
				first, second := &changeLog{}, &changeLog{}
				var cur atomic.Pointer[changeLog]
				cur.Store(first)
				eng := e.engine(e.poller(func(p *watukuytype.Poller) {
					p.Name = name
					p.Partitions = []string{"t1"}
					p.Version = nil
					p.Fingerprint = stateFingerprint
					p.Tombstone = watukuytype.Flag("deleted")
					p.Fetch = func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
						return cur.Load().fetch(ctx, req)
					}
				}), nil)
				for range 3 {
					first.addRaw(`{"id":"x","state":"A"}`)
					first.addRaw(`{"id":"x","deleted":true}`)
				}
				e.tick(eng) // every page in one cycle, at one instant of the clock
				if n := len(e.rec.events()); n != 6 {
					t.Fatalf("the first cycle delivered %d events, want 6", n)
				}
				ctx := t.Context()
				e.clock.Advance(gap)
				if err := eng.Partitions().Delete(ctx, watukuytype.Key{Poller: name, Partition: "t1"}); err != nil {
					t.Fatal(err)
				}
				second.addRaw(`{"id":"x","state":"A"}`)
				cur.Store(second)
				if err := eng.Partitions().Add(ctx, watukuytype.Key{Poller: name, Partition: "t1"}); err != nil {
					t.Fatal(err)
				}
				e.settle(eng)
				got, repeats := dedupingConsumer(e.rec.events())
				if got["x"] != "A" || len(repeats) > 0 {
					t.Errorf("G2: a consumer that dedupes by id holds x %q, the API %q; repeats: %q", got["x"], "A", repeats)
				}
			})
		}
	})
}

// pauseRace runs before the store's Pause: the delete that lands between keyOp's checks and
// pause.lua.
type pauseRace struct {
	core.Store
	before func()
}

func (p *pauseRace) Pause(ctx context.Context, key watukuytype.Key) error {
	if p.before != nil {
		p.before()
		p.before = nil
	}
	return p.Store.Pause(ctx, key)
}

// A pause racing a partitions delete whose mark then expired writes paused=1 into a key without
// state; partitions add does not bring the partition back paused. On miniredis only: its clock
// expires the mark at once.
func TestPauseRacingADeleteDoesNotComeBackWithTheAdd(t *testing.T) {
	b := redistest.Miniredis(t)
	e := newEnv(t, b)
	ops := e.engine(e.poller(), nil)
	ctx := t.Context()
	if err := ops.Partitions().Add(ctx, watukuytype.Key{Poller: "orders", Partition: "t1"}); err != nil {
		t.Fatal(err)
	}
	race := &pauseRace{before: func() {
		if err := ops.Partitions().Delete(ctx, watukuytype.Key{Poller: "orders", Partition: "t1"}); err != nil {
			t.Fatal(err)
		}
		b.Mini.FastForward(16 * time.Second) // the deletion mark expires
	}}
	slow := e.engine(e.poller(), func(s core.Store) core.Store { race.Store = s; return race })
	perr := slow.Pause(ctx, watukuytype.Key{Poller: "orders", Partition: "t1"})
	if err := ops.Partitions().Add(ctx, watukuytype.Key{Poller: "orders", Partition: "t1"}); err != nil {
		t.Fatal(err)
	}
	ki, err := ops.Inspect(ctx, watukuytype.Key{Poller: "orders", Partition: "t1"})
	if err != nil || ki.Paused {
		t.Fatalf("the partition deleted and added back: paused=%v status %s %v (the pause racing the delete answered %v)", ki.Paused, ki.Status, err, perr)
	}
}
