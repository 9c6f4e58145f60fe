package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/hibiken/asynqmon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/internal/config"
	"github.com/watukuy/watukuy/internal/health"
	"github.com/watukuy/watukuy/internal/metrics"
	"github.com/watukuy/watukuy/internal/queue"
	"github.com/watukuy/watukuy/internal/redisstore"
	"github.com/watukuy/watukuy/watukuytype"
)

// Settings are the flags every process shares (each also WATUKUY_<FLAG>).
type Settings struct {
	Redis         string
	Config        string
	ConfigGiven   bool // --config was set: a missing file is an error
	Prefix        string
	LogFormat     string
	Listen        string
	UI            bool
	AllowEviction bool
	Concurrency   int
	// Drain bounds a stopping worker's running cycles (they stop at their next step; those
	// still running after it are cancelled); 0: DefaultDrain.
	Drain      time.Duration
	InstanceID string
	Out        io.Writer // stdout sink; default os.Stdout
	// Pollers, when set, keeps only these pollers of the config file (tick --poller).
	Pollers []string
	// ClaimTimeout is how long a claim holds a key until its cycle's lease keeper holds it on
	// (0: the poller's lease TTL + core.ClaimGrace).
	ClaimTimeout time.Duration
	// WaitReplicas makes cycles deliver events only once that many replicas have their commit
	// (watukuy.Options.WaitReplicas).
	WaitReplicas int
}

// DefaultDrain is Settings.Drain when it is not set.
const DefaultDrain = 30 * time.Second

// Env is what a process runs on.
type Env struct {
	Log      zerolog.Logger
	RDB      redis.UniversalClient
	Store    *redisstore.Store
	Engine   *watukuy.Engine
	Registry *prometheus.Registry
	Metrics  *metrics.Metrics
	Pollers  []watukuy.Poller
	Config   *config.Config

	mu       sync.Mutex  // guards Pollers and Config, which a reload replaces (reload.go)
	reload   reloadState // what Reload needs: the settings, the lock, the metric
	recovery recovery    // Redis outages and data loss (watch.go)
}

// Open loads the config file (when there is one), connects to Redis (flag > env > file),
// checks the eviction policy, and builds the engine with its pollers and metrics.
func Open(ctx context.Context, s Settings, log zerolog.Logger) (*Env, error) {
	env := &Env{Log: log}
	env.reload.redisFromFile, env.reload.prefixFromFile = s.Redis == "", s.Prefix == ""
	if s.Config != "" {
		if _, err := os.Stat(s.Config); err == nil || s.ConfigGiven {
			cfg, err := config.Load(s.Config, nil)
			if err != nil {
				return nil, err
			}
			env.Config = cfg
			if s.Redis == "" {
				s.Redis = cfg.Redis
			}
			if s.Prefix == "" {
				s.Prefix = cfg.Prefix
			}
		}
	}
	rdb, err := Connect(ctx, s.Redis)
	if err != nil {
		return nil, err
	}
	return env, env.finish(ctx, s, rdb)
}

// finish builds the store, metrics and engine on an open client.
func (env *Env) finish(ctx context.Context, s Settings, rdb redis.UniversalClient) error {
	env.RDB = rdb
	st, err := redisstore.New(rdb, redisstore.Options{Prefix: s.Prefix})
	if err != nil {
		return err
	}
	env.Store = st
	if policy, err := st.CheckEviction(ctx); err != nil {
		if !s.AllowEviction {
			return fmt.Errorf("%w (start with --allow-eviction to run anyway)", err)
		}
		env.Log.Warn().Str("maxmemory-policy", policy).Err(err).Msg("running with eviction allowed: events can be lost")
	}
	env.Registry = prometheus.NewRegistry()
	env.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	env.Metrics = metrics.New(env.Registry)
	env.reload.init(s, env.Registry)
	eng, err := watukuy.New(watukuy.Options{Redis: rdb, Prefix: s.Prefix, InstanceID: s.InstanceID, Logger: env.Log, ClaimTimeout: s.ClaimTimeout, WaitReplicas: s.WaitReplicas,
		Hooks: env.Metrics.Hooks(watukuytype.Hooks{})})
	if err != nil {
		return err
	}
	env.Engine = eng
	if env.Config != nil {
		out := s.Out
		if out == nil {
			out = os.Stdout
		}
		pollers, err := Build(env.Config, rdb, out, env.Log)
		if err != nil {
			return err
		}
		if pollers, err = only(pollers, s.Pollers); err != nil {
			return err
		}
		env.Pollers = append(env.Pollers, pollers...)
	}
	for _, p := range env.Pollers {
		if err := eng.Register(p); err != nil {
			return err
		}
	}
	env.Metrics.WatchKeys(env.Registry, env.keyInfos)
	return nil
}

// only keeps the named pollers (all when names is empty); a name the config lacks is a
// *watukuy.NotFoundError.
func only(ps []watukuy.Poller, names []string) ([]watukuy.Poller, error) {
	if len(names) == 0 {
		return ps, nil
	}
	var kept []watukuy.Poller
	for _, n := range names {
		i := slices.IndexFunc(ps, func(p watukuy.Poller) bool { return p.Name == n })
		if i < 0 {
			nf := &watukuy.NotFoundError{Poller: n, Hint: "the config file has no such poller"}
			for _, p := range ps {
				nf.Known = append(nf.Known, p.Name)
			}
			return nil, nf
		}
		kept = append(kept, ps[i])
	}
	return kept, nil
}

// Register adds Go-defined pollers (the dev demo) to the engine.
func (env *Env) Register(ps ...watukuy.Poller) error {
	for _, p := range ps {
		if err := env.Engine.Register(p); err != nil {
			return err
		}
		env.mu.Lock()
		env.Pollers = append(env.Pollers, p)
		env.mu.Unlock()
	}
	return nil
}

