package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/watukuy/watukuy/watukuytype"
)

// dev's event lines show the partition and the lane: a replayed event (observed long ago) or
// a backfilled one does not pass for a live change.
func TestDevEventLines(t *testing.T) {
	var b strings.Builder
	print := printEvents(&b, false)
	for _, ev := range []watukuytype.Event{
		{ID: "e1", Poller: "orders", Lane: "live", Type: watukuytype.Created, Identity: "o1", ObservedAt: time.Now()},
		{ID: "e2", Poller: "orders", Partition: "eu", Lane: "replay", Type: watukuytype.Updated, Identity: "o2", ObservedAt: time.Now()},
	} {
		if err := print(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := [][]string{{"orders", "-", "live", "created", "o1", "e1"}, {"orders", "eu", "replay", "updated", "o2", "e2"}}
	for i, l := range lines {
		if f := strings.Fields(l); len(lines) != 2 || len(f) < 8 || strings.Join(f[1:6], " ") != strings.Join(want[i][:5], " ") || f[len(f)-1] != want[i][5] {
			t.Fatalf("event line %d: %q, want %v", i, l, want[i])
		}
	}
}
