package cli

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/internal/redistest"
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

// An updated event with a change set prints its patch on the line under it (op, path, value),
// or why it has none; other events print one line.
func TestDevEventLinesShowThePatch(t *testing.T) {
	var b strings.Builder
	print := printEvents(&b, false)
	for _, ev := range []watukuytype.Event{
		{ID: "e1", Poller: "orders", Lane: "live", Type: watukuytype.Updated, Identity: "o1", ObservedAt: time.Now(),
			Changes: json.RawMessage(`[{"op":"replace","path":"/status","value":"paid"},{"op":"remove","path":"/total"}]`)},
		{ID: "e2", Poller: "orders", Lane: "live", Type: watukuytype.Updated, Identity: "o2", ObservedAt: time.Now(),
			Changes: json.RawMessage(`null`), ChangesOmitted: watukuytype.ChangesUnknown},
		{ID: "e3", Poller: "orders", Lane: "live", Type: watukuytype.Created, Identity: "o3", ObservedAt: time.Now()},
	} {
		if err := print(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	want := []string{"e1", `changes: replace /status "paid", remove /total`, "e2", "changes: none (no previous payload)", "e3"}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), b.String())
	}
	for i, w := range want {
		if f := strings.Fields(lines[i]); strings.HasPrefix(w, "changes:") && strings.TrimSpace(lines[i]) != w || !strings.HasPrefix(w, "changes:") && f[len(f)-1] != w {
			t.Errorf("line %d: %q, want %q", i, lines[i], w)
		}
	}
}

// The demo's orders carry change sets: an order paid after it was printed prints the
// operations that turn it as printed into the order now.
func TestDevOrdersPrintTheirPatch(t *testing.T) {
	b := redistest.Miniredis(t)
	eng, err := watukuy.New(watukuy.Options{Redis: b.Client, InstanceID: "test-worker"})
	if err != nil {
		t.Fatal(err)
	}
	stopped, stop := context.WithCancel(t.Context())
	stop() // no changes of the shop's own: this test makes the one it looks for
	shop := startDemoShop(stopped)
	defer shop.srv.Close()
	var out syncBuilder
	if err := eng.Replace([]watukuytype.Budget{demoBudget()}, shop.pollers(printEvents(&out, false))...); err != nil {
		t.Fatal(err)
	}
	tick := func() {
		t.Helper()
		if rep, err := eng.Tick(t.Context(), 5*time.Second); err != nil || len(rep.Errors) > 0 {
			t.Fatalf("tick: %v %v", err, rep.Errors)
		}
	}
	tick()
	if !strings.Contains(out.String(), " ord-0002 ") {
		t.Fatalf("the first cycle printed no order ord-0002:\n%s", out.String())
	}
	shop.api.Put("ord-0002", map[string]any{"status": "paid", "total": 20})
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), " updated "); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no updated event in 10s:\n%s", out.String())
		}
		tick()
	}
	want := `changes: replace /status "paid", replace /updated_seq 11, replace /version 2`
	if lines := strings.Split(out.String(), "\n"); !slices.ContainsFunc(lines, func(l string) bool { return strings.TrimSpace(l) == want }) {
		t.Fatalf("no line %q:\n%s", want, out.String())
	}
}

// syncBuilder is a strings.Builder the engine's workers and the test share.
type syncBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuilder) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuilder) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
