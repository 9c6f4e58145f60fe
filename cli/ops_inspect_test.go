package cli

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/watukuy/watukuy"
)

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

// inspect shows the shared budgets below the keys: one bucket per partition of a templated
// budget, its rate, burst, tokens, and the pause a 429 set; from the Redis URL alone.
func TestInspectBudgets(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	eng, err := watukuy.New(watukuy.Options{Redis: w.b.Client, InstanceID: "test-worker",
		Budgets: []watukuy.Budget{{Name: "shop-${partition}", Rate: 2000, Per: time.Minute, Burst: 5}}})
	if err != nil {
		t.Fatal(err)
	}
	w.eng = eng
	w.api.PutMany(3, "o", map[string]any{"total": 1})
	throttled := false
	w.register(w.poller("tenants", func(p *watukuy.Poller) {
		p.Partitions, p.Budget = []string{"a", "b"}, "shop-${partition}"
		fetch := p.Fetch
		p.Fetch = func(ctx context.Context, req watukuy.FetchRequest) (watukuy.Page, error) {
			if req.Key.Partition == "b" {
				throttled = true
				return watukuy.Page{}, &watukuy.HTTPError{StatusCode: 429, RetryAfter: time.Hour}
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
