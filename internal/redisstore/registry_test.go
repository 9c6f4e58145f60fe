package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// registerListing registers poller orders and its config keys (parts; none: the unpartitioned
// key), as core's registration does.
func registerListing(t testing.TB, s *Store, parts ...string) {
	t.Helper()
	var keys []watukuytype.Key
	for _, p := range parts {
		keys = append(keys, watukuytype.Key{Poller: "orders", Partition: p})
	}
	if len(parts) == 0 {
		keys = append(keys, watukuytype.Key{Poller: "orders"})
	}
	if err := s.Register(context.Background(), map[string][]byte{"orders": []byte(`{"poller":"orders"}`)}, keys); err != nil {
		t.Fatal(err)
	}
}

// addKey runs partitions add of key, as core does: under the key's lease.
func addKey(t *testing.T, s *Store, key watukuytype.Key) (existed bool) {
	t.Helper()
	ctx := context.Background()
	r, err := s.Begin(ctx, key, "op", 30*time.Second, core.BeginForAdd)
	if err != nil || r.Status != core.BeginOK {
		t.Fatalf("begin add: %+v, %v", r, err)
	}
	existed, err = s.AddKey(ctx, r.Lease, r.State["deleted"] == "1")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.End(ctx, r.Lease, core.EndRequest{NextDue: r.Now, Trigger: r.State["trig"]}); err != nil {
		t.Fatal(err)
	}
	return existed
}

