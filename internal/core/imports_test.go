package core_test

import (
	"go/build"
	"strings"
	"testing"
)

// internal/core must stay free of Redis, asynq and the network: it talks to the database
// only through Store. The walk covers core's own imports and those of every watukuy package
// it pulls in, and the whole dependency tree for the Redis and asynq clients.
func TestCoreImportsNoRedisAsynqOrNet(t *testing.T) {
	const module = "github.com/watukuy/watukuy"
	forbiddenAnywhere := []string{"github.com/redis/", "github.com/hibiken/asynq", "github.com/alicebob/miniredis"}
	seen := map[string]bool{}
	var walk func(path, from string)
	walk = func(path, from string) {
		if seen[path] || path == "C" {
			return
		}
		seen[path] = true
		pkg, err := build.Import(path, ".", 0)
		if err != nil {
			t.Fatalf("import %s (from %s): %v", path, from, err)
		}
		for _, imp := range pkg.Imports {
			for _, f := range forbiddenAnywhere {
				if strings.HasPrefix(imp, f) {
					t.Errorf("%s imports %s (reached from internal/core)", path, imp)
				}
			}
			if strings.HasPrefix(path, module) && (imp == "net" || strings.HasPrefix(imp, "net/")) {
				t.Errorf("%s imports %s", path, imp)
			}
			if !pkg.Goroot {
				walk(imp, path)
			}
		}
	}
	walk(module+"/internal/core", "test")
	if len(seen) < 3 {
		t.Fatalf("walked only %d packages", len(seen))
	}
}
