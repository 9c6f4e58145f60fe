package redisstore

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/fakeclock"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/internal/statehash"
	"github.com/watukuy/watukuy/watukuytype"
)

// Every fenced script fails with LEASE_LOST and writes nothing, whether the epoch is stale
// (another instance took over) or the lease expired with nobody else holding it.
func TestFencedWritesLeaveNoTrace(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		clk := fakeclock.New(time.UnixMilli(1_800_000_000_000))
		s, err := New(b.Client, Options{Clock: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		key := watukuytype.Key{Poller: "orders", Partition: "t1"}
		ttl := 30 * time.Second
		begin := func(owner string) core.Lease {
			t.Helper()
			r, err := s.Begin(ctx, key, owner, ttl, core.BeginForAdd)
			if err != nil || r.Status != core.BeginOK {
				t.Fatalf("begin: %+v %v", r, err)
			}
			return r.Lease
		}
		l1 := begin("a")
		// Some state to protect: an item, an event pending in the group, a parked row.
		if _, err := s.CommitPoll(ctx, l1, core.Commit{State: map[string]string{"cursor.live": "c1"},
			Upserts: []core.Upsert{{Identity: "x", Row: []byte("123456781")}},
			Events:  []core.OutboxEvent{{ID: "ev1", OrderingKey: "x", Envelope: []byte(`{}`)}, {ID: "ev2", OrderingKey: "y", Envelope: []byte(`{}`)}},
			Invalid: []core.ParkedRow{{ID: "inv1", Row: []byte(`{"kind":"invalid"}`)}}}); err != nil {
			t.Fatal(err)
		}
		batch, err := s.ReadOutbox(ctx, l1, 10)
		entries := batch.Entries
		if err != nil || len(entries) != 2 {
			t.Fatalf("read: %v %v", entries, err)
		}

		ops := map[string]func(l core.Lease) error{
			"renew": func(l core.Lease) error { _, err := s.Renew(ctx, l); return err },
			"commitPoll": func(l core.Lease) error {
				_, err := s.CommitPoll(ctx, l, core.Commit{State: map[string]string{"cursor.live": "stale"},
					Upserts: []core.Upsert{{Identity: "z", Row: []byte("999999999")}}, Deletes: []string{"x"},
					Events: []core.OutboxEvent{{ID: "ev9", OrderingKey: "z", Envelope: []byte(`{}`)}}, Unpark: []core.ParkedRow{{ID: "inv1"}}})
				return err
			},
			"readOutbox": func(l core.Lease) error { _, err := s.ReadOutbox(ctx, l, 10); return err },
			"ack":        func(l core.Lease) error { _, err := s.Ack(ctx, l, outboxEntries(entries[0].StreamID)); return err },
			"park": func(l core.Lease) error {
				return s.Park(ctx, l, core.Parking{Poison: []core.Poison{{Entry: entries[0], ParkedID: "ev1", Row: []byte(`{}`)}}, Held: []core.Held{{Entry: entries[1], JSON: []byte(`{}`)}}})
			},
			"releaseParked": func(l core.Lease) error { _, _, err := s.ReleaseParked(ctx, l, false, []string{"inv1"}); return err },
			"end": func(l core.Lease) error {
				return s.End(ctx, l, core.EndRequest{State: map[string]string{"nextDue": "1"}, NextDue: clk.Now()})
			},
		}
		check := func(t *testing.T, l core.Lease) {
			for name, op := range ops {
				before := b.Dump(t)
				err := op(l)
				var ll *watukuytype.LeaseLostError
				if !errors.As(err, &ll) {
					t.Errorf("%s with a dead lease: %v, want LeaseLostError", name, err)
					continue
				}
				after := b.Dump(t)
				if name == "end" {
					// End's due-time write shares a pipeline with the script; when fenced off,
					// the store re-writes the due score from the owner's state.
					delete(before, s.DueKey(key.Poller))
					delete(after, s.DueKey(key.Poller))
				}
				if !reflect.DeepEqual(before, after) {
					t.Errorf("%s with a dead lease changed Redis:\nbefore %v\nafter  %v", name, before, after)
				}
			}
		}
		t.Run("expired", func(t *testing.T) {
			clk.Advance(ttl + time.Millisecond)
			check(t, l1)
		})
		t.Run("stale epoch", func(t *testing.T) {
			l2 := begin("b")
			if l2.Epoch != l1.Epoch+1 {
				t.Fatalf("epoch %d after %d", l2.Epoch, l1.Epoch)
			}
			check(t, l1)
			if _, err := s.Renew(ctx, l2); err != nil {
				t.Fatalf("the live lease cannot renew: %v", err)
			}
		})
		t.Run("same epoch, another grant's token", func(t *testing.T) {
			// After a failover that lost a grant, the epoch can repeat: the token tells the
			// grants apart.
			clk.Advance(ttl + time.Millisecond)
			l3 := begin("c")
			forged := l3
			forged.Token = "a-lost-grant"
			check(t, forged)
			if _, err := s.Renew(ctx, l3); err != nil {
				t.Fatalf("the live lease cannot renew: %v", err)
			}
		})
	})
}

