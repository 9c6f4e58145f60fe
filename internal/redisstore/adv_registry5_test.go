package redisstore

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/redistest"
)

// Adversarial review of the registry change (config keys registered by their poller's entry).
//
// A routine config change of a poller with a million partitions (the bench's size: one poller,
// 1,000,000 keys) must not block Redis. The first version did the registry diff in a script
// (register_poller.lua) that decoded the old and the new pollers entry (11 MB of JSON each)
// whenever the entry differed in any byte: adding one partition blocked every other client for
// 2.4 s on the project's 2-core machine, dropping half the list 4.0–6.6 s, and past 5 s
// (busy-reply-threshold) lease renewals, commits and claims got BUSY. registerPoller now works
// the diff out in Go under WATCH and writes only what changed. This test adds one partition to
// a 1,000,000-partition entry and measures what another client waits for a PING meanwhile.
func TestAdv6RegisterPollerKeepsRedisResponsive(t *testing.T) {
	b := redistest.Real(t)
	s, _ := newStore(t, b)
	ctx := context.Background()
	const n = 1_000_000
	entry := func(count int) []byte {
		parts := make([]string, count)
		for i := range parts {
			parts[i] = fmt.Sprintf("t%07d", i)
		}
		raw, _ := json.Marshal(map[string]any{"poller": "orders", "partitions": parts, "max": "1m"})
		return raw
	}
	// The entry an earlier registration left.
	if err := b.Client.HSet(ctx, s.pollersKey(), "orders", entry(n)).Err(); err != nil {
		t.Fatal(err)
	}
	next := entry(n + 1) // the config adds one partition

	other := redis.NewClient(&redis.Options{Network: "unix", Addr: b.Client.(*redis.Client).Options().Addr,
		ReadTimeout: 20 * time.Second, MaxRetries: -1})
	defer other.Close()
	if err := other.SlowLogReset(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	var worst atomic.Int64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			_ = other.Ping(ctx).Err() // BUSY past 5 s counts as the wait it ended
			if d := int64(time.Since(start)); d > worst.Load() {
				worst.Store(d)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	start := time.Now()
	set, err := listedSet(next)
	if err != nil {
		t.Fatal(err)
	}
	changed, err := s.registerPoller(ctx, "orders", next, set)
	took := time.Since(start)
	time.Sleep(100 * time.Millisecond)
	close(stop)
	<-done
	var slowest time.Duration
	if sl, err := other.SlowLogGet(ctx, 10).Result(); err == nil {
		for _, e := range sl {
			slowest = max(slowest, e.Duration)
		}
	}
	t.Logf("registerPoller adding one partition to %d: caller %v (changed %v, %v), slowest command %v, another client's worst PING %v",
		n, took, changed, err, slowest, time.Duration(worst.Load()))
	if err != nil || !changed {
		t.Fatalf("registerPoller: changed %v, %v", changed, err)
	}
	if w := time.Duration(worst.Load()); w > 500*time.Millisecond {
		t.Errorf("a config that adds one partition to a %d-partition poller blocked Redis: another client waited %v for a PING (slowest command %v)",
			n, w, slowest)
	}
}
