// Package humantime renders times and durations for operators, the same way in the CLI's
// tables and on the status page.
package humantime

import "time"

// Round keeps a duration readable: milliseconds below a second, seconds above.
func Round(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Second)
}

// Relative renders t as "in 4s", "now" (within a second before now) or "3m0s ago".
func Relative(t, now time.Time) string {
	d := t.Sub(now)
	switch {
	case d > 0:
		return "in " + Round(d).String()
	case d > -time.Second:
		return "now"
	}
	return Round(-d).String() + " ago"
}