// entryOf is key's registry entry, found false when it has none.
func entryOf(t *testing.T, s *Store, key watukuytype.Key) (core.RegEntry, bool) {
	t.Helper()
	_, e, found, err := s.Lookup(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return e, found
}

// allKeys pages through poller's registry with pages of n keys.
func allKeys(t *testing.T, s *Store, poller string, n int) []string {
	t.Helper()
	var out []string
	var after *string
	for pages := 0; ; pages++ {
		page, err := s.ListKeys(context.Background(), poller, after, n)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > n || pages > 100_000 {
			t.Fatalf("a page of %d keys, limit %d", len(page), n)
		}
		for _, rk := range page {
			out = append(out, rk.Partition)
		}
		if len(page) < n {
			return out
		}
		after = &page[len(page)-1].Partition
	}
}

// The registry of a poller keeps its keys in leaves of at most REG_LEAF_MAX (100) entries, in
// partition order across leaves: registering 1,000 keys in an order that is not theirs splits
// leaves as they fill, every key is found, pages of any size list each key once in order,
// and removing keys empties and drops leaves until nothing of the registry is left.
func TestRegistryLeaves(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, _ := newStore(t, b)
		const n = 1000
		parts := make([]string, n)
		for i := range parts {
			parts[i] = fmt.Sprintf("t%d", (i*7919)%n) // every key once, out of order
		}
		for from := 0; from < n; from += 250 { // in batches, as several registrations would
			registerListing(t, s, parts[from:from+250]...)
		}
		want := slices.Sorted(slices.Values(parts))
		for _, size := range []int{1, 7, 100, 101, 1000, 5000} {
			if got := allKeys(t, s, "orders", size); !slices.Equal(got, want) {
				t.Fatalf("pages of %d: %d keys, first %v; want %d in order", size, len(got), got[:min(5, len(got))], n)
			}
		}
		leaves := b.Client.ZRange(ctx, s.keysKey("orders"), 0, -1).Val()
		if len(leaves) < n/100 || leaves[0] != "" {
			t.Fatalf("%d leaves, first bound %q: want at least %d, the first bound ''", len(leaves), leaves[0], n/100)
		}
		for _, lb := range leaves {
			if size := b.Client.HLen(ctx, s.keysKey("orders")+"|"+lb).Val(); size > 100 || size == 0 {
				t.Fatalf("leaf %q holds %d entries, want 1..100", lb, size)
			}
		}
		for _, p := range parts {
			if e, found := entryOf(t, s, watukuytype.Key{Poller: "orders", Partition: p}); !found || e.Source != "config" {
				t.Fatalf("key %s: %+v %v", p, e, found)
			}
		}
		if _, found := entryOf(t, s, watukuytype.Key{Poller: "orders", Partition: "t5000"}); found {
			t.Fatal("an unregistered key was found")
		}
		after := "t5"
		if page, err := s.ListKeys(ctx, "orders", &after, 3); err != nil || len(page) != 3 || page[0].Partition != "t50" {
			t.Fatalf("the page after t5: %+v %v, want t50 first", page, err)
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

// Registrations, adds and deletes at random over a few hundred partitions (names that crowd the
// same leaves, so they split and empty again) keep the leaves' invariants, and a listing in
// pages of any size is the model's keys in byte order.
func TestRegistryLeavesUnderRandomChurn(t *testing.T) {
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

// A listing that pages while registrations split the leaves it reads (new keys before, inside
// and after the cursor) lists every key that was there throughout once, in order.
func TestListKeysWhileLeavesSplit(t *testing.T) {
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

// Forgetting keys (a delete of added keys) empties leaves, which leave the index; the last
// key takes the index with it: nothing of the poller's registry stays.
func TestRegistryForgetsToNothing(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, _ := newStore(t, b)
		registerListing(t, s, "0seed") // before every added key: in the first leaf
		const n = 450
		for i := range n {
			addKey(t, s, watukuytype.Key{Poller: "orders", Partition: fmt.Sprintf("a%03d", i)})
		}
		deleteKey(t, s, watukuytype.Key{Poller: "orders", Partition: "0seed"}) // a config key: stays, deleted
		for i := range n {
			deleteKey(t, s, watukuytype.Key{Poller: "orders", Partition: fmt.Sprintf("a%03d", i)})
			if got := allKeys(t, s, "orders", 37); len(got) != n-i {
				t.Fatalf("after %d forgotten, %d keys listed, want %d", i+1, len(got), n-i)
			}
		}
		if got := allKeys(t, s, "orders", 10); !slices.Equal(got, []string{"0seed"}) {
			t.Fatalf("left: %v", got)
		}
		leaves := b.Client.ZRange(ctx, s.keysKey("orders"), 0, -1).Val()
		if !slices.Equal(leaves, []string{""}) {
			t.Fatalf("leaves left %v, want the first only", leaves)
		}
	})
}

// Registering config keys: a new key is registered and due; a key added with partitions add
// becomes a config key; a deleted config key stays deleted and out of the due set; keys a
// later registration leaves out stay registered.
func TestRegisterConfigKeys(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, _ := newStore(t, b)
		key := func(p string) watukuytype.Key { return watukuytype.Key{Poller: "orders", Partition: p} }
		registerListing(t, s, "a", "b")
		if existed := addKey(t, s, key("c")); existed {
			t.Fatal("c existed")
		}
		if e, _ := entryOf(t, s, key("c")); e.Source != "cli" || e.AddedAt.IsZero() {
			t.Fatalf("an added key's entry: %+v", e)
		}
		if existed := addKey(t, s, key("b")); !existed {
			t.Fatal("an add of the config key b did not find it")
		}
		deleteKey(t, s, key("a"))
		registerListing(t, s, "a", "c") // a stays deleted, c becomes a config key, b stays
		if e, found := entryOf(t, s, key("a")); !found || !e.Deleted {
			t.Fatalf("the deleted a after a registration: %+v %v", e, found)
		}
		if err := b.Client.ZScore(ctx, s.DueKey("orders"), key("a").String()).Err(); !errors.Is(err, redis.Nil) {
			t.Fatalf("the deleted a is due: %v", err)
		}
		if e, _ := entryOf(t, s, key("c")); e.Source != "config" {
			t.Fatalf("c after the config lists it: %+v", e)
		}
		if got := allKeys(t, s, "orders", 10); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Fatalf("keys %v", got)
		}
		// partitions add brings the deleted config key back, a config key again.
		addKey(t, s, key("a"))
		if e, _ := entryOf(t, s, key("a")); e.Source != "config" || e.Deleted {
			t.Fatalf("a added back: %+v", e)
		}
		if err := b.Client.ZScore(ctx, s.DueKey("orders"), key("a").String()).Err(); err != nil {
			t.Fatalf("a added back is not due: %v", err)
		}
	})
}

