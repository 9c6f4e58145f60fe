package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/internal/diff"
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/redistest"
)

// world is one operator test: a private redis-server, a fake API, and an engine in the test
// that plays the worker. The CLI runs against the same Redis with --redis only (no --config),
// as an operator's would at 3 a.m.
type world struct {
	t   *testing.T
	b   redistest.Backend
	api *fakeapi.API
	eng *watukuy.Engine
}

func newWorld(t *testing.T) *world {
	t.Helper()
	b := redistest.Real(t)
	eng, err := watukuy.New(watukuy.Options{Redis: b.Client, InstanceID: "test-worker"})
	if err != nil {
		t.Fatal(err)
	}
	return &world{t: t, b: b, api: fakeapi.New(), eng: eng}
}

// poller is a change-feed poller over the world's fake API, 10 items a page.
func (w *world) poller(name string, mod ...func(*watukuy.Poller)) watukuy.Poller {
	p := watukuy.Poller{Name: name, Fetch: w.api.ChangeFeed(10), Version: watukuy.Field("version"),
		Handler:  func(context.Context, watukuy.Event) error { return nil },
		Schedule: watukuy.Schedule{Min: time.Second, Max: time.Minute},
		Delivery: watukuy.Delivery{Backoff: watukuy.Backoff{Base: time.Microsecond, Factor: 1, Max: time.Microsecond}}}
	for _, m := range mod {
		m(&p)
	}
	return p
}

func (w *world) register(ps ...watukuy.Poller) {
	w.t.Helper()
	for _, p := range ps {
		if err := w.eng.Register(p); err != nil {
			w.t.Fatal(err)
		}
	}
}

// tick runs the due cycles and fails the test on any error.
func (w *world) tick() watukuy.TickReport {
	w.t.Helper()
	rep, err := w.eng.Tick(context.Background(), time.Second)
	if err != nil || len(rep.Errors) > 0 {
		w.t.Fatalf("tick: %v %v", err, rep.Errors)
	}
	return rep
}

// cli runs a command against the world's Redis and returns stdout, stderr and the exit code
// Execute would use.
func (w *world) cli(args ...string) (string, string, int) {
	w.t.Helper()
	out, errb, err := run(w.t, append(args, "--redis", w.b.URL)...)
	if err != nil {
		errb += err.Error()
	}
	return out, errb, exitCode(err)
}

// ok runs a command that must succeed.
func (w *world) ok(args ...string) string {
	w.t.Helper()
	out, errb, code := w.cli(args...)
	if code != ExitOK {
		w.t.Fatalf("%v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, out, errb)
	}
	return out
}

// fails runs a command that must exit with code and say want on stderr.
func (w *world) fails(code int, want string, args ...string) string {
	w.t.Helper()
	out, errb, got := w.cli(args...)
	if got != code || !strings.Contains(errb, want) {
		w.t.Fatalf("%v: exit %d (want %d), stderr does not say %q:\n%s\nstdout:\n%s", args, got, code, want, errb, out)
	}
	return errb
}

// startCLI runs a command in the background with ctx (cancel is Ctrl-C) and hands its stdout
// over line by line; the command blocks on a line until the test has read it. errc gets the
// command's error once stdout is drained.
func startCLI(t *testing.T, ctx context.Context, args ...string) (*bufio.Scanner, <-chan error) {
	t.Helper()
	pr, pw := io.Pipe()
	root := Root()
	root.SetOut(pw)
	root.SetErr(io.Discard)
	root.SetArgs(args)
	root.SilenceErrors, root.SilenceUsage = true, true
	errc := make(chan error, 1)
	go func() {
		err := root.ExecuteContext(ctx)
		_ = pw.Close()
		errc <- err
	}()
	t.Cleanup(func() { _ = pr.Close() }) // a failed test must not leave the command blocked
	return bufio.NewScanner(pr), errc
}

// next reads the next line of a background command, or fails.
func next(t *testing.T, s *bufio.Scanner) string {
	t.Helper()
	if !s.Scan() {
		t.Fatalf("the command ended early: %v", s.Err())
	}
	return s.Text()
}

// jsonOf decodes a command's --json output.
func jsonOf[T any](t *testing.T, out string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	return v
}

func (w *world) hget(key, field string) string {
	return w.b.Client.HGet(context.Background(), key, field).Val()
}

func (w *world) inspect(poller, partition string) watukuy.KeyInfo {
	w.t.Helper()
	ki, err := w.eng.Inspect(context.Background(), poller, partition)
	if err != nil {
		w.t.Fatal(err)
	}
	return ki
}

var wordRE = regexp.MustCompile(`\S+`)

// parseTable reads the aligned table whose header starts with first: every row is cut at the
// columns' header offsets. The table ends at a blank line or at the first line that does not
// fit the columns (a summary line), so a misaligned row shows up as a missing row.
func parseTable(t *testing.T, out, first string) []map[string]string {
	t.Helper()
	lines := strings.Split(out, "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(l, first+" ") {
			start = i
			break
		}
	}
	if start < 0 {
		t.Fatalf("no table with column %s in:\n%s", first, out)
	}
	header := lines[start]
	locs := wordRE.FindAllStringIndex(header, -1)
	aligned := func(l string) bool {
		for _, loc := range locs[1:] {
			if loc[0] < len(l) && (l[loc[0]-1] != ' ' || l[loc[0]] == ' ' && strings.TrimSpace(l[loc[0]:]) != "") {
				return false
			}
		}
		return true
	}
	var rows []map[string]string
	for _, l := range lines[start+1:] {
		if strings.TrimSpace(l) == "" || !aligned(l) {
			break
		}
		row := map[string]string{}
		for i, loc := range locs {
			if loc[0] >= len(l) {
				break
			}
			end := len(l)
			if i+1 < len(locs) && locs[i+1][0] < end {
				end = locs[i+1][0]
			}
			row[header[loc[0]:loc[1]]] = strings.TrimSpace(l[loc[0]:end])
		}
		rows = append(rows, row)
	}
	return rows
}

