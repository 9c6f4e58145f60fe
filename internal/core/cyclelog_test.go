package core_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/watukuytype"
)

// A cycle that ran without an error but parked rows logs one warning with the counts (what
// run and dev show), so a poller that parks every item does not look healthy in its log.
func TestCycleThatParkedLogsTheCounts(t *testing.T) {
	w := newWorld(t)
	f := newFeed(10)
	f.putN(3)
	var logs bytes.Buffer
	eng, err := core.NewEngine(core.Options{Store: w.store, InstanceID: "test", Clock: w.clock.Now, Logger: zerolog.New(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Register(w.poller(f.fetch, func(p *watukuytype.Poller) { p.Identity = watukuytype.Field("sku") })); err != nil {
		t.Fatal(err)
	}
	if rep := eng.RunCycle(context.Background(), key); rep.Err != nil || rep.Invalid != 3 {
		t.Fatalf("cycle: %+v", rep)
	}
	var found int
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var l struct {
			Message                        string
			Items, Events, Parked, Invalid int
			Poller                         string
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if strings.HasPrefix(l.Message, "cycle parked rows") {
			found++
			if l.Items != 3 || l.Invalid != 3 || l.Parked != 0 || l.Events != 0 || l.Poller != "orders" {
				t.Errorf("the cycle line: %s", line)
			}
		}
	}
	if found != 1 {
		t.Fatalf("%d cycle lines with the parked counts, want 1:\n%s", found, logs.String())
	}
}
