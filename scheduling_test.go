package watukuy

// Scheduling liveness: every active key stays claimable and is claimed when due, whatever
// other pollers leave in Redis and whatever operators do while its cycles run. Each test runs
// on miniredis, a private redis-server and a private Redis Cluster.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// commandCalls sums the calls of every command a real Redis ran (INFO commandstats counts the
// commands scripts run too), over every node of a cluster.
func commandCalls(t *testing.T, b redistest.Backend) int64 {
	t.Helper()
	var total atomic.Int64
	count := func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(info, "\n") {
			_, stats, ok := strings.Cut(line, ":calls=")
			if !ok {
				continue
			}
			n, err := strconv.ParseInt(stats[:strings.IndexByte(stats, ',')], 10, 64)
			if err != nil {
				return fmt.Errorf("commandstats line %q: %w", line, err)
			}
			total.Add(n)
		}
		return nil
	}
	var err error
	if cc, ok := b.Client.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(t.Context(), count)
	} else {
		err = count(t.Context(), b.Client.(*redis.Client))
	}
	if err != nil {
		t.Fatal(err)
	}
	return total.Load()
}

// A retired poller's 20,000 overdue keys, due before the live key, neither starve the live
// poller's claims nor make them cost more: a claim reads only the due sets of the pollers it
// runs.
func TestSchedulingNoStarvationBehindOtherPollers(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newEnv(t, b)
		putN(e, 3)
		eng := e.engine(e.poller(), nil)
		if err := eng.Setup(ctx); err != nil {
			t.Fatal(err)
		}
		live := watukuytype.Key{Poller: "orders"}
		var rt redistest.Counter
		rt.Attach(b.Client)
		// claim claims for the live poller as Tick does; it returns what it took, its round trips
		// and, on a real Redis, the commands it ran there.
		claim := func() ([]watukuytype.Key, int64, int64) {
			t.Helper()
			calls := int64(0)
			if b.Mini == nil {
				calls = -commandCalls(t, b)
			}
			rt.Reset()
			keys, err := eng.store.ClaimDue(ctx, 4, 2*time.Minute, []string{"orders"})
			if err != nil {
				t.Fatal(err)
			}
			n := rt.Count()
			if b.Mini == nil {
				calls += commandCalls(t, b)
			}
			return keys, n, calls
		}
		var keys []watukuytype.Key
		var rt0, calls0 int64
		for i := 0; i < 2; i++ { // the first claim loads the script
			if keys, rt0, calls0 = claim(); !slices.Equal(keys, []watukuytype.Key{live}) {
				t.Fatalf("claimed %v, want the live key", keys)
			}
			if err := eng.store.SetDue(ctx, live, e.clock.Now().Add(-time.Second)); err != nil {
				t.Fatal(err)
			}
		}

		// The retired poller's keys were due an hour before the live one, and sort before it.
		var retired []watukuytype.Key
		for i := 0; i < 20000; i++ {
			retired = append(retired, watukuytype.Key{Poller: "archive", Partition: fmt.Sprintf("t%05d", i)})
		}
		e.clock.Advance(-time.Hour)
		if err := eng.store.Register(ctx, map[string][]byte{"archive": []byte(`{"poller":"archive"}`)}, retired); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(time.Hour)

		if rep := e.tick(eng); rep.Ran != 1 || rep.Events != 3 {
			t.Fatalf("the live poller's tick behind 20,000 other keys: %+v", rep)
		}
		if err := eng.store.SetDue(ctx, live, e.clock.Now().Add(-time.Second)); err != nil {
			t.Fatal(err)
		}
		keys, rt1, calls1 := claim()
		if !slices.Equal(keys, []watukuytype.Key{live}) {
			t.Fatalf("claimed %v behind the retired keys, want the live key", keys)
		}
		if rt1 != rt0 || calls1 != calls0 {
			t.Fatalf("a claim costs %d round trips and %d Redis commands behind 20,000 other keys, %d and %d without them",
				rt1, calls1, rt0, calls0)
		}
		t.Logf("a claim: %d round trip(s), %d Redis command(s) with one INFO per node (0: not counted on miniredis)", rt1, calls1)
	})
}