// Two claimers never take the same due key; a claimed key comes back after the claim timeout.
func TestClaimDue(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		clk := fakeclock.New(time.UnixMilli(1_800_000_000_000))
		s, _ := New(b.Client, Options{Clock: clk.Now})
		var keys []watukuytype.Key
		for i := 0; i < 50; i++ {
			keys = append(keys, watukuytype.Key{Poller: "p", Partition: fmt.Sprint(i)})
		}
		if err := s.Register(ctx, map[string][]byte{"p": []byte(`{"poller":"p"}`)}, keys); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		claimed := map[watukuytype.Key]int{}
		var wg sync.WaitGroup
		for w := 0; w < 5; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					ks, err := s.ClaimDue(ctx, 3, time.Minute, nil)
					if err != nil {
						t.Error(err)
						return
					}
					if len(ks) == 0 {
						return
					}
					mu.Lock()
					for _, k := range ks {
						claimed[k]++
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(claimed) != 50 {
			t.Fatalf("claimed %d keys, want 50", len(claimed))
		}
		for k, n := range claimed {
			if n != 1 {
				t.Fatalf("%s claimed %d times", k, n)
			}
		}
		if ks, _ := s.ClaimDue(ctx, 100, time.Minute, nil); len(ks) != 0 {
			t.Fatalf("claimed again before the timeout: %d", len(ks))
		}
		clk.Advance(time.Minute)
		if ks, _ := s.ClaimDue(ctx, 100, time.Minute, nil); len(ks) != 50 {
			t.Fatalf("after the claim timeout: %d keys due, want 50", len(ks))
		}
	})
}

