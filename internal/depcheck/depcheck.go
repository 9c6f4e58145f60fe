// Package depcheck finds where a package's import graph enters packages it must not link, for
// the tests that keep the engine package and watukuytest light.
package depcheck

import (
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
)

// Entries walks pkg's import graph (go list -deps, test files aside) and returns, sorted, each
// edge "importer imports imp" by which the graph enters one of heavy's keys (a package, or a
// path prefix such as a module), unless allowed[key] names that importer. It fails tb when go
// list fails or lists too few packages to be a real graph.
func Entries(tb testing.TB, pkg string, heavy []string, allowed map[string][]string) []string {
	tb.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, pkg).Output()
	if err != nil {
		tb.Fatalf("go list -deps %s: %v", pkg, err)
	}
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
				if within(imp, h) && !within(f[0], h) && !slices.Contains(allowed[h], f[0]) {
					bad = append(bad, f[0]+" imports "+imp)
				}
			}
		}
	}
	if pkgs < 10 {
		tb.Fatalf("go list -deps %s listed %d packages; the walk saw no real graph:\n%s", pkg, pkgs, out)
	}
	sort.Strings(bad)
	return bad
}

// within reports whether pkg is root or one of its subpackages.
func within(pkg, root string) bool { return pkg == root || strings.HasPrefix(pkg, root+"/") }
