package cli

import (
	"context"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/admin"
	"github.com/watukuy/watukuy/internal/command"
	"github.com/watukuy/watukuy/internal/config"
	"github.com/watukuy/watukuy/watukuytype"
)

// backfill starts a backfill per key, --wait follows it to the end (bar or JSON lines), and
// snapshotDiff pollers refuse.
func TestBackfill(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.api.PutMany(25, "o", nil)
	w.register(w.poller("orders", func(p *watukuytype.Poller) {
		p.MaxPagesPerCycle = 2 // the live lane's page leaves one backfill page per cycle
		p.CursorPosition = func(c string) (float64, bool) {
			n, err := strconv.Atoi(c)
			return float64(n), err == nil
		}
	}), w.poller("listing", func(p *watukuytype.Poller) {
		p.Strategy, p.Fetch = watukuytype.SnapshotDiff, w.api.Listing(10)
	}))
	w.tick()

	out := w.ok("backfill", "--poller", "orders", "--from", "null")
	r := rowWhere(t, parseTable(t, out, "POLLER"), "POLLER", "orders", "PARTITION", "-")
	if r["FROM"] != "(the beginning)" || r["TO"] != "25" || r["GENERATION"] != "1" || r["FORCE"] != "no" {
		t.Fatalf("backfill: %v\n%s", r, out)
	}
	if bp := w.inspect("orders", "").Backfill; bp == nil || bp.Generation != 1 || bp.Done || bp.To != "25" {
		t.Fatalf("after backfill: %+v", bp)
	}
	started := jsonOf[[]keyBackfill](t, w.ok("backfill", "--poller", "orders", "--from", "5", "--to", "null", "--force", "--json"))
	if len(started) != 1 || started[0].Backfill.Generation != 2 || started[0].Backfill.From != "5" || started[0].Backfill.To != "" || !started[0].Backfill.Force {
		t.Fatalf("backfill --json: %+v", started)
	}

	// --wait: the test's engine plays the worker until the command returns.
	wait := func(args ...string) (string, string) {
		type result struct {
			out, errb string
			code      int
		}
		done := make(chan result, 1)
		go func() {
			out, errb, code := w.cli(args...)
			done <- result{out, errb, code}
		}()
		for {
			select {
			case r := <-done:
				if r.code != command.ExitOK {
					t.Fatalf("%v: exit %d\n%s\n%s", args, r.code, r.out, r.errb)
				}
				return r.out, r.errb
			case <-time.After(5 * time.Millisecond):
				w.tick()
			}
		}
	}
	out, errb := wait("backfill", "--poller", "orders", "--from", "null", "--wait", "--poll-interval", "5ms")
	r = rowWhere(t, parseTable(t, out[strings.Index(out, "waiting for them"):], "POLLER"), "POLLER", "orders")
	if r["PAGES"] != "3" || r["ITEMS"] != "25" || r["EVENTS"] != "0" || r["CURSOR"] != "25" || !strings.HasPrefix(r["RESULT"], "done at ") {
		t.Fatalf("backfill --wait: %v\n%s", r, out)
	}
	if !strings.Contains(errb, "orders  pages 3  items 25  events 0  cursor 25") {
		t.Errorf("the progress bar does not show the counters:\n%q", errb)
	}
	if bp := w.inspect("orders", "").Backfill; !bp.Done || bp.Generation != 3 {
		t.Fatalf("after --wait: %+v", bp)
	}

	// stderr is no terminal here: plain lines, one per step, no \r.
	if !strings.Contains(errb, "100%  orders  pages 3") || strings.Contains(errb, "\r") || strings.Count(errb, "\n") > 5 {
		t.Errorf("the poller places cursors, yet the lines show no percentage, or redraw, or repeat per poll:\n%q", errb)
	}

	// --wait --json, one backfill page per cycle: the test runs a cycle only after the
	// command has reported the previous one, so every step shows up as a line.
	ctx := context.Background()
	lines, errc := startCLI(t, ctx, "backfill", "--poller", "orders", "--from", "null", "--force", "--wait", "--json", "--poll-interval", "5ms", "--redis", w.b.URL)
	first := jsonOf[keyBackfill](t, next(t, lines))
	if first.Event != "started" || first.Backfill.Generation != 4 || !first.Backfill.Force {
		t.Fatalf("first line: %+v", first)
	}
	key := watukuytype.Key{Poller: "orders"}
	for i, want := range []struct {
		event  string
		pages  int
		cursor string
		frac   float64
	}{{"progress", 1, "10", 0.4}, {"progress", 2, "20", 0.8}, {"done", 3, "25", 1}} {
		if rep := w.eng.RunCycle(ctx, key); rep.Err != nil {
			t.Fatal(rep.Err)
		}
		got := jsonOf[keyBackfill](t, next(t, lines))
		bp := got.Backfill
		if got.Event != want.event || bp.Pages != want.pages || bp.Cursor != want.cursor || bp.Fraction == nil || *bp.Fraction != want.frac || bp.Events != min(10*(i+1), 25) { // forced: every item again
			t.Fatalf("line %d: %+v %+v", i+2, got, bp)
		}
	}
	last := jsonOf[struct {
		Event     string
		Backfills []keyBackfill
	}](t, next(t, lines))
	if last.Event != "finished" || len(last.Backfills) != 1 || !last.Backfills[0].Backfill.Done || last.Backfills[0].Backfill.Events != 25 {
		t.Fatalf("last line: %+v", last)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}

	// Ctrl-C stops the waiting, not the backfill.
	cctx, cancel := context.WithCancel(ctx)
	lines, errc = startCLI(t, cctx, "backfill", "--poller", "orders", "--from", "null", "--wait", "--json", "--poll-interval", "5ms", "--redis", w.b.URL)
	begun := jsonOf[keyBackfill](t, next(t, lines))
	cancel()
	for lines.Scan() { // progress lines until the command notices
	}
	if err := <-errc; command.ExitCode(err) != command.ExitFailed || !strings.Contains(err.Error(), "stopped waiting; the backfills go on in the workers") {
		t.Fatalf("after Ctrl-C: %v", err)
	}
	if bp := w.inspect("orders", "").Backfill; bp.Done || bp.Generation != begun.Backfill.Generation {
		t.Fatalf("the backfill did not go on after Ctrl-C: %+v", bp)
	}

	w.fails(command.ExitFailed, "snapshotDiff lists everything every cycle", "backfill", "--poller", "listing", "--from", "null")
	w.fails(command.ExitUsage, "--from is required", "backfill", "--poller", "orders")
}

