package redisstore

// End and the key's due entry (end.lua writes it on one server, set_due.lua beside it on a
// cluster), and what End writes into the state: an End re-sent by go-redis with something landing between its two copies (a
// trigger, the next cycle's claim and Begin), a stale End after partitions delete, and a
// cluster-mode node behind a plain client (CROSSSLOT: the store falls back to the pair).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/luascripts"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/internal/statehash"
	"github.com/watukuy/watukuy/watukuytype"
)

// resendAround re-sends (once) the first command or pipeline that runs its script, running
// between after the first copy was applied and before the second: go-redis re-sending after a
// read timeout whose first attempt went through, with other writers in between.
type resendAround struct {
	sha, src string // the script's, as EVALSHA and EVAL send it
	done     atomic.Bool
	between  func()
}

// resendOf is a resendAround of s's script name.
func resendOf(t *testing.T, s *Store, name string, between func()) *resendAround {
	src, err := luascripts.Source(name)
	if err != nil {
		t.Fatal(err)
	}
	return &resendAround{sha: s.scripts[name].Hash(), src: src, between: between}
}

func (h *resendAround) runs(c redis.Cmder) bool {
	a := c.Args()
	return isScript(c) && len(a) > 1 && (a[1] == h.sha || a[1] == h.src)
}

func (h *resendAround) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *resendAround) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.runs(cmd) && h.done.CompareAndSwap(false, true) {
			if err := next(ctx, cmd); redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
				h.done.Store(false) // not applied: the store sends it again with EVAL
				return err
			}
			h.between()
		}
		return next(ctx, cmd)
	}
}

func (h *resendAround) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if i := slices.IndexFunc(cmds, h.runs); i >= 0 && h.done.CompareAndSwap(false, true) {
			if err := next(ctx, cmds); redis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
				h.done.Store(false) // not applied: the store sends it again with EVAL
				return err
			}
			h.between()
		}
		return next(ctx, cmds)
	}
}

// endApplied checks, between an End's two copies, that the first released the lease.
func endApplied(t *testing.T, b redistest.Backend, s *Store, key watukuytype.Key) {
	t.Helper()
	if o := b.Client.HGet(context.Background(), s.Key(key, "state"), statehash.LeaseOwner).Val(); o != "" {
		t.Errorf("the End's first copy was not applied before its re-send (owner %q)", o)
	}
}

func dueScore(t *testing.T, b redistest.Backend, s *Store, key watukuytype.Key) (float64, bool) {
	t.Helper()
	v, err := b.Client.ZScore(context.Background(), s.DueKey(key.Poller), key.String()).Result()
	if errors.Is(err, redis.Nil) {
		return 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return v, true
}

// A cycle's End applied, its reply lost, and a trigger landing before go-redis re-sends it:
// the re-sent End (DUPLICATE on one server, where it writes no due entry) leaves the key due
// now. Fails if the re-send pushes the triggered key to the End's next due time (the trigger
// would wait an hour).
func TestEndResentAfterATriggerStaysDueNow(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, clk := newStore(t, b)
		key := watukuytype.Key{Poller: "orders", Partition: "rt"}
		registerListing(t, s, key.Partition)
		r := beginOK(t, s, key, core.BeginForCycle)
		h := resendOf(t, s, "end", func() {
			endApplied(t, b, s, key)
			if err := s.Trigger(ctx, key); err != nil {
				t.Error(err)
			}
		})
		b.Client.AddHook(h)
		hour := clk.Now().Add(time.Hour)
		err := s.End(ctx, r.Lease, core.EndRequest{State: map[string]string{statehash.NextDue: "1"}, NextDue: hour, Trigger: r.State[statehash.Trigger]})
		if !h.done.Load() {
			t.Fatal("end.lua was never re-sent")
		}
		if err != nil {
			t.Fatalf("re-sent End: %v", err)
		}
		if sc, ok := dueScore(t, b, s, key); !ok || sc > float64(clk.Now().UnixMilli()) {
			t.Fatalf("triggered between an End and its re-send: due %v (present %v), want due now", sc, ok)
		}
		if r, err := s.Begin(ctx, key, "w2", 30*time.Second, core.BeginForCycle); err != nil || r.Status != core.BeginOK {
			t.Fatalf("the triggered key does not begin: %s %v", statusName(r.Status), err)
		}
	})
}

