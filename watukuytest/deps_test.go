package watukuytest_test

import (
	"os/exec"
	"sort"
	"strings"
	"testing"
)

// heavy are packages watukuytest must not compile into its users' test binaries: the
// distributed queue and its monitoring, and the process control and HTTP test servers of the process-level
// chaos harness (internal/chaos/procchaos). Each maps to the importers that may still bring
// it, with why; any other importer fails the test.
var heavy = map[string]map[string]string{
	"github.com/hibiken/asynq": {},
	"os/exec": {
		// miniredis runs EVAL with gopher-lua, whose os library imports os/exec.
		"github.com/yuin/gopher-lua": "miniredis's Lua interpreter",
	},
	"net/http/httptest":                   {},
	"github.com/hibiken/asynqmon":         {},
	"github.com/prometheus/client_golang": {},
}

// TestDependenciesStayLight walks watukuytest's import graph (go list -deps) and fails when a
// heavy package is imported by anything but its known importers.
func TestDependenciesStayLight(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`,
		"github.com/watukuy/watukuy/watukuytest").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	var bad []string
	pkgs := 0
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		pkgs++
		importer := f[0]
		for _, imp := range f[1:] {
			for h, allowed := range heavy {
				if !within(imp, h) || within(importer, h) { // report where the graph enters h
					continue
				}
				if _, ok := allowed[importer]; !ok {
					bad = append(bad, importer+" imports "+imp)
				}
			}
		}
	}
	if pkgs < 10 {
		t.Fatalf("go list -deps listed %d packages; the walk saw no real graph:\n%s", pkgs, out)
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Errorf("watukuytest's dependencies: %s", b)
	}
}

// within reports whether pkg is root or one of its subpackages.
func within(pkg, root string) bool { return pkg == root || strings.HasPrefix(pkg, root+"/") }
