package app

import (
	"context"
	"errors"

	"github.com/watukuy/watukuy"
)

// scheduler is the public Scheduler's options from the settings: it serves the
// process's endpoints and claims every registered poller's keys.
func (env *Env) scheduler(s Settings) watukuy.SchedulerOptions {
	return watukuy.SchedulerOptions{ClaimTimeout: s.ClaimTimeout, Logger: env.Log, Registry: env.Registry,
		UI: s.UI, Listen: s.Listen}
}

// worker is the public Worker from the settings; it serves the process's endpoints.
func (env *Env) worker(s Settings) *watukuy.Worker {
	return watukuy.NewWorker(env.Engine, watukuy.WorkerOptions{Concurrency: max(s.Concurrency, 1), DrainTimeout: s.Drain,
		Logger: env.Log, Registry: env.Registry, UI: s.UI, Listen: s.Listen})
}

// RunScheduler claims due keys and enqueues their cycles until ctx ends (watukuy.Scheduler).
func RunScheduler(ctx context.Context, env *Env, s Settings) error {
	return watukuy.NewScheduler(env.Engine, env.scheduler(s)).Run(ctx)
}

// RunWorker serves cycles from asynq until ctx ends; then it stops taking tasks, and running
// cycles stop at their next step (a request in flight is given up, a delivery in flight
// finishes), release their leases and leave their keys due at once, so other workers take
// them over in seconds. Cycles still running after s.Drain are cancelled (their unacked
// events stay in the outbox, G1). See watukuy.Worker.
func RunWorker(ctx context.Context, env *Env, s Settings) error {
	if len(env.PollerNames()) == 0 {
		return errors.New("no pollers: a worker needs --config (or WATUKUY_CONFIG) with at least one poller")
	}
	return env.worker(s).Run(ctx)
}

// RunAll runs a scheduler and a worker in one process (watukuy run, watukuy dev). The first
// of them to return stops the other, so a worker that cannot start (its listener cannot bind)
// fails the process at once instead of leaving a scheduler that claims keys nobody runs.
func RunAll(ctx context.Context, env *Env, s Settings) error {
	if len(env.PollerNames()) == 0 {
		return errors.New("no pollers: pass --config with at least one poller")
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	w := env.worker(s) // the worker serves the process's endpoints
	so := env.scheduler(s)
	so.Listen, so.UI = "", false
	so.Pollers = env.PollerNames // only this process's pollers, as a reload leaves them
	sch := watukuy.NewScheduler(env.Engine, so)
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
