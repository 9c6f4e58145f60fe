package luascripts

import (
	"strings"
	"testing"
)

// Every script documents KEYS (or says it has none), ARGV, the return value and the first check.
func TestEveryScriptHasAHeader(t *testing.T) {
	names := Names()
	if len(names) < 8 {
		t.Fatalf("expected the protocol's scripts, got %v", names)
	}
	for _, n := range names {
		src, err := Source(n)
		if err != nil {
			t.Fatal(err)
		}
		body := src[strings.Index(src, "-- "+n+".lua"):]
		header := body[:strings.Index(body, "\nlocal")]
		for _, want := range []string{"KEYS[1]", "ARGV[1]", "Returns", "check"} {
			if !strings.Contains(header, want) {
				t.Errorf("%s.lua header lacks %q", n, want)
			}
		}
	}
}
