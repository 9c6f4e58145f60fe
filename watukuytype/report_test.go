package watukuytype

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// The compact lastPoll keeps every field of the summary (at to the millisecond) and stays under
// Redis's 64-byte listpack value limit for an idle key; anything else is an error naming
// lastPoll.
func TestPollSummaryCompactRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 2, 0, 39, 19, 155_303_093, time.UTC)
	for _, p := range []PollSummary{
		{At: at.Format(time.RFC3339Nano), Outcome: "ok", Pages: 1},
		{At: at.Format(time.RFC3339Nano), Outcome: "INVALID_ITEMS", DurationMs: 1234, Pages: 7, Items: 100000, Events: 99, Delivered: 98,
			Parked: 3, Invalid: 2, DeleteCandidates: 5, Truncated: true, NotModified: true, Reconciled: true, BackfillPending: true, Fresh: true},
		{At: at.Format(time.RFC3339Nano), Outcome: "odd;outcome", NotModified: true, BackfillPending: true},
	} {
		c := p.Compact()
		got, err := ParsePollSummary(c)
		if err != nil {
			t.Fatalf("%q: %v", c, err)
		}
		want := p
		want.At = at.Truncate(time.Millisecond).Format(time.RFC3339Nano)
		if got != want {
			t.Errorf("%q read back as %+v, want %+v", c, got, want)
		}
		if p.Outcome == "ok" && len(c) >= 64 {
			t.Errorf("an idle key's compact summary %q is %d bytes, not under the 64 of a listpack value", c, len(c))
		}
	}
	// Zeros are written as nothing, and read as written out too.
	idle := PollSummary{At: at.Format(time.RFC3339Nano), Outcome: "ok", Pages: 1}
	if c, want := idle.Compact(), "1;1796171959155;;1;;;;;;;;ok"; c != want {
		t.Errorf("an idle poll's compact form is %q, want %q", c, want)
	}
	if c, want := (PollSummary{At: idle.At, Outcome: "ok", Fresh: true}).Compact(), "1;1796171959155;;;;;;;;;f;ok"; c != want {
		t.Errorf("an idle poll's compact form is %q, want %q", c, want)
	}
	idle.At = at.Truncate(time.Millisecond).Format(time.RFC3339Nano)
	if got, err := ParsePollSummary("1;1796171959155;0;1;0;0;0;0;0;0;;ok"); err != nil || got != idle {
		t.Errorf("a compact form with its zeros written out read as %+v, %v; want %+v", got, err, idle)
	}
	raw, _ := json.Marshal(idle)
	for _, bad := range []string{"", "2;1;2", "1;x;0;0;0;0;0;0;0;0;;ok", "1;1;0;0;0;0;0;0;0;0;z;ok", "{nope", string(raw)} {
		if _, err := ParsePollSummary(bad); err == nil || !strings.Contains(err.Error(), "lastPoll") {
			t.Errorf("%q: err %v, want one naming lastPoll", bad, err)
		}
	}
}
