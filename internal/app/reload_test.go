package app

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/internal/sink"
	"github.com/watukuy/watukuy/watukuytype"
	"github.com/watukuy/watukuy/webhook"
)

// api answers every listing with one item that changed since the last request (so every
// cycle emits an event) and records each request's path and Authorization header.
type api struct {
	mu   sync.Mutex
	n    int
	seen []string // "path auth"
}

func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.n++
	n := a.n
	a.seen = append(a.seen, r.URL.Path+" "+r.Header.Get("Authorization"))
	a.mu.Unlock()
	fmt.Fprintf(w, `{"data": [{"id": "a", "n": %d}], "has_more": false}`, n)
}

func (a *api) last() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.seen) == 0 {
		return ""
	}
	return a.seen[len(a.seen)-1]
}

// hooks receives webhooks and records which secret signed each one.
type hooks struct {
	mu      sync.Mutex
	secrets []string // candidates
	signers []string // per delivery: the candidate whose signature verifies, or "none"
}

func (h *hooks) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	signer := "none"
	for _, s := range h.secrets {
		if v, err := webhook.NewVerifier([]string{s}, webhook.Options{Tolerance: time.Minute}); err == nil && v.Verify(r.Header, body) == nil {
			signer = s
		}
	}
	h.mu.Lock()
	h.signers = append(h.signers, signer)
	h.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (h *hooks) last() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.signers) == 0 {
		return ""
	}
	return h.signers[len(h.signers)-1]
}

func secret(s string) string { return "whsec_" + base64.StdEncoding.EncodeToString([]byte(s)) }

