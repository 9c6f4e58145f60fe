package watukuy_test

import (
	"os/exec"
	"sort"
	"strings"
	"testing"
)

// TestEngineDependenciesStayLight fails when the engine package's import graph (go list
// -deps, test files aside) reaches the distributed pool's queue and monitoring or the HTTP
// test servers: every program that embeds the engine, and watukuytest, would link them. The
// pool lives in package pool for that reason.
func TestEngineDependenciesStayLight(t *testing.T) {
	heavy := []string{"github.com/hibiken/asynq", "github.com/hibiken/asynqmon", "github.com/prometheus", "net/http/httptest"}
	out, err := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`,
		"github.com/watukuy/watukuy").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	within := func(pkg, root string) bool { return pkg == root || strings.HasPrefix(pkg, root+"/") }
	var bad []string
	pkgs := 0
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		pkgs++
		for _, imp := range f[1:] {
			for _, h := range heavy {
				if within(imp, h) && !within(f[0], h) { // where the graph enters h
					bad = append(bad, f[0]+" imports "+imp)
				}
			}
		}
	}
	if pkgs < 10 {
		t.Fatalf("go list -deps listed %d packages; the walk saw no real graph:\n%s", pkgs, out)
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Errorf("the engine's dependencies: %s", b)
	}
}
