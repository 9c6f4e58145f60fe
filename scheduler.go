package watukuy

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy/internal/health"
	"github.com/watukuy/watukuy/internal/queue"
)

// SchedulerOptions configures a Scheduler.
type SchedulerOptions struct {
	// Queue is the asynq queue the cycles go to; default DefaultQueue (the Workers').
	Queue string
	// ClaimTimeout, when set, is how long a claim holds a key before its cycle's lease keeper
	// holds it on; default (0) the key's lease TTL plus 2s, so a key whose cycle died is
	// claimed again as soon as its lease lapses.
	ClaimTimeout time.Duration
	// Pollers, when set, limits the claims to the keys of the pollers it names; it is called
	// at every claim (a config reload changes the list), and an empty list claims nothing.
	// nil claims the keys of every poller the workers registered.
	Pollers func() []string
	// Logger receives the scheduler's logs and the Redis outage lines; the zero value is
	// silent.
	Logger zerolog.Logger
	// Registry, when set, gets the Redis metrics (see WorkerOptions.Registry) and is served at
	// /metrics by Handler.
	Registry *prometheus.Registry
	// UI serves asynqmon (the asynq web UI) at /monitoring/ in Handler.
	UI bool
	// Listen, when set, makes Run serve Handler on this address ("off" serves nothing) until
	// its context ends. Leave it empty to mount Handler in a server of your own.
	Listen string
}

// Scheduler moves due keys into asynq tasks for the Workers, in the spirit of
// asynq.Scheduler: it claims due keys with the atomic claim script and enqueues one task per
// key (a batch of keys when many are due), whose task ID is derived from the key so a key is
// never queued twice. It wakes at once on Trigger and Resume, replaces the tasks of workers
// that died mid-cycle, runs the due-set repair sweep (RepairDue) at start and every minute,
// and backs off with jitter while Redis is unreachable, logging the outage once. Several
// schedulers may run at once (the claim is atomic): run one or two, in their own processes
// or next to a Worker. A scheduler runs no cycle, so its engine needs no pollers.
type Scheduler struct {
	eng   *Engine
	o     SchedulerOptions
	admin *health.Server
	q     *queue.Scheduler
}

// NewScheduler returns a scheduler of the keys registered in eng's Redis.
func NewScheduler(eng *Engine, o SchedulerOptions) *Scheduler {
	if o.Queue == "" {
		o.Queue = DefaultQueue
	}
	eng.pool.init(o.Logger, registerer(o.Registry))
	s := &Scheduler{eng: eng, o: o}
	s.admin = admin(eng.rdb, eng.ping, o.Registry, o.UI, o.Logger)
	s.q = &queue.Scheduler{Store: eng.store, Client: asynq.NewClientFromRedisClient(eng.rdb),
		Inspector: asynq.NewInspectorFromRedisClient(eng.rdb), Redis: eng.rdb, Prefix: eng.store.Prefix(),
		Queue: o.Queue, PollerNames: o.Pollers, Logger: o.Logger, ClaimTimeout: o.ClaimTimeout,
		Repair: eng.RepairDue, Outage: eng.pool.tracker}
	return s
}

// Run claims due keys and enqueues their cycles until ctx ends. It first refuses a data
// layout newer than this build knows (*LayoutError), serves Listen when set, and watches the
// Redis data (WatchData, reporting a loss: a scheduler registers no pollers).
func (s *Scheduler) Run(ctx context.Context) error {
	l, err := s.eng.Layout(ctx)
	if err != nil {
		return fmt.Errorf("read the data layout: %w", err)
	}
	if l.Version > l.Current {
		return &LayoutError{Found: l.Version, Known: l.Current}
	}
	if err := serve(ctx, s.admin, s.o.Listen, s.o.Logger); err != nil {
		return err
	}
	s.eng.pool.watchData(ctx, s.eng, false)
	var pollers []string
	if s.o.Pollers != nil {
		pollers = s.o.Pollers()
	}
	s.o.Logger.Info().Strs("pollers", pollers).Msg("scheduler started")
	return s.q.Run(ctx)
}

// Ready reports whether Redis answers: Handler's /readyz.
func (s *Scheduler) Ready(ctx context.Context) error { return s.eng.ping(ctx) }

// Handler serves /healthz (liveness), /readyz (Ready), /metrics (SchedulerOptions.Registry)
// and, with SchedulerOptions.UI, asynqmon at /monitoring/. Its routes are absolute: mount it
// at "/" of your own mux or serve it alone.
func (s *Scheduler) Handler() http.Handler { return s.admin.Handler() }
