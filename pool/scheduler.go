package pool

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/watukuy/watukuy/internal/buildinfo"
	"github.com/watukuy/watukuy/internal/redisstore"
	"github.com/watukuy/watukuy/watukuytype"

	"github.com/hibiken/asynq"

	"github.com/watukuy/watukuy/internal/queue"
)

// SchedulerOptions configures a Scheduler.
type SchedulerOptions struct {
	// Queue is the asynq queue the cycles go to; default DefaultQueue (the Workers').
	Queue string
	// ClaimTimeout, when set, is how long a claim holds a key, once its cycle's task is
	// enqueued, before its cycle's lease keeper holds it on; default (0) the key's lease TTL
	// plus 2s, so a key whose cycle died is claimed again as soon as its lease lapses. Until
	// the enqueue the claim holds the key for a second only (queue.DefaultClaimWindow), so a
	// scheduler killed in between keeps it out no longer.
	ClaimTimeout time.Duration
	// Pollers, when set, limits the claims to the keys of the pollers it names; it is called
	// at every claim (a config reload changes the list), and an empty list claims nothing.
	// nil claims the keys of every poller the workers registered.
	Pollers func() []string
}

// Scheduler moves due keys into asynq tasks for the Workers, in the spirit of
// asynq.Scheduler: it claims due keys with the atomic claim script and enqueues one task per
// key (a batch of keys when many are due), whose task ID is derived from the key so a key is
// never queued twice. It wakes at once on Trigger and Resume, replaces the tasks of workers
// that died mid-cycle, runs the due-set repair sweep (Engine.RepairDue) at start and every
// minute, and backs off with jitter while Redis is unreachable, logging the outage once.
// Several schedulers may run at once (the claim is atomic): run one or two, in their own
// processes or next to a Worker. A scheduler runs no cycle, so its engine needs no pollers.
type Scheduler struct {
	p   *Process
	o   SchedulerOptions
	q   *queue.Enqueuer
	err error // from building it, returned by Run
}

// Scheduler returns a scheduler of the keys registered in the process engine's Redis.
func (p *Process) Scheduler(o SchedulerOptions) *Scheduler {
	if o.Queue == "" {
		o.Queue = DefaultQueue
	}
	eng, rdb := p.eng, p.eng.Redis()
	// The claims run on a store of the engine's keys of their own: its due set, on its Redis.
	c, err := redisstore.New(rdb, redisstore.Options{Prefix: eng.Prefix()})
	if err != nil {
		return &Scheduler{p: p, o: o, err: err} // Run returns it; the engine's prefix passed this check already
	}
	q := &queue.Enqueuer{Store: c, Client: asynq.NewClientFromRedisClient(rdb),
		Inspector: asynq.NewInspectorFromRedisClient(rdb), Redis: rdb, Prefix: c.Prefix(),
		Queue: o.Queue, PollerNames: o.Pollers, Logger: p.o.Logger, ClaimTimeout: o.ClaimTimeout,
		Repair: eng.RepairDue, Outage: p.tracker}
	return &Scheduler{p: p, o: o, q: q}
}

// Run claims due keys and enqueues their cycles until ctx ends. It first refuses a data
// layout newer than this build knows (*watukuy.LayoutError), and watches the Redis data
// (Engine.WatchData, reporting a loss: a scheduler registers no pollers).
func (s *Scheduler) Run(ctx context.Context) error {
	if s.err != nil {
		return s.err
	}
	l, err := s.p.eng.Layout(ctx)
	if err != nil {
		return fmt.Errorf("read the data layout: %w", err)
	}
	if l.Version > l.Current {
		return &watukuytype.LayoutError{Found: l.Version, Known: l.Current}
	}
	s.p.watchData(ctx, false)
	// The pollers it claims for: those it was given, or every registered one.
	var pollers []string
	if s.o.Pollers != nil {
		pollers = s.o.Pollers()
	} else if n, err := s.p.eng.PollerKeys(ctx); err == nil {
		pollers = slices.Sorted(maps.Keys(n))
	}
	s.p.o.Logger.Info().Str("version", buildinfo.Read().String()).Strs("pollers", pollers).Bool("everyRegistered", s.o.Pollers == nil).
		Msg("scheduler started")
	return s.q.Run(ctx)
}