func write(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// reloadCfg is a config with one snapshotDiff poller per entry of names, on srv, delivering
// to the webhook at hook with secret.
func reloadCfg(srv, path, auth, hook, secret string, names ...string) string {
	var b strings.Builder
	b.WriteString("pollers:\n")
	for _, n := range names {
		fmt.Fprintf(&b, `  - name: %s
    request: {url: %s%s, headers: {Authorization: %q}}
    items: data
    cursor: {strategy: snapshotDiff, param: page, hasMore: has_more}
    schedule: {min: 1h, max: 2h}
    delivery: {webhook: {url: %s, secret: %q}}
`, n, srv, path, auth, hook, secret)
	}
	return b.String()
}

func reloads(env *Env, result string) float64 {
	return testutil.ToFloat64(env.reload.count.WithLabelValues(result))
}

// A reload that changes a poller's URL, header and webhook secret: the next cycle requests
// the new URL with the new header and signs with the new secret. A broken file, and a file
// that changes the Redis URL, keep the running config and say why (file:line for the former).
func TestReloadAppliesFromNextCycle(t *testing.T) {
	b := redistest.Real(t)
	a := &api{}
	srv := httptest.NewServer(a)
	defer srv.Close()
	s1, s2 := secret("first secret of the test"), secret("second secret of the test")
	h := &hooks{secrets: []string{s1, s2}}
	hookSrv := httptest.NewServer(h)
	defer hookSrv.Close()
	cfgPath := filepath.Join(t.TempDir(), "watukuy.yaml")
	write(t, cfgPath, reloadCfg(srv.URL, "/v1", "Bearer one", hookSrv.URL, s1, "orders"))
	ctx := context.Background()
	env, err := Open(ctx, Settings{Redis: b.URL, Config: cfgPath, ConfigGiven: true}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer env.RDB.Close()
	cycle := func(wantReq, wantSigner, when string) {
		t.Helper()
		if err := env.Engine.Trigger(ctx, watukuytype.Key{Poller: "orders", Partition: ""}); err != nil {
			t.Fatal(err)
		}
		rep, err := env.Engine.Tick(ctx, 10*time.Second)
		if err != nil || rep.Ran != 1 || rep.Delivered != 1 {
			t.Fatalf("%s: tick %+v %v", when, rep, err)
		}
		if got := a.last(); got != wantReq {
			t.Fatalf("%s: the cycle requested %q, want %q", when, got, wantReq)
		}
		if got := h.last(); got != wantSigner {
			t.Fatalf("%s: the webhook was signed by %q, want %q", when, got, wantSigner)
		}
	}
	cycle("/v1 Bearer one", s1, "before the reload")

	write(t, cfgPath, reloadCfg(srv.URL, "/v2", "Bearer two", hookSrv.URL, s2, "orders"))
	if err := env.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	cycle("/v2 Bearer two", s2, "after the reload")

	// A broken file: the error names file:line, the running config stays.
	write(t, cfgPath, reloadCfg(srv.URL, "/v3", "Bearer three", hookSrv.URL, s1, "orders")+"    cursor: {strategy: nope}\n")
	err = env.Reload(ctx)
	if err == nil || !strings.Contains(err.Error(), cfgPath+":") || !strings.Contains(err.Error(), "running config is kept") {
		t.Fatalf("a broken file: %v", err)
	}
	t.Logf("a broken file: %v", err)
	write(t, cfgPath, strings.Replace(reloadCfg(srv.URL, "/v3", "Bearer three", hookSrv.URL, s1, "orders"), "    items: data\n", "    items: data\n    bogus: 1\n", 1))
	err = env.Reload(ctx)
	if err == nil || !strings.Contains(err.Error(), cfgPath+":5:") || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("an unknown key: the error must name %s:5: %v", cfgPath, err)
	}
	t.Logf("an unknown key: %v", err)
	// A new Redis URL in the file applies only at a restart (the process took it from the
	// flag here, so the file's is ignored: the reload goes through)...
	write(t, cfgPath, "redis: redis://127.0.0.1:1/0\n"+reloadCfg(srv.URL, "/v2", "Bearer two", hookSrv.URL, s2, "orders"))
	if err := env.Reload(ctx); err != nil {
		t.Fatalf("a redis URL in the file under --redis: %v", err)
	}
	// ...a process that took it from the file keeps the running config.
	env.reload.redisFromFile = true
	write(t, cfgPath, "redis: redis://127.0.0.1:2/0\n"+reloadCfg(srv.URL, "/v3", "Bearer three", hookSrv.URL, s1, "orders"))
	if err := env.Reload(ctx); err == nil || !strings.Contains(err.Error(), "restart") {
		t.Fatalf("a new redis URL: %v", err)
	} else {
		t.Logf("a new redis URL: %v", err)
	}
	cycle("/v2 Bearer two", s2, "after the refused reloads")
	if ok, bad := reloads(env, "ok"), reloads(env, "error"); ok != 2 || bad != 3 {
		t.Fatalf("watukuy_config_reloads_total: ok %v error %v, want 2 and 3", ok, bad)
	}
}

// lines is a goroutine-safe writer that hands over each written line.
type lines chan string

func (l lines) Write(p []byte) (int, error) {
	for _, s := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		l <- s
	}
	return len(p), nil
}

// waitFor reads lines until one contains want.
func waitFor(t *testing.T, l lines, want string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case s := <-l:
			if strings.Contains(s, want) {
				return
			}
		case <-deadline:
			t.Fatalf("no line with %q within 20s", want)
		}
	}
}

