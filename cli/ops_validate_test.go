package cli

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/watukuy/watukuy/internal/fakeapi"
)

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
