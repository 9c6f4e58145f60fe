package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/watukuy/watukuy"
)

// migrate records the layout of a fresh database, moves a layout-1 registry to the pollers
// hash, and does nothing the second time. Other commands refuse a layout-1 database.
func TestMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t)
	out := w.ok("migrate")
	if !strings.Contains(out, "none (empty database) → 5") || w.b.Client.Get(ctx, "wk:{global}:layout").Val() != "5" {
		t.Fatalf("migrate of an empty database: %s", out)
	}
	if out := w.ok("migrate"); !strings.Contains(out, "already at layout 5") {
		t.Fatalf("second migrate: %s", out)
	}

	old := newWorld(t)
	v1 := `{"poller":"p","partitions":[],"min":"5s","max":"5m0s","leaseTTL":"30s","schemaVersion":0}`
	if err := old.b.Client.HSet(ctx, "wk:{global}:registry", "p|", v1).Err(); err != nil {
		t.Fatal(err)
	}
	old.fails(ExitFailed, "run `watukuy migrate` first", "inspect")
	m := jsonOf[watukuy.Migration](t, old.ok("migrate", "--json"))
	if m.From != 1 || m.To != 5 || len(m.Steps) != 4 {
		t.Fatalf("migrate 1→5: %+v", m)
	}
	// The key its poller's entry lists (the unpartitioned one) is registered by that entry
	// alone from layout 5: its registry entry went.
	if old.hget("wk:{global}:pollers", "p") != v1 || old.hget("wk:{global}:registry", "p|") != "" || old.b.Client.Get(ctx, "wk:{global}:layout").Val() != "5" {
		t.Fatalf("after migrate: pollers %q registry %q", old.hget("wk:{global}:pollers", "p"), old.hget("wk:{global}:registry", "p|"))
	}
	if m := jsonOf[watukuy.Migration](t, old.ok("migrate", "--json")); m.From != 5 || m.To != 5 || len(m.Steps) != 0 {
		t.Fatalf("second migrate: %+v", m)
	}
	rowWhere(t, parseTable(t, old.ok("inspect"), "POLLER"), "POLLER", "p", "PARTITION", "-")
}
