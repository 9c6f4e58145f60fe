package budget

import (
	"testing"
	"time"

	"github.com/watukuy/watukuy/watukuytype"
)

// A bucket drained exactly at its bound (a burst, then one token per interval) is within it;
// Excess computes every window's count against times measured from the run's first slot in
// floating point, and a rounding error reports a bound met exactly as exceeded. Seen in the
// chaos run (TestRunHasNoViolations, B1 "gave 0.0 tokens more than 20/s with a burst of 4",
// seeds 16 and 40 now and then): 4 slots at once then 8 at 50 ms.
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