// A cycle's End applied, its reply lost; before go-redis re-sends it, a scheduler claims the
// key and another worker begins its next cycle. The re-send meets the new grant (LEASE_LOST):
// the next cycle's lease and state stay untouched, and the key keeps a due entry no later
// than the End's own next due time. Fails if the stale re-send releases or rewrites the
// new grant, or leaves the key without a due entry.
func TestEndResentAfterTheNextCycleBegan(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, clk := newStore(t, b)
		key := watukuytype.Key{Poller: "orders", Partition: "rn"}
		registerListing(t, s, key.Partition)
		r := beginOK(t, s, key, core.BeginForCycle)
		var next core.BeginResult
		h := resendOf(t, s, "end", func() {
			endApplied(t, b, s, key)
			clk.Advance(2 * time.Second) // the next cycle is due
			zadd(t, b, s.DueKey(key.Poller), map[string]time.Time{key.String(): clk.Now().Add(32 * time.Second)})
			var err error
			if next, err = s.Begin(ctx, key, "w2", 30*time.Second, core.BeginForCycle); err != nil || next.Status != core.BeginOK {
				t.Errorf("next Begin: %s %v", statusName(next.Status), err)
			}
		})
		b.Client.AddHook(h)
		soon := clk.Now().Add(time.Second)
		err := s.End(ctx, r.Lease, core.EndRequest{State: map[string]string{statehash.NextDue: strconv.FormatInt(soon.UnixMilli(), 10)}, NextDue: soon, Trigger: r.State[statehash.Trigger]})
		sc, _ := dueScore(t, b, s, key)
		t.Logf("re-sent End after the next Begin: %v; due entry %+dms from now (the next cycle's claim was +32000ms)", err, int64(sc)-clk.Now().UnixMilli())
		st := b.Client.HGetAll(ctx, s.Key(key, "state")).Val()
		if st[statehash.LeaseToken] != next.Lease.Token || st[statehash.LeaseOwner] != "w2" || st[statehash.LeaseExpires] == "" {
			t.Fatalf("the next cycle's grant was touched by the stale re-send: %v", st)
		}
		if _, err := s.Renew(ctx, next.Lease); err != nil {
			t.Fatalf("the next cycle lost its lease: %v", err)
		}
		if _, ok := dueScore(t, b, s, key); !ok {
			t.Fatal("no due entry left")
		}
	})
}

// A cycle frozen past its lease; partitions delete runs to the end; the cycle wakes and sends
// its End (LEASE_LOST). On one server end.lua writes nothing; on a cluster set_due.lua runs
// beside it whatever end's outcome, and the heal after LEASE_LOST removes the entry it wrote
// for the deleted key. Fails if a due entry of the deleted key comes back.
func TestStaleEndAfterDeleteLeavesNoDueEntry(t *testing.T) {
	redistest.Each(t, staleEndAfterDelete)
}

func staleEndAfterDelete(t *testing.T, b redistest.Backend) {
	ctx := context.Background()
	s, clk := newStore(t, b)
	key := watukuytype.Key{Poller: "orders", Partition: "sd"}
	registerListing(t, s, key.Partition)
	r := beginOK(t, s, key, core.BeginForCycle) // TTL 30 s
	clk.Advance(31 * time.Second)
	d := beginOK(t, s, key, core.BeginForDelete)
	if err := s.DeleteKey(ctx, d.Lease); err != nil {
		t.Fatal(err)
	}
	if _, ok := dueScore(t, b, s, key); ok {
		t.Fatal("partitions delete left a due entry")
	}
	err := s.End(ctx, r.Lease, core.EndRequest{State: map[string]string{statehash.NextDue: "1"}, NextDue: clk.Now().Add(time.Minute), Trigger: r.State[statehash.Trigger]})
	if !watukuytype.IsLeaseLost(err) {
		t.Fatalf("stale End: %v, want LEASE_LOST", err)
	}
	if sc, ok := dueScore(t, b, s, key); ok {
		t.Fatalf("the deleted key has a due entry again (%v) after a stale End", sc)
	}
}

