package cli

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/internal/command"
	"github.com/watukuy/watukuy/watukuytype"
)

// inspect: every key, one poller's keys, and every field of one key, as tables and JSON,
// from the Redis URL alone.
func TestInspect(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.api.PutMany(3, "o", map[string]any{"total": 1})
	w.register(w.poller("orders"), w.poller("tenants", func(p *watukuytype.Poller) { p.Partitions = []string{"a", "b"} }))
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
	one := jsonOf[watukuytype.KeyInfo](t, w.ok("inspect", "--poller", "orders", "--partition", "", "--json"))
	if one.Poller != "orders" || one.Partition != "" || one.Cursor != "3" || one.Items != 3 || one.Status != "idle" {
		t.Fatalf("inspect one --json: %+v", one)
	}

	w.fails(command.ExitUsage, `unknown poller "nope"; known: "orders", "tenants"`, "inspect", "--poller", "nope")
	w.fails(command.ExitUsage, `poller "tenants" has no partition "c"; known: "a", "b"`, "inspect", "--poller", "tenants", "--partition", "c")
	w.fails(command.ExitUsage, "--partition needs --poller", "inspect", "--partition", "a")
}

// A poller whose every item lacks its identity is degraded: inspect's table, detail and --json
// show the status, the INVALID_ITEMS last error and that the key was never fresh, while a
// healthy key beside it shows its freshness.
func TestInspectDegraded(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.api.PutMany(3, "o", map[string]any{"total": 1})
	w.register(w.poller("orders"), w.poller("nameless", func(p *watukuytype.Poller) { p.Identity = watukuytype.Field("uuid") }))
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

// inspect shows the shared budgets below the keys: one bucket per partition of a templated
// budget, its rate, burst, tokens, and the pause a 429 set; from the Redis URL alone.
func TestInspectBudgets(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	eng, err := watukuy.New(watukuy.Options{Redis: w.b.Client, InstanceID: "test-worker",
		Budgets: []watukuytype.Budget{{Name: "shop-${partition}", Rate: 2000, Per: time.Minute, Burst: 5}}})
	if err != nil {
		t.Fatal(err)
	}
	w.eng = eng
	w.api.PutMany(3, "o", map[string]any{"total": 1})
	throttled := false
	w.register(w.poller("tenants", func(p *watukuytype.Poller) {
		p.Partitions, p.Budget = []string{"a", "b"}, "shop-${partition}"
		fetch := p.Fetch
		p.Fetch = func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
			if req.Key.Partition == "b" {
				throttled = true
				return watukuytype.Page{}, &watukuytype.HTTPError{StatusCode: 429, RetryAfter: time.Hour}
			}
			return fetch(ctx, req)
		}
	}))
	if _, err := w.eng.Tick(context.Background(), time.Second); err != nil || !throttled {
		t.Fatalf("tick: %v, b throttled: %v", err, throttled)
	}
	rows := parseTable(t, w.ok("inspect"), "BUDGET")
	if len(rows) != 2 {
		t.Fatalf("budget rows: %v", rows)
	}
	a := rowWhere(t, rows, "BUCKET", "shop-a", "BUDGET", "shop-${partition}", "RATE", "2000/min", "BURST", "5", "PAUSED-UNTIL", "-", "KEYS", "1")
	if tokens, err := strconv.ParseFloat(a["TOKENS"], 64); err != nil || tokens < 4 || tokens > 5 {
		t.Errorf("bucket shop-a holds %q tokens after one request, want about 4 of 5", a["TOKENS"])
	}
	b := rowWhere(t, rows, "BUCKET", "shop-b", "TOKENS", "0.0")
	if !strings.HasPrefix(b["PAUSED-UNTIL"], "in ") {
		t.Errorf("bucket shop-b after a 429 with Retry-After 1h: %v", b)
	}
}

// moreRE finds a listing's more: line and the arguments it gives.
var moreRE = regexp.MustCompile(`(?m)^more: watukuy (.*)$`)