// A stale task of a deleted partition that finds the deletion mark, then unschedules the key
// after a partitions add brought it back, leaves the re-added key due: it runs.
func TestSchedulingDeletedKeyReAddedStaysDue(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newEnv(t, b)
		putN(e, 4)
		p := e.poller(func(p *watukuytype.Poller) { p.Partitions = []string{"a"} })
		eng := e.engine(p, nil)
		e.settle(eng)
		ops, err := newEngine(Options{Redis: b.Client}, seams{clock: e.clock.Now}) // an operator's
		if err != nil {
			t.Fatal(err)
		}
		if err := ops.Partitions().Add(ctx, watukuytype.Key{Poller: "orders", Partition: "b"}); err != nil {
			t.Fatal(err)
		}
		e.settle(eng)
		if err := ops.Partitions().Delete(ctx, watukuytype.Key{Poller: "orders", Partition: "b"}); err != nil {
			t.Fatal(err)
		}
		// The stale task's Begin sees the deletion mark; the operator adds b again before the
		// task unschedules it.
		var addErr error
		stale := e.engine(p, racing(func(br core.BeginResult) {
			if br.Status == core.BeginDeleted {
				addErr = ops.Partitions().Add(ctx, watukuytype.Key{Poller: "orders", Partition: "b"})
			}
		}))
		kb := watukuytype.Key{Poller: "orders", Partition: "b"}
		if rep := stale.RunCycle(ctx, kb); rep.Outcome == watukuytype.Ran || rep.Err != nil || addErr != nil {
			t.Fatalf("the stale task: %+v, add: %v", rep, addErr)
		}
		start := len(e.rec.events())
		if rep := e.tick(eng); rep.Ran != 1 {
			t.Fatalf("the re-added partition is not due: %+v", rep)
		}
		got := 0
		for _, ev := range e.rec.events()[start:] {
			if ev.Partition == "b" {
				got++
			}
		}
		if got != 4 {
			t.Fatalf("the re-added partition emitted %d events, want 4", got)
		}
	})
}

// A trigger is never overwritten by an older due time: not by a Begin that found the key not
// due just before it, nor by the end of a cycle it landed in (in the fetch, in the handler,
// or while another instance's claim was skipped on the lease).
func TestSchedulingTriggerNotOverwritten(t *testing.T) {
	for _, tc := range []struct {
		name      string
		inHandler bool // trigger in the handler, else in the fetch
		claimed   bool // then another instance's claim is skipped on the lease
	}{{"in the fetch", false, false}, {"in the handler", true, false}, {"in the fetch, another claim skipped on the lease", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			redistest.Each(t, func(t *testing.T, b redistest.Backend) {
				ctx := context.Background()
				e := newEnv(t, b)
				putN(e, 2)
				eng := e.engine(e.poller(), nil)
				other := e.engine(e.poller(), nil)
				e.settle(eng)
				var armed atomic.Bool
				var raceErr error
				race := func(inHandler bool) {
					if inHandler != tc.inHandler || !armed.CompareAndSwap(true, false) {
						return
					}
					raceErr = eng.Trigger(ctx, watukuytype.Key{Poller: "orders", Partition: ""})
					if rep, err := other.Tick(ctx, 10*time.Second); tc.claimed && (err != nil || rep.SkippedLeased != 1) {
						raceErr = errors.Join(raceErr, fmt.Errorf("the other instance's tick: %+v, %v", rep, err))
					}
				}
				e.api.OnFetch(func(ctx context.Context, req watukuytype.FetchRequest) error { race(false); return nil })
				e.rec.setFail(func(ev watukuytype.Event) error { race(true); return nil })
				e.api.Put("o01", map[string]any{"total": 100})
				e.clock.Advance(3 * time.Minute)
				armed.Store(true)
				// Tick claims until nothing is due: the cycle the trigger landed in, then the
				// one it asked for.
				if rep := e.tick(eng); rep.Ran != 2 || rep.Events != 1 || armed.Load() || raceErr != nil {
					t.Fatalf("a trigger during the cycle: %+v (want the cycle and the triggered one), race: %v", rep, raceErr)
				}
				if rep := e.tick(eng); rep.Ran != 0 {
					t.Fatalf("the key stays due after the triggered cycle ran: %+v", rep)
				}
			})
		})
	}
	t.Run("racing a not-due begin", func(t *testing.T) {
		redistest.Each(t, func(t *testing.T, b redistest.Backend) {
			ctx := context.Background()
			e := newEnv(t, b)
			putN(e, 2)
			eng := e.engine(e.poller(), nil)
			e.settle(eng)
			// A stale due entry: the key is claimed although its state is not due yet.
			if err := eng.store.SetDue(ctx, watukuytype.Key{Poller: "orders"}, e.clock.Now().Add(-time.Second)); err != nil {
				t.Fatal(err)
			}
			var trigErr error
			racer := e.engine(e.poller(), racing(func(br core.BeginResult) {
				if br.Status == core.BeginNotDue {
					trigErr = eng.Trigger(ctx, watukuytype.Key{Poller: "orders", Partition: ""})
				}
			}))
			// The tick claims until nothing is due: the triggered cycle runs after the skip.
			if rep := e.tick(racer); rep.SkippedNotDue != 1 || rep.Ran != 1 || trigErr != nil {
				t.Fatalf("a trigger racing the not-due begin: %+v (want the skip, then the triggered cycle), trigger: %v", rep, trigErr)
			}
			if rep := e.tick(eng); rep.Ran != 0 {
				t.Fatalf("the key stays due after the triggered cycle ran: %+v", rep)
			}
		})
	})
}

