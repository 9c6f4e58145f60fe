package watukuy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynqmon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy/internal/health"
	"github.com/watukuy/watukuy/internal/metrics"
	"github.com/watukuy/watukuy/internal/outage"
	"github.com/watukuy/watukuy/internal/queue"
)

// DefaultQueue is the asynq queue a Scheduler puts cycles in and a Worker takes them from,
// unless their options name another.
const DefaultQueue = queue.DefaultQueue

// DefaultDrain is WorkerOptions.DrainTimeout when it is not set.
const DefaultDrain = 30 * time.Second

// pool is what the Workers and Schedulers built on one engine share, made by the first of
// them: one outage tracker (the scheduler's claims, the data watcher, asynq's and go-redis'
// log lines go through it, so an outage is logged once per process however many components
// notice it), the Redis metrics it feeds, and one data watcher.
type pool struct {
	once    sync.Once
	tracker *outage.Tracker
	metrics *metrics.Redis

	mu         sync.Mutex
	watching   uint64 // generation of the running data watcher; 0: none
	gen        uint64
	reregister bool
	stopWatch  context.CancelFunc
}

// init makes the tracker and its metrics (registered on reg when set) on first use, and
// routes go-redis' own log lines through the tracker (go-redis has one logger per process:
// with several engines in one process, the last one's tracker gets them).
func (p *pool) init(log zerolog.Logger, reg prometheus.Registerer) {
	p.once.Do(func() {
		m := metrics.NewRedis(reg)
		p.metrics = m
		p.tracker = outage.New(log, outage.Options{
			OnDown: func() { m.Outages.Inc(); m.Up.Set(0) },
			OnUp:   func(d time.Duration) { m.OutageSeconds.Add(d.Seconds()); m.Up.Set(1) },
		})
		redis.SetLogger(redisLogger{log: log, t: p.tracker})
	})
}

// watchData runs the engine's data watcher (Engine.WatchData) until ctx ends, once per
// engine: a Scheduler's only reports a loss; a Worker's also registers the pollers again, and
// replaces a reporting one started before it (watukuy run starts both).
func (p *pool) watchData(ctx context.Context, e *Engine, reregister bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.watching != 0 && (p.reregister || !reregister) {
		return
	}
	if p.stopWatch != nil {
		p.stopWatch()
	}
	p.gen++
	gen := p.gen
	ctx, p.stopWatch = context.WithCancel(ctx)
	p.watching, p.reregister = gen, reregister
	t := p.tracker
	go func() {
		e.WatchData(ctx, WatchOptions{ReportOnly: !reregister, OnLoss: p.metrics.DataLoss.Inc,
			OnCheck: func(err error) bool {
				switch {
				case err == nil:
					t.OK()
				case outage.Unreachable(err):
					t.Fail("data watcher", err)
				default:
					return false
				}
				return true
			}})
		p.mu.Lock()
		if p.watching == gen { // ended with its component: a later one starts its own
			p.watching = 0
		}
		p.mu.Unlock()
	}()
}

// admin is the health server of a Worker or Scheduler: /healthz, /readyz (ready), /metrics
// (reg, when set) and, with ui, asynqmon under /monitoring/.
func admin(rdb redis.UniversalClient, ready func(context.Context) error, reg *prometheus.Registry, ui bool, log zerolog.Logger) *health.Server {
	hs := &health.Server{Logger: log, Ready: ready}
	if reg != nil {
		hs.Metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	}
	if ui {
		hs.UI = asynqmon.New(asynqmon.Options{RootPath: health.UIPath, RedisConnOpt: connOpt{rdb}})
	}
	return hs
}

// serve listens on listen ("" serves nothing, "off" logs that it serves nothing) and serves
// hs until ctx ends.
func serve(ctx context.Context, hs *health.Server, listen string, log zerolog.Logger) error {
	if listen == "" {
		return nil
	}
	hs.Listen = listen
	addr, err := hs.Start(ctx)
	if err != nil {
		return fmt.Errorf("listen %s: %w", listen, err)
	}
	if addr != "" {
		log.Info().Str("addr", addr).Bool("ui", hs.UI != nil).Msg("serving /healthz /readyz /metrics")
	}
	return nil
}

// connOpt hands asynqmon the engine's own Redis client.
type connOpt struct{ c redis.UniversalClient }

func (o connOpt) MakeRedisClient() interface{} { return o.c }

// redisLogger routes go-redis' own log lines (e.g. "failed to dial after 5 attempts", one per
// pooled connection it tries) into the process log: those of an outage go to the tracker
// (logged once), the others at warn level (dropped during an outage).
type redisLogger struct {
	log zerolog.Logger
	t   *outage.Tracker
}

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	msg := strings.TrimSpace(fmt.Sprintf(format, v...))
	switch {
	case outage.LooksUnreachable(msg):
		l.t.Fail("redis client", errors.New(msg))
	case l.t.Down(): // a consequence of the outage: the tracker's lines say it all
	default:
		l.log.Warn().Str("from", "go-redis").Msg(msg)
	}
}

// ping is one PING of the engine's Redis: the readiness of a Scheduler, part of a Worker's.
func (e *Engine) ping(ctx context.Context) error { return e.rdb.Ping(ctx).Err() }
