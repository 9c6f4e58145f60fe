package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redistest"
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
			g, err := s.TakeToken(ctx, core.BudgetTake{Bucket: "shop", Interval: 100 * time.Millisecond, Burst: 3, Reserve: reserve, MaxWait: maxWait})
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
		pttl := b.Client.PTTL(ctx, s.bucketKey("shop")).Val()
		if pttl <= time.Second || pttl > 1400*time.Millisecond {
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
		g, err := s.TakeToken(ctx, core.BudgetTake{Bucket: "shop", Interval: time.Millisecond, Burst: 10, MaxWait: time.Minute})
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
		take := core.BudgetTake{Bucket: "api", Interval: 100 * time.Millisecond, Burst: 1, MaxWait: time.Second}
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
