// Package pool runs an Engine's pollers on a distributed pool of processes: Schedulers move
// due keys into asynq tasks, and Workers, as many as the APIs need, in as many processes and
// on the same Redis, run their cycles.
//
// A Process is what one process shares, made once with New: its engine, the Redis outage
// tracker that logs an outage once however many components notice it (the scheduler's
// claims, asynq, go-redis, the data watcher), the Redis metrics, the data watcher, and the
// HTTP endpoints (/healthz, /readyz, /metrics, /monitoring/, the admin API at /api/, the
// status page at /status). Workers and Schedulers are built
// from it, in the spirit of asynq.Server and asynq.Scheduler: a worker process builds a
// Worker, a scheduler process a Scheduler, and a process that runs both (watukuy run) builds
// them from the one Process. The shared state lives in a value the program holds, rather than
// inside the Engine, so what the two share (and which of them serves the endpoints) is plain
// in the code that builds them, and the engine package links neither asynq nor Prometheus.
//
//	p := pool.New(eng, pool.Options{Logger: log, Registry: reg})
//	w := p.Worker(pool.WorkerOptions{Concurrency: 10})
//	mux.Handle("/", p.Handler()) // or p.Serve(ctx, "127.0.0.1:9090")
//	err := w.Run(ctx)            // until SIGTERM; another process runs p.Scheduler(...).Run(ctx)
package pool

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynqmon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/admintoken"
	"github.com/watukuy/watukuy/internal/admin"
	"github.com/watukuy/watukuy/internal/health"
	"github.com/watukuy/watukuy/internal/metrics"
	"github.com/watukuy/watukuy/internal/outage"
	"github.com/watukuy/watukuy/internal/queue"
	"github.com/watukuy/watukuy/internal/statuspage"
	"github.com/watukuy/watukuy/watukuytype"
)

// DefaultQueue is the asynq queue a Scheduler puts cycles in and a Worker takes them from,
// unless their options name another.
const DefaultQueue = queue.DefaultQueue

// DefaultDrain is WorkerOptions.DrainTimeout when it is not set.
const DefaultDrain = 30 * time.Second

// Options configures a Process.
type Options struct {
	// Logger receives the process's logs: its workers' and schedulers', asynq's warnings,
	// go-redis' own lines and the Redis outage lines. The zero value is silent.
	Logger zerolog.Logger
	// Registry, when set, gets the Redis metrics (watukuy_redis_up,
	// watukuy_redis_outages_total, watukuy_redis_outage_seconds_total,
	// watukuy_redis_data_loss_total) and is served at /metrics by Handler. Give Metrics the
	// same registry for the engine's own series.
	Registry *prometheus.Registry
	// Metrics, when set, are the engine's metrics (NewMetrics, whose Hooks the engine was
	// built with): New adds their per-key gauges, read from Redis on each scrape.
	Metrics *Metrics
	// Pollers, when set, names the pollers whose keys Metrics exports (read on each scrape);
	// nil: every poller the registry knows.
	Pollers func() []string
	// UI serves asynqmon (the asynq web UI) at /monitoring/ in Handler.
	UI bool
	// Admin holds the tokens of the admin API, served at /api/ by Handler (the operator
	// commands as JSON endpoints), and of the status page at /status. Without a token (nil or
	// an empty set) both say they are off. Replace on the set rotates tokens while it runs.
	Admin *admintoken.Set
	// SecureCookies marks the status page's login cookie Secure on every request: the page is
	// reached over HTTPS through a proxy that speaks plain HTTP to the listener.
	SecureCookies bool
	// TrustedProxies are the proxies whose X-Forwarded-Proto (https: a Secure cookie) and
	// X-Forwarded-For (the client whose failed logins slow it down) the status page believes,
	// matched against a request's remote address.
	TrustedProxies []netip.Prefix
}

// Process is the part of the pool one process runs on one engine: see the package doc.
type Process struct {
	eng     *watukuy.Engine
	o       Options
	tracker *outage.Tracker
	metrics *metrics.Redis
	admin   *health.Server
	login   *admin.Login // the status page's sessions and failed logins, shared with the API

	mu         sync.Mutex
	workers    []*Worker // their readiness is the process's
	watching   uint64    // generation of the running data watcher; 0: none
	gen        uint64
	reregister bool
	stopWatch  context.CancelFunc
}

