package httppoll

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Format names accepted by ParseTime besides Go layouts.
const (
	RFC3339 = "rfc3339"  // RFC 3339 with optional fractional seconds
	EpochS  = "epoch_s"  // seconds since 1970, integer or decimal
	EpochMS = "epoch_ms" // milliseconds since 1970
	Epoch   = "epoch"    // a number: seconds below 1e12, milliseconds above
)

// ParseTime reads an API's date in the first of formats that fits: "rfc3339", "epoch_s",
// "epoch_ms", "epoch" (seconds or milliseconds by magnitude: below 1e12 is seconds), or a Go
// layout such as "2006-01-02 15:04:05" (read as UTC unless it has a zone); no formats means
// rfc3339 then epoch. A value that fits none is an error: the configuration does not match
// the API, and no retry will fix it.
func ParseTime(v string, formats []string) (time.Time, error) {
	if len(formats) == 0 {
		formats = []string{RFC3339, Epoch} // the default
	}
	v = strings.TrimSpace(v)
	for _, f := range formats {
		switch f {
		case RFC3339:
			if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
				return t, nil
			}
		case EpochS, EpochMS, Epoch:
			n, err := strconv.ParseFloat(v, 64)
			if err != nil || math.IsNaN(n) || math.IsInf(n, 0) {
				continue
			}
			ms := n * 1000
			if f == EpochMS || f == Epoch && n >= 1e12 {
				ms = n
			}
			return time.UnixMilli(int64(ms)).UTC(), nil
		default:
			if t, err := time.ParseInLocation(f, v, time.UTC); err == nil {
				return t, nil
			}
		}
	}
	return time.Time{}, fmt.Errorf("%q is not a date in any of the formats %v", v, formats)
}
