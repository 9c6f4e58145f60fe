package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/admintoken"
	"github.com/watukuy/watukuy/internal/config"
	"github.com/watukuy/watukuy/internal/redisstore"
	"github.com/watukuy/watukuy/internal/sink"
	"github.com/watukuy/watukuy/pool"
	"github.com/watukuy/watukuy/watukuytype"
)

// Settings are the flags every process shares (each also WATUKUY_<FLAG>).
type Settings struct {
	Redis       string
	Config      string
	ConfigGiven bool // --config was set: a missing file is an error
	// ConfigOnDemand marks the operator commands: they read a Config not given (the default
	// file) only for a Redis URL that Redis lacks, since they take pollers from the registry,
	// and read any config with config.LoadOperator: the variables of delivery secrets and admin
	// tokens, which only the workers have, may be unset.
	ConfigOnDemand bool
	Prefix         string
	LogFormat      string
	LogLevel       string // debug, info, warn, error; "" is info
	Listen         string
	UI             bool
	AllowEviction  bool
	Concurrency    int
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
	// Service is the default service.name of the process's traces (OTEL_SERVICE_NAME wins):
	// the binary's name; "" is watukuy.
	Service string
}

// DefaultDrain is Settings.Drain when it is not set.
const DefaultDrain = pool.DefaultDrain

// Env is what a process runs on.
type Env struct {
	Log      zerolog.Logger
	RDB      redis.UniversalClient
	Store    *redisstore.Store
	Engine   *watukuy.Engine
	Registry *prometheus.Registry
	Metrics  *pool.Metrics
	Pollers  []watukuytype.Poller
	Config   *config.Config
	// Brokers keeps the broker sinks (NATS, AMQP, PostgreSQL) the pollers share; Close
	// closes their connections.
	Brokers sink.Brokers
	// Admin is the admin API's tokens (adminTokens); a reload replaces them.
	Admin      *admintoken.Set
	adminExtra []admintoken.Token // AddAdminToken's

	procs []*pool.Process // the processes serving the status page: a reload sets their login policy

	mu     sync.Mutex  // guards Pollers, Config and procs, which a reload replaces (reload.go)
	reload reloadState // what Reload needs: the settings, the lock, the metric
	traces traces      // the tracer provider's shutdown (tracing.go)
}

// Open loads the config file (when there is one and it is wanted: wantsConfig), connects to
// Redis (flag > env > file), checks the eviction policy, and builds the engine with its
// pollers and metrics.
func Open(ctx context.Context, s Settings, log zerolog.Logger) (*Env, error) {
	env := &Env{Log: log}
	env.reload.redisFromFile, env.reload.prefixFromFile = s.Redis == "", s.Prefix == ""
	if s.wantsConfig() {
		load := config.Load
		if s.ConfigOnDemand { // an operator command: it delivers nothing and serves no API
			load = config.LoadOperator
		}
		cfg, err := load(s.Config, nil)
		if err != nil {
			if !s.ConfigGiven && s.ConfigOnDemand {
				err = fmt.Errorf("%w (read for its redis: URL: pass --redis or set WATUKUY_REDIS_URL to leave the file alone)", err)
			}
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
	rdb, err := Connect(ctx, s.Redis)
	if err != nil {
		return nil, err
	}
	return env, env.finish(ctx, s, rdb)
}

// wantsConfig says whether Open reads s.Config: a given one always; the default file when it
// exists, unless the settings are ConfigOnDemand and have their Redis URL.
func (s Settings) wantsConfig() bool {
	switch {
	case s.Config == "":
		return false
	case s.ConfigGiven:
		return true
	case s.ConfigOnDemand && s.Redis != "":
		return false
	}
	_, err := os.Stat(s.Config)
	return err == nil
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
		var refused redis.Error
		switch {
		case errors.As(err, &refused):
			// The server would not say (no CONFIG: miniredis, a managed Redis that hides it):
			// the policy is unknown, not evicting. Said at debug when nothing depends on it.
			lvl := zerolog.InfoLevel
			if s.AllowEviction {
				lvl = zerolog.DebugLevel
			}
			env.Log.WithLevel(lvl).Err(err).Msg("the maxmemory-policy could not be read: make sure it is noeviction (evicted leases or outboxes lose events)")
		case !s.AllowEviction:
			return fmt.Errorf("%w (start with --allow-eviction to run anyway)", err)
		default:
			env.Log.Warn().Str("maxmemory-policy", policy).Err(err).Msg("running with eviction allowed: events can be lost")
		}
	}
	tokensFrom := env.Config
	if s.ConfigOnDemand {
		tokensFrom = nil // an operator command serves no API: the config's tokens may be unset
	}
	ts, err := env.adminTokens(tokensFrom)
	if err != nil {
		return err
	}
	if env.Admin, err = admintoken.NewSet(ts...); err != nil {
		return err
	}
	env.Registry = prometheus.NewRegistry()
	env.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	env.Metrics = pool.NewMetrics(env.Registry)
	env.reload.init(s, env.Registry)
	var budgets []watukuytype.Budget
	if env.Config != nil {
		budgets = env.Config.EngineBudgets()
	}
	tp, err := env.startTracing(ctx, s)
	if err != nil {
		return err
	}
	eng, err := watukuy.New(watukuy.Options{Redis: rdb, Prefix: s.Prefix, InstanceID: s.InstanceID, Logger: env.Log, ClaimTimeout: s.ClaimTimeout, WaitReplicas: s.WaitReplicas,
		Hooks: env.Metrics.Hooks(watukuytype.Hooks{}), Budgets: budgets, TracerProvider: tp})
	if err != nil {
		return err
	}
	env.Engine = eng
	if env.Config != nil {
		out := s.Out
		if out == nil {
			out = os.Stdout
		}
		pollers, err := Build(env.Config, rdb, out, &env.Brokers, env.Log)
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
			if env.Config != nil {
				return env.Config.Locate(err) // file:line: pollers[i].field: …
			}
			return err
		}
	}
	env.Metrics.SetPollers(env.Pollers...)
	if env.Config != nil {
		env.Metrics.SetSinks(env.Config.SinkKinds())
	}
	return nil
}

// Close closes the broker sinks' connections and the Redis client: after the process's last
// cycle and delivery ended.
func (env *Env) Close() error {
	return errors.Join(env.Brokers.Close(), env.RDB.Close())
}

// only keeps the named pollers (all when names is empty); a name the config lacks is a
// *watukuy.NotFoundError.
func only(ps []watukuytype.Poller, names []string) ([]watukuytype.Poller, error) {
	if len(names) == 0 {
		return ps, nil
	}
	var kept []watukuytype.Poller
	for _, n := range names {
		i := slices.IndexFunc(ps, func(p watukuytype.Poller) bool { return p.Name == n })
		if i < 0 {
			nf := &watukuytype.NotFoundError{Poller: n, Hint: "the config file has no such poller"}
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
func (env *Env) Register(ps ...watukuytype.Poller) error {
	for _, p := range ps {
		if err := env.Engine.Register(p); err != nil {
			return err
		}
		env.mu.Lock()
		env.Pollers = append(env.Pollers, p)
		env.Metrics.SetPollers(env.Pollers...)
		env.mu.Unlock()
	}
	return nil
}

// PollerNames names the process's pollers, config and Go-defined, as a reload left them.
func (env *Env) PollerNames() []string {
	env.mu.Lock()
	defer env.mu.Unlock()
	var names []string
	for _, p := range env.Pollers {
		names = append(names, p.Name)
	}
	return names
}
