package cli

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/watukuy/watukuy/internal/command"
)

// chaos --patch runs the in-process scenario with change sets on an embedded Redis and checks
// every delivered patch (P1): none fails, and some were applied. With --processes it is a
// usage error.
func TestChaosWithPatches(t *testing.T) {
	out, errb, err := run(t, "chaos", "--patch", "--seed", "3", "--duration", "1s")
	if err != nil {
		t.Fatalf("chaos --patch: %v\n%s%s", err, out, errb)
	}
	m := regexp.MustCompile(`patches applied (\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no patch count in:\n%s", out)
	}
	if n, _ := strconv.Atoi(m[1]); n == 0 {
		t.Fatalf("no patch applied:\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^P1 .*\s0 violations$`).MatchString(out) {
		t.Fatalf("no P1 line with 0 violations:\n%s", out)
	}
	_, _, err = run(t, "chaos", "--patch", "--processes")
	if command.ExitCode(err) != command.ExitUsage || !strings.Contains(err.Error(), "in-process only") {
		t.Fatalf("chaos --patch --processes: %v", err)
	}
}
