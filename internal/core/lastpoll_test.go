package core

import (
	"encoding/json"
	"testing"

	"github.com/watukuy/watukuy/watukuytype"
)

// Inspect shows the same lastPoll JSON for a state written by this release (compact) and one
// written before it (JSON), and a value neither reads as comes through as a JSON string.
func TestLastPollJSONReadsBothForms(t *testing.T) {
	p := watukuytype.PollSummary{At: "2026-12-02T00:39:19.155Z", Outcome: "ok", DurationMs: 3, Pages: 2, Items: 5, Events: 4,
		Delivered: 4, Reconciled: true}
	old, _ := json.Marshal(p)
	for _, v := range []string{p.Compact(), string(old)} {
		var got watukuytype.PollSummary
		if err := json.Unmarshal(lastPollJSON(v), &got); err != nil || got != p {
			t.Errorf("lastPoll %q shown as %s (%v), want %+v", v, lastPollJSON(v), err, p)
		}
	}
	if got := string(lastPollJSON("garbage")); got != `"garbage"` {
		t.Errorf("an unreadable lastPoll shown as %s, want the JSON string", got)
	}
}
