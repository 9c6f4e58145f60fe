package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/internal/metrics"
	"github.com/watukuy/watukuy/internal/outage"
	"github.com/watukuy/watukuy/internal/queue"
)

// DataWatchEvery is how often a long-running process checks that Redis still holds its data.
const DataWatchEvery = time.Second

// recovery is a process's watch over its Redis: one outage tracker (scheduler, data watcher,
// asynq and go-redis log lines go through it, so an outage is logged once per process) and
// one data watcher, started by the first component that needs them (run and dev start a
// scheduler and a worker).
type recovery struct {
	once    sync.Once
	tracker *outage.Tracker
	metrics *metrics.Redis
	watch   sync.Once
}

// outage returns the process's outage tracker, creating it (and its metrics) on first use.
func (env *Env) outage() *outage.Tracker {
	env.recovery.once.Do(func() {
		env.recovery.metrics = metrics.NewRedis(env.Registry)
		m := env.recovery.metrics
		env.recovery.tracker = outage.New(env.Log, outage.Options{
			OnDown: func() { m.Outages.Inc(); m.Up.Set(0) },
			OnUp:   func(d time.Duration) { m.OutageSeconds.Add(d.Seconds()); m.Up.Set(1) },
		})
		redis.SetLogger(redisLogger{log: env.Log, t: env.recovery.tracker})
	})
	return env.recovery.tracker
}

// watchData starts the process's data watcher once (see core.DataWatch): every
// DataWatchEvery it checks that Redis still holds watukuy's data; after a loss it logs one
// error, counts it in watukuy_redis_data_loss_total and, with reregister (processes that run
// cycles), registers the process's pollers again.
func (env *Env) watchData(ctx context.Context, reregister bool) {
	t := env.outage()
	env.recovery.watch.Do(func() {
		go env.Engine.WatchData(ctx, watukuy.WatchOptions{Every: DataWatchEvery, ReportOnly: !reregister,
			OnLoss: env.recovery.metrics.DataLoss.Inc, OnCheck: func(err error) bool {
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
	})
}

// asynqLogger is the worker's asynq logger, quiet during an outage.
func (env *Env) asynqLogger(c asynq.Config) asynq.Config {
	c.Logger = queue.OutageLogger(c.Logger, env.outage(), env.ping)
	return c
}

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