// A registered key whose due entry is gone would never run again: the repair sweep
// (RepairDue; Tick runs it at most once a minute) puts the entry back at the state's next due
// time and reports the key; a deleted key is left out.
func TestSchedulingRepairSweep(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newEnv(t, b)
		putN(e, 2)
		p := e.poller(func(p *watukuytype.Poller) { p.Partitions = []string{"a", "b", "c"} })
		eng := e.engine(p, nil)
		e.settle(eng)
		var hooked []watukuytype.Key
		ops, err := newEngine(Options{Redis: b.Client, Hooks: watukuytype.Hooks{OnDueRepaired: func(k watukuytype.Key) { hooked = append(hooked, k) }}}, seams{clock: e.clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		due := eng.store.DueKey("orders")
		ka, kb, kc := watukuytype.Key{Poller: "orders", Partition: "a"}, watukuytype.Key{Poller: "orders", Partition: "b"}, watukuytype.Key{Poller: "orders", Partition: "c"}

		// c is deleted; a worker whose config still lists it registers it again: it stays
		// deleted, with no due entry, and no task runs it.
		if err := ops.Partitions().Delete(ctx, watukuytype.Key{Poller: "orders", Partition: "c"}); err != nil {
			t.Fatal(err)
		}
		if err := e.engine(p, nil).Setup(ctx); err != nil {
			t.Fatal(err)
		}
		if err := b.Client.ZScore(ctx, due, kc.String()).Err(); !errors.Is(err, redis.Nil) {
			t.Fatalf("the deleted partition is due again after a registration: %v", err)
		}
		if rep := e.tick(eng); rep.SkippedPaused != 0 || rep.Ran != 0 {
			t.Fatalf("a tick after the delete: %+v", rep)
		}

		// a and b lose their due entries.
		if err := b.Client.ZRem(ctx, due, ka.String(), kb.String()).Err(); err != nil {
			t.Fatal(err)
		}
		next, err := b.Client.HGet(ctx, eng.store.Key(ka, "state"), "nextDue").Float64()
		if err != nil {
			t.Fatal(err)
		}
		repaired, err := ops.RepairDue(ctx)
		byPartition := func(x, y watukuytype.Key) int { return strings.Compare(x.Partition, y.Partition) }
		slices.SortFunc(repaired, byPartition)
		slices.SortFunc(hooked, byPartition)
		if err != nil || !slices.Equal(repaired, []watukuytype.Key{ka, kb}) || !slices.Equal(hooked, repaired) {
			t.Fatalf("repaired %v (hooks saw %v), %v; want a and b", repaired, hooked, err)
		}
		if got := b.Client.ZScore(ctx, due, ka.String()).Val(); got != next {
			t.Fatalf("a repaired due at %v, want its state's next due %v", got, next)
		}
		if err := b.Client.ZScore(ctx, due, kc.String()).Err(); !errors.Is(err, redis.Nil) {
			t.Fatalf("the sweep made the deleted partition due: %v", err)
		}
		if again, err := ops.RepairDue(ctx); err != nil || len(again) != 0 {
			t.Fatalf("a second sweep repaired %v, %v", again, err)
		}

		// Tick mode has no scheduler: a tick runs the sweep, at most once a minute. (Setup
		// gives the config's keys that lack one a due entry too, so a's goes after it.)
		fresh := e.engine(p, nil)
		if err := fresh.Setup(ctx); err != nil {
			t.Fatal(err)
		}
		if err := b.Client.ZRem(ctx, due, ka.String()).Err(); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(3 * time.Minute)
		if rep := e.tick(fresh); rep.Repaired != 1 || rep.Ran != 2 {
			t.Fatalf("a tick after a lost due entry: %+v, want a repaired and a, b run", rep)
		}
		if err := b.Client.ZRem(ctx, due, ka.String()).Err(); err != nil {
			t.Fatal(err)
		}
		if rep := e.tick(fresh); rep.Repaired != 0 {
			t.Fatalf("a second tick within the minute swept again: %+v", rep)
		}
	})
}
