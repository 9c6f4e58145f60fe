package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// Adversarial review of layout 1: the delete/add flows, seeds and marks, re-sent scripts.

// statusName names a Begin outcome.
func statusName(s core.BeginStatus) string {
	return map[core.BeginStatus]string{core.BeginOK: "ok", core.BeginPaused: "paused", core.BeginNotDue: "notDue",
		core.BeginLeased: "leased", core.BeginDeleted: "deleted"}[s]
}

// beginOK begins key in mode and fails the test unless it was granted.
func beginOK(t *testing.T, s *Store, key watukuytype.Key, mode core.BeginMode) core.BeginResult {
	t.Helper()
	r, err := s.Begin(context.Background(), key, "w", 30*time.Second, mode)
	if err != nil || r.Status != core.BeginOK {
		t.Fatalf("begin %v: %+v %v", mode, r, err)
	}
	return r
}

// Liveness of partitions add: go-redis re-sends add_key.lua after a read timeout; the second
// run must not find the entry the first wrote and answer "existed" (the operator would get
// ConflictError "added meanwhile" for an add that happened, and a deleted key would stay
// deleted in its state while registered and due). add_key.lua recognises its own entry, and
// AddKey revives whatever the state says deleted.
func TestAdvL1ResentAddKeyLeavesTheKeyDeleted(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, _ := newStore(t, b)
		registerListing(t, s, "cfg")
		key := watukuytype.Key{Poller: "orders", Partition: "x"}
		addKey(t, s, key)
		deleteKey(t, s, key) // the mark lives 15 s
		b.Client.AddHook(resend{})
		fresh := watukuytype.Key{Poller: "orders", Partition: "new"}
		if existed := addKey(t, s, fresh); existed {
			t.Errorf("a re-sent add_key of a partition never seen: AddKey says existed (the operator gets ConflictError 'added meanwhile')")
		}
		r := beginOK(t, s, key, core.BeginForAdd)
		if r.State["deleted"] != "1" {
			t.Fatalf("the add's Begin did not see the deletion: %v", r.State)
		}
		existed, err := s.AddKey(ctx, r.Lease, true)
		if err != nil {
			t.Fatal(err)
		}
		deleted := b.Client.HGet(ctx, s.Key(key, "state"), "deleted").Val()
		if existed || deleted == "1" {
			t.Fatalf("a re-sent add_key: AddKey says existed=%v, the state's deleted=%q: the add of a deleted key did not revive it", existed, deleted)
		}
	})
}

// Liveness of partitions add: a process that dies between add_key.lua and the revive leaves
// the key registered and deleted in its state, and a partitions add again finishes it; so
// does an add after a delete cut short before retire_key.lua (the registry still live, the
// mark without an expiry).
func TestAdvL1AddAgainDoesNotFinishAnAddCutShort(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, clk := newStore(t, b)
		registerListing(t, s, "cfg")
		key := watukuytype.Key{Poller: "orders", Partition: "x"}
		addKey(t, s, key)
		deleteKey(t, s, key)
		r := beginOK(t, s, key, core.BeginForAdd)
		if _, err := run(ctx, s, nil, addKeyArgs{Now: s.nowArg(), Key: key, Entry: "a1"}); err != nil { // then the process dies
			t.Fatal(err)
		}
		_ = r
		clk.Advance(time.Minute) // its lease lapses
		if existed := addKey(t, s, key); existed {
			t.Errorf("add cut short, add again: existed=true (ConflictError 'added meanwhile'), the state's deleted=%q",
				b.Client.HGet(ctx, s.Key(key, "state"), "deleted").Val())
		}

		// A delete cut short before retire_key (Begin in mode delete, then the process dies).
		cfg := watukuytype.Key{Poller: "orders", Partition: "cfg"}
		beginOK(t, s, cfg, core.BeginForDelete)
		clk.Advance(time.Minute)
		r = beginOK(t, s, cfg, core.BeginForAdd)
		existed, err := s.AddKey(ctx, r.Lease, r.State["deleted"] == "1")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.End(ctx, r.Lease, core.EndRequest{NextDue: r.Now, Trigger: r.State["trig"]}); err != nil {
			t.Fatal(err)
		}
		if c, err := s.Begin(ctx, cfg, "w", time.Minute, core.BeginForCycle); existed || err != nil || c.Status != core.BeginOK {
			t.Errorf("add after a delete cut short: existed=%v; a cycle then: %s %v (the key stays deleted, its mark has no expiry: PTTL %v)",
				existed, statusName(c.Status), err, b.Client.PTTL(ctx, s.Key(cfg, "state")).Val())
		}
	})
}

