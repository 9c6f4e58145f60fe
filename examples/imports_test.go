// Package examples_test checks that the example programs can be copied into another module.
package examples_test

import (
	"go/build"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/watukuy/watukuy"

// Every program under examples/ imports only public packages of the module: an internal one
// cannot be imported from another module, so the example could not be copied. Test files may
// use internal packages (to check an example against the real sender, for instance).
func TestExamplesImportOnlyPublicPackages(t *testing.T) {
	var checked []string
	err := filepath.WalkDir(".", func(dir string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		pkg, err := build.ImportDir(dir, 0)
		if _, noGo := err.(*build.NoGoError); noGo {
			return nil
		}
		if err != nil {
			return err
		}
		if len(pkg.GoFiles) == 0 {
			return nil
		}
		checked = append(checked, filepath.ToSlash(dir))
		for _, imp := range pkg.Imports {
			if isInternal(imp) {
				t.Errorf("examples/%s imports %s: examples may import only public packages", filepath.ToSlash(dir), imp)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"quickstart", "distributed", "webhookreceiver"} {
		if !slices.Contains(checked, want) {
			t.Errorf("examples/%s was not checked (checked %v)", want, checked)
		}
	}
}

// isInternal reports whether path is a package of this module under an internal directory.
func isInternal(path string) bool {
	rest, ok := strings.CutPrefix(path, module+"/")
	return ok && slices.Contains(strings.Split(rest, "/"), "internal")
}
