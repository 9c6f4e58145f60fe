package brokertest

import (
	"regexp"
	"strings"
	"testing"
)

func TestNameIsSafeAndUnique(t *testing.T) {
	ok := regexp.MustCompile(`^wt_[a-z0-9_]+$`)
	a, b := Name(t), Name(t)
	if a == b {
		t.Errorf("two names alike: %q", a)
	}
	for _, n := range []string{a, b} {
		if !ok.MatchString(n) || len(n) > 48 || !strings.Contains(n, "testnameissafeandunique") {
			t.Errorf("name %q: want wt_ + the test's name + random, ≤ 48 bytes", n)
		}
	}
}
