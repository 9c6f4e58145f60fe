package app

import (
	"context"
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

	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/internal/tracing/otlptest"
)

// A process opened with an OTLP endpoint in its environment traces its cycles: a config
// poller's cycle reaches the OTLP receiver under the process's service name once FlushTraces
// ran (no wait: the flush exports), with its HTTP request's span, and its webhook sink sends
// the cycle's trace as traceparent.
func TestOpenTracesCyclesFromTheEnvironment(t *testing.T) {
	var mu sync.Mutex
	recv := &otlptest.Receiver{}
	otlp := httptest.NewServer(recv)
	defer otlp.Close()
	var parents []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		parents = append(parents, r.Header.Get("traceparent"))
		mu.Unlock()
	}))
	defer hook.Close()
	api := fakeapi.New()
	api.Put("a", map[string]any{"status": "open"})
	srv := fakeapi.NewServer(api, fakeapi.ServerOptions{})
	defer srv.Close()

	for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER"} {
		t.Setenv(k, "")
		_ = os.Unsetenv(k)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.URL)
	cfgPath := filepath.Join(t.TempDir(), "watukuy.yaml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(`pollers:
  - name: orders
    request: {url: %s/list}
    items: data
    cursor: {strategy: snapshotDiff, param: page, sizeParam: per_page, size: 10, hasMore: has_more}
    delivery: {webhook: {url: %q, secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}}
`, srv.URL, hook.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	env, err := Open(context.Background(), Settings{Redis: redistest.Miniredis(t).URL, Config: cfgPath, ConfigGiven: true, AllowEviction: true,
		Service: "watukuy-worker"}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer env.RDB.Close()
	if rep, err := env.Engine.Tick(context.Background(), 10*time.Second); err != nil || rep.Delivered != 1 {
		t.Fatalf("tick: %+v %v", rep, err)
	}
	env.FlushTraces()
	env.FlushTraces() // a second call does nothing
	mu.Lock()
	defer mu.Unlock()
	got := strings.Join(recv.Spans(), " ")
	for _, want := range []string{"watukuy-worker/watukuy.cycle", "watukuy-worker/GET", "watukuy-worker/handler"} {
		if !strings.Contains(got, want) {
			t.Errorf("exported spans %q lack %s", got, want)
		}
	}
	if len(parents) != 1 || !strings.HasPrefix(parents[0], "00-") {
		t.Errorf("the webhook's traceparent headers: %q", parents)
	}
}
