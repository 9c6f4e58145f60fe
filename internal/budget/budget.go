// Package budget holds the pure rules of shared request budgets: reading a rate, a budget's
// defaults, the bucket a key draws from, the reserve each lane leaves for the lanes above it,
// and the bound a budget puts on any window of requests. The bucket itself (GCRA on the
// Redis server clock) is internal/luascripts/budget_take.lua.
//
// GCRA keeps one number per bucket, the theoretical arrival time (TAT) of the next request
// were the bucket drained at its rate: a request at now may go when TAT+interval-now fits in
// the tolerance (Burst intervals), and moves TAT on by one interval. A lane below live may go
// only when, after its request, the bucket still holds its reserve; the live lane may also
// reserve a slot up to a short wait ahead and sit it out, so the keys of a budget are served
// in the order they ask (fairness), and a key whose wait is longer yields its worker slot.
package budget

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/watukuy/watukuy/watukuytype"
)

// Placeholder is what a budget name holds where the partition goes.
const Placeholder = "${partition}"

// ParseRate reads a rate such as "40/s", "2000/min", "5/h" or "10/30s": requests per period.
func ParseRate(s string) (rate float64, per time.Duration, err error) {
	n, unit, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, 0, fmt.Errorf("rate %q: want requests/period, such as 40/s or 2000/min", s)
	}
	rate, err = strconv.ParseFloat(strings.TrimSpace(n), 64)
	if err != nil || rate <= 0 || math.IsInf(rate, 0) {
		return 0, 0, fmt.Errorf("rate %q: %q is not a positive number", s, n)
	}
	switch u := strings.TrimSpace(unit); u {
	case "s", "sec", "second":
		per = time.Second
	case "m", "min", "minute":
		per = time.Minute
	case "h", "hour":
		per = time.Hour
	default:
		per, err = time.ParseDuration(u)
		if err != nil || per <= 0 {
			return 0, 0, fmt.Errorf("rate %q: period %q: want s, min, h or a duration such as 30s", s, u)
		}
	}
	return rate, per, nil
}

// FormatRate is the rate as ParseRate reads it.
func FormatRate(rate float64, per time.Duration) string {
	unit := per.String()
	switch per {
	case time.Second:
		unit = "s"
	case time.Minute:
		unit = "min"
	case time.Hour:
		unit = "h"
	}
	return strconv.FormatFloat(rate, 'f', -1, 64) + "/" + unit
}

// WithDefaults fills Per (one second) and Burst (the requests of one second, at least 1) and
// checks the budget: a name (characters a Redis key and a label can carry) and a positive
// rate. The error names the field.
func WithDefaults(b watukuytype.Budget) (watukuytype.Budget, error) {
	if b.Per == 0 {
		b.Per = time.Second
	}
	switch {
	case b.Name == "" || strings.ContainsAny(strings.ReplaceAll(b.Name, Placeholder, ""), "{}$ \t\r\n|"):
		return b, &watukuytype.ConfigError{Field: "budgets.name", Msg: fmt.Sprintf("%q: want a non-empty name without braces, $, | or spaces (besides %s)", b.Name, Placeholder)}
	case !(b.Rate > 0) || math.IsInf(b.Rate, 0):
		return b, &watukuytype.ConfigError{Field: "budgets.rate", Msg: fmt.Sprintf("budget %s: the rate must be positive", b.Name)}
	case b.Per < 0:
		return b, &watukuytype.ConfigError{Field: "budgets.rate", Msg: fmt.Sprintf("budget %s: the period must be positive", b.Name)}
	case b.Burst < 0:
		return b, &watukuytype.ConfigError{Field: "budgets.burst", Msg: fmt.Sprintf("budget %s: burst must not be negative", b.Name)}
	}
	if Interval(b) < time.Microsecond {
		return b, &watukuytype.ConfigError{Field: "budgets.rate", Msg: fmt.Sprintf("budget %s: %s is more than a million requests a second", b.Name, FormatRate(b.Rate, b.Per))}
	}
	if b.Burst == 0 {
		b.Burst = max(1, int(math.Ceil(b.Rate*float64(time.Second)/float64(b.Per))))
	}
	return b, nil
}

// Interval is the time one token takes to come back: Per / Rate.
func Interval(b watukuytype.Budget) time.Duration {
	return time.Duration(float64(b.Per) / b.Rate)
}

// Bucket is the bucket a key of partition draws from: the budget's name with the partition
// put in.
func Bucket(name, partition string) string {
	return strings.ReplaceAll(name, Placeholder, partition)
}

// Reserve is how many tokens a request of lane must leave in a bucket of burst tokens for the
// lanes above it: none for live, a quarter of the burst for reconcile, half for backfill,
// three quarters for replay; always less than the burst, so a full bucket serves every lane.
func Reserve(lane watukuytype.Lane, burst int) int {
	var quarters int
	switch lane {
	case watukuytype.LaneLive:
		return 0
	case watukuytype.LaneReconcile:
		quarters = 1
	case watukuytype.LaneBackfill:
		quarters = 2
	default:
		quarters = 3
	}
	return min(burst-1, (burst*quarters+3)/4)
}

// Tokens is how many requests a bucket whose TAT is tat could serve at now (0 to Burst).
func Tokens(b watukuytype.Budget, tat, now time.Time) float64 {
	if !tat.After(now) {
		return float64(b.Burst)
	}
	t := float64(b.Burst) - float64(tat.Sub(now))/float64(Interval(b))
	return max(0, min(float64(b.Burst), t))
}

// epsilon absorbs the rounding of float sums: a window exactly at its bound is within it.
const epsilon = 1e-9

// Excess checks requests sent at times (in any order) against the bound a budget puts on
// them: no window [t0, t1] holds more than Burst + Rate×(t1−t0)/Per requests. It returns by
// how many requests the worst window exceeds it (0: never) and where that window starts and
// ends. slack widens each window by that much time (clock skew between the bucket's clock and
// the one that recorded the times).
func Excess(b watukuytype.Budget, times []time.Time, slack time.Duration) (excess float64, from, to time.Time) {
	ts := slices.SortedFunc(slices.Values(times), time.Time.Compare)
	perNs := float64(b.Per)
	// For windows ending at request j: count = j-i+1, bound = Burst + Rate×(t_j - t_i + slack)/Per.
	// excess = (j - Rate×t_j/Per) - (i - Rate×t_i/Per) + 1 - Burst - Rate×slack/Per: the
	// largest difference of f(j) - f(i) over i <= j, found in one pass.
	f := func(k int) float64 { return float64(k) - b.Rate*float64(ts[k].Sub(ts[0]))/perNs }
	excess = math.Inf(-1)
	best := 0
	for j := range ts {
		if f(j) < f(best) {
			best = j
		}
		if e := f(j) - f(best) + 1 - float64(b.Burst) - b.Rate*float64(slack)/perNs; e > excess+epsilon {
			excess, from, to = e, ts[best], ts[j]
		}
	}
	if len(ts) == 0 || excess < epsilon {
		excess = max(0, excess) // a bound met exactly is met, whatever the float rounding says
	}
	return excess, from, to
}