// A pause that lands after a deletion's mark expired (the engine's keyOp checks the registry,
// then Inspect, then pauses: a stall of 15 s between Inspect and pause.lua lands here) writes
// paused=1 into a state without an epoch. partitions add starts the key from nothing (Begin in
// mode add drops a state without an epoch), so the key does not come back paused. (The few
// bytes stay while the key is not added back: nothing else begins it.)
func TestAdvL1PauseAfterTheMarkExpiredDoesNotComeBackWithTheAdd(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, _ := newStore(t, b)
		s.markTTL = 50 * time.Millisecond
		registerListing(t, s, "cfg")
		key := watukuytype.Key{Poller: "orders", Partition: "x"}
		addKey(t, s, key)
		deleteKey(t, s, key)
		expire(t, b, s.Key(key, "state"), s.markTTL)
		if err := s.Pause(ctx, key); err != nil { // the stalled pause lands
			t.Fatal(err)
		}
		addKey(t, s, key)
		r, err := s.Begin(ctx, key, "w", time.Minute, core.BeginForCycle)
		if err != nil || r.Status != core.BeginOK {
			t.Fatalf("after partitions add, a cycle: %s %v (want ok: the add came back paused)", statusName(r.Status), err)
		}
	})
}

// G5 / "epochs never repeat after a delete and an add" (fencing holds through the token
// anyway): partitions add (or a second delete) takes its lease on the deletion mark, whose
// epoch E+1 no high-water mark holds (they say E). The mark must not expire under that grant,
// or the key, registered by add_key.lua, is begun fresh with the seed E and gets E+1 again: a
// grant in mode add or delete keeps the mark until it ends.
func TestAdvL1G5EpochRepeatsWhenTheMarkExpiresUnderAnAdd(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, _ := newStore(t, b)
		s.markTTL = 200 * time.Millisecond
		registerListing(t, s, "cfg")
		key := watukuytype.Key{Poller: "orders", Partition: "x"}
		addKey(t, s, key)
		deleteKey(t, s, key)
		add := beginOK(t, s, key, core.BeginForAdd) // on the mark
		if b.Mini != nil {
			b.Mini.FastForward(2 * s.markTTL)
		} else {
			time.Sleep(2 * s.markTTL)
		}
		if n := b.Client.Exists(ctx, s.Key(key, "state")).Val(); n != 1 {
			t.Fatal("the mark expired under the add's lease")
		}
		if _, err := s.AddKey(ctx, add.Lease, true); err != nil {
			t.Fatal(err)
		}
		if err := s.End(ctx, add.Lease, core.EndRequest{NextDue: add.Now, Trigger: add.State["trig"]}); err != nil {
			t.Fatal(err)
		}
		c := beginOK(t, s, key, core.BeginForCycle)
		if c.Lease.Epoch <= add.Lease.Epoch {
			t.Fatalf("epoch %d after the add's %d", c.Lease.Epoch, add.Lease.Epoch)
		}
	})
}