// newStore is a store on b with a test clock.
func newStore(t *testing.T, b redistest.Backend) (*Store, *fakeclock.Clock) {
	t.Helper()
	clk := fakeclock.New(time.UnixMilli(1_800_000_000_000))
	s, err := New(b.Client, Options{Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return s, clk
}

// zadd writes due entries straight into a poller's due set, as any earlier write would have.
func zadd(t *testing.T, b redistest.Backend, key string, due map[string]time.Time) {
	t.Helper()
	for m, at := range due {
		if err := b.Client.ZAdd(context.Background(), key, redis.Z{Score: float64(at.UnixMilli()), Member: m}).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// A claim merges the named pollers' due sets (every poller of the pollers hash when none is
// named): the earliest due first, at most limit, each pushed to now + claim timeout.
func TestClaimDueMergesPollers(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, clk := newStore(t, b)
		now := clk.Now()
		if err := s.Register(ctx, map[string][]byte{"a": []byte(`{}`), "b": []byte(`{}`), "c": []byte(`{}`)}, nil); err != nil {
			t.Fatal(err)
		}
		zadd(t, b, s.DueKey("a"), map[string]time.Time{"a|1": now.Add(-30 * time.Second), "a|2": now.Add(-10 * time.Second)})
		zadd(t, b, s.DueKey("b"), map[string]time.Time{"b|1": now.Add(-20 * time.Second), "b|2": now.Add(10 * time.Second)})
		zadd(t, b, s.DueKey("c"), map[string]time.Time{"c|1": now.Add(-5 * time.Second)})
		k := func(p, part string) watukuytype.Key { return watukuytype.Key{Poller: p, Partition: part} }

		got, err := s.ClaimDue(ctx, 3, time.Minute, nil)
		if want := []watukuytype.Key{k("a", "1"), k("b", "1"), k("a", "2")}; err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("claim across every poller: %v, %v; want %v", got, err, want)
		}
		if score := b.Client.ZScore(ctx, s.DueKey("b"), "b|1").Val(); score != float64(now.Add(time.Minute).UnixMilli()) {
			t.Fatalf("a claimed key is due at %v, want now + the claim timeout", score)
		}
		if got, err := s.ClaimDue(ctx, 10, time.Minute, []string{"b"}); err != nil || len(got) != 0 {
			t.Fatalf("claim of b with nothing due: %v, %v", got, err)
		}
		if got, err := s.ClaimDue(ctx, 10, time.Minute, []string{"c", "b", "unknown"}); err != nil || !reflect.DeepEqual(got, []watukuytype.Key{k("c", "1")}) {
			t.Fatalf("claim of c and b: %v, %v", got, err)
		}
	})
}

// A claim whose list names a poller twice takes each of its keys once.
func TestAClaimNamingAPollerTwiceTakesEachKeyOnce(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, clk := newStore(t, b)
		now := clk.Now()
		zadd(t, b, s.DueKey("p"), map[string]time.Time{"p|1": now.Add(-time.Second), "p|2": now.Add(-2 * time.Second)})
		c, err := s.ClaimForEnqueue(ctx, 10, time.Second, []string{"p", "p"})
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Keys) != 2 || c.Keys[0] == c.Keys[1] {
			t.Fatalf("claimed %v, want p|2 and p|1 once each", c.Keys)
		}
	})
}

// Without a fixed claim timeout a claim holds a key for the lease TTL its poller's entry
// records plus the grace, read from the entry without decoding it: a partition whose name
// spells the field does not fool it, and an entry without the field gets the default.
func TestClaimFollowsTheRecordedLeaseTTL(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, clk := newStore(t, b)
		now := clk.Now()
		if err := s.Register(ctx, map[string][]byte{
			"a":   []byte(`{"poller":"a","partitions":["x\",\"leaseTTLMs\":1,\"","1"],"leaseTTL":"7s","leaseTTLMs":7000}`),
			"old": []byte(`{"poller":"old","leaseTTL":"30s"}`),
		}, nil); err != nil {
			t.Fatal(err)
		}
		zadd(t, b, s.DueKey("a"), map[string]time.Time{"a|1": now})
		zadd(t, b, s.DueKey("old"), map[string]time.Time{"old|1": now})
		if got, err := s.ClaimDue(ctx, 10, 0, nil); err != nil || len(got) != 2 {
			t.Fatalf("claim: %v, %v", got, err)
		}
		for key, want := range map[string]time.Duration{"a": 7*time.Second + core.ClaimGrace, "old": core.DefaultLeaseTTL + core.ClaimGrace} {
			if score := b.Client.ZScore(ctx, s.DueKey(key), key+"|1").Val(); score != float64(now.Add(want).UnixMilli()) {
				t.Errorf("%s claimed until %v, want now + %s", key, time.UnixMilli(int64(score)).Sub(now), want)
			}
		}
	})
}

