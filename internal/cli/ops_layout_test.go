package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/watukuy/watukuy/internal/command"
	"github.com/watukuy/watukuy/watukuytype"
)

// migrate records the layout of a fresh database and does nothing the second time; a database
// of a layout this build does not know is refused by every command, migrate included.
func TestMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t)
	out := w.ok("migrate")
	if !strings.Contains(out, "none (empty database) → 1") || w.b.Client.Get(ctx, "wk:{global}:layout").Val() != "1" {
		t.Fatalf("migrate of an empty database: %s", out)
	}
	if m := jsonOf[watukuytype.Migration](t, w.ok("migrate", "--json")); m.From != 1 || m.To != 1 || len(m.Steps) != 0 {
		t.Fatalf("second migrate: %+v", m)
	}
	if out := w.ok("migrate"); !strings.Contains(out, "already at layout 1") {
		t.Fatalf("third migrate: %s", out)
	}

	newer := newWorld(t)
	if err := newer.b.Client.Set(ctx, "wk:{global}:layout", "2", 0).Err(); err != nil {
		t.Fatal(err)
	}
	newer.fails(command.ExitFailed, "newer than this build knows", "inspect")
	newer.fails(command.ExitFailed, "newer than this build knows", "migrate")

	unrecorded := newWorld(t)
	if err := unrecorded.b.Client.HSet(ctx, "wk:{global}:pollers", "p", `{"poller":"p"}`).Err(); err != nil {
		t.Fatal(err)
	}
	unrecorded.fails(command.ExitFailed, "records no data layout", "inspect")
}
