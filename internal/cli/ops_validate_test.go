package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/watukuy/watukuy/internal/brokertest"
	"github.com/watukuy/watukuy/internal/command"
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/redistest"
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
	if command.ExitCode(err) != command.ExitFailed || !strings.Contains(err.Error(), "1 of 1 probe(s) failed") || !strings.Contains(out, "probe products: FAILED") {
		t.Fatalf("probe of a dead API: %v\n%s", err, out)
	}

	broken := writeConfig(t, "pollers:\n  - name: orders\n    request: {url: http://x}\n    cursor: {strategy: sideways}\n    delivery: {stdout: {}}\n")
	_, _, err = run(t, "validate", "--config", broken)
	if command.ExitCode(err) != command.ExitFailed || !strings.Contains(err.Error(), filepath.Base(broken)+":4:") || !strings.Contains(err.Error(), "cursor.strategy") {
		t.Fatalf("broken config: %v", err)
	}
}

// validate --probe fails where the poller would lose or stall on what the API answers, and
// each failure's hint says what to set: a wrong identity path (every item parked as invalid),
// a full page of items that share one change time (the cursor stalls without a tie-breaker),
// a 429 (rate limited, not the credentials), an HTML page answered with 200.
func TestValidateProbeProblems(t *testing.T) {
	t.Parallel()
	api := fakeapi.New()
	api.PutMany(5, "w", map[string]any{"price": 1}) // 5 items in one second
	plain := fakeapi.NewServer(api, fakeapi.ServerOptions{})
	defer plain.Close()
	tied := fakeapi.NewServer(api, fakeapi.ServerOptions{TieBreaker: true})
	defer tied.Close()
	html := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "<!DOCTYPE html><title>Sign in</title>")
	}))
	defer html.Close()
	config := func(url, identity, cursor string) string {
		return writeConfig(t, fmt.Sprintf(`pollers:
  - name: widgets
    request: {url: %s/items}
    items: data
    identity: %s
    version: version
    cursor: {strategy: timestamp, param: updated_since, field: updated_at, limitParam: limit%s}
    delivery: {stdout: {}}
`, url, identity, cursor))
	}
	for _, tc := range []struct {
		name, config string
		fault        *fakeapi.Fault
		want         []string // in stdout, then the error
		wantErr      string
	}{
		{name: "every item without an identity", config: config(plain.URL, "sku", ""),
			want:    []string{`FAILED: no item has an identity at "sku": every item would be parked as invalid`, "hint: set identity to the gjson path of the field that names an item (the first item has: id, price, updated_at, updated_seq, version)"},
			wantErr: "1 of 1 probe(s) failed: set identity"},
		{name: "a full page of ties without a tie-breaker", config: config(plain.URL, "id", ", limit: 3"),
			want:    []string{"FAILED: the cursor stalls: a full page of 3 items all at", "cursor.tieBreaker", "(cursor.limit, now 3)"},
			wantErr: "1 of 1 probe(s) failed: set a tie-breaker"},
		{name: "a 429 is a rate limit", config: config(plain.URL, "id", ""), fault: &fakeapi.Fault{Path: "/items", Status: http.StatusTooManyRequests, RetryAfter: "30"},
			want:    []string{"probe widgets: FAILED:", "hint: the API rate limited the probe (HTTP 429): retry after 30s"},
			wantErr: "retry after 30s"},
		{name: "an HTML page", config: config(html.URL, "id", ""),
			want:    []string{"the response is text/html, not JSON", "hint: the answer is not JSON"},
			wantErr: "the answer is not JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.fault != nil {
				plain.Inject(*tc.fault)
				defer plain.ClearFaults()
			}
			out, _, err := run(t, "validate", "--config", tc.config, "--probe")
			if command.ExitCode(err) != command.ExitFailed || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error()+out, "credentials") {
				t.Fatalf("exit %d, %v; want exit 1 saying %q\n%s", command.ExitCode(err), err, tc.wantErr, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("stdout does not say %q:\n%s", w, out)
				}
			}
		})
	}
	// A static listing that ignores the paging parameter: page 2 is page 1 again.
	static := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `[{"id": 1}, {"id": 2}]`)
	}))
	defer static.Close()
	cfg := writeConfig(t, fmt.Sprintf("pollers:\n  - name: items\n    request: {url: %s/items.json}\n    items: \"@this\"\n    cursor: {strategy: snapshotDiff}\n    delivery: {stdout: {}}\n", static.URL))
	out, _, err := run(t, "validate", "--config", cfg, "--probe")
	if command.ExitCode(err) != command.ExitFailed || !strings.Contains(out, "the next page repeats the first (2 items): the API ignores the paging parameter") || !strings.Contains(out, "cursor.size") {
		t.Fatalf("a listing that ignores its paging: exit %d, %v\n%s", command.ExitCode(err), err, out)
	}

	// The same ties with the API's tie-breaker set: the cursor moves on, the probe passes.
	out, _, err = run(t, "validate", "--config", config(tied.URL, "id", ", limit: 3, tieBreaker: after_id"), "--probe", "--json")
	v := jsonOf[struct {
		OK     bool
		Probes []probeReport
	}](t, out)
	if err != nil || !v.OK || len(v.Probes) != 1 || v.Probes[0].Result.Stall != "" || v.Probes[0].Problem != "" || len(v.Probes[0].Result.Items) != 3 {
		t.Fatalf("probe with a tie-breaker: %v\n%s", err, out)
	}
}