// DueIn says how long until the earliest key of the named pollers (every poller's when none)
// is due, by the store's clock: 0 once one is overdue, false when the sets are empty.
func TestDueIn(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, clk := newStore(t, b)
		now := clk.Now()
		if err := s.Register(ctx, map[string][]byte{"a": []byte(`{}`), "b": []byte(`{}`)}, nil); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := s.DueIn(ctx, nil); err != nil || ok {
			t.Fatalf("empty due sets: ok %v, %v; want false", ok, err)
		}
		zadd(t, b, s.DueKey("a"), map[string]time.Time{"a|1": now.Add(30 * time.Second)})
		zadd(t, b, s.DueKey("b"), map[string]time.Time{"b|1": now.Add(700 * time.Millisecond), "b|2": now.Add(time.Hour)})
		for _, tc := range []struct {
			pollers []string
			want    time.Duration
		}{{nil, 700 * time.Millisecond}, {[]string{"a"}, 30 * time.Second}, {[]string{"a", "b"}, 700 * time.Millisecond}} {
			if d, ok, err := s.DueIn(ctx, tc.pollers); err != nil || !ok || d != tc.want {
				t.Errorf("DueIn(%v) = %s, %v, %v; want %s", tc.pollers, d, ok, err, tc.want)
			}
		}
		clk.Advance(time.Second)
		if d, ok, err := s.DueIn(ctx, nil); err != nil || !ok || d != 0 {
			t.Errorf("an overdue key: %s, %v, %v; want 0", d, ok, err)
		}
		// Without a clock override the server's clock counts.
		real, err := New(b.Client, Options{Prefix: "srv"})
		if err != nil {
			t.Fatal(err)
		}
		srvNow, err := b.Client.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		zadd(t, b, real.DueKey("a"), map[string]time.Time{"a|1": srvNow.Add(time.Hour)})
		if d, ok, err := real.DueIn(ctx, []string{"a"}); err != nil || !ok || d > time.Hour || d < 59*time.Minute {
			t.Errorf("by the server's clock: %s, %v, %v; want about 1h", d, ok, err)
		}
	})
}