// keyInfos inspects every key of the process's pollers, partitions added at run time too.
func (env *Env) keyInfos(ctx context.Context) ([]watukuytype.KeyInfo, error) {
	var out []watukuytype.KeyInfo
	for _, name := range env.PollerNames() {
		kis, err := env.Engine.InspectAll(ctx, name)
		out = append(out, kis...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

func (env *Env) PollerNames() []string {
	env.mu.Lock()
	defer env.mu.Unlock()
	var names []string
	for _, p := range env.Pollers {
		names = append(names, p.Name)
	}
	return names
}

// serve starts the health, readiness, metrics and (with ui) asynqmon endpoints.
func (env *Env) serve(ctx context.Context, s Settings, ready func(context.Context) error) (string, error) {
	hs := &health.Server{Listen: s.Listen, Logger: env.Log, Ready: ready,
		Metrics: promhttp.HandlerFor(env.Registry, promhttp.HandlerOpts{})}
	if s.UI {
		hs.UI = asynqmon.New(asynqmon.Options{RootPath: "/monitoring", RedisConnOpt: connOpt{env.RDB}})
	}
	addr, err := hs.Start(ctx)
	if err != nil {
		return "", fmt.Errorf("listen %s: %w", s.Listen, err)
	}
	if addr != "" {
		env.Log.Info().Str("addr", addr).Bool("ui", s.UI).Msg("serving /healthz /readyz /metrics")
	}
	return addr, nil
}

// connOpt hands asynqmon the process's own Redis client.
type connOpt struct{ c redis.UniversalClient }

func (o connOpt) MakeRedisClient() interface{} { return o.c }

func (env *Env) ping(ctx context.Context) error { return env.RDB.Ping(ctx).Err() }

// RunScheduler claims due keys and enqueues their cycles until ctx ends.
func RunScheduler(ctx context.Context, env *Env, s Settings) error {
	l, err := env.Engine.Layout(ctx)
	if err != nil {
		return fmt.Errorf("read the data layout: %w", err)
	}
	if l.Version > l.Current {
		return &watukuy.LayoutError{Found: l.Version, Known: l.Current}
	}
	if _, err := env.serve(ctx, s, env.ping); err != nil {
		return err
	}
	env.watchData(ctx, false) // a scheduler registers no pollers: it reports a data loss only
	sch := env.scheduler(s)
	env.Log.Info().Strs("pollers", sch.Pollers).Msg("scheduler started")
	return sch.Run(ctx)
}

func (env *Env) scheduler(s Settings) *queue.Scheduler {
	return &queue.Scheduler{Store: env.Store, Client: asynq.NewClientFromRedisClient(env.RDB),
		Inspector: asynq.NewInspectorFromRedisClient(env.RDB), Redis: env.RDB, Prefix: env.Store.Prefix(), Logger: env.Log,
		ClaimTimeout: s.ClaimTimeout, Repair: env.Engine.RepairDue, Outage: env.outage()}
}

// RunWorker serves cycles from asynq until ctx ends; then it stops taking tasks, and running
// cycles stop at their next step (a request in flight is given up, a delivery in flight
// finishes), release their leases and leave their keys due at once, so other workers take
// them over in seconds. Cycles still running after s.Drain are cancelled (their unacked
// events stay in the outbox, G1).
func RunWorker(ctx context.Context, env *Env, s Settings) error {
	if len(env.Pollers) == 0 {
		return errors.New("no pollers: a worker needs --config (or WATUKUY_CONFIG) with at least one poller")
	}
	if err := env.Engine.Setup(ctx); err != nil {
		return err
	}
	env.watchData(ctx, true) // registers the pollers again if Redis loses its data
	var running atomic.Bool
	ready := func(ctx context.Context) error {
		if !running.Load() {
			return errors.New("the asynq server is not running")
		}
		return env.ping(ctx)
	}
	if _, err := env.serve(ctx, s, ready); err != nil {
		return err
	}
	drain := s.Drain
	if drain <= 0 {
		drain = DefaultDrain
	}
	srv := asynq.NewServerFromRedisClient(env.RDB, env.asynqLogger(queue.ServerConfig(max(s.Concurrency, 1), drain, "", env.Log)))
	if err := srv.Start(queue.Handler(env.Engine, env.Log)); err != nil {
		return fmt.Errorf("start the asynq server: %w", err)
	}
	running.Store(true)
	env.Log.Info().Int("concurrency", s.Concurrency).Strs("pollers", env.PollerNames()).Msg("worker started")
	<-ctx.Done()
	running.Store(false)
	env.Log.Info().Dur("drain", drain).Msg("worker stopping: no new cycles; running ones stop at their next step and hand their keys back")
	stopped := make(chan error, 1)
	go func() { stopped <- env.Engine.Stop(true, drain) }()
	srv.Shutdown()
	return <-stopped
}

// RunAll runs a scheduler and a worker in one process (watukuy run, watukuy dev). The first
// of them to return stops the other, so a worker that cannot start (its listener cannot bind)
// fails the process at once instead of leaving a scheduler that claims keys nobody runs.
func RunAll(ctx context.Context, env *Env, s Settings) error {
	if len(env.Pollers) == 0 {
		return errors.New("no pollers: pass --config with at least one poller")
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	errc := make(chan error, 2)
	go func() { errc <- RunWorker(ctx, env, s) }() // the worker serves the process's endpoints
	go func() {
		sch := env.scheduler(s)
		sch.PollerNames = env.PollerNames // read at every claim: a reload changes them
		errc <- sch.Run(ctx)
	}()
	err := <-errc
	stop()
	if err2 := <-errc; err == nil {
		err = err2
	}
	return err
}
