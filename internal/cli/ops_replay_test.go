package cli

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/command"
	"github.com/watukuy/watukuy/internal/diff"
	"github.com/watukuy/watukuy/watukuytype"
)

// replay copies logged events back into the outbox; a poller without log.retention fails
// with the reason and what to do.
func TestReplay(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.api.PutMany(3, "o", nil)
	w.register(w.poller("orders", func(p *watukuytype.Poller) { p.LogRetention = time.Hour }), w.poller("plain"))
	start := time.Now().Add(-time.Minute)
	w.tick()
	ctx := context.Background()
	outbox := func() int64 { return w.b.Client.XLen(ctx, "wk:{orders|}:outbox").Val() }
	before := outbox()

	out := w.ok("replay", "--poller", "orders", "--from", strconv.FormatInt(start.UnixMilli(), 10))
	if !strings.Contains(out, "replayed 3 events of orders") {
		t.Fatalf("replay: %s", out)
	}
	if got := outbox(); got != before+3 {
		t.Fatalf("outbox %d after replay, want %d", got, before+3)
	}
	res := jsonOf[struct {
		Replayed int
		Keys     []struct {
			Poller, Partition string
			Replayed          int
		}
	}](t, w.ok("replay", "--poller", "orders", "--partition", "", "--from", start.UTC().Format(time.RFC3339), "--to", time.Now().Add(time.Minute).UTC().Format(time.RFC3339), "--json"))
	if res.Replayed != 3 || len(res.Keys) != 1 || res.Keys[0].Poller != "orders" || res.Keys[0].Replayed != 3 {
		t.Fatalf("replay --json: %+v", res)
	}
	if got := outbox(); got != before+6 {
		t.Fatalf("outbox %d after the second replay, want %d", got, before+6)
	}
	if rep := w.tick(); rep.Delivered != 6 {
		t.Fatalf("the replayed events were not delivered: %+v", rep)
	}

	// A time ago, and a blame that names only what was given.
	if out := w.ok("replay", "--poller", "orders", "--partition", "-", "--from", "2h"); !strings.Contains(out, "replayed 3 events of orders") {
		t.Fatalf("replay --from 2h: %s", out)
	}
	w.fails(command.ExitUsage, "--to 2026-01-01T00:00:00Z is before --from 2026-01-02T00:00:00Z", "replay", "--poller", "orders", "--from", "2026-01-02", "--to", "2026-01-01")
	w.fails(command.ExitUsage, "is in the future", "replay", "--poller", "orders", "--from", time.Now().Add(time.Hour).UTC().Format(time.RFC3339))

	w.fails(command.ExitFailed, "set log.retention", "replay", "--poller", "plain", "--from", "0")
	w.fails(command.ExitUsage, "want an RFC 3339 time", "replay", "--poller", "orders", "--from", "lastweek")
	w.ok("replay", "--poller", "orders", "--from", "yesterday") // now, today and yesterday are times too
	w.fails(command.ExitUsage, "--from is required", "replay", "--poller", "orders")
}

// reset-cursor rewinds the live lane; with --clear-snapshot every item comes back as created.
func TestResetCursor(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.api.PutMany(3, "o", nil)
	w.register(w.poller("orders"))
	w.tick()
	ctx := context.Background()

	out := w.ok("reset-cursor", "--poller", "orders", "--to", "null", "--clear-snapshot")
	r := rowWhere(t, parseTable(t, out, "POLLER"), "POLLER", "orders")
	if r["CURSOR"] != "-" || r["SNAPSHOT"] != "cleared" || !strings.Contains(out, "every item is emitted again as created") {
		t.Fatalf("reset-cursor: %v\n%s", r, out)
	}
	if got := w.hget("wk:{orders|}:state", "cursor.live"); got != "" {
		t.Fatalf("cursor.live = %q", got)
	}
	// The rows stay, forgotten: lives and counts go on, and deletes can still be found.
	for id, row := range w.b.Client.HGetAll(ctx, "wk:{orders|}:items").Val() {
		if r, ok := diff.ParseRow([]byte(row)); !ok || !r.Forgotten {
			t.Fatalf("row of %s after --clear-snapshot: %+v (ok %v), want forgotten", id, r, ok)
		}
	}
	if rep := w.tick(); rep.Events != 3 {
		t.Fatalf("after the reset: %+v", rep)
	}
	rows := jsonOf[[]map[string]any](t, w.ok("reset-cursor", "--poller", "orders", "--partition", "", "--to", "2", "--json"))
	if len(rows) != 1 || rows[0]["cursor"] != "2" || rows[0]["clearSnapshot"] != false {
		t.Fatalf("reset-cursor --json: %v", rows)
	}
	if got := w.hget("wk:{orders|}:state", "cursor.live"); got != "2" {
		t.Fatalf("cursor.live = %q", got)
	}
	w.fails(command.ExitUsage, "--to is required", "reset-cursor", "--poller", "orders")
}

// reset-cursor --clear-snapshot re-emits every item with the id it was first emitted with
// (G2), and what the CLI's help and message, Engine.ResetCursor's doc and the docs say about
// those ids agrees: none of them promises new ids a deduping consumer would take.
func TestResetCursorClaimsAboutIDsHold(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.api.PutMany(3, "o", nil)
	var mu sync.Mutex
	ids := map[string][]string{}
	w.register(w.poller("orders", func(p *watukuytype.Poller) {
		p.Handler = func(_ context.Context, ev watukuytype.Event) error {
			mu.Lock()
			defer mu.Unlock()
			ids[ev.Identity] = append(ids[ev.Identity], ev.ID)
			return nil
		}
	}))
	w.tick()
	msg := w.ok("reset-cursor", "--poller", "orders", "--to", "null", "--clear-snapshot")
	if rep := w.tick(); rep.Delivered != 3 {
		t.Fatalf("after the reset: %+v", rep)
	}
	mu.Lock()
	for id, got := range ids {
		if len(got) != 2 || got[0] != got[1] {
			t.Fatalf("%s delivered with ids %v, want the first id twice", id, got)
		}
	}
	mu.Unlock()

	help := w.ok("reset-cursor", "--help")
	src, err := os.ReadFile("../../watukuy.go")
	if err != nil {
		t.Fatal(err)
	}
	_, doc, _ := strings.Cut(string(src), "// ResetCursor ")
	doc, _, _ = strings.Cut(doc, "func ")
	claims := map[string]string{"reset-cursor --help": help, "reset-cursor's message": msg, "Engine.ResetCursor's doc": doc}
	for name, text := range claims {
		if !strings.Contains(text, "first emitted") {
			t.Errorf("%s does not say the items come back with the ids they were first emitted with:\n%s", name, text)
		}
	}
	docs, _ := filepath.Glob("../../docs/*.md")
	for _, f := range append(docs, "../../README.md") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for para := range strings.SplitSeq(string(b), "\n\n") {
			if strings.Contains(para, "clear-snapshot") {
				claims[f+": "+para] = para
			}
		}
	}
	newIDs := regexp.MustCompile(`(?i)\bwith (new|fresh|other|different) (event )?ids\b`)
	for name, text := range claims {
		if m := newIDs.FindString(strings.Join(strings.Fields(text), " ")); m != "" {
			t.Errorf("%s says %q, but the items come back with their first ids", name, m)
		}
	}
}
