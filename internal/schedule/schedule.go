// Package schedule holds the poller's schedule arithmetic as pure functions: AIMD intervals,
// symmetric jitter and exponential backoff with full jitter. Randomness comes in as an
// argument in [0,1), so every function is deterministic under test.
package schedule

import (
	"time"

	"github.com/watukuy/watukuy/watukuytype"
)

// DefaultBackoff is the failure backoff (docs/design.md, Scheduling): base 1s, factor 2, max 10m.
var DefaultBackoff = watukuytype.Backoff{Base: time.Second, Factor: 2, Max: 10 * time.Minute}

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
func NextInterval(c watukuytype.Schedule, current time.Duration, o Outcome) time.Duration {
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
