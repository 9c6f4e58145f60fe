package watukuytype

import (
	"math"
	"time"
)

// Schedule is one poller's polling interval: adaptive between Min and Max, or Fixed.
type Schedule struct {
	// Min is the shortest interval and the starting one.
	Min time.Duration
	// Max caps the interval.
	Max time.Duration
	// Jitter is the symmetric jitter fraction (0.1 = ±10%); 0 means the default, 0.1.
	Jitter float64
	// NoJitter turns jitter off: every interval is exact (the config file's jitter: 0).
	NoJitter bool
	// Fixed pins the interval at Min (adaptive: false).
	Fixed bool
}

// Backoff describes exponential backoff with full jitter.
type Backoff struct {
	Base   time.Duration
	Factor float64
	Max    time.Duration
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
