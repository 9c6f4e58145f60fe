package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// BenchmarkIdleScripts: what an idle cycle's scripts cost Redis, by the CPU a private
// redis-server reports. "begin+end": 32 goroutines run the Begin and End of idle keys of their
// own in turn, their calls sharing pipelines through the store's batcher; "calls": two
// `return 1` scripts with the very keys and arguments of a Begin and an End, sent the same
// way (what the calls cost, their bodies aside); "claim": a scheduler's claim of 200 due keys
// and its confirmation, per key (an INFO between them included, about 0.1 µs a key).
func BenchmarkIdleScripts(b *testing.B) {
	const goroutines, keysEach = 32, 10
	rb := redistest.Real(b)
	s, err := New(rb.Client, Options{Prefix: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	parts := make([]string, goroutines*keysEach)
	for i := range parts {
		parts[i] = strconv.Itoa(i)
	}
	registerListing(b, s, parts...)
	// cycles runs b.N cycles of cycle over the goroutines, each on its own keys, and reports
	// Redis' CPU per cycle.
	cycles := func(b *testing.B, cycle func(key watukuytype.Key) error) {
		b.SetParallelism((goroutines + 1) / 2) // 32 goroutines on two cores
		var next atomic.Int64
		cpu := rb.CPU(b)
		b.RunParallel(func(pb *testing.PB) {
			first := int(next.Add(1)-1) % goroutines * keysEach
			for i := 0; pb.Next(); i++ {
				if err := cycle(watukuytype.Key{Poller: "orders", Partition: parts[first+i%keysEach]}); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric((rb.CPU(b)-cpu)/float64(b.N), "redisCpuUs/cycle")
	}
	idle := func(key watukuytype.Key) (core.BeginResult, core.EndRequest, error) {
		r, err := s.Begin(ctx, key, "w", 30*time.Second, core.BeginForCycle)
		if err == nil && r.Status != core.BeginOK {
			err = fmt.Errorf("begin %s: %v", key, r.Status)
		}
		now := strconv.FormatInt(time.Now().UnixMilli(), 10)
		return r, core.EndRequest{State: map[string]string{"lastPoll": now}, NextDue: time.Now(), Trigger: r.State["trig"]}, err
	}
	b.Run("begin+end", func(b *testing.B) {
		cycles(b, func(key watukuytype.Key) error {
			r, end, err := idle(key)
			if err != nil {
				return err
			}
			return s.End(ctx, r.Lease, end)
		})
	})
	b.Run("calls", func(b *testing.B) {
		one := redis.NewScript("return 1")
		cycles(b, func(key watukuytype.Key) error {
			bk, bargv := beginArgs{Key: key, Owner: "w", TTL: 30 * time.Second, Now: s.nowArg(), Token: "t", Seed: s.firstSeed()}.encode(s)
			l := core.Lease{Key: key, Epoch: 1, Token: "t"}
			ek, eargv := endArgs{Key: key, writeFence: s.writeFenceOf(l), State: map[string]string{"lastPoll": "1"}, Due: "1"}.encode(s)
			if _, err := s.batchRun(ctx, &batchCall{lua: one, keys: bk, argv: bargv}); err != nil {
				return err
			}
			_, err := s.batchRun(ctx, &batchCall{lua: one, keys: ek, argv: eargv})
			return err
		})
	})
	b.Run("claim", func(b *testing.B) {
		const batch = 200
		var claim, confirm float64
		due := make([]redis.Z, len(parts))
		for i := 0; i < b.N; i++ {
			for j, p := range parts {
				due[j] = redis.Z{Score: float64(j), Member: "orders|" + p}
			}
			if err := rb.Client.ZAdd(ctx, s.dueKey("orders"), due[:batch]...).Err(); err != nil {
				b.Fatal(err)
			}
			cpu := rb.CPU(b)
			c, err := s.ClaimForEnqueue(ctx, batch, time.Second, []string{"orders"})
			if err != nil || len(c.Keys) != batch {
				b.Fatalf("claim: %d keys, %v", len(c.Keys), err)
			}
			claimed := rb.CPU(b)
			if err := s.ConfirmClaims(ctx, c, c.Keys, 0); err != nil {
				b.Fatal(err)
			}
			claim, confirm = claim+claimed-cpu, confirm+rb.CPU(b)-claimed
		}
		b.ReportMetric(claim/float64(b.N*batch), "claimRedisCpuUs/key")
		b.ReportMetric(confirm/float64(b.N*batch), "confirmRedisCpuUs/key")
	})
}
