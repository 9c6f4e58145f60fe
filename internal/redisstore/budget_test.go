package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/budget"
	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// budget_take.lua is GCRA: a burst at once, then one token per interval; a taker may hold a
// slot up to its longest wait (later takers queue behind it); a lower lane leaves its
// reserve; nothing is written when it refuses.
func TestBudgetTake(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		s, clk := newStore(t, b)
		ctx := context.Background()
		take := func(reserve int, maxWait time.Duration) core.BudgetGrant {
			t.Helper()
			g, err := s.TakeToken(ctx, core.BudgetTake{Bucket: "shop", Interval: 100 * time.Millisecond, Burst: 3, Reserve: reserve, SitOut: maxWait})
			if err != nil {
				t.Fatal(err)
			}
			return g
		}
		for i := range 3 {
			if g := take(0, 0); !g.Taken || g.Wait != 0 {
				t.Fatalf("take %d of a burst of 3: %+v", i, g)
			}
		}
		if g := take(0, 0); g.Taken || g.Wait != 100*time.Millisecond {
			t.Fatalf("a fourth at once: %+v; want refused, 100ms", g)
		}
		// Holding slots: each later taker queues one interval behind the last.
		for i, want := range []time.Duration{100, 200, 300} {
			if g := take(0, time.Second); !g.Taken || g.Wait != want*time.Millisecond {
				t.Fatalf("held slot %d: %+v; want taken after %dms", i, g, want)
			}
		}
		if g := take(0, 350*time.Millisecond); g.Taken || g.Wait != 400*time.Millisecond {
			t.Fatalf("a slot beyond the longest wait: %+v; want refused, 400ms", g)
		}
		// Refused takes wrote nothing: the bucket is full again once the held slots pass.
		clk.Advance(600 * time.Millisecond)
		// A lower lane that keeps 2 of 3 tokens takes one and leaves the rest to live.
		if g := take(2, 0); !g.Taken {
			t.Fatalf("a backfill on a full bucket: %+v", g)
		}
		if g := take(2, 0); g.Taken || g.Wait != 100*time.Millisecond {
			t.Fatalf("a backfill below its reserve: %+v; want refused until one more token is back", g)
		}
		for i := range 2 {
			if g := take(0, 0); !g.Taken || g.Wait != 0 {
				t.Fatalf("live take %d from the reserve: %+v", i, g)
			}
		}
		// Redis expires on its own clock, which the test's does not move: the bucket keeps an hour
		// more than the 300ms until it is full again.
		pttl := b.Client.PTTL(ctx, s.bucketKey("shop")).Val()
		if pttl <= time.Hour || pttl > time.Hour+400*time.Millisecond {
			t.Errorf("under a test clock the bucket expires in %v; want once it is full again (300ms) plus an hour", pttl)
		}
	})
}

// On the server's own clock a bucket expires once it is full again, plus a second: an idle
// budget leaves nothing behind.
func TestBudgetBucketExpiresOnceFull(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		s, err := New(b.Client, Options{})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for range 3 {
			if _, err := s.TakeToken(ctx, core.BudgetTake{Bucket: "shop", Interval: 100 * time.Millisecond, Burst: 3}); err != nil {
				t.Fatal(err)
			}
		}
		if pttl := b.Client.PTTL(ctx, s.bucketKey("shop")).Val(); pttl <= time.Second || pttl > 1400*time.Millisecond {
			t.Errorf("the bucket expires in %v; want once it is full again (300ms) plus a second", pttl)
		}
	})
}

// A pause refuses every take until it ends, whatever the lane; a shorter pause does not
// shorten it; Buckets reads it.
func TestBudgetPause(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		s, clk := newStore(t, b)
		ctx := context.Background()
		until, err := s.PauseBudget(ctx, "shop", 5*time.Second)
		if err != nil || !until.Equal(clk.Now().Add(5*time.Second).Truncate(time.Millisecond)) {
			t.Fatalf("PauseBudget: %v, %v", until, err)
		}
		if u2, err := s.PauseBudget(ctx, "shop", time.Second); err != nil || !u2.Equal(until) {
			t.Fatalf("a shorter pause: %v, %v; want the longer one kept (%v)", u2, err, until)
		}
		g, err := s.TakeToken(ctx, core.BudgetTake{Bucket: "shop", Interval: time.Millisecond, Burst: 10, SitOut: time.Minute})
		if err != nil || g.Taken || !g.PausedUntil.Equal(until) || g.Wait != 5*time.Second {
			t.Fatalf("a take in the pause: %+v, %v", g, err)
		}
		got, now, err := s.Buckets(ctx, []string{"shop", "other"})
		if err != nil || !got["shop"].PausedUntil.Equal(until) || got["other"] != (core.Bucket{}) || !now.Equal(clk.Now()) {
			t.Fatalf("Buckets: %+v at %v, %v", got, now, err)
		}
		clk.Advance(5 * time.Second)
		if g, err := s.TakeToken(ctx, core.BudgetTake{Bucket: "shop", Interval: time.Millisecond, Burst: 10}); err != nil || !g.Taken {
			t.Fatalf("a take after the pause: %+v, %v", g, err)
		}
	})
}