// partitions delete leaves bounded state: an added key is forgotten (no registry entry, no due
// entry), and once its deletion mark expires nothing of it is left in Redis; a config key
// stays registered, deleted. A stale Begin within the mark finds it deleted; after it, the
// registry refuses it, and a trigger writes nothing.
func TestDeleteLeavesBoundedState(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, _ := newStore(t, b)
		s.markTTL = 50 * time.Millisecond
		registerListing(t, s, "cfg")
		added := watukuytype.Key{Poller: "orders", Partition: "x"}
		addKey(t, s, added)
		deleteKey(t, s, added)
		if _, found := entryOf(t, s, added); found {
			t.Fatal("a deleted added key is still registered")
		}
		if r, err := s.Begin(ctx, added, "stale", time.Minute, core.BeginForCycle); err != nil || r.Status != core.BeginDeleted {
			t.Fatalf("a stale cycle within the mark: %+v %v", r, err)
		}
		expire(t, b, s.Key(added, "state"), s.markTTL)
		if n := b.Client.Exists(ctx, s.Key(added, "state")).Val(); n != 0 {
			t.Fatal("the mark did not expire")
		}
		if err := s.Trigger(ctx, added); !errors.Is(err, core.ErrKeyDeleted) { // a trigger racing the delete writes nothing
			t.Fatalf("a trigger of the forgotten key: %v, want ErrKeyDeleted", err)
		}
		if r, err := s.Begin(ctx, added, "stale", time.Minute, core.BeginForCycle); err != nil || r.Status != core.BeginDeleted {
			t.Fatalf("a stale cycle after the mark: %+v %v", r, err)
		}
		if got := b.Client.Keys(ctx, s.prefix+":{orders|x}:*").Val(); len(got) != 0 {
			t.Fatalf("left of the deleted key: %v", got)
		}
		cfg := watukuytype.Key{Poller: "orders", Partition: "cfg"}
		deleteKey(t, s, cfg)
		expire(t, b, s.Key(cfg, "state"), s.markTTL)
		if r, err := s.Begin(ctx, cfg, "stale", time.Minute, core.BeginForOp); err != nil || r.Status != core.BeginDeleted {
			t.Fatalf("an operation on the deleted config key after its mark: %+v %v", r, err)
		}
		if e, found := entryOf(t, s, cfg); !found || !e.Deleted {
			t.Fatalf("the deleted config key: %+v %v", e, found)
		}
	})
}

// expire waits out a key's time to live: miniredis' clock is moved, a real server waited for.
func expire(t *testing.T, b redistest.Backend, key string, ttl time.Duration) {
	t.Helper()
	if b.Mini != nil {
		b.Mini.FastForward(ttl + time.Millisecond)
		return
	}
	deadline := time.Now().Add(ttl + 5*time.Second)
	for b.Client.Exists(context.Background(), key).Val() == 1 && time.Now().Before(deadline) {
		time.Sleep(ttl / 5)
	}
}

// A partition deleted and added back (or deleted, forgotten and begun again) never repeats an
// epoch, a life or an outbox id of the deleted one: they start above the poller's high-water
// marks, which each delete raises. The marks are one hash field per poller.
func TestDeletedKeysHighWaterMarks(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, clk := newStore(t, b)
		s.markTTL = 50 * time.Millisecond
		key := watukuytype.Key{Poller: "orders", Partition: "x"}
		addKey(t, s, key)
		var epoch int64
		var last string
		for range 5 { // epochs well past the first grant's
			r, err := s.Begin(ctx, key, "w", time.Minute, core.BeginForCycle)
			if err != nil || r.Status != core.BeginOK {
				t.Fatalf("begin: %+v %v", r, err)
			}
			epoch = r.Lease.Epoch
			res, err := s.CommitPoll(ctx, r.Lease, core.Commit{Events: []core.OutboxEvent{{ID: "e", OrderingKey: "o", Envelope: []byte(`{}`)}},
				Tombstones: []core.Tombstone{{Identity: "i", Gen: clk.Now().UnixMilli() + 1e6}}, TombstoneRetention: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			last = res.StreamIDs[0]
			if err := s.End(ctx, r.Lease, core.EndRequest{NextDue: clk.Now()}); err != nil {
				t.Fatal(err)
			}
		}
		life := clk.Now().UnixMilli() + 1e6 // the highest life given, ahead of the clock
		deleteKey(t, s, key)
		expire(t, b, s.Key(key, "state"), s.markTTL)
		addKey(t, s, key)
		r, err := s.Begin(ctx, key, "w", time.Minute, core.BeginForCycle)
		if err != nil || r.Status != core.BeginOK {
			t.Fatalf("begin after the add: %+v %v", r, err)
		}
		if r.Lease.Epoch <= epoch {
			t.Fatalf("epoch %d after the delete, the deleted key reached %d", r.Lease.Epoch, epoch)
		}
		if inc, _ := strconv.ParseInt(r.State["incarnation"], 10, 64); inc <= life {
			t.Fatalf("incarnation %d, the deleted key gave life %d", inc, life)
		}
		res, err := s.CommitPoll(ctx, r.Lease, core.Commit{Events: []core.OutboxEvent{{ID: "e", OrderingKey: "o", Envelope: []byte(`{}`)}}})
		if err != nil {
			t.Fatal(err)
		}
		if !streamLess(last, res.StreamIDs[0]) {
			t.Fatalf("outbox id %s after the delete, the deleted key gave %s", res.StreamIDs[0], last)
		}
		marks := b.Client.HGetAll(ctx, s.retiredKey()).Val()
		var markEpoch, markFloor int64
		if _, err := fmt.Sscanf(marks["orders"], "%d %d", &markEpoch, &markFloor); err != nil || len(marks) != 1 || markEpoch <= epoch || markFloor <= life {
			t.Fatalf("high-water marks %v, want one field for orders above epoch %d and life %d", marks, epoch, life)
		}
	})
}