// moreArgs splits a more: line's command into arguments: words, single quotes around a value
// removed (the tests' values hold no space).
func moreArgs(line string) []string {
	var args []string
	for _, f := range strings.Fields(line) {
		if strings.HasPrefix(f, "'") && strings.HasSuffix(f, "'") {
			f = strings.ReplaceAll(f[1:len(f)-1], `'\''`, "'")
		}
		args = append(args, f)
	}
	return args
}

// inspect lists a page of keys at a time: at most --limit keys, then the command line of the
// next page; following those reaches every key once, in order, and the last page has no more:
// line. --json prints the page's array, with the more: line on stderr.
func TestInspectPages(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.register(w.poller("orders"), w.poller("tenants", func(p *watukuytype.Poller) { p.Partitions = []string{"a", "b", "c", "d"} }))
	w.tick()

	pages := func(args ...string) ([]string, []int, []string) {
		var keys, lines []string
		var sizes []int
		for range 10 {
			out := w.ok(args...)
			rows := parseTable(t, out, "POLLER")
			for _, r := range rows {
				keys = append(keys, r["POLLER"]+"|"+r["PARTITION"])
			}
			sizes = append(sizes, len(rows))
			m := moreRE.FindStringSubmatch(out)
			if m == nil {
				return keys, sizes, lines
			}
			lines = append(lines, m[0])
			args = moreArgs(m[1])
		}
		t.Fatalf("%v: no end after 10 pages", args)
		return nil, nil, nil
	}
	keys, sizes, lines := pages("inspect", "--limit", "2")
	if fmt.Sprint(keys) != "[orders|- tenants|a tenants|b tenants|c tenants|d]" || fmt.Sprint(sizes) != "[2 2 1]" {
		t.Fatalf("pages: %v, sizes %v", keys, sizes)
	}
	if want := "more: watukuy inspect --limit 2 --after 'tenants|a'"; lines[0] != want {
		t.Fatalf("more line %q, want %q", lines[0], want)
	}
	keys, sizes, lines = pages("inspect", "--poller", "tenants", "--limit", "3")
	if fmt.Sprint(keys) != "[tenants|a tenants|b tenants|c tenants|d]" || fmt.Sprint(sizes) != "[3 1]" ||
		lines[0] != "more: watukuy inspect --poller tenants --limit 3 --after 'tenants|c'" {
		t.Fatalf("tenants' pages: %v, sizes %v, %q", keys, sizes, lines)
	}
	// A page that ends with the last key says no more.
	if _, sizes, lines := pages("inspect", "--poller", "tenants", "--limit", "4"); fmt.Sprint(sizes) != "[4]" || len(lines) != 0 {
		t.Fatalf("one full page: sizes %v, %q", sizes, lines)
	}
	if out := w.ok("inspect", "--after", "zzz|"); !strings.Contains(out, "no keys after zzz|") {
		t.Fatalf("past the end: %s", out)
	}

	out, errb, code := w.cli("inspect", "--json", "--limit", "3")
	page := jsonOf[[]watukuytype.KeyInfo](t, out)
	if code != command.ExitOK || len(page) != 3 || page[2].Partition != "b" || strings.TrimSpace(errb) != "more: watukuy inspect --limit 3 --after 'tenants|b'" {
		t.Fatalf("--json page: exit %d, %d keys, stderr %q", code, len(page), errb)
	}
	out, errb, _ = w.cli("inspect", "--json", "--after", "tenants|b")
	if page := jsonOf[[]watukuytype.KeyInfo](t, out); len(page) != 2 || page[0].Partition != "c" || errb != "" {
		t.Fatalf("--json last page: %+v, stderr %q", page, errb)
	}

	w.fails(command.ExitUsage, "--limit 0: want 1 to 1000", "inspect", "--limit", "0")
	w.fails(command.ExitUsage, "--limit 1001: want 1 to 1000", "inspect", "--limit", "1001")
	w.fails(command.ExitUsage, `--after "tenants" is not a cursor of inspect`, "inspect", "--after", "tenants")
	w.fails(command.ExitUsage, `is a cursor of poller "tenants", not of --poller orders`, "inspect", "--poller", "orders", "--after", "tenants|a")
	w.fails(command.ExitUsage, "not with --partition", "inspect", "--poller", "tenants", "--partition", "a", "--limit", "2")
}
