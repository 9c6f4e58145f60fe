package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/watukuy/watukuy/internal/command"
	"github.com/watukuy/watukuy/watukuytype"
)

// parked ls shows poison rows with their details; retry returns one to delivery, discard
// drops the other.
func TestParked(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.api.PutMany(2, "o", nil)
	var healthy atomic.Bool
	w.register(w.poller("orders", func(p *watukuytype.Poller) {
		p.Delivery.Attempts, p.Delivery.RetryHorizon = 1, -1 // poison after one try
		p.Handler = func(ctx context.Context, ev watukuytype.Event) error {
			if !healthy.Load() {
				return errors.New("sink down")
			}
			return nil
		}
	}), w.poller("strict", func(p *watukuytype.Poller) { p.Identity = watukuytype.Field("sku") }))
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
	w.fails(command.ExitFailed, "pass --config", "parked", "retry", "--poller", "strict", "--ids", invalid[0].ID)
	w.fails(command.ExitFailed, `no parked row "nope"`, "parked", "discard", "--poller", "strict", "--ids", "nope")
	w.fails(command.ExitUsage, "--ids is required", "parked", "retry", "--poller", "orders")
	w.fails(command.ExitUsage, `--kind "sick"`, "parked", "ls", "--poller", "orders", "--kind", "sick")
}

// A row parked by a handler's panic shows the panic's stack: under the row's errors, and as
// stack in --json.
func TestParkedShowsThePanicStack(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.api.PutMany(1, "o", nil)
	w.register(w.poller("orders", func(p *watukuytype.Poller) {
		p.Delivery.Attempts, p.Delivery.RetryHorizon = 1, -1
		p.Handler = func(ctx context.Context, ev watukuytype.Event) error { panic("nil map in the sink") }
	}))
	w.tick()
	out := w.ok("parked", "ls", "--poller", "orders")
	for _, want := range []string{"  errors:\n    1. handler panic: nil map in the sink\n", "  stack:\n    goroutine ", "TestParkedShowsThePanicStack"} {
		if !strings.Contains(out, want) {
			t.Errorf("parked ls does not show %q:\n%s", want, out)
		}
	}
	rows := jsonOf[[]parkedRow](t, w.ok("parked", "ls", "--poller", "orders", "--json"))
	if len(rows) != 1 || !strings.Contains(rows[0].Stack, "TestParkedShowsThePanicStack") {
		t.Fatalf("parked ls --json: %+v", rows)
	}
}

// parked retry|discard --all [--kind] take every parked row of the poller (of one kind)
// without a list of ids; --kind needs --all, and --all excludes --ids.
func TestParkedAll(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.api.Put("a", map[string]any{"sku": "A"})
	w.api.Put("b", map[string]any{"sku": "B"})
	w.api.Put("c", map[string]any{"name": "no sku"})
	var healthy atomic.Bool
	w.register(w.poller("mixed", func(p *watukuytype.Poller) {
		p.Identity = watukuytype.Field("sku")
		p.Delivery.Attempts, p.Delivery.RetryHorizon = 1, -1 // poison after one try
		p.Handler = func(ctx context.Context, ev watukuytype.Event) error {
			if !healthy.Load() {
				return errors.New("sink down")
			}
			return nil
		}
	}))
	w.tick()
	kinds := func() map[string]int {
		n := map[string]int{}
		for _, r := range jsonOf[[]parkedRow](t, w.ok("parked", "ls", "--poller", "mixed", "--json")) {
			n[r.Kind]++
		}
		return n
	}
	if n := kinds(); n["poison"] != 2 || n["invalid"] != 1 {
		t.Fatalf("parked rows by kind: %v", n)
	}
	w.fails(command.ExitUsage, "--all and --ids exclude each other", "parked", "retry", "--poller", "mixed", "--all", "--ids", "x")
	w.fails(command.ExitUsage, "--kind narrows --all", "parked", "discard", "--poller", "mixed", "--kind", "poison")
	w.fails(command.ExitUsage, `--kind "sick"`, "parked", "retry", "--poller", "mixed", "--all", "--kind", "sick")

	healthy.Store(true)
	if out := w.ok("parked", "retry", "--poller", "mixed", "--all", "--kind", "poison"); !strings.Contains(out, "retried 2 parked row(s) of mixed") {
		t.Fatalf("retry --all --kind poison: %s", out)
	}
	if n := kinds(); n["poison"] != 0 || n["invalid"] != 1 {
		t.Fatalf("after retry --all --kind poison: %v", n)
	}
	if rep := w.tick(); rep.Delivered != 2 {
		t.Fatalf("the retried events were not delivered: %+v", rep)
	}
	if out := w.ok("parked", "retry", "--poller", "mixed", "--all", "--kind", "poison"); !strings.Contains(out, "no poison parked rows in mixed: nothing retried") {
		t.Fatalf("retry --all with nothing parked: %s", out)
	}
	res := jsonOf[struct {
		Released int
		Keys     []struct{ IDs []string }
	}](t, w.ok("parked", "discard", "--poller", "mixed", "--all", "--json"))
	if res.Released != 1 || len(res.Keys) != 1 || len(res.Keys[0].IDs) != 1 || w.b.Client.Exists(t.Context(), "wk:{mixed|}:parked").Val() != 0 {
		t.Fatalf("discard --all: %+v", res)
	}
}

