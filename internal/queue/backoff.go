package queue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/hibiken/asynq"

	"github.com/watukuy/watukuy/internal/outage"
)

// Defaults of the scheduler's retry after a failed claim or enqueue.
const (
	DefaultRetryMin = 100 * time.Millisecond
	// DefaultRetryMax keeps the scheduler's first claim after an outage within 2 s of Redis
	// answering again.
	DefaultRetryMax = 2 * time.Second
)

// backoff is the wait after a failed claim: exponential from min to max with decorrelated
// jitter (each wait drawn uniformly between min and three times the previous one, capped at
// max), so the schedulers of a deployment do not retry in step; a success resets it.
type backoff struct {
	min, max, prev time.Duration
	rand           func() float64
}

func (b *backoff) next() time.Duration {
	if b.rand == nil {
		b.rand = rand.Float64
	}
	hi := min(b.max, 3*max(b.prev, b.min))
	d := b.min + time.Duration(b.rand()*float64(hi-b.min))
	b.prev = d
	return d
}

func (b *backoff) reset() { b.prev = 0 }

// settle turns the outcome of one Once into the wait before the next: Idle after a success
// (ending an outage, which the tracker logs once), the backoff after a failure. A failure
// because Redis is unreachable is logged once per outage (by the tracker); any other failure
// is logged each time.
func (s *Enqueuer) settle(err error) time.Duration {
	if err == nil {
		s.retry.reset()
		s.Outage.OK()
		return s.Idle
	}
	d := s.retry.next()
	if outage.Unreachable(err) && s.Outage != nil {
		s.Outage.Fail("scheduler", err)
		return d
	}
	s.Logger.Error().Err(err).Dur("retryIn", d).Msg("scheduler: claim or enqueue failed")
	return d
}

// OutageLogger wraps a worker's asynq logger so that a worker does not log each of asynq's
// retries (dequeue, heartbeat, forwarder, recoverer) while Redis is down: during an outage
// its warnings and errors are dropped (the tracker logs the outage once); outside one, a
// warning or error that says Redis cannot be reached is checked with ping (one PING, 1 s) and
// starts an outage if Redis does not answer, or is logged as it is if it does (asynq logs
// some failures late, e.g. a state sync retried at shutdown).
func OutageLogger(l asynq.Logger, t *outage.Tracker, ping func(ctx context.Context) error) asynq.Logger {
	return outageLogger{l: l, t: t, ping: ping}
}

type outageLogger struct {
	l    asynq.Logger
	t    *outage.Tracker
	ping func(ctx context.Context) error
}

func (o outageLogger) Debug(args ...any) { o.l.Debug(args...) }
func (o outageLogger) Info(args ...any)  { o.l.Info(args...) }
func (o outageLogger) Warn(args ...any) {
	if !o.quiet(args) {
		o.l.Warn(args...)
	}
}
func (o outageLogger) Error(args ...any) {
	if !o.quiet(args) {
		o.l.Error(args...)
	}
}
func (o outageLogger) Fatal(args ...any) { o.l.Fatal(args...) }

// quiet reports whether a message belongs to an outage (then the tracker has it).
func (o outageLogger) quiet(args []any) bool {
	if o.t.Down() {
		return true
	}
	msg := sprint(args)
	if !outage.LooksUnreachable(msg) || o.ping == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := o.ping(ctx)
	if err == nil || !outage.Unreachable(err) {
		return false
	}
	o.t.Fail("asynq", errors.New(msg))
	return true
}

func sprint(args []any) string { return fmt.Sprint(args...) }