// validate --probe reads a complete listing page by page, up to --probe-pages, and says how
// many pages and cycles it takes.
func TestValidateProbeEstimatesAListing(t *testing.T) {
	t.Parallel()
	api := fakeapi.New()
	for i := range 406 {
		api.Put(fmt.Sprintf("x%03d", i), map[string]any{"sku": fmt.Sprintf("S-%03d", i)})
	}
	srv := fakeapi.NewServer(api, fakeapi.ServerOptions{})
	defer srv.Close()
	cfg := writeConfig(t, fmt.Sprintf(`pollers:
  - name: products
    request: {url: %s/list}
    items: data
    identity: sku
    cursor: {strategy: snapshotDiff, param: page, sizeParam: per_page, size: 3, hasMore: has_more}
    maxPagesPerCycle: 100
    delivery: {stdout: {}}
`, srv.URL))
	out, _, err := run(t, "validate", "--config", cfg, "--probe", "--probe-pages", "200")
	if err != nil || !strings.Contains(out, "live listing: 136 pages, 406 items: 2 cycles at 100 pages a cycle") {
		t.Fatalf("a listing read to its end: %v\n%s", err, out)
	}
	out, _, err = run(t, "validate", "--config", cfg, "--probe", "--json")
	v := jsonOf[struct{ Probes []probeReport }](t, out)
	if err != nil || len(v.Probes) != 1 || len(v.Probes[0].Listings) != 1 {
		t.Fatalf("a listing read in part: %v\n%s", err, out)
	}
	if l := v.Probes[0].Listings[0]; l.Complete || l.Pages != 20 || l.Items != 60 || l.Cycles != 1 || l.PagesPerCycle != 100 {
		t.Fatalf("a listing read in part: %+v", l)
	}
}

// validate --probe takes its requests' tokens from the poller's shared budget when it has a
// Redis URL (the bucket the workers draw from moves); without one it takes none and says so.
func TestValidateProbeTakesBudgetTokens(t *testing.T) {
	t.Parallel()
	api := fakeapi.New()
	api.Put("x1", map[string]any{"sku": "S-1"})
	srv := fakeapi.NewServer(api, fakeapi.ServerOptions{})
	defer srv.Close()
	cfg := writeConfig(t, fmt.Sprintf(`budgets:
  - {name: shop, rate: 1/h, burst: 4}
pollers:
  - name: orders
    request: {url: %s/list}
    items: data
    identity: sku
    cursor: {strategy: snapshotDiff, param: page, sizeParam: per_page, size: 3, hasMore: has_more}
    budget: shop
    delivery: {stdout: {}}
`, srv.URL))
	out, _, err := run(t, "validate", "--config", cfg, "--probe")
	if err != nil || !strings.Contains(out, `took no token of budget "shop"`) {
		t.Fatalf("a probe without Redis: %v\n%s", err, out)
	}
	b := redistest.Miniredis(t)
	out, _, err = run(t, "validate", "--config", cfg, "--probe", "--redis", b.URL, "--json")
	v := jsonOf[struct{ Probes []probeReport }](t, out)
	if err != nil || len(v.Probes) != 1 || v.Probes[0].Untaken || v.Probes[0].Budget != "shop" {
		t.Fatalf("a probe with Redis: %v\n%s", err, out)
	}
	keys := b.Mini.Keys()
	if !slices.ContainsFunc(keys, func(k string) bool { return strings.Contains(k, "shop") }) {
		t.Fatalf("no bucket of budget shop in Redis after the probe took its tokens: %v", keys)
	}
}

// validate --probe connects to each broker sink and says whether its target exists: a stream
// that exists passes, a missing one fails the run with the stream's name; credentials in the
// URL are never printed.
func TestValidateProbeBrokerSinks(t *testing.T) {
	t.Parallel()
	natsURL := brokertest.NATS(t)
	name := strings.ToUpper(brokertest.Name(t))
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close) // after the stream's removal below (cleanups run last first)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	api := fakeapi.New()
	api.Put("x1", map[string]any{"sku": "A-1"})
	srv := fakeapi.NewServer(api, fakeapi.ServerOptions{})
	defer srv.Close()
	// The server has no authorization: it ignores the user and password in the URL.
	withCreds := strings.Replace(natsURL, "nats://", "nats://wtuser:Sup3rS3cret-pw@", 1)
	body := func(stream string) string {
		return fmt.Sprintf(`pollers:
  - name: products
    request: {url: %s/list}
    items: data
    cursor: {strategy: snapshotDiff, param: page, sizeParam: per_page, size: 10, hasMore: has_more}
    delivery:
      nats: {url: "%s", subject: "%s.${poller}.${type}", stream: %s}
`, srv.URL, withCreds, name, stream)
	}
	out, errb, err := run(t, "validate", "--config", writeConfig(t, body(name)), "--probe")
	if err != nil || !strings.Contains(out, "sink nats ") || !strings.Contains(out, name) || !strings.Contains(out, ", 1 sink, 0 failed") {
		t.Fatalf("probe of an existing stream: %v\n%s%s", err, out, errb)
	}
	missing := name + "_MISSING"
	out, errb, err = run(t, "validate", "--config", writeConfig(t, body(missing)), "--probe")
	if command.ExitCode(err) != command.ExitFailed || !strings.Contains(out, "FAILED") || !strings.Contains(out, missing) || !strings.Contains(err.Error(), "1 of 2 probe(s) failed") {
		t.Fatalf("probe of a missing stream: %v\n%s%s", err, out, errb)
	}
	for _, s := range []string{out, errb, err.Error()} {
		if strings.Contains(s, "Sup3rS3cret-pw") || strings.Contains(s, "wtuser") {
			t.Errorf("the output shows the URL's credentials:\n%s", s)
		}
	}
}