// parked ls --partition pages one key's rows by id: at most --limit rows, then the command
// line of the next page, which goes on after the last id; across partitions it lists every
// row. --after needs --partition.
func TestParkedPages(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.api.PutMany(3, "o", nil)
	w.register(w.poller("tenants", func(p *watukuytype.Poller) {
		p.Partitions = []string{"a", "b"}
		p.Delivery.Attempts, p.Delivery.RetryHorizon = 1, -1 // poison after one try
		p.Handler = func(context.Context, watukuytype.Event) error { return errors.New("sink down") }
	}), w.poller("orders", func(p *watukuytype.Poller) {
		p.Delivery.Attempts, p.Delivery.RetryHorizon = 1, -1 // poison after one try
		p.Handler = func(context.Context, watukuytype.Event) error { return errors.New("sink down") }
	}))
	w.tick()
	ids := func(partition string) []string {
		rows, err := w.eng.Parked().List(t.Context(), watukuytype.Key{Poller: "tenants", Partition: partition}, "")
		if err != nil || len(rows) != 3 {
			t.Fatalf("parked rows of tenants|%s: %v %v", partition, rows, err)
		}
		var out []string
		for _, r := range rows {
			out = append(out, r.ID)
		}
		return out
	}
	b := ids("b")

	if rows := parseTable(t, w.ok("parked", "ls", "--poller", "tenants"), "PARTITION"); len(rows) != 6 {
		t.Fatalf("every partition's rows: %v", rows)
	}
	var seen []string
	args := []string{"parked", "ls", "--poller", "tenants", "--partition", "b", "--limit", "2"}
	for page := 0; ; page++ {
		if page > 3 {
			t.Fatalf("no end after %v", seen)
		}
		out := w.ok(args...)
		for _, r := range parseTable(t, out, "PARTITION") {
			seen = append(seen, r["ID"])
		}
		m := moreRE.FindStringSubmatch(out)
		if m == nil {
			break
		}
		if want := "more: watukuy parked ls --poller tenants --partition b --limit 2 --after " + b[1]; page == 0 && m[0] != want {
			t.Fatalf("more line %q, want %q", m[0], want)
		}
		args = moreArgs(m[1])
	}
	if fmt.Sprint(seen) != fmt.Sprint(b) {
		t.Fatalf("pages of tenants|b: %v, want %v", seen, b)
	}
	if out := w.ok("parked", "ls", "--poller", "tenants", "--partition", "b"); len(parseTable(t, out, "PARTITION")) != 3 || moreRE.MatchString(out) {
		t.Fatalf("one page of every row:\n%s", out)
	}
	out, errb, code := w.cli("parked", "ls", "--poller", "orders", "--partition", "-", "--kind", "poison", "--limit", "1", "--json")
	rows := jsonOf[[]parkedRow](t, out)
	if code != command.ExitOK || len(rows) != 1 || rows[0].Poller != "orders" ||
		strings.TrimSpace(errb) != "more: watukuy parked ls --poller orders --partition - --kind poison --limit 1 --after "+rows[0].ID {
		t.Fatalf("--json page: exit %d, %+v, stderr %q", code, rows, errb)
	}
	if out := w.ok("parked", "ls", "--poller", "tenants", "--partition", "a", "--after", "~"); !strings.Contains(out, "no parked rows in tenants|a") {
		t.Fatalf("past the last id:\n%s", out)
	}
	w.fails(command.ExitUsage, "--after pages one partition's rows", "parked", "ls", "--poller", "tenants", "--after", b[0])
	w.fails(command.ExitUsage, "at most 1000", "parked", "ls", "--poller", "tenants", "--partition", "a", "--limit", "1001")
}

