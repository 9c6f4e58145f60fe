// Package schedule holds the poller's schedule arithmetic as pure functions: AIMD intervals,
// symmetric jitter and exponential backoff with full jitter. Randomness comes in as an
// argument in [0,1), so every function is deterministic under test.
package schedule

import (
	"math"
	"time"
)

// Config is one poller's schedule.
type Config struct {
	// Min is the shortest interval and the starting one.
	Min time.Duration
	// Max caps the interval.
	Max time.Duration
	// Jitter is the symmetric jitter fraction (0.1 = ±10%).
	Jitter float64
	// Fixed pins the interval at Min (adaptive: false).
	Fixed bool
}

// Backoff describes exponential backoff with full jitter.
type Backoff struct {
	Base   time.Duration
	Factor float64
	Max    time.Duration
}

// DefaultBackoff is the failure backoff (docs/design.md, Scheduling): base 1s, factor 2, max 10m.
var DefaultBackoff = Backoff{Base: time.Second, Factor: 2, Max: 10 * time.Minute}

// Outcome is what a cycle's fetches saw.
type Outcome int

const (
	// Idle means the cycle found no change (or the API answered 304).
	Idle Outcome = iota
	// Changed means the cycle emitted at least one event.
	Changed
)

// NextInterval applies AIMD: a cycle with changes halves the interval (floor Min), an idle
// one multiplies it by 1.5 (cap Max). A zero current interval starts at Min.
func NextInterval(c Config, current time.Duration, o Outcome) time.Duration {
	if c.Fixed || current <= 0 {
		return c.Min
	}
	var next time.Duration
	if o == Changed {
		next = current / 2
	} else {
		next = time.Duration(float64(current) * 1.5)
	}
	return min(max(next, c.Min), c.Max)
}

// Jittered spreads d symmetrically by the fraction j: with r uniform in [0,1) the result is
// uniform in [d·(1-j), d·(1+j)).
func Jittered(d time.Duration, j, r float64) time.Duration {
	if j <= 0 {
		return d
	}
	return time.Duration(float64(d) * (1 + j*(2*r-1)))
}

// Delay returns the full-jitter backoff before retry number attempt (1 for the first
// retry): uniform in [0, min(Max, Base·Factor^(attempt-1))).
func (b Backoff) Delay(attempt int, r float64) time.Duration {
	return time.Duration(r * float64(b.Cap(attempt)))
}

// Cap is the upper bound of Delay for that attempt.
func (b Backoff) Cap(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	c := float64(b.Base) * math.Pow(b.Factor, float64(attempt-1))
	if c > float64(b.Max) || math.IsInf(c, 0) {
		return b.Max
	}
	return time.Duration(c)
}
