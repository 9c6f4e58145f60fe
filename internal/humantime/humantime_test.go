package humantime

import (
	"testing"
	"time"
)

func TestRelative(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{4*time.Second + 400*time.Millisecond, "in 4s"},
		{250 * time.Millisecond, "in 250ms"},
		{0, "now"},
		{-999 * time.Millisecond, "now"},
		{-3 * time.Minute, "3m0s ago"},
		{-1500 * time.Millisecond, "2s ago"},
	} {
		if got := Relative(now.Add(c.d), now); got != c.want {
			t.Errorf("Relative(now%+v) = %q, want %q", c.d, got, c.want)
		}
	}
}