// endCycleDueAt runs one successful cycle of key ending with nextDue at.
func endCycleDueAt(t *testing.T, s *Store, key watukuytype.Key, at time.Time) {
	t.Helper()
	r := beginOK(t, s, key, core.BeginForCycle)
	if err := s.End(context.Background(), r.Lease, core.EndRequest{State: map[string]string{statehash.NextDue: strconv.FormatInt(at.UnixMilli(), 10)},
		NextDue: at, Trigger: r.State[statehash.Trigger]}); err != nil {
		t.Fatal(err)
	}
}

// On one server a stale End (its lease taken over, the next cycle already claimed) writes no
// due time, and nothing is rewritten for it: the claim's entry stays. Fails if the due entry is
// healed from the state after a fenced-off folded End (the state's nextDue over the claim).
func TestStaleEndLeavesANewerClaimsDueEntry(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, clk := newStore(t, b)
		if !s.oneServer.Load() {
			t.Skip("on a cluster the due write goes beside End, and a fenced-off End is healed")
		}
		key := watukuytype.Key{Poller: "orders", Partition: "sc"}
		registerListing(t, s, key.Partition)
		stale := beginOK(t, s, key, core.BeginForCycle) // TTL 30 s
		clk.Advance(31 * time.Second)
		endCycleDueAt(t, s, key, clk.Now().Add(time.Minute)) // the next cycle, begun and ended
		claimed := clk.Now().Add(2 * time.Minute)            // a later claim pushed the entry past its due time
		zadd(t, b, s.DueKey("orders"), map[string]time.Time{key.String(): claimed})
		err := s.End(ctx, stale.Lease, core.EndRequest{NextDue: clk.Now().Add(time.Hour), Trigger: stale.State[statehash.Trigger]})
		if !watukuytype.IsLeaseLost(err) {
			t.Fatalf("stale End: %v, want LEASE_LOST", err)
		}
		if sc, ok := dueScore(t, b, s, key); !ok || sc != float64(claimed.UnixMilli()) {
			t.Fatalf("due entry %v (%v) after a stale End, want the claim's %d", sc, ok, claimed.UnixMilli())
		}
	})
}

// A stale task of a deleted key (Begin answered 'deleted', then frozen before its Unschedule);
// partitions add revives the key; a cycle runs and ends (state nextDue T); the key is claimed
// and cycle A begins; the stale task wakes and Unschedules (the claimed entry is in the future,
// so due_write removes it); A is frozen past its lease and its End is fenced off. Fails if the
// registered, live, unpaused key is left with no due entry (only the repair sweep brings it
// back). On a cluster the heal from the state gives it back; on one server only a missing entry
// is given back.
func TestFencedOffEndGivesBackADueEntryAStaleUnscheduleRemoved(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, clk := newStore(t, b)
		key := watukuytype.Key{Poller: "orders", Partition: "un"}
		registerListing(t, s, key.Partition)
		d := beginOK(t, s, key, core.BeginForDelete)
		if err := s.DeleteKey(ctx, d.Lease); err != nil {
			t.Fatal(err)
		}
		// The stale task: its Begin sees the key deleted.
		if r, err := s.Begin(ctx, key, "stale", 30*time.Second, core.BeginForCycle); err != nil || r.Status != core.BeginDeleted {
			t.Fatalf("stale task's Begin: %s %v", statusName(r.Status), err)
		}
		clk.Advance(time.Second)
		addKey(t, s, key) // partitions add: revived, due now
		clk.Advance(time.Second)
		endCycleDueAt(t, s, key, clk.Now().Add(time.Second)) // a cycle after the add: nextDue = T
		clk.Advance(2 * time.Second)
		keys, err := s.ClaimDue(ctx, 10, 0, []string{"orders"})
		if err != nil || len(keys) != 1 {
			t.Fatalf("claim: %v %v", keys, err)
		}
		a := beginOK(t, s, key, core.BeginForCycle)
		// The stale task wakes: Unschedule (core does this after BeginDeleted).
		if err := s.Unschedule(ctx, key); err != nil {
			t.Fatal(err)
		}
		clk.Advance(31 * time.Second) // A frozen past its lease
		err = s.End(ctx, a.Lease, core.EndRequest{State: map[string]string{statehash.NextDue: strconv.FormatInt(clk.Now().Add(time.Minute).UnixMilli(), 10)},
			NextDue: clk.Now().Add(time.Minute), Trigger: a.State[statehash.Trigger]})
		if !watukuytype.IsLeaseLost(err) {
			t.Fatalf("A's End: %v, want LEASE_LOST", err)
		}
		if _, ok := dueScore(t, b, s, key); !ok {
			t.Fatal("the registered, live key has no due entry after a fenced-off End")
		}
	})
}

