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

// A script gets the prelude's definitions it names and those they name, each with its
// comment, in the prelude's order; the others stay out.
func TestSourceTakesThePreludeDefinitionsAScriptUses(t *testing.T) {
	prelude := "-- header\n-- a: one\nlocal function a() return 1 end\n\nlocal B = {x = true}\n-- c uses a\nlocal function c()\n  return a()\nend\nlocal function d() return B end\n"
	defs := definitions(prelude)
	for _, tc := range []struct{ body, want string }{
		{"return c()", "-- header\n-- a: one\nlocal function a() return 1 end\n\n-- c uses a\nlocal function c()\n  return a()\nend\n"},
		{"return d()", "local B = {x = true}\nlocal function d() return B end\n"},
		{"return 1 -- no helper", ""},
		{"local cc = 1 return cc", ""}, // a name inside another word is not a use
	} {
		if got := used(defs, tc.body); got != tc.want {
			t.Errorf("used(%q) =\n%q\nwant\n%q", tc.body, got, tc.want)
		}
	}
	for _, name := range Names() {
		src, err := Source(name)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(src, "local function fence(") != strings.Contains(src, "fence(KEYS") {
			t.Errorf("%s: fence defined %v, used %v", name, strings.Contains(src, "local function fence("), strings.Contains(src, "fence(KEYS"))
		}
	}
}
