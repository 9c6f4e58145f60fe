package core

import (
	"encoding/json"
	"testing"

	"github.com/watukuy/watukuy/watukuytype"
)

// Inspect shows a state's compact lastPoll as the summary's JSON, and a value that does not
// read as one comes through as a JSON string.
func TestLastPollJSON(t *testing.T) {
	p := watukuytype.PollSummary{At: "2026-12-02T00:39:19.155Z", Outcome: "ok", DurationMs: 3, Pages: 2, Items: 5, Events: 4,
		Delivered: 4, Reconciled: true}
	var got watukuytype.PollSummary
	if err := json.Unmarshal(lastPollJSON(p.Compact()), &got); err != nil || got != p {
		t.Errorf("lastPoll %q shown as %s (%v), want %+v", p.Compact(), lastPollJSON(p.Compact()), err, p)
	}
	if got := string(lastPollJSON("garbage")); got != `"garbage"` {
		t.Errorf("an unreadable lastPoll shown as %s, want the JSON string", got)
	}
}
