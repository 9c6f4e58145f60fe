package schedule

import (
	"fmt"
	"testing"
	"time"

	"github.com/watukuy/watukuy/watukuytype"
)

func TestNextInterval(t *testing.T) {
	c := watukuytype.Schedule{Min: 5 * time.Second, Max: 5 * time.Minute}
	tests := []struct {
		name string
		cfg  watukuytype.Schedule
		cur  time.Duration
		o    Outcome
		want time.Duration
	}{
		{"first cycle starts at min", c, 0, Idle, 5 * time.Second},
		{"idle multiplies by 1.5", c, 10 * time.Second, Idle, 15 * time.Second},
		{"idle caps at max", c, 4 * time.Minute, Idle, 5 * time.Minute},
		{"change halves", c, 40 * time.Second, Changed, 20 * time.Second},
		{"change floors at min", c, 6 * time.Second, Changed, 5 * time.Second},
		{"fixed pins min", watukuytype.Schedule{Min: time.Second, Max: time.Hour, Fixed: true}, time.Minute, Idle, time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := NextInterval(tc.cfg, tc.cur, tc.o); got != tc.want {
				t.Fatalf("NextInterval(%v, %v) = %v, want %v", tc.cur, tc.o, got, tc.want)
			}
		})
	}
}

func TestJittered(t *testing.T) {
	d := 10 * time.Second
	for _, tc := range []struct {
		r    float64
		want time.Duration
	}{{0, 9 * time.Second}, {0.5, 10 * time.Second}, {0.75, 10500 * time.Millisecond}} {
		if got := Jittered(d, 0.1, tc.r); got != tc.want {
			t.Errorf("Jittered(r=%v) = %v, want %v", tc.r, got, tc.want)
		}
	}
	if got := Jittered(d, 0, 0.9); got != d {
		t.Errorf("no jitter changed the interval: %v", got)
	}
}

func TestBackoff(t *testing.T) {
	b := DefaultBackoff
	for _, tc := range []struct {
		attempt int
		cap     time.Duration
	}{{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {4, 8 * time.Second}, {11, 10 * time.Minute}, {500, 10 * time.Minute}} {
		if got := b.Cap(tc.attempt); got != tc.cap {
			t.Errorf("Cap(%d) = %v, want %v", tc.attempt, got, tc.cap)
		}
		if got := b.Delay(tc.attempt, 0.5); got != tc.cap/2 {
			t.Errorf("Delay(%d, .5) = %v, want %v", tc.attempt, got, tc.cap/2)
		}
	}
}

func ExampleNextInterval() {
	c := watukuytype.Schedule{Min: 5 * time.Second, Max: time.Minute}
	iv := time.Duration(0)
	for _, o := range []Outcome{Idle, Idle, Idle, Changed} {
		iv = NextInterval(c, iv, o)
		fmt.Println(iv)
	}
	// Output:
	// 5s
	// 7.5s
	// 11.25s
	// 5.625s
}