// A cluster-mode node (one node owning every slot) behind a plain *redis.Client, with keys
// that already have an epoch: End's folded script is refused (CROSSSLOT) and re-sent as
// end.lua + set_due.lua. Fails if the End errors, is applied twice, loses the trigger that
// landed during the cycle, or leaves the wrong due time.
func TestEndOnAClusterModeNodeFallsBack(t *testing.T) {
	b := clusterModeNode(t)
	ctx := context.Background()
	s, clk := newStore(t, b)
	registerListing(t, s, "a", "b")
	a := watukuytype.Key{Poller: "orders", Partition: "a"}
	nb := watukuytype.Key{Poller: "orders", Partition: "b"}
	s.oneServer.Store(false) // Begins as on a cluster
	ra := beginOK(t, s, a, core.BeginForCycle)
	if err := s.Trigger(ctx, a); err != nil { // during the cycle
		t.Fatal(err)
	}
	zadd(t, b, s.DueKey("orders"), map[string]time.Time{a.String(): clk.Now().Add(40 * time.Second)}) // a skipped claim pushed it
	s.oneServer.Store(true)                                                                           // as a store whose first call on this node is an End
	n := &core.NextBegin{Key: nb, Owner: "w", TTL: time.Minute, At: clk.Now()}
	err := s.End(ctx, ra.Lease, core.EndRequest{State: map[string]string{statehash.NextDue: "1"}, NextDue: clk.Now().Add(time.Hour), Trigger: ra.State[statehash.Trigger], Next: n})
	if err != nil {
		t.Fatalf("End through the fallback: %v", err)
	}
	if s.oneServer.Load() {
		t.Fatal("store still folds the due write")
	}
	if sc, ok := dueScore(t, b, s, a); !ok || sc > float64(clk.Now().UnixMilli()) {
		t.Fatalf("triggered during the cycle: due %v (%v), want now", sc, ok)
	}
	if nd := b.Client.HGet(ctx, s.Key(a, "state"), statehash.NextDue).Val(); nd != "0" {
		t.Fatalf("nextDue %q, want 0", nd)
	}
	if !n.Sent {
		t.Fatalf("the next Begin sent with the refused End was never answered: %+v", n)
	}
	t.Logf("next Begin: granted %v err %v", n.Granted(), n.Err)
	if n.Granted() {
		zadd(t, b, s.DueKey("orders"), map[string]time.Time{nb.String(): clk.Now().Add(40 * time.Second)}) // its claim
		if err := s.End(ctx, n.Result.Lease, core.EndRequest{NextDue: clk.Now().Add(time.Hour), Trigger: n.Result.State[statehash.Trigger]}); err != nil {
			t.Fatal(err)
		}
		if sc, ok := dueScore(t, b, s, nb); !ok || sc != float64(clk.Now().Add(time.Hour).UnixMilli()) {
			t.Fatalf("b after its End: due %v (%v), want in an hour", sc, ok)
		}
	}
}