// A pause checks the deletion mark in the script that writes it: a key deleted since the
// engine looked takes no pause (partitions add would bring it back paused).
func TestPauseRefusesDeletedKey(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, _ := newStore(t, b)
		key := watukuytype.Key{Poller: "orders", Partition: "a"}
		registerListing(t, s, "a")
		if err := s.Pause(ctx, key); err != nil {
			t.Fatal(err)
		}
		if b.Client.HGet(ctx, s.Key(key, "state"), "paused").Val() != "1" {
			t.Fatal("a live key was not paused")
		}
		deleteKey(t, s, key)
		if err := s.Pause(ctx, key); !errors.Is(err, core.ErrKeyDeleted) {
			t.Fatalf("pause of a deleted key: %v, want core.ErrKeyDeleted", err)
		}
		if v := b.Client.HGet(ctx, s.Key(key, "state"), "paused").Val(); v != "" {
			t.Fatalf("a deleted key holds paused %q", v)
		}
	})
}

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

// partitions add through a re-sent add_key.lua (go-redis after a read timeout): the second run
// recognises the entry the first wrote, so the add is not a ConflictError "added meanwhile",
// and AddKey revives a key its state says deleted.
func TestResentAddKeyRecognisesItsOwnEntry(t *testing.T) {
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

// A partitions add cut short (the process dies between add_key.lua and the revive) is finished
// by the next add, and so is an add after a delete cut short before retire_key.lua (the
// registry still live, the mark without an expiry): the key polls again.
func TestAddAgainFinishesAnAddCutShort(t *testing.T) {
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

// A pause that lands after a deletion's mark expired writes paused=1 into a state without an
// epoch; partitions add starts the key from nothing (Begin in mode add drops such a state), so
// the key does not come back paused.
func TestPauseAfterTheMarkExpiredDoesNotComeBackWithTheAdd(t *testing.T) {
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

// G5: partitions add (or a second delete) takes its lease on the deletion mark, whose epoch E+1
// no high-water mark holds; the mark lasts until that grant ends, or the key would be begun
// fresh from the seed E and get E+1 again.
func TestG5MarkLastsUntilTheAddEnds(t *testing.T) {
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

// A key's first Begin reads its seed (its poller's high-water marks and its registry entry)
// in the same script on one server: one script call, and a key the registry does not hold is
// answered deleted by that one. On a cluster the registry lives in another slot: the Begin is
// answered fresh, the registry read, and the key begun again, three calls.
func TestFirstBeginReadsItsSeedInItsOwnScript(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		s, _ := newStore(t, b)
		registerListing(t, s, "a", "b")
		calls := &scriptCalls{}
		b.Client.AddHook(calls)
		want := int64(1)
		if _, cluster := b.Client.(*redis.ClusterClient); cluster {
			want = 3
		}
		r := beginOK(t, s, watukuytype.Key{Poller: "orders", Partition: "b"}, core.BeginForCycle)
		if got := calls.n.Load(); got != want || r.Lease.Epoch != 1 {
			t.Fatalf("first Begin of a registered key: %d script calls, epoch %d; want %d, epoch 1", got, r.Lease.Epoch, want)
		}
		calls.n.Store(0)
		r, err := s.Begin(context.Background(), watukuytype.Key{Poller: "orders", Partition: "nobody"}, "w", time.Minute, core.BeginForCycle)
		if err != nil || r.Status != core.BeginDeleted {
			t.Fatalf("first Begin of a key the registry does not hold: %s %v, want deleted", statusName(r.Status), err)
		}
		if got := calls.n.Load(); got != want {
			t.Fatalf("first Begin of an unregistered key: %d script calls, want %d", got, want)
		}
	})
}

// scriptCalls is a go-redis hook that counts the scripts run (EVALSHA, and EVAL after a
// NOSCRIPT: one call each), alone or in a pipeline.
type scriptCalls struct{ n atomic.Int64 }

func (*scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c *scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if cmd.Name() == "evalsha" {
				c.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}
