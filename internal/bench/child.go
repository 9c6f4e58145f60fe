package bench

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy/internal/queue"
	"github.com/watukuy/watukuy/internal/redisstore"
	"github.com/watukuy/watukuy/internal/statehash"
	"github.com/watukuy/watukuy/watukuytype"
)

// childArgs are the settings of a worker or scheduler process of a measurement.
type childArgs struct {
	role, redis, prefix, queue, out, counter string
	keys, concurrency                        int
	interval                                 time.Duration
}

func (a childArgs) flags() []string {
	return []string{"--role", a.role, "--redis", a.redis, "--prefix", a.prefix, "--queue", a.queue, "--out", a.out,
		"--counter", a.counter, "--keys", fmt.Sprint(a.keys), "--concurrency", fmt.Sprint(a.concurrency), "--interval", a.interval.String()}
}

// Child runs one process of a measurement (what `watukuy bench child` runs) until ctx ends:
// --role worker runs an asynq server whose handler runs the bench poller's cycles, counting
// them in the --counter key and, with --out, writing "key dueMs startMs" per cycle (the key's
// nextDue from its state hash, read just before the cycle, and the cycle's start); --role
// scheduler runs a queue.Scheduler. Both INCR <counter>:ready once they run.
func Child(ctx context.Context, args []string, stderr io.Writer) error {
	var a childArgs
	fs := flag.NewFlagSet("bench child", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&a.role, "role", "", "worker or scheduler")
	fs.StringVar(&a.redis, "redis", "", "Redis URL")
	fs.StringVar(&a.prefix, "prefix", "", "key prefix")
	fs.StringVar(&a.queue, "queue", "", "asynq queue")
	fs.StringVar(&a.out, "out", "", "file of the cycles' due and start times")
	fs.StringVar(&a.counter, "counter", "", "Redis key counting cycles")
	fs.IntVar(&a.keys, "keys", 0, "partitions of the bench poller")
	fs.IntVar(&a.concurrency, "concurrency", 32, "asynq concurrency")
	fs.DurationVar(&a.interval, "interval", 0, "the keys' polling interval")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := zerolog.New(stderr).With().Timestamp().Str("role", a.role).Logger()
	rdb, err := connect(ctx, a.redis)
	if err != nil {
		return err
	}
	defer rdb.Close()
	e := &env{rdb: rdb, prefix: a.prefix}
	st, err := e.store()
	if err != nil {
		return err
	}
	switch a.role {
	case "scheduler":
		sch := &queue.Enqueuer{Store: st, Client: asynq.NewClientFromRedisClient(rdb), Inspector: asynq.NewInspectorFromRedisClient(rdb),
			Redis: rdb, Prefix: a.prefix, Queue: a.queue, Pollers: []string{pollerName}, Logger: log}
		if err := rdb.Incr(ctx, a.counter+":ready").Err(); err != nil {
			return fmt.Errorf("ready %s: %w", a.counter, err)
		}
		return sch.Run(ctx)
	case "worker":
		return runWorker(ctx, a, rdb, st, log)
	}
	return fmt.Errorf("bench child: --role %q: want worker or scheduler", a.role)
}

// runWorker is the worker child: an asynq server running the bench poller's cycles.
func runWorker(ctx context.Context, a childArgs, rdb redis.UniversalClient, st *redisstore.Store, log zerolog.Logger) error {
	eng, err := newEngine(st, fmt.Sprintf("worker-%d", os.Getpid()), noopPoller(a.keys, a.interval), watukuytype.Hooks{})
	if err != nil {
		return err
	}
	var out *bufio.Writer
	var mu sync.Mutex
	if a.out != "" {
		f, err := os.Create(a.out)
		if err != nil {
			return fmt.Errorf("bench child: %w", err)
		}
		defer f.Close()
		out = bufio.NewWriterSize(f, 1<<20)
		defer func() { mu.Lock(); _ = out.Flush(); mu.Unlock() }()
	}
	var cycles atomic.Int64
	h := asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		members := strings.Split(string(t.Payload()), "\n")
		keys := make([]watukuytype.Key, 0, len(members))
		for _, m := range members {
			if k, err := watukuytype.ParseKey(m); err == nil {
				keys = append(keys, k)
			}
		}
		due := make([]*redis.StringCmd, len(keys))
		if out != nil {
			// The due time each cycle serves, as the key's state records it; one round trip a task.
			_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i, k := range keys {
					due[i] = p.HGet(ctx, st.Key(k, "state"), statehash.NextDue)
				}
				return nil
			})
		}
		for i, k := range keys {
			if ctx.Err() != nil {
				return nil
			}
			started := time.Now().UnixMilli()
			rep := eng.RunCycle(ctx, k)
			if rep.Outcome != watukuytype.Ran {
				continue
			}
			cycles.Add(1)
			if out != nil {
				mu.Lock()
				fmt.Fprintf(out, "%s %s %d\n", k.String(), due[i].Val(), started)
				mu.Unlock()
			}
		}
		return nil
	})
	srv := asynq.NewServerFromRedisClient(rdb, queue.ServerConfig(a.concurrency, 5*time.Second, a.queue, log))
	if err := srv.Start(h); err != nil {
		return fmt.Errorf("bench child: asynq server: %w", err)
	}
	if err := rdb.Incr(ctx, a.counter+":ready").Err(); err != nil {
		srv.Shutdown()
		return fmt.Errorf("ready %s: %w", a.counter, err)
	}
	// The count goes to Redis ten times a second, so the parent sees progress without a
	// round trip per cycle.
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	var sent int64
	flush := func(ctx context.Context) {
		if n := cycles.Load(); n > sent {
			if err := rdb.IncrBy(ctx, a.counter, n-sent).Err(); err == nil {
				sent = n
			}
		}
	}
	for {
		select {
		case <-ctx.Done():
			srv.Shutdown()
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			flush(fctx)
			cancel()
			return nil
		case <-t.C:
			flush(ctx)
		}
	}
}
