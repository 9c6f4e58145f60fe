package core

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/watukuy/watukuy/watukuytype"
)

// Inspect shows a state's compact lastPoll as the summary's JSON, and a value that does not
// read as one comes through as a JSON string.
func TestLastPollJSON(t *testing.T) {
	p := watukuytype.PollSummary{At: "2026-12-02T00:39:19.155Z", Outcome: "ok", DurationMs: 3, Pages: 2, Items: 5, Events: 4,
		Delivered: 4, Reconciled: true}
	var got watukuytype.PollSummary
	if err := json.Unmarshal(lastPollJSON(compactPoll(p)), &got); err != nil || got != p {
		t.Errorf("lastPoll %q shown as %s (%v), want %+v", compactPoll(p), lastPollJSON(compactPoll(p)), err, p)
	}
	if got := string(lastPollJSON("garbage")); got != `"garbage"` {
		t.Errorf("an unreadable lastPoll shown as %s, want the JSON string", got)
	}
}

// The compact lastPoll keeps every field of the summary (at to the millisecond) and stays under
// Redis's 64-byte listpack value limit for an idle key; anything else is an error naming
// lastPoll.
func TestPollSummaryCompactRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 2, 0, 39, 19, 155_303_093, time.UTC)
	for _, p := range []watukuytype.PollSummary{
		{At: at.Format(time.RFC3339Nano), Outcome: "ok", Pages: 1},
		{At: at.Format(time.RFC3339Nano), Outcome: "INVALID_ITEMS", DurationMs: 1234, Pages: 7, Items: 100000, Events: 99, Delivered: 98,
			Parked: 3, Invalid: 2, DeleteCandidates: 5, Truncated: true, NotModified: true, Reconciled: true, BackfillPending: true, Fresh: true},
		{At: at.Format(time.RFC3339Nano), Outcome: "odd;outcome", NotModified: true, BackfillPending: true},
	} {
		c := compactPoll(p)
		got, err := parsePoll(c)
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
	idle := watukuytype.PollSummary{At: at.Format(time.RFC3339Nano), Outcome: "ok", Pages: 1}
	if c, want := compactPoll(idle), "1;1796171959155;;1;;;;;;;;ok"; c != want {
		t.Errorf("an idle poll's compact form is %q, want %q", c, want)
	}
	if c, want := compactPoll(watukuytype.PollSummary{At: idle.At, Outcome: "ok", Fresh: true}), "1;1796171959155;;;;;;;;;f;ok"; c != want {
		t.Errorf("an idle poll's compact form is %q, want %q", c, want)
	}
	idle.At = at.Truncate(time.Millisecond).Format(time.RFC3339Nano)
	if got, err := parsePoll("1;1796171959155;0;1;0;0;0;0;0;0;;ok"); err != nil || got != idle {
		t.Errorf("a compact form with its zeros written out read as %+v, %v; want %+v", got, err, idle)
	}
	raw, _ := json.Marshal(idle)
	for _, bad := range []string{"", "2;1;2", "1;x;0;0;0;0;0;0;0;0;;ok", "1;1;0;0;0;0;0;0;0;0;z;ok", "{nope", string(raw)} {
		if _, err := parsePoll(bad); err == nil || !strings.Contains(err.Error(), "lastPoll") {
			t.Errorf("%q: err %v, want one naming lastPoll", bad, err)
		}
	}
}
