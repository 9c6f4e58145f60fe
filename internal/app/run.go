package app

import (
	"context"
	"errors"

	"github.com/watukuy/watukuy/pool"
)

// process is the process's share of the distributed pool, serving its endpoints on
// s.Listen ("" or "off": none) until ctx ends.
func (env *Env) process(ctx context.Context, s Settings) (*pool.Process, error) {
	p := pool.New(env.Engine, pool.Options{Logger: env.Log, Registry: env.Registry, Metrics: env.Metrics, Pollers: env.PollerNames, UI: s.UI, Admin: env.Admin})
	if s.Listen != "" {
		if _, err := p.Serve(ctx, s.Listen); err != nil {
			return nil, err
		}
	}
	return p, nil
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
	p, err := env.process(ctx, s)
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
	p, err := env.process(ctx, s)
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
	if len(env.PollerNames()) == 0 {
		return errors.New("no pollers: pass --config with at least one poller")
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	p, err := env.process(ctx, s)
	if err != nil {
		return err
	}
	w := p.Worker(env.worker(s))
	so := env.scheduler(s)
	so.Pollers = env.PollerNames // only this process's pollers, as a reload leaves them
	sch := p.Scheduler(so)
	errc := make(chan error, 2)
	go func() { errc <- w.Run(ctx) }()
	go func() { errc <- sch.Run(ctx) }()
	err = <-errc
	stop()
	if err2 := <-errc; err == nil {
		err = err2
	}
	return err
}