// rowWhere returns the row whose columns have the given values, or fails.
func rowWhere(t *testing.T, rows []map[string]string, kv ...string) map[string]string {
	t.Helper()
next:
	for _, r := range rows {
		for i := 0; i < len(kv); i += 2 {
			if r[kv[i]] != kv[i+1] {
				continue next
			}
		}
		return r
	}
	t.Fatalf("no row with %v in %v", kv, rows)
	return nil
}

// detail reads a two-column table (inspect --partition) into a map.
func detail(out string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, " "); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

// inspect: every key, one poller's keys, and every field of one key, as tables and JSON,
// from the Redis URL alone.
func TestInspect(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.api.PutMany(3, "o", map[string]any{"total": 1})
	w.register(w.poller("orders"), w.poller("tenants", func(p *watukuy.Poller) { p.Partitions = []string{"a", "b"} }))
	w.tick()

	rows := parseTable(t, w.ok("inspect"), "POLLER")
	if len(rows) != 3 {
		t.Fatalf("rows: %v", rows)
	}
	r := rowWhere(t, rows, "POLLER", "orders", "PARTITION", "-")
	if r["STATUS"] != "idle" || r["CURSOR"] != "3" || r["ITEMS"] != "3" || r["OUTBOX"] != "0" || r["PARKED"] != "0" || r["LAST-ERROR"] != "-" || !strings.HasPrefix(r["NEXT-DUE"], "in ") || r["FRESH"] == "-" {
		t.Fatalf("orders row: %v", r)
	}
	rowWhere(t, rows, "POLLER", "tenants", "PARTITION", "a", "ITEMS", "3")

	all := jsonOf[[]map[string]any](t, w.ok("inspect", "--json"))
	if len(all) != 3 || all[0]["poller"] != "orders" || all[0]["items"] != 3.0 || all[0]["intervalMs"] == nil {
		t.Fatalf("inspect --json: %v", all)
	}
	rows = parseTable(t, w.ok("inspect", "--poller", "tenants"), "POLLER")
	if len(rows) != 2 || rows[0]["PARTITION"] != "a" || rows[1]["PARTITION"] != "b" {
		t.Fatalf("tenants: %v", rows)
	}

	d := detail(w.ok("inspect", "--poller", "orders", "--partition", ""))
	for k, want := range map[string]string{"poller": "orders", "partition": "-", "status": "idle", "paused": "no", "source": "config",
		"cursors.live": "3", "items": "3", "outboxPending": "0", "parked": "0 (poison 0, invalid 0)", "circuit": "closed",
		"logRetention": "none (no replay)", "backfill": "none", "consecutiveFailures": "0", "lease.owner": "-"} {
		if d[k] != want {
			t.Errorf("inspect detail %s = %q, want %q", k, d[k], want)
		}
	}
	if !strings.HasPrefix(d["lastPoll"], "ok at ") || !strings.Contains(d["lastPoll"], "3 events, 3 delivered") || !strings.Contains(d["nextDueAt"], "(in ") {
		t.Errorf("inspect detail: lastPoll %q nextDueAt %q", d["lastPoll"], d["nextDueAt"])
	}
	one := jsonOf[watukuy.KeyInfo](t, w.ok("inspect", "--poller", "orders", "--partition", "", "--json"))
	if one.Poller != "orders" || one.Partition != "" || one.Cursor != "3" || one.Items != 3 || one.Status != "idle" {
		t.Fatalf("inspect one --json: %+v", one)
	}

	w.fails(ExitUsage, `unknown poller "nope"; known: "orders", "tenants"`, "inspect", "--poller", "nope")
	w.fails(ExitUsage, `poller "tenants" has no partition "c"; known: "a", "b"`, "inspect", "--poller", "tenants", "--partition", "c")
	w.fails(ExitUsage, "--partition needs --poller", "inspect", "--partition", "a")
}