// The due writes that follow a Begin (SetDue, Unschedule, End's) keep an entry that something
// made due since the claim pushed it forward; End keeps a key due now when a trigger landed
// during its cycle, even if a skipped claim pushed its entry again meanwhile.
func TestDueWritesKeepDueNow(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, clk := newStore(t, b)
		key := watukuytype.Key{Poller: "orders", Partition: "t1"}
		registerListing(t, s, key.Partition) // registered (a cycle begins only a registered key), not due
		due := s.DueKey("orders")
		if err := b.Client.Del(ctx, due).Err(); err != nil {
			t.Fatal(err)
		}
		score := func() float64 {
			t.Helper()
			v, err := b.Client.ZScore(ctx, due, key.String()).Result()
			if errors.Is(err, redis.Nil) {
				return -1
			}
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		ms := func(d time.Duration) float64 { return float64(clk.Now().Add(d).UnixMilli()) }

		if err := s.SetDue(ctx, key, clk.Now().Add(time.Minute)); err != nil || score() != ms(time.Minute) {
			t.Fatalf("SetDue of an absent entry: %v, score %v", err, score())
		}
		if err := s.SetDue(ctx, key, clk.Now().Add(time.Hour)); err != nil || score() != ms(time.Hour) {
			t.Fatalf("SetDue over a future entry: %v, score %v", err, score())
		}
		if err := s.Trigger(ctx, key); err != nil {
			t.Fatal(err)
		}
		if err := s.SetDue(ctx, key, clk.Now().Add(time.Hour)); err != nil || score() != ms(0) {
			t.Fatalf("SetDue over a due-now entry: %v, score %v; want it kept", err, score())
		}
		if err := s.Unschedule(ctx, key); err != nil || score() != ms(0) {
			t.Fatalf("Unschedule of a due-now entry: %v, score %v; want it kept", err, score())
		}
		if err := s.SetDue(ctx, key, clk.Now().Add(-time.Second)); err != nil || score() != ms(0) {
			t.Fatalf("SetDue over a due-now entry: %v, score %v", err, score())
		}
		zadd(t, b, due, map[string]time.Time{key.String(): clk.Now().Add(2 * time.Minute)}) // claimed
		if err := s.Unschedule(ctx, key); err != nil || score() != -1 {
			t.Fatalf("Unschedule of a claimed entry: %v, score %v; want it removed", err, score())
		}

		// A cycle: a trigger lands while it runs, then another instance's claim is skipped on
		// the lease and pushes the entry again.
		r, err := s.Begin(ctx, key, "a", 30*time.Second, core.BeginForCycle)
		if err != nil || r.Status != core.BeginOK {
			t.Fatalf("begin: %+v, %v", r, err)
		}
		if err := s.Trigger(ctx, key); err != nil {
			t.Fatal(err)
		}
		if err := s.SetDue(ctx, key, clk.Now().Add(2*time.Minute)); err != nil {
			t.Fatal(err)
		}
		zadd(t, b, due, map[string]time.Time{key.String(): clk.Now().Add(15 * time.Second)})
		end := core.EndRequest{State: map[string]string{statehash.NextDue: strconv.FormatInt(clk.Now().Add(time.Hour).UnixMilli(), 10)},
			NextDue: clk.Now().Add(time.Hour), Trigger: r.State[statehash.Trigger]}
		if err := s.End(ctx, r.Lease, end); err != nil {
			t.Fatal(err)
		}
		if st := b.Client.HGet(ctx, s.Key(key, "state"), statehash.NextDue).Val(); st != "0" || score() > ms(0) {
			t.Fatalf("after a trigger during the cycle: nextDue %q, due entry %v; want due now", st, score())
		}
		// The next cycle sees the trigger at Begin: its End writes the schedule.
		zadd(t, b, due, map[string]time.Time{key.String(): clk.Now().Add(2 * time.Minute)}) // claimed
		if r, err = s.Begin(ctx, key, "a", 30*time.Second, core.BeginForCycle); err != nil || r.Status != core.BeginOK {
			t.Fatalf("begin: %+v, %v", r, err)
		}
		end.Trigger = r.State[statehash.Trigger]
		if err := s.End(ctx, r.Lease, end); err != nil {
			t.Fatal(err)
		}
		if st := b.Client.HGet(ctx, s.Key(key, "state"), statehash.NextDue).Val(); st != end.State[statehash.NextDue] || score() != ms(time.Hour) {
			t.Fatalf("a cycle without a trigger: nextDue %q, due entry %v; want both in an hour", st, score())
		}
	})
}

// partitions add and delete of one key never interleave: an add that comes while a delete
// holds the key's lease (here, between the deletion of its data and the registry's cleanup)
// finds the key leased and writes nothing; once the delete is done, the add brings the key
// back, registered and due.
func TestAddWaitsForADeleteInProgress(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, _ := newStore(t, b)
		key := watukuytype.Key{Poller: "orders", Partition: "t1"}
		addKey(t, s, key)
		add := &beforeScript{key: s.keysKey("orders"), run: func() {
			if r, err := s.Begin(ctx, key, "ops2", time.Minute, core.BeginForAdd); err != nil || r.Status != core.BeginLeased {
				t.Errorf("an add during the delete: %+v %v, want leased", r, err)
			}
		}}
		b.Client.AddHook(add)
		deleteKey(t, s, key)
		if !add.ran.Load() {
			t.Fatal("the add never ran")
		}
		if _, found := entryOf(t, s, key); found {
			t.Fatal("the deleted key is still registered")
		}
		addKey(t, s, key)
		if e, found := entryOf(t, s, key); !found || e.Source != "cli" {
			t.Fatalf("the key added back: %+v %v", e, found)
		}
		if err := b.Client.ZScore(ctx, s.DueKey("orders"), key.String()).Err(); err != nil {
			t.Fatalf("the added key is not due: %v", err)
		}
	})
}

