package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/watukuy/watukuy/pool"
)

// process is the process's share of the distributed pool, serving its endpoints on
// s.Listen ("" or "off": none) until ctx ends. It returns the address they listen on ("" for
// none): with port 0, the port picked.
func (env *Env) process(ctx context.Context, s Settings) (*pool.Process, string, error) {
	o := pool.Options{Logger: env.Log, Registry: env.Registry, Metrics: env.Metrics, Pollers: env.PollerNames, UI: s.UI, Admin: env.Admin}
	env.mu.Lock()
	if env.Config != nil {
		o.SecureCookies, o.TrustedProxies = env.Config.Admin.SecureCookies, env.Config.Admin.TrustedProxies
	}
	p := pool.New(env.Engine, o)
	env.procs = append(env.procs, p)
	env.mu.Unlock()
	if s.Listen == "" {
		return p, "", nil
	}
	addr, err := p.Serve(ctx, s.Listen)
	if err != nil {
		return nil, "", listenError(s.Listen, err)
	}
	return p, addr, nil
}

// listenError says once why the endpoints cannot listen on addr, and what to pass instead.
// The listen error names the address at every layer it went through; the operating system's
// own error (bind: address already in use) is the part worth keeping.
func listenError(addr string, err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		err = op.Err
	}
	hint := "pass --listen HOST:PORT, or --listen off for no endpoints"
	if errors.Is(err, syscall.EADDRINUSE) {
		hint = "another process listens there: pass --listen with a free port (--listen 127.0.0.1:0 picks one), or --listen off for no endpoints"
	}
	return fmt.Errorf("--listen %s: %w; %s", addr, err, hint)
}

// scheduler is the Scheduler's options from the settings.
func (env *Env) scheduler(s Settings) pool.SchedulerOptions {
	return pool.SchedulerOptions{ClaimTimeout: s.ClaimTimeout}
}

// worker is the Worker's options from the settings.
func (env *Env) worker(s Settings) pool.WorkerOptions {
	return pool.WorkerOptions{Concurrency: max(s.Concurrency, 1), DrainTimeout: s.Drain}
}

// RunScheduler claims due keys and enqueues their cycles until ctx ends (pool.Scheduler),
// claiming every registered poller's keys.
func RunScheduler(ctx context.Context, env *Env, s Settings) error {
	defer env.FlushTraces() // the last cycles' spans
	ctx, stop := context.WithCancel(ctx)
	defer stop() // the endpoints end with the scheduler
	p, _, err := env.process(ctx, s)
	if err != nil {
		return err
	}
	return p.Scheduler(env.scheduler(s)).Run(ctx)
}

// RunWorker serves cycles from asynq until ctx ends; then it stops taking tasks, and running
// cycles stop at their next step (a request in flight is given up, a delivery in flight
// finishes), release their leases and leave their keys due at once, so other workers take
// them over in seconds. Cycles still running after s.Drain are cancelled (their unacked
// events stay in the outbox, G1). See pool.Worker.
func RunWorker(ctx context.Context, env *Env, s Settings) error {
	defer env.FlushTraces() // the last cycles' spans
	if len(env.PollerNames()) == 0 {
		return errors.New("no pollers: a worker needs --config (or WATUKUY_CONFIG) with at least one poller")
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	p, _, err := env.process(ctx, s)
	if err != nil {
		return err
	}
	return p.Worker(env.worker(s)).Run(ctx)
}

// RunAll runs a scheduler and a worker in one process (watukuy run, watukuy dev), on one
// pool.Process: one outage tracker, one data watcher, one set of endpoints, ready while the
// worker runs. A listener that cannot bind fails the process before either starts, and the
// first of them to return stops the other, so a worker that cannot start never leaves a
// scheduler that claims keys nobody runs.
func RunAll(ctx context.Context, env *Env, s Settings) error {
	defer env.FlushTraces() // the last cycles' spans
	ctx, stop := context.WithCancel(ctx)
	defer stop() // the endpoints end with the run
	st, err := StartAll(ctx, env, s)
	if err != nil {
		return err
	}
	return st.Run(ctx)
}

// Started is a process of RunAll's kind whose endpoints listen: StartAll is RunAll's first
// half, for a caller that says where they are before anything runs (watukuy dev's banner).
type Started struct {
	// Addr is the address the endpoints listen on ("" when Listen is "" or off): with port 0,
	// the port picked.
	Addr string
	env  *Env
	s    Settings
	p    *pool.Process
}

// StartAll checks that the process has pollers and binds and serves its endpoints on
// s.Listen until ctx ends; Run then runs the scheduler and the worker. A listener that cannot
// bind is an error that names the address once and says what to pass instead.
func StartAll(ctx context.Context, env *Env, s Settings) (*Started, error) {
	if len(env.PollerNames()) == 0 {
		return nil, errors.New("no pollers: pass --config with at least one poller")
	}
	p, addr, err := env.process(ctx, s)
	if err != nil {
		return nil, err
	}
	return &Started{Addr: addr, env: env, s: s, p: p}, nil
}

// Run runs the scheduler and the worker until ctx ends or one of them returns, which stops
// the other. The endpoints serve until StartAll's context ends.
func (st *Started) Run(ctx context.Context) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	w := st.p.Worker(st.env.worker(st.s))
	so := st.env.scheduler(st.s)
	so.Pollers = st.env.PollerNames // only this process's pollers, as a reload leaves them
	sch := st.p.Scheduler(so)
	errc := make(chan error, 2)
	go func() { errc <- w.Run(ctx) }()
	go func() { errc <- sch.Run(ctx) }()
	err := <-errc
	stop()
	if err2 := <-errc; err == nil {
		err = err2
	}
	return err
}
