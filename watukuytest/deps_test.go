package watukuytest_test

import (
	"testing"

	"github.com/watukuy/watukuy/internal/depcheck"
)

// TestDependenciesStayLight fails when watukuytest would compile the distributed queue and its
// monitoring, or the process control and HTTP test servers of the process-level chaos harness
// (internal/chaos/procchaos), into its users' test binaries. os/exec may come in by one known
// importer only.
func TestDependenciesStayLight(t *testing.T) {
	heavy := []string{"github.com/hibiken/asynq", "github.com/hibiken/asynqmon", "github.com/prometheus/client_golang", "os/exec", "net/http/httptest"}
	allowed := map[string][]string{
		"os/exec": {"github.com/yuin/gopher-lua"}, // miniredis runs EVAL with gopher-lua, whose os library imports os/exec
	}
	for _, b := range depcheck.Entries(t, "github.com/watukuy/watukuy/watukuytest", heavy, allowed) {
		t.Errorf("watukuytest's dependencies: %s", b)
	}
}
