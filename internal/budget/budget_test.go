package budget

import (
	"testing"
	"time"

	"github.com/watukuy/watukuy/watukuytype"
)

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		rate float64
		per  time.Duration
		bad  bool
	}{
		{in: "40/s", rate: 40, per: time.Second},
		{in: "2000/min", rate: 2000, per: time.Minute},
		{in: " 5 / h ", rate: 5, per: time.Hour},
		{in: "10/30s", rate: 10, per: 30 * time.Second},
		{in: "0.5/s", rate: 0.5, per: time.Second},
		{in: "40", bad: true},
		{in: "0/s", bad: true},
		{in: "-1/s", bad: true},
		{in: "x/s", bad: true},
		{in: "40/fortnight", bad: true},
		{in: "40/-1s", bad: true},
	} {
		rate, per, err := ParseRate(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseRate(%q) = %v/%v, want an error", tc.in, rate, per)
			}
			continue
		}
		if err != nil || rate != tc.rate || per != tc.per {
			t.Errorf("ParseRate(%q) = %v, %v, %v; want %v, %v", tc.in, rate, per, err, tc.rate, tc.per)
		}
		if r2, p2, err := ParseRate(FormatRate(rate, per)); err != nil || r2 != rate || p2 != per {
			t.Errorf("FormatRate(%v, %v) = %q does not read back", rate, per, FormatRate(rate, per))
		}
	}
}

func TestWithDefaults(t *testing.T) {
	b, err := WithDefaults(watukuytype.Budget{Name: "shop-${partition}", Rate: 2000, Per: time.Minute})
	if err != nil || b.Per != time.Minute || b.Burst != 34 {
		t.Fatalf("got %+v, %v; want burst 34 (the requests of one second, rounded up)", b, err)
	}
	if b, _ := WithDefaults(watukuytype.Budget{Name: "slow", Rate: 1, Per: time.Hour}); b.Burst != 1 {
		t.Errorf("burst of 1/h = %d, want 1", b.Burst)
	}
	for _, bad := range []watukuytype.Budget{
		{Name: "", Rate: 1},
		{Name: "a b", Rate: 1},
		{Name: "a{b}", Rate: 1},
		{Name: "a|b", Rate: 1},
		{Name: "a", Rate: 0},
		{Name: "a", Rate: 1, Burst: -1},
		{Name: "a", Rate: 1e7},
	} {
		if _, err := WithDefaults(bad); err == nil {
			t.Errorf("WithDefaults(%+v) accepted", bad)
		}
	}
}

func TestReserve(t *testing.T) {
	for _, tc := range []struct {
		lane  watukuytype.Lane
		burst int
		want  int
	}{
		{watukuytype.LaneLive, 20, 0},
		{watukuytype.LaneReconcile, 20, 5},
		{watukuytype.LaneBackfill, 20, 10},
		{watukuytype.LaneReplay, 20, 15},
		{watukuytype.LaneBackfill, 3, 2},
		{watukuytype.LaneReplay, 2, 1},
		{watukuytype.LaneBackfill, 1, 0}, // a bucket of one token serves every lane when full
	} {
		if got := Reserve(tc.lane, tc.burst); got != tc.want {
			t.Errorf("Reserve(%s, %d) = %d, want %d", tc.lane, tc.burst, got, tc.want)
		}
	}
}

func TestTokens(t *testing.T) {
	b := watukuytype.Budget{Name: "a", Rate: 10, Per: time.Second, Burst: 5}
	now := time.UnixMilli(1_000_000)
	for _, tc := range []struct {
		tat  time.Duration // from now
		want float64
	}{
		{-time.Second, 5}, {0, 5}, {100 * time.Millisecond, 4}, {250 * time.Millisecond, 2.5}, {500 * time.Millisecond, 0}, {time.Second, 0},
	} {
		if got := Tokens(b, now.Add(tc.tat), now); got != tc.want {
			t.Errorf("Tokens(tat now%+v) = %v, want %v", tc.tat, got, tc.want)
		}
	}
}

func TestExcess(t *testing.T) {
	b := watukuytype.Budget{Name: "a", Rate: 10, Per: time.Second, Burst: 2}
	at := func(ms ...int) []time.Time {
		ts := make([]time.Time, len(ms))
		for i, m := range ms {
			ts[i] = time.UnixMilli(int64(m))
		}
		return ts
	}
	for _, tc := range []struct {
		name  string
		times []time.Time
		ok    bool
	}{
		{"none", nil, true},
		{"a burst of 2, then one every interval", at(0, 0, 100, 200, 300), true},
		{"three at once", at(0, 0, 0), false},
		{"a burst, then one too soon", at(0, 0, 50), false},
		{"out of order", at(300, 0, 200, 100, 0), true},
		{"too fast over a long window", at(0, 90, 180, 270, 360, 450, 540, 630, 720, 810, 900, 990, 1080, 1170, 1260, 1350, 1440, 1530, 1620, 1710, 1800, 1890), false},
	} {
		e, from, to := Excess(b, tc.times, 0)
		if (e <= 0) != tc.ok {
			t.Errorf("%s: excess %v in [%v, %v], want ok=%v", tc.name, e, from.UnixMilli(), to.UnixMilli(), tc.ok)
		}
	}
	if e, _, _ := Excess(b, at(0, 0, 50), 60*time.Millisecond); e > 0 {
		t.Errorf("a slack of 60ms covers one request 50ms early: excess %v", e)
	}
}

// A bucket drained exactly at its bound (a burst, then one token per interval) is within it:
// Excess must not report a rounding error of its floating-point window times as an excess
// (4 slots at once, then 8 at 50 ms, for 20/s with a burst of 4).
func TestExcessOfABoundMetExactlyIsNone(t *testing.T) {
	b := watukuytype.Budget{Name: "api", Rate: 20, Per: time.Second, Burst: 4}
	start := time.UnixMilli(1_800_000_000_000)
	bad := 0
	for off := time.Duration(0); off < 100*time.Second; off += 1001 * time.Microsecond {
		ts := []time.Time{start}
		w := start.Add(time.Second + off)
		for range 4 {
			ts = append(ts, w)
		}
		for i := 1; i <= 8; i++ {
			ts = append(ts, w.Add(time.Duration(i)*50*time.Millisecond))
		}
		if e, _, _ := Excess(b, ts, 0); e > 0 {
			if bad == 0 {
				t.Errorf("window at %v after the first slot: excess %g, want 0 (12 slots in 400 ms = 4 + 20/s × 0.4 s)", time.Second+off, e)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d of 99,900 offsets report an excess for a bound met exactly", bad)
	}
}