// backfill --wait ends when the backfill fails for good (a cursor the poller refuses), says
// why, and exits 1; the key itself keeps running.
func TestBackfillWaitEndsOnFailure(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.api.PutMany(5, "o", nil)
	w.api.OnFetch(func(ctx context.Context, req watukuytype.FetchRequest) error {
		if req.Lane == "backfill" && req.Cursor == "garbage" {
			return &watukuytype.ConfigError{Poller: req.Key.Poller, Field: "cursor", Msg: `"garbage" is not a sequence number`}
		}
		return nil
	})
	w.register(w.poller("orders"))
	w.tick()
	done := make(chan struct {
		errb string
		code int
	}, 1)
	go func() {
		_, errb, code := w.cli("backfill", "--poller", "orders", "--from", "garbage", "--wait", "--poll-interval", "5ms")
		done <- struct {
			errb string
			code int
		}{errb, code}
	}()
	for {
		select {
		case r := <-done:
			if r.code != command.ExitFailed || !strings.Contains(r.errb, "backfill of orders failed") {
				t.Fatalf("backfill --wait of a refused cursor: exit %d\n%s", r.code, r.errb)
			}
			ki := w.inspect("orders", "")
			if !ki.Backfill.Failed || !strings.Contains(ki.Backfill.LastError, "not a sequence number") || ki.Status != "idle" {
				t.Fatalf("after the failure: %+v, status %s", ki.Backfill, ki.Status)
			}
			out := w.ok("inspect", "--poller", "orders", "--partition", "")
			if d := detail(out); !strings.Contains(d["backfill.progress"], "failed") || !strings.Contains(d["backfill.lastError"], "CONFIG") {
				t.Fatalf("inspect of a failed backfill:\n%s", out)
			}
			return
		case <-time.After(5 * time.Millisecond):
			w.tick()
		}
	}
}

// On a terminal the progress is a bar redrawn in place.
func TestBackfillBarOnTerminal(t *testing.T) {
	var b strings.Builder
	bar := newBackfillBar(&b, true)
	one := 1.0
	bar.update([]keyBackfill{{KeyBackfill: admin.KeyBackfill{Poller: "orders", Backfill: &watukuytype.BackfillProgress{Pages: 3, Cursor: "25", Fraction: &one}}}}, []bool{true})
	bar.finish()
	if !strings.Contains(b.String(), "100% |") || !strings.Contains(b.String(), "\r") {
		t.Fatalf("terminal bar: %q", b.String())
	}
}

