package queue_test

import (
	"fmt"
	"testing"

	"github.com/watukuy/watukuy/internal/bench"
	"github.com/watukuy/watukuy/internal/redistest"
)

// BenchmarkNoopCycles: no-op cycles per second through the scheduler, asynq and a worker
// against a real redis-server (2,000 keys whose fetch returns an empty page, all due at once),
// next to raw asynq no-op tasks per second measured in the same run with the same concurrency,
// with 1 and 10 keys per task; measured by internal/bench (`watukuy bench --only noop`).
// Goal: cycles/s >= 0.8 × tasks/s.
func BenchmarkNoopCycles(b *testing.B) {
	redistest.Real(b) // skips, or fails with WATUKUY_REQUIRE_REAL_REDIS=1, without redis-server
	for _, perTask := range []int{1, 10} {
		b.Run(fmt.Sprintf("perTask=%d", perTask), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				r, err := bench.NoopCycles(b.Context(), bench.Options{Dir: b.TempDir(), NoopKeys: 2000, Concurrency: 32}, perTask)
				if err != nil {
					b.Fatal(err)
				}
				for unit, v := range r.Metrics() {
					b.ReportMetric(v, unit)
				}
				b.ReportMetric(r.Value/r.Baseline, "ratio")
			}
		})
	}
}
