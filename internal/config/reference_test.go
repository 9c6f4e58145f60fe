package config

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "write the README's table of poller keys from the schema")

// TestReadmeReference: the README's table of poller keys is the schema's; -update rewrites it.
func TestReadmeReference(t *testing.T) {
	const path = "../../README.md"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	i, j := strings.Index(readme, referenceBegin), strings.Index(readme, referenceEnd)
	if i < 0 || j < i {
		t.Fatalf("%s: no %q ... %q markers", path, referenceBegin, referenceEnd)
	}
	i += len(referenceBegin)
	want := "\n\n" + reference() + "\n"
	if readme[i:j] == want {
		return
	}
	if !*update {
		t.Fatalf("%s: the table of poller keys differs from internal/config/schema.go; run go test ./internal/config -run TestReadmeReference -update", path)
	}
	if err := os.WriteFile(path, []byte(readme[:i]+want+readme[j:]), 0o644); err != nil {
		t.Fatal(err)
	}
}
