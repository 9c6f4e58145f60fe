package queue_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/watukuy/watukuy/internal/bench"
	"github.com/watukuy/watukuy/internal/redistest"
)

// BenchmarkNoopCycles: no-op cycles per second through the scheduler, asynq and a worker
// against a real redis-server (2,000 keys whose fetch returns an empty page, all due at once),
// next to raw asynq no-op tasks per second measured in the same run with the same concurrency,
// with 1 and 10 keys per task; measured by internal/bench (`watukuy bench --only noop`).
// Goal: cycles/s >= 0.8 × tasks/s. The idle: figures are those of the rounds after the keys'
// first cycles.
func BenchmarkNoopCycles(b *testing.B) {
	benchPerTask(b, bench.NoopCycles, func(b *testing.B, r bench.Result) { b.ReportMetric(r.Value/r.Baseline, "ratio") })
}

// BenchmarkIdleCycleCosts: what an idle cycle costs Redis, per cycle, split into the
// scheduler, asynq's server and the engine (bench.IdleCycleCosts: round trips from each
// client's hook, the commands Redis ran from MONITOR, the total from INFO commandstats).
func BenchmarkIdleCycleCosts(b *testing.B) {
	benchPerTask(b, bench.IdleCycleCosts, nil)
}

// benchPerTask runs measure at 1 and 10 keys per task on 2,000 keys and reports its figures
// (and what more reports).
func benchPerTask(b *testing.B, measure func(context.Context, bench.Options, int) (bench.Result, error), more func(*testing.B, bench.Result)) {
	redistest.Real(b) // skips, or fails with WATUKUY_REQUIRE_REAL_REDIS=1, without redis-server
	for _, perTask := range []int{1, 10} {
		b.Run(fmt.Sprintf("perTask=%d", perTask), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				r, err := measure(b.Context(), bench.Options{Dir: b.TempDir(), NoopKeys: 2000, Concurrency: 32}, perTask)
				if err != nil {
					b.Fatal(err)
				}
				for unit, v := range r.Metrics() {
					b.ReportMetric(v, unit)
				}
				if more != nil {
					more(b, r)
				}
			}
		})
	}
}
