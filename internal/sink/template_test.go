package sink

import (
	"testing"

	"github.com/watukuy/watukuy/watukuytype"
)

func TestTemplateExpandsPollerPartitionAndType(t *testing.T) {
	ev := watukuytype.Event{Poller: "orders", Partition: "acme", Type: watukuytype.Updated}
	for _, tc := range []struct{ in, want, filled string }{
		{"watukuy.events", "watukuy.events", "watukuy.events"},
		{"watukuy.${poller}.${type}", "watukuy.orders.updated", "watukuy.*.*"},
		{"${partition}", "acme", "*"},
		{"a${poller}b${partition}c", "aordersbacmec", "a*b*c"},
	} {
		tpl, err := ParseTemplate(tc.in)
		if err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		if got := tpl.Expand(ev); got != tc.want {
			t.Errorf("%q expands to %q, want %q", tc.in, got, tc.want)
		}
		if got := tpl.Fill("*"); got != tc.filled {
			t.Errorf("%q filled is %q, want %q", tc.in, got, tc.filled)
		}
		if tpl.String() != tc.in {
			t.Errorf("String() = %q, want %q", tpl.String(), tc.in)
		}
	}
}

func TestTemplateRejectsUnknownVariables(t *testing.T) {
	for _, in := range []string{"", "x.${tenant}", "x.${poller", "${HOME}"} {
		if _, err := ParseTemplate(in); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

func TestTemplateUses(t *testing.T) {
	tpl, err := ParseTemplate("w.${partition}.${type}")
	if err != nil {
		t.Fatal(err)
	}
	if !tpl.Uses(VarPartition) || !tpl.Uses(VarType) || tpl.Uses(VarPoller) {
		t.Errorf("Uses: partition %v type %v poller %v", tpl.Uses(VarPartition), tpl.Uses(VarType), tpl.Uses(VarPoller))
	}
}
