//go:build unix

package procchaos

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/chaos"
	"github.com/watukuy/watukuy/watukuytype"
)

// TestProcessStaleRedelivery checks the receiver's one exception to recording every delivery:
// a late duplicate, older than what its identity already got, is dropped (as docs/operations.md tells
// consumers that need strict order); anything else is recorded.
func TestProcessStaleRedelivery(t *testing.T) {
	r := &processRun{start: time.Now(), rec: chaos.NewRecorder()}
	now := time.Now()
	signed := func(ago time.Duration) string { return strconv.FormatInt(now.Add(-ago).Unix(), 10) }
	ev := func(id, version, seq string) watukuytype.Event {
		return watukuytype.Event{ID: id, Poller: "orders", Type: watukuytype.Updated, Identity: "ord-1", Version: version, Seq: seq,
			Item: json.RawMessage(`{"id":"ord-1","version":` + version + `}`)}
	}
	v19, v20 := ev("ev_19", "19", "100-0"), ev("ev_20", "20", "200-0")
	steps := []struct {
		what    string
		ev      watukuytype.Event
		ago     time.Duration
		dropped bool
	}{
		{"v19 on time", v19, 0, false},
		{"v20 on time", v20, 0, false},
		{"v19 again, late: a frozen worker's call", v19, 6 * time.Second, true},
		{"v19 again, not late: no freeze explains it", v19, 0, false},
		{"v18 for the first time, late: out of order", ev("ev_18", "18", "50-0"), 6 * time.Second, false},
		{"v19 again, late, other content: one id for two changes", ev("ev_19", "19", "100-0"), 6 * time.Second, false},
		{"v20 again, late but not older", v20, 6 * time.Second, false},
	}
	steps[5].ev.Item = json.RawMessage(`{"id":"ord-1","version":19,"total":1}`)
	for _, s := range steps {
		if got := r.staleRedelivery(s.ev, signed(s.ago), now); got != s.dropped {
			t.Errorf("%s: dropped = %v, want %v", s.what, got, s.dropped)
		}
	}
	if r.recv.stale != 1 {
		t.Errorf("stale = %d, want 1", r.recv.stale)
	}
}