// In run (RunAll), a reload that adds a poller registers its keys and the scheduler claims
// them; a removed poller's key stays registered, and this process no longer claims it.
func TestReloadAddsAndRemovesPollers(t *testing.T) {
	b := redistest.Real(t)
	a := &api{}
	srv := httptest.NewServer(a)
	defer srv.Close()
	cfgPath := filepath.Join(t.TempDir(), "watukuy.yaml")
	stdout := func(names ...string) string {
		return strings.ReplaceAll(reloadCfg(srv.URL, "/list", "Bearer x", "http://unused", "", names...),
			`{webhook: {url: http://unused, secret: ""}}`, "{stdout: {}}")
	}
	write(t, cfgPath, stdout("orders"))
	out := make(lines, 100)
	s := Settings{Redis: b.URL, Config: cfgPath, ConfigGiven: true, Listen: "off", Concurrency: 2, Out: out}
	ctx, cancel := context.WithCancel(context.Background())
	env, err := Open(ctx, s, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer env.RDB.Close()
	errc := make(chan error, 1)
	go func() { errc <- RunAll(ctx, env, s) }()
	defer func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("RunAll: %v", err)
		}
	}()
	waitFor(t, out, `"poller":"orders"`)

	write(t, cfgPath, stdout("customers"))
	if err := env.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, out, `"poller":"customers"`)
	// Make orders due and customers due again: the claim that runs customers' second cycle
	// comes after both triggers, and would have taken orders too, had it still been claimed.
	if err := env.Engine.Trigger(ctx, watukuytype.Key{Poller: "orders", Partition: ""}); err != nil {
		t.Fatalf("the removed poller's key must stay known: %v", err)
	}
	if err := env.Engine.Trigger(ctx, watukuytype.Key{Poller: "customers", Partition: ""}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, out, `"poller":"customers"`)
	due, err := b.Client.ZScore(ctx, "wk:{global}:due:orders", "orders|").Result()
	if err != nil || due > float64(time.Now().UnixMilli()) {
		t.Fatalf("the removed poller's key was claimed after the reload (due %v, %v)", time.UnixMilli(int64(due)), err)
	}
	keys, _, err := env.Engine.KeysPage(ctx, "", "", 1000)
	if err != nil || fmt.Sprint(keys) != fmt.Sprint([]watukuytype.Key{{Poller: "customers"}, {Poller: "orders"}}) {
		t.Fatalf("registered keys %v %v: want customers' added and orders' kept", keys, err)
	}
	if names := env.PollerNames(); fmt.Sprint(names) != "[customers]" {
		t.Fatalf("the process runs %v after the reload", names)
	}
}

// The broker sinks of a process are one per setting: a reload keeps the one whose setting a
// poller still names (its connection stays), and closes the one no poller names any more. The
// process's Close closes the rest.
func TestReloadKeepsAndClosesBrokerSinks(t *testing.T) {
	b := redistest.Real(t)
	cfgPath := filepath.Join(t.TempDir(), "watukuy.yaml")
	entry := func(name, delivery string) string {
		return fmt.Sprintf("  - name: %s\n    request: {url: http://127.0.0.1:1/%s}\n    cursor: {strategy: snapshotDiff}\n    schedule: {min: 1h, max: 2h}\n    delivery:\n      %s\n", name, name, delivery)
	}
	const nats = `nats: {url: "nats://127.0.0.1:1", subject: "w.${poller}"}`
	const pg = `postgres: {url: "postgres://127.0.0.1:1/test", table: events}`
	write(t, cfgPath, "pollers:\n"+entry("orders", nats)+entry("users", pg))
	env, err := Open(context.Background(), Settings{Redis: b.URL, Config: cfgPath, ConfigGiven: true}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	kinds := func() []string {
		var ks []string
		for _, br := range env.Brokers.All() {
			ks = append(ks, br.Kind())
		}
		return ks
	}
	if got := kinds(); len(got) != 2 {
		t.Fatalf("brokers %v, want nats and postgres", got)
	}
	var natsBroker, pgBroker sink.Broker
	for _, br := range env.Brokers.All() {
		if br.Kind() == "nats" {
			natsBroker = br
		} else {
			pgBroker = br
		}
	}

	write(t, cfgPath, "pollers:\n"+entry("orders", nats)+entry("invoices", nats))
	if err := env.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if all := env.Brokers.All(); len(all) != 1 || all[0] != natsBroker {
		t.Fatalf("after the reload: %v, want the same nats sink only", kinds())
	}
	closed := func(br sink.Broker) bool {
		err := br.Handle(context.Background(), watukuytype.Event{ID: "ev_x", Poller: "orders"})
		return err != nil && strings.Contains(err.Error(), "closed")
	}
	if !closed(pgBroker) {
		t.Error("the postgres sink no poller names is not closed")
	}
	if closed(natsBroker) {
		t.Error("the nats sink the pollers still name is closed")
	}
	if err := env.Close(); err != nil {
		t.Fatal(err)
	}
	if !closed(natsBroker) {
		t.Error("Close left the nats sink open")
	}
}
