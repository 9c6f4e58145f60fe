package cli

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/watukuy/watukuy/internal/command"
)

// The version command and --version print the build; --json has the fields the upgrade
// runbook compares.
func TestVersion(t *testing.T) {
	t.Parallel()
	out, _, err := run(t, "version")
	if err != nil || !strings.HasPrefix(out, "watukuy ") || !strings.Contains(out, runtime.Version()) {
		t.Fatalf("version: %v %q", err, out)
	}
	flag, _, err := run(t, "--version")
	if err != nil || flag != out {
		t.Fatalf("--version printed %q (%v), want the version command's %q", flag, err, out)
	}
	js, _, err := run(t, "version", "--json")
	var v struct{ Version, GoVersion string }
	if err != nil || json.Unmarshal([]byte(js), &v) != nil || v.Version == "" || v.GoVersion != runtime.Version() {
		t.Fatalf("version --json: %v %q", err, js)
	}
	for _, c := range []*cobra.Command{command.Worker(), command.Scheduler()} {
		if !strings.Contains(c.Version, runtime.Version()) {
			t.Fatalf("%s --version: %q", c.Name(), c.Version)
		}
	}
}