// beforeScript is a go-redis hook that runs run once, before the first script whose first
// key is key.
type beforeScript struct {
	key string
	run func()
	ran atomic.Bool
}

func (h *beforeScript) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *beforeScript) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *beforeScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if (cmd.Name() == "evalsha" || cmd.Name() == "eval") && len(args) > 3 && args[3] == h.key && h.ran.CompareAndSwap(false, true) {
			h.run()
		}
		return next(ctx, cmd)
	}
}

// The repair sweep pages through every poller's registry (more keys than one batch) and gives
// each key that is not deleted and lacks a due entry one, at its state's next due time or now.
func TestRepairDue(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, clk := newStore(t, b)
		var keys []watukuytype.Key
		for i := 0; i < 4*repairBatch+200; i++ {
			keys = append(keys, watukuytype.Key{Poller: fmt.Sprintf("p%d", i%2), Partition: fmt.Sprint(i)})
		}
		if err := s.Register(ctx, map[string][]byte{"p0": []byte(`{}`), "p1": []byte(`{}`)}, keys); err != nil {
			t.Fatal(err)
		}
		if err := b.Client.ZRem(ctx, s.DueKey("p1"), "p1|1").Err(); err != nil {
			t.Fatal(err)
		}
		if got, err := s.RepairDue(ctx); err != nil || !slices.Equal(got, []watukuytype.Key{{Poller: "p1", Partition: "1"}}) {
			t.Fatalf("a sweep with every entry in place but p1|1's: %v, %v", got, err)
		}
		if got, err := s.RepairDue(ctx); err != nil || len(got) != 0 {
			t.Fatalf("a sweep with every entry in place: %v, %v", got, err)
		}
		deleted, later := watukuytype.Key{Poller: "p0", Partition: "0"}, watukuytype.Key{Poller: "p1", Partition: "1"}
		if err := b.Client.HSet(ctx, s.Key(deleted, "state"), "deleted", "1").Err(); err != nil {
			t.Fatal(err)
		}
		at := clk.Now().Add(time.Hour).UnixMilli()
		if err := b.Client.HSet(ctx, s.Key(later, "state"), statehash.NextDue, at).Err(); err != nil {
			t.Fatal(err)
		}
		if err := b.Client.Del(ctx, s.DueKey("p0"), s.DueKey("p1")).Err(); err != nil {
			t.Fatal(err)
		}
		got, err := s.RepairDue(ctx)
		if err != nil || len(got) != len(keys)-1 || slices.Contains(got, deleted) {
			t.Fatalf("repaired %d keys (the deleted one among them: %v), %v; want %d", len(got), slices.Contains(got, deleted), err, len(keys)-1)
		}
		if score := b.Client.ZScore(ctx, s.DueKey("p1"), later.String()).Val(); score != float64(at) {
			t.Fatalf("a key with a next due time repaired at %v, want %v", score, at)
		}
		for _, k := range []string{"p1|3", "p0|2"} {
			if score := b.Client.ZScore(ctx, s.DueKey(k[:2]), k).Val(); score != float64(clk.Now().UnixMilli()) {
				t.Fatalf("%s, without a next due time, repaired at %v, want now", k, score)
			}
		}
		if got, err := s.RepairDue(ctx); err != nil || len(got) != 0 {
			t.Fatalf("a second sweep: %v, %v", got, err)
		}
	})
}

// Every key of one (poller, partition) shares a hash tag, so each script touches one slot.
func TestKeysShareOneHashTag(t *testing.T) {
	s, _ := New(nil, Options{Prefix: "wk"})
	k := watukuytype.Key{Poller: "orders", Partition: "t_42"}
	for _, suffix := range append([]string{"log"}, keyData...) {
		got := s.Key(k, suffix)
		if want := "wk:{orders|t_42}:" + suffix; got != want {
			t.Errorf("%s: %s, want %s", suffix, got, want)
		}
	}
	if _, err := New(nil, Options{Prefix: "a{b}"}); err == nil {
		t.Error("a prefix with braces was accepted")
	}
}

