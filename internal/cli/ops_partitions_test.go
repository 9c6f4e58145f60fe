package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/watukuy/watukuy/internal/command"
	"github.com/watukuy/watukuy/watukuytype"
)

// partitions ls, add, remove and delete (which wants --yes) from the Redis URL alone.
func TestPartitions(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.api.PutMany(2, "o", nil)
	w.register(w.poller("tenants", func(p *watukuytype.Poller) { p.Partitions = []string{"a", "b"} }))
	w.tick()
	ctx := context.Background()

	rows := parseTable(t, w.ok("partitions", "ls", "--poller", "tenants"), "PARTITION")
	if len(rows) != 2 || rows[0]["PARTITION"] != "a" || rows[0]["SOURCE"] != "config" || rows[0]["ITEMS"] != "2" || rows[0]["CURSOR"] != "2" {
		t.Fatalf("partitions ls: %v", rows)
	}

	out := w.ok("partitions", "add", "--poller", "tenants", "--partition", "c")
	if !strings.Contains(out, `added partition "c" to tenants`) || w.source("tenants", "c") != "cli" {
		t.Fatalf("add: %s", out)
	}
	kis := jsonOf[[]watukuytype.KeyInfo](t, w.ok("partitions", "ls", "--poller", "tenants", "--json"))
	if len(kis) != 3 || kis[2].Partition != "c" || kis[2].Source != "cli" {
		t.Fatalf("partitions ls --json: %+v", kis)
	}
	w.tick() // the worker picks c up

	out = w.ok("partitions", "remove", "--poller", "tenants", "--partition", "c")
	if !strings.Contains(out, "brings it back from its last cursor") || w.hget("wk:{tenants|c}:state", "paused") != "1" || w.hget("wk:{tenants|c}:state", "removed") != "1" {
		t.Fatalf("remove: %s", out)
	}
	rowWhere(t, parseTable(t, w.ok("partitions", "ls", "--poller", "tenants"), "PARTITION"), "PARTITION", "c", "STATUS", "removed", "CURSOR", "2")

	errb := w.fails(command.ExitUsage, "pass --yes", "partitions", "delete", "--poller", "tenants", "--partition", "c")
	if !strings.Contains(errb, `live cursor "2"`) || !strings.Contains(errb, "2 known items") {
		t.Fatalf("the refusal does not say what would be deleted: %s", errb)
	}
	if w.source("tenants", "c") == "" {
		t.Fatal("a refused delete deleted")
	}
	st := jsonOf[keyStatus](t, w.ok("partitions", "delete", "--poller", "tenants", "--partition", "c", "--yes", "--json"))
	if st.Status != "deleted" || w.source("tenants", "c") != "" || w.b.Client.Exists(ctx, "wk:{tenants|c}:items").Val() != 0 {
		t.Fatalf("delete: %+v", st)
	}
	w.fails(command.ExitUsage, "--poller and --partition are required", "partitions", "add", "--poller", "tenants")

	// A deleted config partition stays listed, as deleted, and takes no operation: naming it
	// is refused, acting on every partition passes it by.
	w.ok("partitions", "delete", "--poller", "tenants", "--partition", "a", "--yes")
	w.fails(command.ExitUsage, "partitions add", "pause", "--poller", "tenants", "--partition", "a")
	sts := jsonOf[[]keyStatus](t, w.ok("pause", "--poller", "tenants", "--json"))
	if len(sts) != 1 || sts[0].Partition != "b" || w.hget("wk:{tenants|a}:state", "paused") != "" {
		t.Fatalf("pause of every partition with a deleted one: %+v, paused on the deleted: %q", sts, w.hget("wk:{tenants|a}:state", "paused"))
	}
}

// partitions add refuses a poller whose request has no ${partition} (the new key would poll
// the same API again), with the config or from the Redis URL alone (the registry records it),
// and takes one that has it. --partition - names the unpartitioned key; add refuses it. An
// operator command reads a config whose delivery secret and admin token are not set here.
func TestPartitionsAddNeedsPartitionVar(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	cfg := writeConfig(t, `pollers:
  - name: orders
    request: {url: http://127.0.0.1:1/orders}
    cursor: {strategy: timestamp, field: updated_at, param: since}
    delivery: {stdout: {}}
  - name: tenants
    partitions: [a]
    request: {url: http://127.0.0.1:1/orders, headers: {X-Tenant: "${partition}"}}
    cursor: {strategy: timestamp, field: updated_at, param: since}
    delivery: {stdout: {}}
`)
	w.ok("pause", "--poller", "orders", "--config", cfg) // registers the config's pollers
	errb := w.fails(command.ExitFailed, "has no ${partition}", "partitions", "add", "--poller", "orders", "--partition", "eu", "--config", cfg)
	if !strings.Contains(errb, "poll the same API") || w.source("orders", "eu") != "" {
		t.Fatalf("partitions add without ${partition}: %s", errb)
	}
	w.ok("partitions", "add", "--poller", "tenants", "--partition", "b", "--config", cfg)
	w.fails(command.ExitFailed, "has no ${partition}", "partitions", "add", "--poller", "orders", "--partition", "eu")
	if w.source("orders", "eu") != "" {
		t.Fatal("partitions add from the Redis URL alone added a partition to a poller without ${partition}")
	}
	secrets := writeConfig(t, `admin:
  tokens: [{id: ops, token: "${NOT_SET_ADMIN_TOKEN}"}]
pollers:
  - name: tenants
    partitions: [a]
    request: {url: http://127.0.0.1:1/orders, headers: {X-Tenant: "${partition}"}}
    cursor: {strategy: timestamp, field: updated_at, param: since}
    delivery: {webhook: {url: "https://${NOT_SET_HOOK_HOST}/in", secret: "${NOT_SET_HOOK_SECRET}"}}
`)
	w.ok("partitions", "add", "--poller", "tenants", "--partition", "c", "--config", secrets)
	w.ok("inspect", "--poller", "tenants", "--config", secrets)
	w.fails(command.ExitUsage, "name the new partition", "partitions", "add", "--poller", "orders", "--partition", "-")
	sts := jsonOf[[]keyStatus](t, w.ok("resume", "--poller", "orders", "--partition", "-", "--json"))
	if len(sts) != 1 || sts[0].Poller != "orders" || sts[0].Partition != "" {
		t.Fatalf("--partition - resumed %+v", sts)
	}
}
