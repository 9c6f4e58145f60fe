package config

import (
	"errors"
	"flag"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy/watukuytype"
)

var update = flag.Bool("update", false, "write docs/configuration.md's table of poller keys from the schema")

// TestReadmeReference: docs/configuration.md's table of poller keys is the schema's; -update rewrites it.
func TestReadmeReference(t *testing.T) {
	const path = "../../docs/configuration.md"
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

// TestLocateEngineError: a check only the engine makes (the lease's lower bound) fails the
// build, as it would fail at start, with the file, the poller's line and the key.
func TestLocateEngineError(t *testing.T) {
	cfg, err := Parse("w.yaml", []byte(strings.Replace(valid, "  request:", "  leaseTTL: 1ms\n    request:", 1)), envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	// Build runs the engine's checks (core.Check) and locates what they find.
	_, err = Build(cfg, nil, io.Discard, nil, zerolog.Nop())
	var ce *watukuytype.ConfigError
	if err == nil || !strings.HasPrefix(err.Error(), "w.yaml:2: pollers[0].leaseTTL: 1ms is too short") || !errors.As(err, &ce) {
		t.Fatalf("got %v", err)
	}
	if other := errors.New("x"); cfg.Locate(other) != other {
		t.Fatal("an error that is not the engine's config error must come back as it is")
	}
}