// checkRegistry checks the registry's leaves against model (partition -> entry 'c', '-c' or
// 'a...'): every leaf in the index holds 1..100 entries (the first may be empty), each within
// [its bound, the next bound), the listing in pages of size equals the model in byte order.
func checkRegistry(t *testing.T, b redistest.Backend, s *Store, model map[string]string, size int) {
	t.Helper()
	ctx := context.Background()
	idx := s.keysKey("orders")
	bounds := b.Client.ZRange(ctx, idx, 0, -1).Val()
	if len(model) > 0 && (len(bounds) == 0 || bounds[0] != "") {
		t.Fatalf("index %q: want the first bound ''", bounds)
	}
	seen := 0
	for i, lb := range bounds {
		leaf := b.Client.HGetAll(ctx, idx+"|"+lb).Val()
		if len(leaf) > 100 || (len(leaf) == 0 && lb != "") {
			t.Fatalf("leaf %q holds %d entries", lb, len(leaf))
		}
		for p, v := range leaf {
			if p < lb || (i+1 < len(bounds) && p >= bounds[i+1]) {
				t.Fatalf("leaf %q holds %q, outside [%q, next)", lb, p, lb)
			}
			if model[p] != v && !(v[0] == 'a' && model[p] == "a") {
				t.Fatalf("leaf %q: %q=%q, model %q", lb, p, v, model[p])
			}
			seen++
		}
	}
	if seen != len(model) {
		t.Fatalf("%d entries in the leaves, model %d", seen, len(model))
	}
	want := make([]string, 0, len(model))
	for p := range model {
		want = append(want, p)
	}
	slices.Sort(want)
	if got := allKeys(t, s, "orders", size); !slices.Equal(got, want) {
		t.Fatalf("pages of %d: %d keys %v..., want %d", size, len(got), got[:min(5, len(got))], len(want))
	}
}

// Held: registrations, adds and deletes at random over a few hundred partitions (names that
// crowd the same leaves, so they split and empty again) keep the leaves' invariants, and a
// listing in pages of any size is the model's keys in byte order.
func TestAdvL1HeldRegistryLeavesUnderRandomChurn(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		s, _ := newStore(t, b)
		rng := rand.New(rand.NewPCG(1, 2))
		names := make([]string, 300)
		for i := range names {
			names[i] = fmt.Sprintf("%c%d", "aAz0._-:@"[i%9], rng.IntN(1000)) // bytes across the ASCII range
		}
		model := map[string]string{}
		ops := 800
		if b.Mini == nil {
			ops = 250
		}
		for op := range ops {
			p := names[rng.IntN(len(names))]
			key := watukuytype.Key{Poller: "orders", Partition: p}
			switch c := rng.IntN(10); {
			case c == 0: // a registration of a batch
				batch := []string{p}
				for range rng.IntN(8) {
					batch = append(batch, names[rng.IntN(len(names))])
				}
				registerListing(t, s, batch...)
				for _, q := range batch {
					if v := model[q]; v == "" || v == "a" {
						model[q] = "c"
					}
				}
			case c < 6:
				addKey(t, s, key)
				switch model[p] {
				case "":
					model[p] = "a"
				case "-c":
					model[p] = "c"
				}
			default:
				deleteKey(t, s, key)
				switch model[p] {
				case "c":
					model[p] = "-c"
				case "a":
					delete(model, p)
				}
			}
			if op%25 == 0 {
				checkRegistry(t, b, s, model, 1+rng.IntN(150))
			}
		}
		checkRegistry(t, b, s, model, 37)
	})
}

// Held: a listing that pages while registrations split the leaves it reads (new keys before,
// inside and after the cursor) lists every key that was there throughout once, in order.
func TestAdvL1HeldListingWhileLeavesSplit(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, _ := newStore(t, b)
		var first []string
		for i := range 300 {
			first = append(first, fmt.Sprintf("k%04d", i*10))
		}
		registerListing(t, s, first...)
		var got []string
		var after *string
		for page := 0; ; page++ {
			rks, err := s.ListKeys(ctx, "orders", after, 7)
			if err != nil {
				t.Fatal(err)
			}
			for _, rk := range rks {
				got = append(got, rk.Partition)
			}
			// Fill the gaps around the cursor and far from it: leaves split under the listing.
			var more []string
			for j := range 40 {
				more = append(more, fmt.Sprintf("k%04d", (page*37+j*71)%3000))
			}
			registerListing(t, s, more...)
			if len(rks) < 7 {
				break
			}
			after = &rks[len(rks)-1].Partition
		}
		for i := 1; i < len(got); i++ {
			if got[i] <= got[i-1] {
				t.Fatalf("listed %q after %q", got[i], got[i-1])
			}
		}
		for _, p := range first {
			if !slices.Contains(got, p) {
				t.Fatalf("%q, registered throughout, was skipped", p)
			}
		}
	})
}