// New returns the process's share of the pool on eng; build one per engine. It routes go-redis' own log lines
// (e.g. "failed to dial after 5 attempts", one per pooled connection) through the process's
// outage tracker: go-redis has one logger per process, so with several Processes in one, the
// last one built gets them.
func New(eng *watukuy.Engine, o Options) *Process {
	p := &Process{eng: eng, o: o}
	var reg prometheus.Registerer
	if o.Registry != nil { // a nil *Registry in the interface would not be nil
		reg = o.Registry
	}
	m := metrics.NewRedis(reg)
	p.metrics = m
	p.tracker = outage.New(o.Logger, outage.Options{
		OnDown: func() { m.Outages.Inc(); m.Up.Set(0) },
		OnUp:   func(d time.Duration) { m.OutageSeconds.Add(d.Seconds()); m.Up.Set(1) },
	})
	redis.SetLogger(redisLogger{log: o.Logger, t: p.tracker})
	if o.Metrics != nil {
		o.Metrics.watchKeys(eng, o.Pollers)
	}
	p.admin = &health.Server{Logger: o.Logger, Ready: p.Ready}
	if o.Registry != nil {
		p.admin.Metrics = promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{})
	}
	if o.UI {
		p.admin.UI = asynqmon.New(asynqmon.Options{RootPath: health.UIPath, RedisConnOpt: connOpt{eng.Redis()}})
	}
	tokens := o.Admin
	if tokens == nil {
		tokens = &admintoken.Set{}
	}
	p.login = admin.NewLogin(admin.LoginOptions{Tokens: tokens, Policy: admin.LoginPolicy{SecureCookies: o.SecureCookies, TrustedProxies: o.TrustedProxies}})
	p.admin.API = admin.NewAPI(admin.Options{Engine: eng, Tokens: tokens, Login: p.login, Logger: o.Logger})
	sp := statuspage.Options{Engine: eng, Tokens: tokens, Login: p.login, Logger: o.Logger}
	if o.UI {
		sp.MonitoringPath = health.UIPath + "/"
	}
	p.admin.Status = statuspage.New(sp)
	return p
}

// SetLoginPolicy replaces Options.SecureCookies and Options.TrustedProxies while the process
// runs (a config reload).
func (p *Process) SetLoginPolicy(secureCookies bool, trustedProxies []netip.Prefix) {
	p.login.SetPolicy(admin.LoginPolicy{SecureCookies: secureCookies, TrustedProxies: trustedProxies})
}

// Ready reports whether Redis answers and every Worker of the process takes tasks (a
// Worker takes none before Start and after Shutdown): Handler's /readyz.
func (p *Process) Ready(ctx context.Context) error {
	if p.eng.Stopped() {
		return watukuytype.ErrEngineStopped
	}
	p.mu.Lock()
	workers := p.workers
	p.mu.Unlock()
	for _, w := range workers {
		if !w.running.Load() {
			return errors.New("the asynq server is not running")
		}
	}
	return p.ping(ctx)
}

// Handler serves /healthz (liveness), /readyz (Ready), /metrics (Options.Registry), the
// admin API at /api/ and the status page at /status (Options.Admin) and, with Options.UI,
// asynqmon at /monitoring/. Its routes are absolute: mount it at "/" of
// your own mux (mux.Handle("/", p.Handler())) or Serve it alone.
func (p *Process) Handler() http.Handler { return p.admin.Handler() }

// Serve serves Handler on addr (e.g. "127.0.0.1:9090", port 0 picks a free one; "off" serves
// nothing) until ctx ends, and returns the address it listens on. A listen error (address in
// use) is returned at once. Serve a Process once.
func (p *Process) Serve(ctx context.Context, addr string) (string, error) {
	p.admin.Listen = addr
	bound, err := p.admin.Start(ctx)
	if err != nil {
		return "", fmt.Errorf("listen %s: %w", addr, err)
	}
	if bound != "" {
		p.o.Logger.Info().Str("addr", bound).Bool("ui", p.admin.UI != nil).Msg("serving /healthz /readyz /metrics")
	}
	return bound, nil
}

// ping is one PING of the engine's Redis.
func (p *Process) ping(ctx context.Context) error { return p.eng.Redis().Ping(ctx).Err() }

// watchData runs the engine's data watcher (Engine.WatchData) until ctx ends, once per
// process: a Scheduler's only reports a loss; a Worker's also registers the pollers again,
// and replaces a reporting one started before it (watukuy run starts both).
func (p *Process) watchData(ctx context.Context, reregister bool) {
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
		p.eng.WatchData(ctx, watukuy.WatchOptions{ReportOnly: !reregister, OnLoss: p.metrics.DataLoss.Inc,
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

// connOpt hands asynqmon the engine's own Redis client.
type connOpt struct{ c redis.UniversalClient }

func (o connOpt) MakeRedisClient() interface{} { return o.c }

// redisLogger routes go-redis' own log lines into the process log: those of an outage go to
// the tracker (logged once), the others at warn level (dropped during an outage).
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