// Without a clock override the buckets run on the server's TIME, in microseconds.
func TestBudgetOnTheServerClock(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		s, err := New(b.Client, Options{Prefix: "srv"})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		take := core.BudgetTake{Bucket: "api", Interval: 100 * time.Millisecond, Burst: 1, SitOut: time.Second}
		var last time.Duration
		for i := range 4 {
			g, err := s.TakeToken(ctx, take)
			if err != nil || !g.Taken || g.Wait > time.Duration(i)*100*time.Millisecond {
				t.Fatalf("take %d: %+v, %v", i, g, err)
			}
			last = g.Wait
		}
		if last == 0 {
			t.Error("four takes of a bucket of one token, 100ms apart, all went at once")
		}
		got, now, err := s.Buckets(ctx, []string{"api"})
		// Held slots reach 300ms ahead: the bucket is full again after them.
		if tat := got["api"].TAT; err != nil || tat.Before(now) || tat.After(now.Add(time.Second)) {
			t.Fatalf("Buckets: %+v at %v, %v", got, now, err)
		}
	})
}

// BenchmarkBudgetTake: tokens taken per second from one bucket on a private redis-server,
// from 8 goroutines (one round trip each; the bucket is large enough that none waits).
func BenchmarkBudgetTake(b *testing.B) {
	rb := redistest.Real(b)
	s, err := New(rb.Client, Options{Prefix: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	take := core.BudgetTake{Bucket: "api", Interval: time.Microsecond, Burst: 1_000_000}
	b.SetParallelism(8)
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if g, err := s.TakeToken(context.Background(), take); err != nil || !g.Taken {
				b.Errorf("take: %+v, %v", g, err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "takes/s")
}

// A live request whose wait is too long to sit out holds its token in the bucket under its
// key: asking again before its slot keeps it, at its slot hands it over once (single use),
// a pause moves it to the pause's end, and a change of the interval drops the held slots.
func TestBudgetHeldSlots(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		s, clk := newStore(t, b)
		ctx := context.Background()
		ask := func(part string, sitOut time.Duration, interval time.Duration) core.BudgetGrant {
			t.Helper()
			g, err := s.TakeToken(ctx, core.BudgetTake{Bucket: "shop", Key: watukuytype.Key{Poller: "o", Partition: part},
				Interval: interval, Burst: 1, SitOut: sitOut, Hold: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			return g
		}
		ms := time.Millisecond
		if g := ask("a", 0, 100*ms); !g.Taken || g.Wait != 0 || g.Held {
			t.Fatalf("a, the bucket's one token: %+v", g)
		}
		if g := ask("b", 0, 100*ms); !g.Taken || g.Wait != 100*ms || g.Held {
			t.Fatalf("b, held for 100ms: %+v", g)
		}
		if g := ask("b", 0, 100*ms); !g.Taken || g.Wait != 100*ms || !g.Held {
			t.Fatalf("b again before its slot: %+v; want its held token kept", g)
		}
		if g := ask("c", 0, 100*ms); !g.Taken || g.Wait != 200*ms || g.Held {
			t.Fatalf("c, behind b's held slot: %+v", g)
		}
		clk.Advance(100 * ms)
		if g := ask("b", time.Second, 100*ms); !g.Taken || g.Wait != 0 || !g.Held {
			t.Fatalf("b at its slot: %+v; want its held token", g)
		}
		if g := ask("b", 0, 100*ms); g.Held || g.Wait != 200*ms {
			t.Fatalf("b once more: %+v; a held token is handed over once, then b queues anew", g)
		}
		// c holds a slot 100ms ahead; a pause of 5s moves it to the pause's end.
		until, err := s.PauseBudget(ctx, "shop", 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if g := ask("c", time.Second, 100*ms); g.Taken || g.PausedUntil != until {
			t.Fatalf("c in the pause: %+v", g)
		}
		clk.Advance(5 * time.Second)
		if g := ask("c", time.Second, 100*ms); !g.Taken || !g.Held || g.Wait != 0 {
			t.Fatalf("c after the pause: %+v; want the token it held", g)
		}
		// A reload to another interval drops the held slots (b's) and rescales the queue.
		if n := b.Client.ZCard(ctx, s.heldKey("shop")).Val(); n != 1 {
			t.Fatalf("%d held slots, want b's", n)
		}
		if g := ask("b", 0, 200*ms); g.Held {
			t.Fatalf("b after the interval changed: %+v; want its held slot dropped", g)
		}
	})
}

// budget_take.lua keeps the fraction of an interval (333.333 µs at 3000/s) in the stored tat
// instead of rounding each step to a whole µs, a faster rate that adds up without bound: 3000
// tokens of a 3000/s budget of burst 1, taken back to back, hold no more than it allows.
func TestBudgetTakeKeepsAFractionalInterval(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		s, _ := newStore(t, b)
		ctx := context.Background()
		bg := watukuytype.Budget{Name: "shop", Rate: 3000, Per: time.Second, Burst: 1}
		var slots []time.Time
		for range 3000 {
			g, err := s.TakeToken(ctx, core.BudgetTake{Bucket: "shop", Interval: budget.Interval(bg), Burst: 1, SitOut: time.Hour})
			if err != nil || !g.Taken {
				t.Fatalf("take: %+v, %v", g, err)
			}
			slots = append(slots, g.At.Add(g.Wait))
		}
		if e, from, to := budget.Excess(bg, slots, 0); e > 1e-6 {
			t.Fatalf("3000 slots of a 3000/s budget of burst 1 span %v: %.2f more than it allows in %v", slots[len(slots)-1].Sub(slots[0]), e, to.Sub(from))
		}
	})
}
