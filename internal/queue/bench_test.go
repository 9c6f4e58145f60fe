package queue

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redisstore"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/internal/statehash"
	"github.com/watukuy/watukuy/watukuytype"
)

const benchKeys = 2000

// BenchmarkNoopCycles: no-op cycles per second through the scheduler, asynq and a worker
// against a real redis-server (a poller of 2,000 partitions whose fetch returns an empty
// page), next to raw asynq no-op tasks per second measured in the same run with the same
// concurrency. Goal: cycles/s >= 0.8 × tasks/s.
func BenchmarkNoopCycles(b *testing.B) {
	for _, perTask := range []int{1, 10} {
		b.Run(fmt.Sprintf("perTask=%d", perTask), func(b *testing.B) { benchNoop(b, perTask) })
	}
}

func benchNoop(b *testing.B, perTask int) {
	rb := redistest.Real(b)
	const concurrency = 32
	rawPerSec := rawAsynq(b, rb.Client, concurrency)

	st, err := redisstore.New(rb.Client, redisstore.Options{Prefix: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	var done atomic.Int64
	all := make(chan struct{}, 1)
	target := atomic.Int64{}
	eng, err := core.NewEngine(core.Options{Store: st, InstanceID: "bench", Hooks: watukuytype.Hooks{OnCycle: func(r watukuytype.CycleReport, _ time.Duration) {
		if r.Outcome == watukuytype.Ran && done.Add(1) == target.Load() {
			all <- struct{}{}
		}
	}}})
	if err != nil {
		b.Fatal(err)
	}
	parts := make([]string, benchKeys)
	for i := range parts {
		parts[i] = fmt.Sprintf("p%04d", i)
	}
	noop := func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
		return watukuytype.Page{Next: req.Cursor}, nil
	}
	if err := eng.Register(watukuytype.Poller{Name: "noop", Partitions: parts, Fetch: noop,
		Handler: func(context.Context, watukuytype.Event) error { return nil }}); err != nil {
		b.Fatal(err)
	}
	if err := eng.Setup(b.Context()); err != nil {
		b.Fatal(err)
	}
	srv := asynq.NewServerFromRedisClient(rb.Client, ServerConfig(concurrency, time.Second, "", zerolog.Nop()))
	if err := srv.Start(Handler(eng, zerolog.Nop())); err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	sch := &Scheduler{Store: st, Client: asynq.NewClientFromRedisClient(rb.Client), Prefix: "bench", Batch: 200, PerTask: perTask}

	b.ResetTimer()
	var cycles int64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		makeAllDue(b, rb.Client, st, parts)
		done.Store(0)
		target.Store(benchKeys)
		b.StartTimer()
		for {
			n, err := sch.Once(b.Context())
			if err != nil {
				b.Fatal(err)
			}
			if n == 0 {
				break
			}
		}
		select {
		case <-all:
		case <-time.After(time.Minute):
			b.Fatalf("only %d of %d cycles ran", done.Load(), benchKeys)
		}
		cycles += benchKeys
	}
	perSec := float64(cycles) / b.Elapsed().Seconds()
	b.ReportMetric(perSec, "cycles/s")
	b.ReportMetric(rawPerSec, "raw-asynq-tasks/s")
	b.ReportMetric(perSec/rawPerSec, "ratio")
}

// makeAllDue clears every key's due time (untimed): as if all became due at once.
func makeAllDue(b *testing.B, rdb redis.UniversalClient, st *redisstore.Store, parts []string) {
	_, err := rdb.Pipelined(b.Context(), func(p redis.Pipeliner) error {
		for _, part := range parts {
			k := watukuytype.Key{Poller: "noop", Partition: part}
			p.HSet(b.Context(), st.Key(k, "state"), statehash.NextDue, "0")
			p.ZAdd(b.Context(), st.DueKey(k.Poller), redis.Z{Score: 0, Member: k.String()})
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

// rawAsynq measures asynq alone: benchKeys no-op tasks with task IDs, enqueued one by one
// and processed by a server of the same concurrency, three rounds.
func rawAsynq(b *testing.B, rdb redis.UniversalClient, concurrency int) float64 {
	var done atomic.Int64
	all := make(chan struct{}, 1)
	srv := asynq.NewServerFromRedisClient(rdb, ServerConfig(concurrency, time.Second, "raw", zerolog.Nop()))
	if err := srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		if done.Add(1)%benchKeys == 0 {
			all <- struct{}{}
		}
		return nil
	})); err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	client := asynq.NewClientFromRedisClient(rdb)
	start := time.Now()
	const rounds = 3
	for r := 0; r < rounds; r++ {
		for i := 0; i < benchKeys; i++ {
			t := asynq.NewTask("raw", nil, asynq.TaskID(fmt.Sprintf("raw:%d:%d", r, i)), asynq.Queue("raw"), asynq.MaxRetry(0), asynq.Retention(0))
			if _, err := client.EnqueueContext(b.Context(), t); err != nil {
				b.Fatal(err)
			}
		}
		select {
		case <-all:
		case <-time.After(time.Minute):
			b.Fatal("raw asynq tasks did not finish")
		}
	}
	return float64(rounds*benchKeys) / time.Since(start).Seconds()
}