// A poller whose every item lacks its identity is degraded: inspect's table, detail and --json
// show the status, the INVALID_ITEMS last error and that the key was never fresh, while a
// healthy key beside it shows its freshness.
func TestInspectDegraded(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.api.PutMany(3, "o", map[string]any{"total": 1})
	w.register(w.poller("orders"), w.poller("nameless", func(p *watukuy.Poller) { p.Identity = watukuy.Field("uuid") }))
	w.tick()

	rows := parseTable(t, w.ok("inspect"), "POLLER")
	if r := rowWhere(t, rows, "POLLER", "nameless"); r["STATUS"] != "degraded" || r["LAST-ERROR"] != "INVALID_ITEMS" || r["PARKED"] != "3" || r["FRESH"] != "-" || r["LAG"] != "0s" {
		t.Fatalf("degraded row: %v", r)
	}
	if r := rowWhere(t, rows, "POLLER", "orders"); r["STATUS"] != "idle" || r["FRESH"] == "-" {
		t.Fatalf("healthy row: %v", r)
	}
	d := detail(w.ok("inspect", "--poller", "nameless", "--partition", ""))
	if d["status"] != "degraded" || !strings.HasPrefix(d["lastError"], "INVALID_ITEMS (validate) at ") || !strings.Contains(d["lastError"], "no identity") ||
		d["freshness"] != "-" || !strings.HasPrefix(d["lastPoll"], "INVALID_ITEMS at ") {
		t.Fatalf("degraded detail: %v", d)
	}
	one := jsonOf[map[string]any](t, w.ok("inspect", "--poller", "nameless", "--partition", "", "--json"))
	le, _ := one["lastError"].(map[string]any)
	if one["status"] != "degraded" || le["code"] != "INVALID_ITEMS" || one["freshnessMs"] != -1.0 || one["freshAt"] != nil {
		t.Fatalf("degraded --json: %v", one)
	}
	healthy := jsonOf[map[string]any](t, w.ok("inspect", "--poller", "orders", "--partition", "", "--json"))
	if healthy["status"] != "idle" || healthy["freshAt"] == nil {
		t.Fatalf("healthy --json: %v", healthy)
	}
}

