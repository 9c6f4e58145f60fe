package pool

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/watukuy/watukuy/internal/buildinfo"

	"github.com/hibiken/asynq"

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
}

// Worker runs the cycles of its engine's registered pollers from the asynq tasks a Scheduler
// enqueues, in the spirit of asynq.Server: start as many as the APIs need, in as many
// processes, on the same Redis and with the same pollers registered. A cycle holds its key's
// lease, so two workers never run one key at once, and a key whose worker died is claimed
// again once its lease lapses.
type Worker struct {
	p       *Process
	o       WorkerOptions
	srv     *asynq.Server
	running atomic.Bool
}

// Worker returns a worker running the process engine's registered pollers; register them
// before Start. The process is ready (Ready, /readyz) only while the worker takes tasks.
func (p *Process) Worker(o WorkerOptions) *Worker {
	if o.Concurrency <= 0 {
		o.Concurrency = 10
	}
	if o.Queue == "" {
		o.Queue = DefaultQueue
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = DefaultDrain
	}
	w := &Worker{p: p, o: o}
	p.mu.Lock()
	p.workers = append(p.workers, w)
	p.mu.Unlock()
	return w
}

// Start writes the engine's keys to Redis (Engine.Setup: a data layout this build cannot run
// on is a *watukuy.LayoutError), starts the data watcher (Engine.WatchData: the pollers are
// registered again if Redis loses its data) until ctx ends, and starts taking tasks; the
// cycles stop with Shutdown. Start a Worker once.
func (w *Worker) Start(ctx context.Context) error {
	eng, log := w.p.eng, w.p.o.Logger
	if err := eng.Setup(ctx); err != nil {
		return err
	}
	w.p.watchData(ctx, true)
	c := queue.ServerConfig(w.o.Concurrency, w.o.DrainTimeout, w.o.Queue, log)
	// During an outage asynq's retries are dropped: the tracker logs the outage once.
	c.Logger = queue.OutageLogger(c.Logger, w.p.tracker, w.p.ping)
	w.srv = asynq.NewServerFromRedisClient(eng.Redis(), c)
	if err := w.srv.Start(queue.Handler(eng, log)); err != nil {
		return fmt.Errorf("start the asynq server: %w", err)
	}
	w.running.Store(true)
	log.Info().Str("version", buildinfo.Read().String()).Int("concurrency", w.o.Concurrency).Str("queue", w.o.Queue).Msg("worker started")
	return nil
}

// Shutdown stops taking tasks and stops the engine (Engine.Stop), and returns once the
// running cycles ended. With drain each stops at its next step (a request in flight is given
// up, a delivery in flight finishes), releases its lease and leaves its key due at once, so
// other workers take it over in seconds; those still running after DrainTimeout are
// cancelled. Without drain they are cancelled at once and their leases lapse by themselves.
// Either way their unacked events stay in the outbox (G1). The engine runs no cycle after it.
func (w *Worker) Shutdown(drain bool) error {
	log := w.p.o.Logger
	w.running.Store(false)
	if drain {
		log.Info().Dur("drain", w.o.DrainTimeout).Msg("worker stopping: no new cycles; running ones stop at their next step and hand their keys back")
	} else {
		log.Info().Msg("worker stopping: no new cycles; running ones are cancelled")
	}
	stopped := make(chan error, 1)
	go func() { stopped <- w.p.eng.Stop(drain, w.o.DrainTimeout) }()
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
