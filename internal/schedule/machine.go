package schedule

import (
	"time"

	"github.com/watukuy/watukuy/watukuytype"
)

// The poller state machine. Every transition is a pure function of the persisted State, the
// cycle's Outcome, the time and a random number, so every instance computes the same thing.
//
//	            changed / idle / 304: AIMD interval, paced by RateLimit
//	          ┌───────────┐
//	          ▼           │
//	 ┌──────────────────────┐  failure (n < Failures): backoff, full jitter   ┌─────────┐
//	 │        closed        │ ──────────────────────────────────────────────▶ │ backoff │
//	 │ (interval, jitter)   │ ◀────────────────────────────────────────────── │ (n > 0) │
//	 └──────────────────────┘            success                               └─────────┘
//	   │   ▲        ▲  │ 429, 503+Retry-After (any state: not a failure,          │
//	   │   │        │  │ circuit untouched): throttledUntil = now+Retry-After     │ failure (n = Failures)
//	   │   │        │  ▼                                                          │ or poison halt
//	   │   │     ┌───────────┐                                                    ▼
//	   │   │     │ throttled │                                             ┌────────────┐
//	   │   │     └───────────┘                                             │    open    │ due after ProbeEvery
//	   │   │                                                               └────────────┘ (Trigger: at once)
//	   │   │ probe succeeds                                                      │ due
//	   │   └──────────────────────────────────────────────────── ┌───────────┐ ◀─┘
//	   │                                                          │ half-open │ probe fails: open again
//	   │ truncated (maxPagesPerCycle): due now                     └───────────┘
//	   └──▶ closed
//
// No answer (stopped before the API answered anything): nothing changes; due now, or after
// ProbeEvery when open.
//
// Half-open is not stored: a cycle that runs while the circuit is open is the probe.

// Policy is one poller's schedule settings.
type Policy struct {
	watukuytype.Schedule
	// Backoff spaces failed cycles; zero value = DefaultBackoff.
	Backoff watukuytype.Backoff
	// Failures opens the circuit after that many consecutive failures.
	Failures int
	// ProbeEvery is how long an open circuit waits before its probe.
	ProbeEvery time.Duration
}

// State is the persisted schedule of one key.
type State struct {
	Interval       time.Duration
	Failures       int
	Circuit        watukuytype.CircuitState
	NextDue        time.Time
	ThrottledUntil time.Time
}

// Kind is what a cycle amounted to.
type Kind int

// Cycle results.
const (
	// Idle: no change (or 304).
	ResultIdle Kind = iota
	// ResultChanged: at least one event.
	ResultChanged
	// ResultTruncated: maxPagesPerCycle cut the cycle short; more is waiting.
	ResultTruncated
	// ResultThrottled: 429, or 503 with Retry-After.
	ResultThrottled
	// ResultFailed: any other error.
	ResultFailed
	// ResultPoisonHalt: a poison event with poison: halt.
	ResultPoisonHalt
	// ResultNoAnswer: the cycle stopped (its process stopping, tick's deadline) before the API
	// answered anything: nothing was learned of the API, so failures, circuit, interval and
	// throttle stay; due at once, or after ProbeEvery when the circuit is open (a probe given
	// up unanswered waits for the next probe, as a failed one would, without counting).
	ResultNoAnswer
	// ResultDeferred: the shared budget had no token for the cycle's first request, so none
	// was sent: nothing was learned of the API and only the due time moves, to when the
	// budget can serve the key (Pace), whatever the circuit.
	ResultDeferred
)

// Result is one cycle's outcome as the state machine sees it.
type Result struct {
	Kind Kind
	// RetryAfter is the throttle window (ResultThrottled); 0 means the API gave none.
	RetryAfter time.Duration
	// Pace is the least gap before the next request that the API's rate-limit headers ask
	// for (see Pace), counted from now; 0 when none.
	Pace time.Duration
	// Began is when the cycle began by the server's clock: a result due at once (truncated,
	// no answer) is due from then, whatever clock the next claimer reads; zero: now.
	Began time.Time
}

// Next computes the state after a cycle that ended at now; r is uniform in [0,1). Whatever
// the result, the next cycle is not due before the API's pace allows (counted from now: the
// answer that carried the rate-limit headers may have come late in the cycle).
func Next(p Policy, s State, res Result, now time.Time, r float64) State {
	s = transition(p, s, res, now, r)
	if res.Pace > 0 {
		s.NextDue = later(s.NextDue, now.Add(res.Pace))
	}
	return s
}

// transition is Next before the pace.
func transition(p Policy, s State, res Result, now time.Time, r float64) State {
	b := p.Backoff
	if b == (watukuytype.Backoff{}) {
		b = DefaultBackoff
	}
	if s.Circuit == "" {
		s.Circuit = watukuytype.CircuitClosed
	}
	began := res.Began
	if began.IsZero() {
		began = now
	}
	switch res.Kind {
	case ResultNoAnswer:
		s.NextDue = began
		if s.Circuit == watukuytype.CircuitOpen {
			s.NextDue = now.Add(p.ProbeEvery)
		}
		s.NextDue = later(s.NextDue, s.ThrottledUntil)
		return s
	case ResultDeferred:
		s.NextDue = later(began, s.ThrottledUntil)
		return s
	case ResultThrottled:
		// Not a failure: failures and circuit stay as they are.
		wait := res.RetryAfter
		if wait <= 0 {
			wait = max(res.Pace, s.Interval, p.Min)
		}
		s.ThrottledUntil = now.Add(wait)
		s.NextDue = s.ThrottledUntil
		return s
	case ResultFailed, ResultPoisonHalt:
		s.Failures++
		if res.Kind == ResultPoisonHalt || s.Failures >= p.Failures || s.Circuit == watukuytype.CircuitOpen {
			s.Circuit = watukuytype.CircuitOpen
			s.NextDue = now.Add(p.ProbeEvery)
		} else {
			s.NextDue = now.Add(b.Delay(s.Failures, r))
		}
		s.NextDue = later(s.NextDue, s.ThrottledUntil)
		return s
	}
	// Success closes the circuit (a successful half-open probe) and clears the failures.
	s.Failures = 0
	s.Circuit = watukuytype.CircuitClosed
	if s.Interval <= 0 {
		s.Interval = p.Min
	}
	switch res.Kind {
	case ResultTruncated:
		s.NextDue = began
	case ResultChanged:
		s.Interval = NextInterval(p.Schedule, s.Interval, Changed)
		s.NextDue = now.Add(Jittered(s.Interval, p.Jitter, r))
	default:
		s.Interval = NextInterval(p.Schedule, s.Interval, Idle)
		s.NextDue = now.Add(Jittered(s.Interval, p.Jitter, r))
	}
	s.NextDue = later(s.NextDue, s.ThrottledUntil)
	return s
}

// Pace is the gap between requests that spreads the remaining quota over what is left of
// the window, reset / max(remaining, 1), so the quota lasts until the reset and no 429 is
// needed to slow down.
func Pace(remaining int, reset time.Duration) time.Duration {
	if reset <= 0 {
		return 0
	}
	return reset / time.Duration(max(remaining, 1))
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
