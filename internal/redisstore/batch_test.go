package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/core"
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
// maxInFlight round trips plus one, and every key has the due time its caller wrote. On a
// cluster each goes alone (a pipeline there spans nodes, and one slow node would hold up the
// others' calls): 64 round trips, none waiting for another.
func TestConcurrentShortScriptsShareARoundTrip(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		s, clk := newStore(t, b)
		_, cluster := b.Client.(*redis.ClusterClient)
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
		if cluster {
			close(g.open)
		}
		for deadline := time.Now().Add(10 * time.Second); !cluster; { // every call but those in flight waits in the batcher
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
		if !cluster {
			close(g.open)
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		want := int64(maxInFlight + 1)
		if cluster {
			want = n
		}
		if got := g.trips.Load(); got != want {
			t.Fatalf("%d concurrent calls took %d round trips, want %d", n, got, want)
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

// A call whose context ended before it was sent sends nothing and fails with the context's
// error, as a round trip of its own would: no lease is taken for a cycle that was cancelled.
func TestBatchedCallWhoseContextEndedSendsNothing(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		s, _ := newStore(t, b)
		k := watukuytype.Key{Poller: "p", Partition: "c"}
		if err := s.Register(context.Background(), map[string][]byte{"p": []byte(`{"poller":"p"}`)}, []watukuytype.Key{k}); err != nil {
			t.Fatal(err)
		}
		first, err := s.Begin(context.Background(), k, "o", time.Minute, core.BeginForOp)
		if err != nil || first.Status != core.BeginOK {
			t.Fatal(first.Status, err)
		}
		if err := s.End(context.Background(), first.Lease, core.EndRequest{NextDue: first.Now}); err != nil {
			t.Fatal(err)
		}
		epoch := first.Lease.Epoch
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		r, err := s.Begin(ctx, k, "o", time.Minute, core.BeginForOp)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("a Begin whose ctx was cancelled before the call took the lease (status %v, epoch %d)", r.Status, r.Lease.Epoch)
		}
		if after, err := s.Begin(context.Background(), k, "o", time.Minute, core.BeginForOp); err != nil || after.Lease.Epoch != epoch+1 {
			t.Fatalf("the next Begin: epoch %d, %v; want %d (the cancelled one took none)", after.Lease.Epoch, err, epoch+1)
		}
	})
}

// A call waiting for a pipeline slot leaves when its context ends, having sent nothing; the
// calls in flight are not held up by it.
func TestBatchedCallStopsWaitingWhenItsContextEnds(t *testing.T) {
	b := redistest.Real(t)
	s, clk := newStore(t, b)
	key := func(p string) watukuytype.Key { return watukuytype.Key{Poller: "p", Partition: p} }
	if err := s.SetDue(t.Context(), key("warm"), clk.Now()); err != nil {
		t.Fatal(err)
	}
	g := &gate{open: make(chan struct{})}
	b.Client.AddHook(g)
	var wg sync.WaitGroup
	for i := range maxInFlight { // the slots, held by the gate
		wg.Add(1)
		go func() { defer wg.Done(); _ = s.SetDue(t.Context(), key(fmt.Sprint("held", i)), clk.Now()) }()
	}
	for g.held.Load() < maxInFlight {
		time.Sleep(time.Millisecond) // the callers are goroutines of this test: no signal to wait on
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.SetDue(ctx, key("late"), clk.Now().Add(time.Hour)) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(5 * time.Second):
		close(g.open)
		wg.Wait()
		t.Fatalf("a waiting call whose context ended did not leave: %v", <-done)
	}
	close(g.open)
	wg.Wait()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a waiting call whose context ended: %v, want its context's error", err)
	}
	if n, _ := b.Client.ZScore(t.Context(), s.DueKey("p"), key("late").String()).Result(); n != 0 {
		t.Fatalf("the call that left was sent: due %v", n)
	}
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	if len(s.batch.pending) != 0 || s.batch.inFlight != 0 {
		t.Fatalf("batcher after: %d pending, %d in flight", len(s.batch.pending), s.batch.inFlight)
	}
}
