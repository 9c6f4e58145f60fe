package command_test

import (
	"testing"

	"github.com/watukuy/watukuy/internal/depcheck"
)

// TestProcessBinariesLinkOnlyWhatRuns fails when the worker's or the scheduler's binary
// reaches the test and demo harness (chaos, bench, the fake API and proxy, the redis-server
// runner, miniredis) or the CLI that carries it: a production process links only what runs.
func TestProcessBinariesLinkOnlyWhatRuns(t *testing.T) {
	const m = "github.com/watukuy/watukuy/"
	harness := []string{m + "internal/cli", m + "internal/chaos", m + "internal/bench", m + "internal/fakeapi",
		m + "internal/netproxy", m + "internal/redisproc", m + "internal/redistest", m + "internal/fakeclock",
		m + "watukuytest", "github.com/alicebob/miniredis"}
	for _, bin := range []string{m + "cmd/worker", m + "cmd/scheduler"} {
		for _, b := range depcheck.Entries(t, bin, harness, nil) {
			t.Errorf("%s: %s", bin, b)
		}
	}
}