// The :invalid index names one parked row per identity: parking the next one removes the row
// it named, in the same script; unparking or discarding a row forgets the entry only if it
// names that row.
func TestInvalidIndex(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, err := New(b.Client, Options{})
		if err != nil {
			t.Fatal(err)
		}
		key := watukuytype.Key{Poller: "orders", Partition: "t1"}
		r, err := s.Begin(ctx, key, "a", 30*time.Second, core.BeginForAdd)
		if err != nil || r.Status != core.BeginOK {
			t.Fatalf("begin: %+v %v", r, err)
		}
		l := r.Lease
		park := func(id, version string) {
			t.Helper()
			row := []byte(`{"kind":"invalid","identity":"o1"}`)
			if _, err := s.CommitPoll(ctx, l, core.Commit{Invalid: []core.ParkedRow{{ID: id, Identity: "o1", Version: version, Row: row}}}); err != nil {
				t.Fatal(err)
			}
		}
		indexed := func(want core.ParkedRow, parked ...string) {
			t.Helper()
			sr, err := s.LoadRows(ctx, key, []string{"o1"}, core.LoadWant{Parked: true})
			if err != nil || !reflect.DeepEqual(sr.Parked[0], want) {
				t.Fatalf("index of o1: %+v (%v), want %+v", sr.Parked, err, want)
			}
			rows, err := s.ListParked(ctx, key, "", "", 100)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range rows {
				got = append(got, r.ID)
			}
			if !slices.Equal(got, parked) {
				t.Fatalf("parked rows %v, want %v", got, parked)
			}
		}
		park("inv1", "1")
		indexed(core.ParkedRow{ID: "inv1", Version: "1"}, "inv1")
		park("inv2", "2")
		indexed(core.ParkedRow{ID: "inv2", Version: "2"}, "inv2")
		// An unpark of a row the entry does not name leaves the entry.
		if _, err := s.CommitPoll(ctx, l, core.Commit{Unpark: []core.ParkedRow{{ID: "inv1", Identity: "o1"}}}); err != nil {
			t.Fatal(err)
		}
		indexed(core.ParkedRow{ID: "inv2", Version: "2"}, "inv2")
		if _, _, err := s.ReleaseParked(ctx, l, false, []string{"inv2"}); err != nil {
			t.Fatal(err)
		}
		indexed(core.ParkedRow{})
	})
}

// A database another process is setting up (layout recorded, then pollers registered) never
// reads as data without a layout, whenever Layout's reads land: they are one transaction.
func TestLayoutWhileAnotherProcessSetsUp(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, _ := newStore(t, b)
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
				}
				b.Client.Del(ctx, s.layoutKey(), s.keysKey("p"), s.pollersKey())
				if _, err := s.Migrate(ctx); err != nil {
					t.Error(err)
					return
				}
				if err := s.Register(ctx, map[string][]byte{"p": []byte(`{}`)}, []watukuytype.Key{{Poller: "p"}}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		for i := 0; i < 2000; i++ {
			l, err := s.Layout(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !l.Empty && l.Version != CurrentLayout {
				close(stop)
				<-done
				t.Fatalf("read %d: a database being set up read as layout %d", i, l.Version)
			}
		}
		close(stop)
		<-done
	})
}

// deleteKey runs partitions delete of key: an operation's Begin, then DeleteKey.
func deleteKey(t *testing.T, s *Store, key watukuytype.Key) {
	t.Helper()
	ctx := context.Background()
	r, err := s.Begin(ctx, key, "op", 30*time.Second, core.BeginForDelete)
	if err != nil || r.Status != core.BeginOK {
		t.Fatalf("begin: %+v, %v", r, err)
	}
	if err := s.DeleteKey(ctx, r.Lease); err != nil {
		t.Fatal(err)
	}
}
