package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy/internal/config"
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// A poller built from the config file: its JSON Schema parks failing items as invalid, its
// fingerprint fields decide what counts as a change, and the stdout sink delivers.
func TestBuildFromConfig(t *testing.T) {
	b := redistest.Real(t)
	api := fakeapi.New()
	api.Put("a", map[string]any{"status": "open", "total": 1, "seen": 1})
	api.Put("b", map[string]any{"status": "open", "total": -4, "seen": 1})
	srv := fakeapi.NewServer(api, fakeapi.ServerOptions{})
	defer srv.Close()
	dir := t.TempDir()
	schema := `{"type":"object","required":["id","total"],"properties":{"total":{"type":"number","minimum":0}}}`
	if err := os.WriteFile(filepath.Join(dir, "order.json"), []byte(schema), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "watukuy.yaml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(`pollers:
  - name: orders
    request: {url: %s/list}
    items: data
    fingerprint: [status, total]
    schema: ./order.json
    cursor: {strategy: snapshotDiff, param: page, sizeParam: per_page, size: 10, hasMore: has_more}
    delivery: {stdout: {}, orderingKey: status}
`, srv.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	env, err := Open(context.Background(), Settings{Redis: b.URL, Config: cfgPath, ConfigGiven: true, Out: &out}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	tick := func() {
		t.Helper()
		if err := env.Engine.Trigger(context.Background(), watukuytype.Key{Poller: "orders", Partition: ""}); err != nil {
			t.Fatal(err)
		}
		if _, err := env.Engine.Tick(context.Background(), 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	tick()
	if lines := strings.Count(out.String(), "\n"); lines != 1 || !strings.Contains(out.String(), `"identity":"a"`) {
		t.Fatalf("delivered:\n%s", out.String())
	}
	rows, err := env.Engine.Parked().List(context.Background(), watukuytype.Key{Poller: "orders", Partition: ""}, "invalid")
	if err != nil || len(rows) != 1 || rows[0].Identity != "b" || !strings.Contains(rows[0].Error, "minimum") {
		t.Fatalf("schema failures must be parked invalid: %+v %v", rows, err)
	}
	api.Put("a", map[string]any{"status": "open", "total": 1, "seen": 2}) // outside the fingerprint
	tick()
	if lines := strings.Count(out.String(), "\n"); lines != 1 {
		t.Fatalf("a change outside the fingerprint fields was emitted:\n%s", out.String())
	}
	api.Put("a", map[string]any{"status": "paid", "total": 1, "seen": 2})
	tick()
	var ev struct{ Type, Identity string }
	last := strings.Split(strings.TrimSpace(out.String()), "\n")
	if err := json.Unmarshal([]byte(last[len(last)-1]), &ev); err != nil || ev.Type != "updated" || ev.Identity != "a" {
		t.Fatalf("a fingerprint change: %q %v", last[len(last)-1], err)
	}
}

// deletes and commit reach the engine poller: the detail request sends the poller's headers
// and its own query (not the listing's), with {id} and ${partition} replaced; 404 is not found.
func TestBuildDeletesAndCommit(t *testing.T) {
	type seen struct{ path, auth, tenant, query string }
	var mu sync.Mutex
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, seen{r.URL.EscapedPath(), r.Header.Get("Authorization"), r.Header.Get("X-Tenant"), r.URL.RawQuery})
		if r.URL.Path != "/t/t_1/customers/c 1" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, `{"data": {"id": "c 1", "name": "Ann"}}`)
	}))
	defer srv.Close()
	cfg, err := config.Parse("w.yaml", []byte(fmt.Sprintf(`pollers:
  - name: customers
    partitions: [t_1]
    request:
      url: %[1]s/t/${partition}/customers
      query: {per_page: "100"}
      headers: {Authorization: Bearer tok, X-Tenant: "${partition}"}
    items: data
    cursor: {strategy: snapshotDiff, param: page}
    deletes:
      confirmListings: 3
      detail: {url: "%[1]s/t/${partition}/customers/{id}", items: data, query: {expand: all}}
      tombstones: 48h
    commit: {maxItems: 10, maxBytes: 4096}
    delivery: {stdout: {}}
  - name: plain
    request: {url: %[1]s/plain}
    cursor: {strategy: page}
    delivery: {stdout: {}}
`, srv.URL)), nil)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := Build(cfg, nil, &bytes.Buffer{}, nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	p, plain := ps[0], ps[1]
	if p.ConfirmDeletes != 3 || p.TombstoneRetention != 48*time.Hour || p.CommitMaxItems != 10 || p.CommitMaxBytes != 4096 || p.Detail == nil {
		t.Fatalf("poller: confirm %d, tombstones %v, commit %d/%d, detail set %v",
			p.ConfirmDeletes, p.TombstoneRetention, p.CommitMaxItems, p.CommitMaxBytes, p.Detail != nil)
	}
	if plain.ConfirmDeletes != 0 || plain.TombstoneRetention != 0 || plain.CommitMaxItems != 0 || plain.CommitMaxBytes != 0 || plain.Detail != nil {
		t.Fatalf("a poller without deletes and commit must keep the engine's defaults (zero values): %+v", plain)
	}
	key := watukuytype.Key{Poller: "customers", Partition: "t_1"}
	item, found, err := p.Detail(context.Background(), key, "c 1")
	if err != nil || !found || string(item) != `{"id": "c 1", "name": "Ann"}` {
		t.Fatalf("found item: %s %v %v", item, found, err)
	}
	item, found, err = p.Detail(context.Background(), key, "c2")
	if err != nil || found || item != nil {
		t.Fatalf("404: %s %v %v", item, found, err)
	}
	want := []seen{
		{"/t/t_1/customers/c%201", "Bearer tok", "t_1", "expand=all"},
		{"/t/t_1/customers/c2", "Bearer tok", "t_1", "expand=all"},
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("requests:\n got %v\nwant %v", got, want)
	}
}

// Processes refuse a Redis that may evict keys, unless told to run anyway.
func TestEvictionPolicyChecked(t *testing.T) {
	b := redistest.Real(t, "--maxmemory-policy", "allkeys-lru")
	_, err := Open(context.Background(), Settings{Redis: b.URL}, zerolog.Nop())
	if err == nil || !strings.Contains(err.Error(), "noeviction") || !strings.Contains(err.Error(), "--allow-eviction") {
		t.Fatalf("err = %v", err)
	}
	env, err := Open(context.Background(), Settings{Redis: b.URL, AllowEviction: true}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	env.RDB.Close()
}

// What Open says of the maxmemory-policy: an evicting policy warns when allowed (operator
// commands), and a policy the server will not tell (miniredis has no CONFIG) is unknown, not
// evicting: no refusal and no warning, a line at info (debug when eviction is allowed anyway).
func TestEvictionPolicyLogged(t *testing.T) {
	lru := redistest.Real(t, "--maxmemory-policy", "allkeys-lru")
	mini := redistest.Miniredis(t)
	for _, tc := range []struct {
		name  string
		b     redistest.Backend
		allow bool
		level string
		msg   string
	}{
		{"evicting, allowed", lru, true, "warn", "running with eviction allowed"},
		{"no CONFIG", mini, false, "info", "the maxmemory-policy could not be read"},
		{"no CONFIG, allowed", mini, true, "debug", "the maxmemory-policy could not be read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			env, err := Open(context.Background(), Settings{Redis: tc.b.URL, AllowEviction: tc.allow}, zerolog.New(&logs))
			if err != nil {
				t.Fatal(err)
			}
			env.RDB.Close()
			var line struct{ Level, Message string }
			if err := json.Unmarshal(logs.Bytes(), &line); err != nil || line.Level != tc.level || !strings.HasPrefix(line.Message, tc.msg) {
				t.Fatalf("log %q (%v), want one %s line %q", logs.String(), err, tc.level, tc.msg)
			}
		})
	}
}

// Logger shows info and above unless told otherwise: debug is one line per HTTP request.
func TestLoggerLevel(t *testing.T) {
	for _, tc := range []struct {
		level string
		debug bool
	}{{"", false}, {"info", false}, {"debug", true}} {
		var out bytes.Buffer
		log, err := Logger("json", tc.level, &out)
		if err != nil {
			t.Fatal(err)
		}
		log.Debug().Msg("d")
		log.Info().Msg("i")
		if got := strings.Contains(out.String(), `"d"`); got != tc.debug || !strings.Contains(out.String(), `"i"`) {
			t.Fatalf("level %q: %s", tc.level, out.String())
		}
	}
	if _, err := Logger("json", "trace", nil); err == nil {
		t.Fatal("--log-level trace was accepted")
	}
}

// A schema that does not compile is a config error naming the field.
func TestBadSchemaIsAConfigError(t *testing.T) {
	dir := t.TempDir()
	_ = os.WriteFile(filepath.Join(dir, "bad.json"), []byte(`{"type": 12}`), 0o600)
	cfg, err := config.Parse(filepath.Join(dir, "w.yaml"), []byte("pollers:\n  - name: o\n    request: {url: http://x}\n    schema: ./bad.json\n    cursor: {strategy: snapshotDiff}\n    delivery: {stdout: {}}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Build(cfg, nil, &bytes.Buffer{}, nil, zerolog.Nop()); err == nil || !strings.Contains(err.Error(), "schema") {
		t.Fatalf("err = %v", err)
	}
}

// --claim-timeout reaches the scheduler's claims (a dead worker's key comes back after it).
func TestClaimTimeoutSetting(t *testing.T) {
	b := redistest.Miniredis(t)
	env := &Env{Log: zerolog.Nop()}
	s := Settings{ClaimTimeout: 45 * time.Second, AllowEviction: true}
	if err := env.finish(context.Background(), s, b.Client); err != nil {
		t.Fatal(err)
	}
	if got := env.scheduler(s).ClaimTimeout; got != 45*time.Second {
		t.Fatalf("scheduler claim timeout %v, want 45s", got)
	}
}
