package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// gate holds the first maxInFlight pipelines of scripts until it is opened, and counts the
// round trips that run scripts (a new connection's handshake is a pipeline too).
type gate struct {
	open  chan struct{}
	held  atomic.Int64
	trips atomic.Int64
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" || cmd.Name() == "eval" {
			g.trips.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || cmds[0].Name() != "evalsha" {
			return next(ctx, cmds)
		}
		g.trips.Add(1)
		if g.held.Add(1) <= maxInFlight {
			<-g.open
		}
		return next(ctx, cmds)
	}
}

// The short scripts of concurrent callers that meet while the pipelines in flight are busy go
// out together, in one round trip, and each caller gets its own reply: 64 SetDue calls cost
// maxInFlight round trips plus one, and every key has the due time its caller wrote.
func TestConcurrentShortScriptsShareARoundTrip(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		s, clk := newStore(t, b)
		if err := s.SetDue(t.Context(), watukuytype.Key{Poller: "p", Partition: "warm"}, clk.Now()); err != nil {
			t.Fatal(err) // the server now has the script
		}
		g := &gate{open: make(chan struct{})}
		b.Client.AddHook(g)
		const n = 64
		due := clk.Now().Add(time.Hour)
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := watukuytype.Key{Poller: "p", Partition: fmt.Sprintf("k%02d", i)}
				errs[i] = s.SetDue(t.Context(), key, due.Add(time.Duration(i)*time.Second))
			}()
		}
		for deadline := time.Now().Add(10 * time.Second); ; { // every call but those in flight waits in the batcher
			s.batch.mu.Lock()
			waiting := len(s.batch.pending)
			s.batch.mu.Unlock()
			if waiting == n-maxInFlight {
				break
			}
			if time.Now().After(deadline) {
				close(g.open)
				wg.Wait()
				t.Fatalf("%d calls waiting in the batcher, want %d (trips %d)", waiting, n-maxInFlight, g.trips.Load())
			}
			time.Sleep(time.Millisecond) // the callers are goroutines of this test: no signal to wait on
		}
		close(g.open)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		if got := g.trips.Load(); got != maxInFlight+1 {
			t.Fatalf("%d concurrent calls took %d round trips, want %d", n, got, maxInFlight+1)
		}
		for i := range n {
			key := watukuytype.Key{Poller: "p", Partition: fmt.Sprintf("k%02d", i)}
			score, err := b.Client.ZScore(t.Context(), s.DueKey("p"), key.String()).Result()
			if err != nil {
				t.Fatal(err)
			}
			if want := due.Add(time.Duration(i) * time.Second).UnixMilli(); int64(score) != want {
				t.Fatalf("%s due at %d, want %d", key.Describe(), int64(score), want)
			}
		}
	})
}