// trigger, pause and resume act on every partition without --partition, report the status
// afterwards, and change the state in Redis.
func TestTriggerPauseResume(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.api.PutMany(2, "o", nil)
	w.register(w.poller("tenants", func(p *watukuy.Poller) { p.Partitions = []string{"a", "b"} }))
	w.tick()
	ctx := context.Background()

	rows := parseTable(t, w.ok("pause", "--poller", "tenants"), "POLLER")
	if len(rows) != 2 || rows[0]["STATUS"] != "paused" || rows[1]["STATUS"] != "paused" {
		t.Fatalf("pause: %v", rows)
	}
	for _, p := range []string{"a", "b"} {
		if got := w.hget("wk:{tenants|"+p+"}:state", "paused"); got != "1" {
			t.Fatalf("partition %s paused = %q", p, got)
		}
	}
	sts := jsonOf[[]keyStatus](t, w.ok("resume", "--poller", "tenants", "--partition", "a", "--json"))
	if len(sts) != 1 || sts[0] != (keyStatus{"tenants", "a", "idle"}) {
		t.Fatalf("resume --json: %+v", sts)
	}
	if w.b.Client.HExists(ctx, "wk:{tenants|a}:state", "paused").Val() || w.hget("wk:{tenants|b}:state", "paused") != "1" {
		t.Fatal("resume of a touched b or missed a")
	}

	before := time.Now()
	out := w.ok("trigger", "--poller", "tenants", "--partition", "a")
	rowWhere(t, parseTable(t, out, "POLLER"), "POLLER", "tenants", "PARTITION", "a", "STATUS", "idle")
	if !strings.Contains(out, "triggered 1 key(s) of tenants: due now") {
		t.Fatalf("trigger: %s", out)
	}
	score := w.b.Client.ZScore(ctx, "wk:{global}:due:tenants", "tenants|a").Val()
	if w.hget("wk:{tenants|a}:state", "nextDue") != "0" || score > float64(time.Now().UnixMilli()) || score < float64(before.Add(-time.Second).UnixMilli()) {
		t.Fatalf("trigger: due score %v, nextDue %q", score, w.hget("wk:{tenants|a}:state", "nextDue"))
	}
	if rep := w.tick(); rep.Ran != 1 {
		t.Fatalf("after trigger the key should run once (b is paused): %+v", rep)
	}

	w.fails(ExitUsage, "--poller is required", "pause")
	w.fails(ExitUsage, `unknown poller "x"`, "trigger", "--poller", "x")
}

