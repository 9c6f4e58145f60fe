package docsync

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// goProgram matches a fenced Go block that is a whole program.
var goProgram = regexp.MustCompile("(?ms)^```go\n(package main\n.*?)^```")

// The Go programs the docs show (a first poller, the library's walk-through) build against
// the module as it is: each is compiled in place by go build -overlay, gofmt-clean, so a
// renamed type or method fails here before a reader copies it.
func TestDocsGoProgramsBuild(t *testing.T) {
	rootDir := root(t)
	docs := readDocs(t, rootDir)
	names := make([]string, 0, len(docs))
	for d := range docs {
		names = append(names, d)
	}
	sort.Strings(names)
	tmp := t.TempDir()
	built := 0
	for _, d := range names {
		for i, m := range goProgram.FindAllStringSubmatch(docs[d], -1) {
			src := filepath.Join(tmp, fmt.Sprintf("p%d.go", built))
			if err := os.WriteFile(src, []byte(m[1]), 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command("gofmt", "-l", src).CombinedOutput(); err != nil || len(out) > 0 {
				t.Errorf("%s, Go program %d: gofmt would change it (%v)", d, i+1, err)
			}
			// The program builds as a package of the module, at a directory that does not exist.
			pkg := filepath.Join(rootDir, "internal", "docsync", "docprogram")
			ov, _ := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(pkg, "main.go"): src}})
			ovFile := filepath.Join(tmp, "overlay.json")
			if err := os.WriteFile(ovFile, ov, 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("go", "build", "-overlay", ovFile, "-o", os.DevNull, "./internal/docsync/docprogram")
			cmd.Dir = rootDir
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s, Go program %d does not build: %v\n%s", d, i+1, err, strings.TrimSpace(string(out)))
			}
			built++
		}
	}
	if built < 2 {
		t.Fatalf("built %d Go programs of the docs; the README and docs/library.md each show one", built)
	}
}
