package watukuy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy/internal/health"
	"github.com/watukuy/watukuy/internal/queue"
)

// WorkerOptions configures a Worker.
type WorkerOptions struct {
	// Concurrency is how many cycles run at once; default 10.
	Concurrency int
	// Queue is the asynq queue the cycles come from; default DefaultQueue (the Scheduler's).
	Queue string
	// DrainTimeout bounds Shutdown(true): running cycles stop at their next step and hand
	// their keys back; those still running after it are cancelled. Default DefaultDrain.
	DrainTimeout time.Duration
	// Logger receives the worker's logs, asynq's warnings and the Redis outage lines; the zero
	// value is silent.
	Logger zerolog.Logger
	// Registry, when set, gets the Redis metrics (watukuy_redis_up, watukuy_redis_outages_total,
	// watukuy_redis_outage_seconds_total, watukuy_redis_data_loss_total; once per engine, by
	// its first Worker or Scheduler) and is served at /metrics by Handler. Register the
	// engine's own metrics on it too.
	Registry *prometheus.Registry
	// UI serves asynqmon (the asynq web UI) at /monitoring/ in Handler.
	UI bool
	// Listen, when set, makes Start serve Handler on this address (e.g. "127.0.0.1:9090",
	// port 0 picks a free one; "off" serves nothing) until its context ends. Leave it empty to
	// mount Handler in a server of your own.
	Listen string
}

// Worker runs the cycles of its engine's registered pollers from the asynq tasks a Scheduler
// enqueues, in the spirit of asynq.Server: start as many as the APIs need, in as many
// processes, on the same Redis and with the same pollers registered. A cycle holds its key's
// lease, so two workers never run one key at once, and a key whose worker died is claimed
// again once its lease lapses.
type Worker struct {
	eng     *Engine
	o       WorkerOptions
	admin   *health.Server
	srv     *asynq.Server
	running atomic.Bool
}

// NewWorker returns a worker running eng's registered pollers; register them before Start.
func NewWorker(eng *Engine, o WorkerOptions) *Worker {
	if o.Concurrency <= 0 {
		o.Concurrency = 10
	}
	if o.Queue == "" {
		o.Queue = DefaultQueue
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = DefaultDrain
	}
	eng.pool.init(o.Logger, registerer(o.Registry))
	w := &Worker{eng: eng, o: o}
	w.admin = admin(eng.rdb, w.Ready, o.Registry, o.UI, o.Logger)
	return w
}

// Start writes the engine's keys to Redis (Setup: a data layout this build cannot run on is a
// *LayoutError), starts the data watcher (WatchData: the pollers are registered again if
// Redis loses its data), serves Listen when set, and starts taking tasks. The watcher and the
// listener stop when ctx ends; the cycles stop with Shutdown. Start a Worker once.
func (w *Worker) Start(ctx context.Context) error {
	if err := w.eng.Setup(ctx); err != nil {
		return err
	}
	w.eng.pool.watchData(ctx, w.eng, true)
	if err := serve(ctx, w.admin, w.o.Listen, w.o.Logger); err != nil {
		return err
	}
	c := queue.ServerConfig(w.o.Concurrency, w.o.DrainTimeout, w.o.Queue, w.o.Logger)
	// During an outage asynq's retries are dropped: the tracker logs the outage once.
	c.Logger = queue.OutageLogger(c.Logger, w.eng.pool.tracker, w.eng.ping)
	w.srv = asynq.NewServerFromRedisClient(w.eng.rdb, c)
	if err := w.srv.Start(queue.Handler(w.eng, w.o.Logger)); err != nil {
		return fmt.Errorf("start the asynq server: %w", err)
	}
	w.running.Store(true)
	w.o.Logger.Info().Int("concurrency", w.o.Concurrency).Str("queue", w.o.Queue).Msg("worker started")
	return nil
}

// Shutdown stops taking tasks and stops the engine (Engine.Stop), and returns once the
// running cycles ended. With drain each stops at its next step (a request in flight is given
// up, a delivery in flight finishes), releases its lease and leaves its key due at once, so
// other workers take it over in seconds; those still running after DrainTimeout are
// cancelled. Without drain they are cancelled at once and their leases lapse by themselves.
// Either way their unacked events stay in the outbox (G1). The engine runs no cycle after it.
func (w *Worker) Shutdown(drain bool) error {
	w.running.Store(false)
	if drain {
		w.o.Logger.Info().Dur("drain", w.o.DrainTimeout).Msg("worker stopping: no new cycles; running ones stop at their next step and hand their keys back")
	} else {
		w.o.Logger.Info().Msg("worker stopping: no new cycles; running ones are cancelled")
	}
	stopped := make(chan error, 1)
	go func() { stopped <- w.eng.Stop(drain, w.o.DrainTimeout) }()
	if w.srv != nil {
		w.srv.Shutdown()
	}
	return <-stopped
}

// Run starts the worker (Start), runs cycles until ctx ends, then shuts down with drain
// (Shutdown(true)): what a worker process does until SIGTERM.
func (w *Worker) Run(ctx context.Context) error {
	if err := w.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	return w.Shutdown(true)
}

// Ready reports whether the worker takes tasks and Redis answers: Handler's /readyz.
func (w *Worker) Ready(ctx context.Context) error {
	if !w.running.Load() {
		return errors.New("the asynq server is not running")
	}
	return w.eng.ping(ctx)
}

// Handler serves /healthz (liveness), /readyz (Ready), /metrics (WorkerOptions.Registry)
// and, with WorkerOptions.UI, asynqmon at /monitoring/. Its routes are absolute: mount it at
// "/" of your own mux (mux.Handle("/", w.Handler())) or serve it alone.
func (w *Worker) Handler() http.Handler { return w.admin.Handler() }

// registerer is reg as a prometheus.Registerer, nil when reg is (a nil *Registry in the
// interface would not be).
func registerer(reg *prometheus.Registry) prometheus.Registerer {
	if reg == nil {
		return nil
	}
	return reg
}