// backfill starts a backfill per key, --wait follows it to the end (bar or JSON lines), and
// snapshotDiff pollers refuse.
func TestBackfill(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.api.PutMany(25, "o", nil)
	w.register(w.poller("orders", func(p *watukuy.Poller) {
		p.MaxPagesPerCycle = 2 // the live lane's page leaves one backfill page per cycle
		p.CursorPosition = func(c string) (float64, bool) {
			n, err := strconv.Atoi(c)
			return float64(n), err == nil
		}
	}), w.poller("listing", func(p *watukuy.Poller) {
		p.Strategy, p.Fetch = watukuy.SnapshotDiff, w.api.Listing(10)
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
				if r.code != ExitOK {
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

	if !strings.Contains(errb, "100% |") {
		t.Errorf("the poller places cursors, yet the bar shows no percentage:\n%q", errb)
	}

	// --wait --json, one backfill page per cycle: the test runs a cycle only after the
	// command has reported the previous one, so every step shows up as a line.
	ctx := context.Background()
	lines, errc := startCLI(t, ctx, "backfill", "--poller", "orders", "--from", "null", "--force", "--wait", "--json", "--poll-interval", "5ms", "--redis", w.b.URL)
	first := jsonOf[keyBackfill](t, next(t, lines))
	if first.Event != "started" || first.Backfill.Generation != 4 || !first.Backfill.Force {
		t.Fatalf("first line: %+v", first)
	}
	key := watukuy.Key{Poller: "orders"}
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
	if err := <-errc; exitCode(err) != ExitFailed || !strings.Contains(err.Error(), "stopped waiting; the backfills go on in the workers") {
		t.Fatalf("after Ctrl-C: %v", err)
	}
	if bp := w.inspect("orders", "").Backfill; bp.Done || bp.Generation != begun.Backfill.Generation {
		t.Fatalf("the backfill did not go on after Ctrl-C: %+v", bp)
	}

	w.fails(ExitFailed, "snapshotDiff lists everything every cycle", "backfill", "--poller", "listing", "--from", "null")
	w.fails(ExitUsage, "--from is required", "backfill", "--poller", "orders")
}

// replay copies logged events back into the outbox; a poller without log.retention fails
// with the reason and what to do.
func TestReplay(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.api.PutMany(3, "o", nil)
	w.register(w.poller("orders", func(p *watukuy.Poller) { p.LogRetention = time.Hour }), w.poller("plain"))
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

	w.fails(ExitFailed, "set log.retention", "replay", "--poller", "plain", "--from", "0")
	w.fails(ExitUsage, "want an RFC 3339 time", "replay", "--poller", "orders", "--from", "yesterday")
	w.fails(ExitUsage, "--from is required", "replay", "--poller", "orders")
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
	w.fails(ExitUsage, "--to is required", "reset-cursor", "--poller", "orders")
}

// parked ls shows poison rows with their details; retry returns one to delivery, discard
// drops the other.
func TestParked(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.api.PutMany(2, "o", nil)
	var healthy atomic.Bool
	w.register(w.poller("orders", func(p *watukuy.Poller) {
		p.Delivery.Attempts = 1
		p.Handler = func(ctx context.Context, ev watukuy.Event) error {
			if !healthy.Load() {
				return errors.New("sink down")
			}
			return nil
		}
	}), w.poller("strict", func(p *watukuy.Poller) { p.Identity = watukuy.Field("sku") }))
	w.tick()
	ctx := context.Background()

	out := w.ok("parked", "ls", "--poller", "orders")
	rows := parseTable(t, out, "PARTITION")
	if len(rows) != 2 {
		t.Fatalf("parked ls:\n%s", out)
	}
	r := rowWhere(t, rows, "IDENTITY", "o0000")
	if r["KIND"] != "poison" || r["ATTEMPTS"] != "1" || r["ORDERING-KEY"] != "o0000" || r["ERROR"] != "sink down" || r["PARTITION"] != "-" {
		t.Fatalf("parked row: %v", r)
	}
	for _, want := range []string{"\n" + r["ID"] + " (poison, orders)\n", "  errors:\n    1. sink down\n", `holds ordering key "o0000"`, `"identity": "o0000"`, "parked retry --poller orders"} {
		if !strings.Contains(out, want) {
			t.Errorf("parked ls does not show %q:\n%s", want, out)
		}
	}
	infos := jsonOf[[]parkedRow](t, w.ok("parked", "ls", "--poller", "orders", "--json"))
	if len(infos) != 2 || infos[0].Kind != "poison" || infos[0].Poller != "orders" || len(infos[0].Event) == 0 || infos[0].Errors[0] != "sink down" {
		t.Fatalf("parked ls --json: %+v", infos)
	}
	if out := w.ok("parked", "ls", "--poller", "orders", "--limit", "1"); len(parseTable(t, out, "PARTITION")) != 1 || !strings.Contains(out, "showing 1 of 2") {
		t.Fatalf("--limit 1:\n%s", out)
	}
	if out := w.ok("parked", "ls", "--poller", "orders", "--kind", "invalid"); !strings.Contains(out, "no parked rows in orders") {
		t.Fatalf("--kind invalid:\n%s", out)
	}

	healthy.Store(true)
	out = w.ok("parked", "retry", "--poller", "orders", "--ids", infos[0].ID)
	if !strings.Contains(out, "retried 1 parked row(s) of orders") {
		t.Fatalf("retry: %s", out)
	}
	if n := w.b.Client.HLen(ctx, "wk:{orders|}:parked").Val(); n != 1 {
		t.Fatalf("%d parked rows after retry", n)
	}
	if rep := w.tick(); rep.Delivered != 1 {
		t.Fatalf("the retried event was not delivered: %+v", rep)
	}
	res := jsonOf[struct {
		Action   string
		Released int
	}](t, w.ok("parked", "discard", "--poller", "orders", "--partition", "", "--ids", infos[1].ID, "--json"))
	if res.Action != "discard" || res.Released != 1 || w.b.Client.Exists(ctx, "wk:{orders|}:parked").Val() != 0 {
		t.Fatalf("discard: %+v", res)
	}

	// An invalid item's retry runs the poller's checks: without --config it says so.
	invalid := jsonOf[[]parkedRow](t, w.ok("parked", "ls", "--poller", "strict", "--kind", "invalid", "--json"))
	if len(invalid) != 2 || !strings.Contains(invalid[0].Error, "sku") || len(invalid[0].Item) == 0 {
		t.Fatalf("invalid rows: %+v", invalid)
	}
	w.fails(ExitFailed, "pass --config", "parked", "retry", "--poller", "strict", "--ids", invalid[0].ID)
	w.fails(ExitFailed, `no parked row "nope"`, "parked", "discard", "--poller", "strict", "--ids", "nope")
	w.fails(ExitUsage, "--ids is required", "parked", "retry", "--poller", "orders")
	w.fails(ExitUsage, `--kind "sick"`, "parked", "ls", "--poller", "orders", "--kind", "sick")
}

// partitions ls, add, remove and delete (which wants --yes) from the Redis URL alone.
func TestPartitions(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.api.PutMany(2, "o", nil)
	w.register(w.poller("tenants", func(p *watukuy.Poller) { p.Partitions = []string{"a", "b"} }))
	w.tick()
	ctx := context.Background()

	rows := parseTable(t, w.ok("partitions", "ls", "--poller", "tenants"), "PARTITION")
	if len(rows) != 2 || rows[0]["PARTITION"] != "a" || rows[0]["SOURCE"] != "config" || rows[0]["ITEMS"] != "2" || rows[0]["CURSOR"] != "2" {
		t.Fatalf("partitions ls: %v", rows)
	}

	out := w.ok("partitions", "add", "--poller", "tenants", "--partition", "c")
	if !strings.Contains(out, `added partition "c" to tenants`) || !strings.Contains(w.hget("wk:{global}:registry", "tenants|c"), `"source":"cli"`) {
		t.Fatalf("add: %s", out)
	}
	kis := jsonOf[[]watukuy.KeyInfo](t, w.ok("partitions", "ls", "--poller", "tenants", "--json"))
	if len(kis) != 3 || kis[2].Partition != "c" || kis[2].Source != "cli" {
		t.Fatalf("partitions ls --json: %+v", kis)
	}
	w.tick() // the worker picks c up

	out = w.ok("partitions", "remove", "--poller", "tenants", "--partition", "c")
	if !strings.Contains(out, "brings it back from its last cursor") || w.hget("wk:{tenants|c}:state", "paused") != "1" || w.hget("wk:{tenants|c}:state", "removed") != "1" {
		t.Fatalf("remove: %s", out)
	}
	rowWhere(t, parseTable(t, w.ok("partitions", "ls", "--poller", "tenants"), "PARTITION"), "PARTITION", "c", "STATUS", "removed", "CURSOR", "2")

	errb := w.fails(ExitUsage, "pass --yes", "partitions", "delete", "--poller", "tenants", "--partition", "c")
	if !strings.Contains(errb, `live cursor "2"`) || !strings.Contains(errb, "2 known items") {
		t.Fatalf("the refusal does not say what would be deleted: %s", errb)
	}
	if !w.b.Client.HExists(ctx, "wk:{global}:registry", "tenants|c").Val() {
		t.Fatal("a refused delete deleted")
	}
	st := jsonOf[keyStatus](t, w.ok("partitions", "delete", "--poller", "tenants", "--partition", "c", "--yes", "--json"))
	if st.Status != "deleted" || w.b.Client.HExists(ctx, "wk:{global}:registry", "tenants|c").Val() || w.b.Client.Exists(ctx, "wk:{tenants|c}:items").Val() != 0 {
		t.Fatalf("delete: %+v", st)
	}
	w.fails(ExitUsage, "--poller and --partition are required", "partitions", "add", "--poller", "tenants")
}

// migrate records the layout of a fresh database, moves a layout-1 registry to the pollers
// hash, and does nothing the second time. Other commands refuse a layout-1 database.
func TestMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWorld(t)
	out := w.ok("migrate")
	if !strings.Contains(out, "none (empty database) → 3") || w.b.Client.Get(ctx, "wk:{global}:layout").Val() != "3" {
		t.Fatalf("migrate of an empty database: %s", out)
	}
	if out := w.ok("migrate"); !strings.Contains(out, "already at layout 3") {
		t.Fatalf("second migrate: %s", out)
	}

	old := newWorld(t)
	v1 := `{"poller":"p","partitions":[],"min":"5s","max":"5m0s","leaseTTL":"30s","schemaVersion":0}`
	if err := old.b.Client.HSet(ctx, "wk:{global}:registry", "p|", v1).Err(); err != nil {
		t.Fatal(err)
	}
	old.fails(ExitFailed, "run `watukuy migrate` first", "inspect")
	m := jsonOf[watukuy.Migration](t, old.ok("migrate", "--json"))
	if m.From != 1 || m.To != 3 || len(m.Steps) != 2 {
		t.Fatalf("migrate 1→3: %+v", m)
	}
	if old.hget("wk:{global}:pollers", "p") != v1 || old.hget("wk:{global}:registry", "p|") != `{"source":"config"}` || old.b.Client.Get(ctx, "wk:{global}:layout").Val() != "3" {
		t.Fatalf("after migrate: pollers %q registry %q", old.hget("wk:{global}:pollers", "p"), old.hget("wk:{global}:registry", "p|"))
	}
	if m := jsonOf[watukuy.Migration](t, old.ok("migrate", "--json")); m.From != 3 || m.To != 3 || len(m.Steps) != 0 {
		t.Fatalf("second migrate: %+v", m)
	}
	rowWhere(t, parseTable(t, old.ok("inspect"), "POLLER"), "POLLER", "p", "PARTITION", "-")
}

// validate checks a config without Redis; --probe fetches each poller's first page.
func TestValidate(t *testing.T) {
	t.Parallel()
	api := fakeapi.New()
	api.Put("x1", map[string]any{"sku": "A-1"})
	api.Put("x2", map[string]any{"sku": "A-2"})
	api.Put("x3", map[string]any{"name": "no sku"})
	srv := fakeapi.NewServer(api, fakeapi.ServerOptions{})
	defer srv.Close()
	body := func(url string) string {
		return fmt.Sprintf(`pollers:
  - name: products
    request: {url: %s/list}
    items: data
    identity: sku
    version: version
    cursor: {strategy: snapshotDiff, param: page, sizeParam: per_page, size: 10, hasMore: has_more}
    schedule: {min: 2s, max: 1m}
    log: {retention: 24h}
    delivery: {stdout: {}}
`, url)
	}
	cfg := writeConfig(t, body(srv.URL))
	// No --redis: validate needs none.
	out, errb, err := run(t, "validate", "--config", cfg)
	if err != nil {
		t.Fatalf("validate: %v\n%s", err, errb)
	}
	r := rowWhere(t, parseTable(t, out, "NAME"), "NAME", "products")
	if r["STRATEGY"] != "snapshotDiff" || r["SCHEDULE"] != "2s..1m0s" || r["DELIVERY"] != "stdout" || r["SHADOW"] != "no" || r["LOG"] != "24h0m0s" || r["PARTITIONS"] != "-" {
		t.Fatalf("validate: %v", r)
	}
	if !strings.Contains(out, "config OK: 1 poller(s)") {
		t.Fatalf("validate: %s", out)
	}

	out, errb, err = run(t, "validate", "--config", cfg, "--probe")
	if err != nil {
		t.Fatalf("validate --probe: %v\n%s", err, errb)
	}
	items := parseTable(t, out, "IDENTITY")
	if len(items) != 3 || items[0]["IDENTITY"] != "A-1" || items[0]["VERSION"] != "1" || len(items[0]["FINGERPRINT"]) < 8 || items[0]["ISSUE"] != "-" {
		t.Fatalf("probe items: %v\n%s", items, out)
	}
	bad := rowWhere(t, items, "IDENTITY", "-")
	if !strings.Contains(bad["ISSUE"], "sku") || !strings.Contains(out, "3 items, 1 invalid") || !strings.Contains(out, "park them as invalid") {
		t.Fatalf("probe with an invalid item:\n%s", out)
	}
	out, _, err = run(t, "validate", "--config", cfg, "--probe", "--json")
	v := jsonOf[struct {
		OK     bool
		Probes []probeReport
	}](t, out)
	if err != nil || !v.OK || len(v.Probes) != 1 || v.Probes[0].Result == nil || len(v.Probes[0].Result.Items) != 3 || v.Probes[0].Result.Invalid != 1 {
		t.Fatalf("validate --probe --json: %v\n%s", err, out)
	}

	down := fakeapi.NewServer(api, fakeapi.ServerOptions{})
	down.Close()
	out, _, err = run(t, "validate", "--config", writeConfig(t, body(down.URL)), "--probe")
	if exitCode(err) != ExitFailed || !strings.Contains(err.Error(), "1 of 1 probe(s) failed") || !strings.Contains(out, "probe products: FAILED") {
		t.Fatalf("probe of a dead API: %v\n%s", err, out)
	}

	broken := writeConfig(t, "pollers:\n  - name: orders\n    request: {url: http://x}\n    cursor: {strategy: sideways}\n    delivery: {stdout: {}}\n")
	_, _, err = run(t, "validate", "--config", broken)
	if exitCode(err) != ExitFailed || !strings.Contains(err.Error(), filepath.Base(broken)+":4:") || !strings.Contains(err.Error(), "cursor.strategy") {
		t.Fatalf("broken config: %v", err)
	}
}

// exitCode maps errors as Execute does: usage errors and unknown pollers or partitions are 2,
// other failures 1.
func TestExitCode(t *testing.T) {
	nf := &watukuy.NotFoundError{Poller: "x"}
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, ExitOK},
		{errors.New("redis down"), ExitFailed},
		{&watukuy.ReplayUnavailableError{}, ExitFailed},
		{&watukuy.ConfigError{Poller: "x"}, ExitFailed},
		{usagef("--poller is required"), ExitUsage},
		{nf, ExitUsage},
		{fmt.Errorf("inspect: %w", nf), ExitUsage},
		{errors.New(`unknown command "x" for "watukuy"`), ExitUsage},
	} {
		if got := exitCode(c.err); got != c.want {
			t.Errorf("exitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
	// Through the command tree: a bad flag value and an unknown command.
	if _, _, err := run(t, "parked", "ls", "--poller", "p", "--limit", "many"); exitCode(err) != ExitUsage {
		t.Errorf("bad --limit: %v", err)
	}
	for _, args := range [][]string{{"nonsense"}, {"parked"}, {"partitions", "bogus"}} {
		if _, _, err := run(t, args...); exitCode(err) != ExitUsage {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// The operator flags come from the command line only; settings still come from the
// environment.
func TestOperatorFlagsIgnoreTheEnvironment(t *testing.T) {
	b := redistest.Real(t)
	eng, _ := watukuy.New(watukuy.Options{Redis: b.Client})
	w := &world{t: t, b: b, api: fakeapi.New(), eng: eng}
	w.register(w.poller("tenants", func(p *watukuy.Poller) { p.Partitions = []string{"a"} }))
	w.tick()
	t.Setenv("WATUKUY_REDIS_URL", b.URL)
	t.Setenv("WATUKUY_YES", "true")
	t.Setenv("WATUKUY_POLLER", "tenants")
	if _, _, err := run(t, "partitions", "delete", "--poller", "tenants", "--partition", "a"); exitCode(err) != ExitUsage || !strings.Contains(err.Error(), "pass --yes") {
		t.Fatalf("WATUKUY_YES confirmed a delete: %v", err)
	}
	if _, _, err := run(t, "pause"); exitCode(err) != ExitUsage {
		t.Fatalf("WATUKUY_POLLER named the poller: %v", err)
	}
}

// --json of the long-running commands means JSON logs; it contradicts --log-format console.
// dev's handler prints events as JSON lines.
func TestProcessJSON(t *testing.T) {
	if _, _, err := run(t, "run", "--json", "--log-format", "console"); exitCode(err) != ExitUsage || !strings.Contains(err.Error(), "contradict") {
		t.Fatalf("run --json --log-format console: %v", err)
	}
	var b strings.Builder
	ev := watukuy.Event{ID: "e1", Poller: "orders", Type: watukuy.Created, Identity: "o1", Item: json.RawMessage(`{"id":"o1"}`)}
	if err := printEvents(&b, true)(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	got := jsonOf[watukuy.Event](t, b.String())
	if got.ID != "e1" || got.Identity != "o1" || strings.Count(b.String(), "\n") != 1 {
		t.Fatalf("dev --json event line: %q", b.String())
	}
}

// Looking at an empty database (a wrong --redis or --prefix) writes nothing into it.
func TestReadOnlyOnEmptyDatabase(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	out := w.ok("inspect", "--prefix", "typo")
	if !strings.Contains(out, "no keys") {
		t.Fatalf("inspect of an empty database: %s", out)
	}
	w.fails(ExitUsage, `unknown poller "orders"`, "pause", "--prefix", "typo", "--poller", "orders", "--partition", "")
	w.fails(ExitUsage, `unknown poller "orders"`, "inspect", "--prefix", "typo", "--poller", "orders", "--partition", "eu")
	if keys := w.b.Client.Keys(context.Background(), "typo:*").Val(); len(keys) != 0 {
		t.Fatalf("operator commands wrote %v into an empty database", keys)
	}
}

// backfill --wait ends when the backfill fails for good (a cursor the poller refuses), says
// why, and exits 1; the key itself keeps running.
func TestBackfillWaitEndsOnFailure(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.api.PutMany(5, "o", nil)
	w.api.OnFetch(func(ctx context.Context, req watukuy.FetchRequest) error {
		if req.Lane == "backfill" && req.Cursor == "garbage" {
			return &watukuy.ConfigError{Poller: req.Key.Poller, Field: "cursor", Msg: `"garbage" is not a sequence number`}
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
			if r.code != ExitFailed || !strings.Contains(r.errb, "backfill of orders failed") {
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