// End writes the schedule, its write id and, after a trigger landed during the cycle, the due-now
// nextDue whether its state pairs fit one HSET or not (more than one call's worth goes in
// slices), and drops the lease and the fields it deletes.
func TestEndWritesItsStateInOneCallOrInSlices(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		for _, tc := range []struct {
			pairs     int
			triggered bool
		}{{2, false}, {2, true}, {400, true}, {401, true}, {1200, false}, {1200, true}} {
			t.Run(fmt.Sprintf("pairs=%d,triggered=%v", tc.pairs, tc.triggered), func(t *testing.T) {
				ctx := context.Background()
				s, clk := newStore(t, b)
				part := fmt.Sprintf("p%d-%v", tc.pairs, tc.triggered) // the backend outlives the subtest
				registerListing(t, s, part)
				key := watukuytype.Key{Poller: "orders", Partition: part}
				b.Client.HSet(ctx, s.Key(key, "state"), "gone", "x")
				r := beginOK(t, s, key, core.BeginForCycle)
				if tc.triggered {
					if err := s.Trigger(ctx, key); err != nil {
						t.Fatal(err)
					}
				}
				state := map[string]string{statehash.NextDue: strconv.FormatInt(clk.Now().Add(time.Hour).UnixMilli(), 10)}
				for i := len(state); i < tc.pairs; i++ {
					state[fmt.Sprintf("f%04d", i)] = strconv.Itoa(i)
				}
				if err := s.End(ctx, r.Lease, core.EndRequest{State: state, Delete: []string{"gone"}, NextDue: clk.Now().Add(time.Hour), Trigger: r.State[statehash.Trigger]}); err != nil {
					t.Fatal(err)
				}
				got := b.Client.HGetAll(ctx, s.Key(key, "state")).Val()
				for f, v := range state {
					want := v
					if f == statehash.NextDue && tc.triggered {
						want = "0"
					}
					if got[f] != want {
						t.Fatalf("field %s = %q, want %q", f, got[f], want)
					}
				}
				for _, f := range []string{"gone", statehash.LeaseOwner, statehash.LeaseExpires} {
					if v, ok := got[f]; ok {
						t.Errorf("field %s kept (%q)", f, v)
					}
				}
				if got[statehash.LeaseWrite] == "" || got[statehash.LeaseWrite] == "0" {
					t.Errorf("write id %q, want the End's", got[statehash.LeaseWrite])
				}
			})
		}
	})
}

// An End carrying the next key's Begin, its pipeline sent again by go-redis after a read
// timeout whose first copy went through, and sent after the server lost its script cache:
// the End answers as applied once (DUPLICATE, no error) and the Begin as the same grant (its
// token: one epoch, renewable). Fails if the second copy takes a second grant, or either copy
// fails.
func TestEndWithTheNextBeginSentTwiceGrantsOnce(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, clk := newStore(t, b)
		registerListing(t, s, "a", "b", "c", "d")
		key := func(p string) watukuytype.Key { return watukuytype.Key{Poller: "orders", Partition: p} }
		endWithNext := func(p, next string) *core.NextBegin {
			r := beginOK(t, s, key(p), core.BeginForCycle)
			n := &core.NextBegin{Key: key(next), Owner: "w", TTL: time.Minute, At: clk.Now()}
			if err := s.End(ctx, r.Lease, core.EndRequest{NextDue: clk.Now().Add(time.Minute), Trigger: r.State[statehash.Trigger], Next: n}); err != nil {
				t.Errorf("End of %s: %v", p, err)
			}
			st := b.Client.HGetAll(ctx, s.Key(key(next), "state")).Val()
			if !n.Granted() || strconv.FormatInt(n.Result.Lease.Epoch, 10) != st[statehash.LeaseEpoch] || n.Result.Lease.Token != st[statehash.LeaseToken] {
				t.Errorf("the Begin of %s: granted %v epoch %d token %.8s, %v; its state holds epoch %s token %.8s", next, n.Granted(), n.Result.Lease.Epoch, n.Result.Lease.Token, n.Err, st[statehash.LeaseEpoch], st[statehash.LeaseToken])
			}
			if _, err := s.Renew(ctx, n.Result.Lease); err != nil {
				t.Errorf("renew %s's lease: %v", next, err)
			}
			return n
		}

		// b has begun before: its Begin grants in the End's pipeline (no seed to read apart).
		rb := beginOK(t, s, key("b"), core.BeginForCycle)
		if err := s.End(ctx, rb.Lease, core.EndRequest{NextDue: clk.Now(), Trigger: rb.State[statehash.Trigger]}); err != nil {
			t.Fatal(err)
		}
		var first map[string]string
		h := resendOf(t, s, "end", func() { first = b.Client.HGetAll(ctx, s.Key(key("b"), "state")).Val() })
		b.Client.AddHook(h)
		n := endWithNext("a", "b")
		if !h.done.Load() {
			t.Fatal("the End's pipeline was not sent twice")
		}
		if e := strconv.FormatInt(n.Result.Lease.Epoch, 10); first[statehash.LeaseEpoch] != e || first[statehash.LeaseToken] != n.Result.Lease.Token {
			t.Errorf("the first copy granted b epoch %s token %.8s; the answer is epoch %s token %.8s", first[statehash.LeaseEpoch], first[statehash.LeaseToken], e, n.Result.Lease.Token)
		}

		if err := b.Client.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		endWithNext("c", "d")
	})
}