// backfill --from and --to read times for a timestamp poller, written as its API writes them
// (the config says the strategy and formats); token cursors stay as typed; a refused cursor is
// a usage error that names the flag, before anything is written.
func TestBackfillCursorFlags(t *testing.T) {
	now := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
	cfg := &config.Config{Pollers: []config.Poller{
		{Name: "ts", Cursor: config.Cursor{Strategy: config.StrategyTimestamp}},
		{Name: "ms", Cursor: config.Cursor{Strategy: config.StrategyTimestamp, Formats: []string{"epoch_ms"}}},
		{Name: "tok", Cursor: config.Cursor{Strategy: config.StrategyToken}},
	}}
	for _, c := range []struct {
		poller string
		cfg    *config.Config
		in     string
		want   string
	}{
		{"ts", cfg, "-1h", "2026-03-04T11:00:00Z"},
		{"ts", cfg, "2h", "2026-03-04T10:00:00Z"},
		{"ts", cfg, "7d", "2026-02-25T12:00:00Z"},
		{"ts", cfg, "2026-01-02", "2026-01-02T00:00:00Z"},
		{"ts", cfg, "2026-01-02T03:04:05Z", "2026-01-02T03:04:05Z"},
		{"ts", cfg, "null", ""},
		{"ms", cfg, "-1h", "1772622000000"},
		{"ms", cfg, "2026-03-04T11:00:00Z", "1772622000000"},
		{"ms", cfg, "1772622000000", "1772622000000"},
		{"tok", cfg, "2h", "2h"},
		{"ts", nil, "-30m", "2026-03-04T11:30:00Z"}, // no config: the strategy is unknown
		{"ts", nil, "yesterday", "2026-03-03T00:00:00Z"},
		{"ts", cfg, "today", "2026-03-04T00:00:00Z"},
		{"ts", nil, "12", "12"},
		{"ts", nil, "lastweek", "lastweek"}, // and a warning: see below
	} {
		o := &op{poller: c.poller, cfg: c.cfg, errOut: io.Discard}
		if got, err := o.backfillCursor("from", c.in, now, nil); got != c.want || err != nil {
			t.Errorf("%s --from %s: %q (%v), want %q", c.poller, c.in, got, err, c.want)
		}
	}
	// A word that is no time, for a poller whose strategy is unknown: passed on, with a warning.
	var warn strings.Builder
	o := &op{poller: "ts", errOut: &warn}
	if got, err := o.backfillCursor("from", "lastweek", now, nil); got != "lastweek" || err != nil || !strings.Contains(warn.String(), `warning: "lastweek" is no time this command reads`) {
		t.Errorf("--from lastweek without a config: %q (%v), warning %q", got, err, warn.String())
	}
	// Without the config, the registry's formats make it a timestamp poller: times are written
	// as the API writes them, and what is no time is refused here.
	o = &op{poller: "ms", errOut: io.Discard}
	for _, c := range []struct{ in, want string }{{"-1h", "1772622000000"}, {"2026-03-04T11:00:00Z", "1772622000000"}, {"1772622000000", "1772622000000"}, {"null", ""}} {
		if got, err := o.backfillCursor("from", c.in, now, []string{"epoch_ms"}); got != c.want || err != nil {
			t.Errorf("registry formats, --from %s: %q (%v), want %q", c.in, got, err, c.want)
		}
	}
	if _, err := o.backfillCursor("to", "lastweek", now, []string{"epoch_ms"}); command.ExitCode(err) != command.ExitUsage || !strings.Contains(err.Error(), `--to "lastweek" is no time the cursor of poller ms takes (it is written as epoch_ms)`) {
		t.Errorf("registry formats, --to lastweek: %v, want a usage error", err)
	}
}

// The engine's check of a cursor reaches the operator as a usage error naming the flag.
func TestBackfillRefusedCursor(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.api.PutMany(5, "o", nil)
	cfg := writeConfig(t, `pollers:
  - name: orders
    request: {url: http://127.0.0.1:1/orders}
    cursor: {strategy: timestamp, field: updated_at, param: since}
    delivery: {stdout: {}}
`)
	w.ok("pause", "--poller", "orders", "--config", cfg) // registers the config's poller
	errb := w.fails(command.ExitUsage, `--from "lastweek" is not a cursor of this poller`, "backfill", "--poller", "orders", "--from", "lastweek", "--config", cfg)
	if !strings.Contains(errb, "poller orders") {
		t.Fatalf("the refusal does not name the poller: %s", errb)
	}
	w.fails(command.ExitUsage, "--to \"2026-01-01T00:00:00Z\" is before --from", "backfill", "--poller", "orders", "--from", "2026-01-02", "--to", "2026-01-01", "--config", cfg)
	if bp := w.inspect("orders", "").Backfill; bp != nil {
		t.Fatalf("a refused backfill was written: %+v", bp)
	}
	w.ok("backfill", "--poller", "orders", "--from", "-1h", "--to", "null", "--config", cfg)
	// Without the config the registry says the cursor is a time: a word is refused at once too.
	w.fails(command.ExitUsage, `--from "lastweek" is no time the cursor of poller orders takes`, "backfill", "--poller", "orders", "--from", "lastweek")
	w.ok("backfill", "--poller", "orders", "--from", "yesterday")
}