// parked ls without --poller lists every poller's parked rows, by poller, partition and id,
// a page at a time as GET /api/parked does: following the more: lines reaches every row once,
// in that order. --poller stays a filter; --partition needs it.
func TestParkedAcrossPollers(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.api.PutMany(3, "o", nil)
	sick := func(p *watukuytype.Poller) {
		p.Delivery.Attempts, p.Delivery.RetryHorizon = 1, -1 // poison after one try
		p.Handler = func(context.Context, watukuytype.Event) error { return errors.New("sink down") }
	}
	w.register(w.poller("tenants", sick, func(p *watukuytype.Poller) { p.Partitions = []string{"a", "b"} }), w.poller("orders", sick),
		w.poller("healthy"))
	w.tick()
	var want []string // every row, by poller, partition and id
	for _, k := range []watukuytype.Key{{Poller: "orders"}, {Poller: "tenants", Partition: "a"}, {Poller: "tenants", Partition: "b"}} {
		rows, err := w.eng.Parked().List(t.Context(), k, "")
		if err != nil || len(rows) != 3 {
			t.Fatalf("parked rows of %v: %v %v", k, rows, err)
		}
		for _, r := range rows {
			want = append(want, k.Poller+"|"+k.Partition+"|"+r.ID)
		}
	}

	out := w.ok("parked", "ls")
	rows := parseTable(t, out, "POLLER")
	if len(rows) != len(want) || moreRE.MatchString(out) || !strings.Contains(out, "parked retry --poller P --ids") {
		t.Fatalf("parked ls, every poller's %d rows in one page:\n%s", len(want), out)
	}
	var seen []string
	args := []string{"parked", "ls", "--limit", "2"}
	for page := 0; ; page++ {
		if page > len(want) {
			t.Fatalf("no end after %v", seen)
		}
		out := w.ok(args...)
		for _, r := range parseTable(t, out, "POLLER") {
			seen = append(seen, r["POLLER"]+"|"+strings.TrimPrefix(r["PARTITION"], "-")+"|"+r["ID"])
		}
		m := moreRE.FindStringSubmatch(out)
		if m == nil {
			break
		}
		if page == 0 && !strings.HasPrefix(m[0], "more: watukuy parked ls --limit 2 --after ") {
			t.Fatalf("more line %q", m[0])
		}
		args = moreArgs(m[1])
	}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("pages of every poller's rows:\n%v\nwant\n%v", seen, want)
	}

	// --json: the page's array; the more: line on stderr.
	jsonOut, errb, code := w.cli("parked", "ls", "--limit", "4", "--json")
	page := jsonOf[[]parkedRow](t, jsonOut)
	if code != command.ExitOK || len(page) != 4 || page[0].Poller != "orders" || page[3].Poller != "tenants" || !strings.HasPrefix(errb, "more: watukuy parked ls --limit 4 --after ") {
		t.Fatalf("--json page: exit %d, %+v, stderr %q", code, page, errb)
	}
	if rows := jsonOf[[]parkedRow](t, w.ok("parked", "ls", "--poller", "orders", "--json")); len(rows) != 3 || rows[0].Poller != "orders" {
		t.Fatalf("--poller orders: %+v", rows)
	}
	if out := w.ok("parked", "ls", "--kind", "invalid"); !strings.Contains(out, "no parked rows in any poller") {
		t.Fatalf("--kind invalid:\n%s", out)
	}
	w.fails(command.ExitUsage, "--partition needs --poller", "parked", "ls", "--partition", "a")
	w.fails(command.ExitUsage, "is not a cursor of this listing", "parked", "ls", "--after", "nope")
	w.fails(command.ExitUsage, "at most 1000", "parked", "ls", "--limit", "1001")
}
