package health

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
)

// start runs s on a free loopback port until the test ends and returns its base URL.
func start(t *testing.T, s *Server) string {
	t.Helper()
	s.Listen = "127.0.0.1:0"
	s.Logger = zerolog.New(zerolog.NewTestWriter(t))
	ctx, cancel := context.WithCancel(context.Background())
	addr, err := s.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.Done():
		case <-time.After(10 * time.Second):
			t.Error("server did not stop")
		}
	})
	return "http://" + addr
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func TestHealthz(t *testing.T) {
	base := start(t, &Server{Ready: func(ctx context.Context) error { return errors.New("redis down") }})
	// Liveness does not depend on readiness.
	if code, body := get(t, base+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz = %d %q, want 200 ok", code, body)
	}
	resp, err := http.Post(base+"/healthz", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /healthz = %d, want 405", resp.StatusCode)
	}
}

func TestReadyz(t *testing.T) {
	var mu sync.Mutex // the handler runs on the server's goroutines
	var fail error
	var deadline time.Duration
	base := start(t, &Server{Ready: func(ctx context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if d, ok := ctx.Deadline(); ok {
			deadline = time.Until(d)
		}
		return fail
	}})
	if code, body := get(t, base+"/readyz"); code != 200 || body != "ok\n" {
		t.Errorf("/readyz = %d %q, want 200 ok", code, body)
	}
	mu.Lock()
	if deadline <= time.Second || deadline > 2*time.Second {
		t.Errorf("Ready deadline in %v, want about 2s", deadline)
	}
	fail = errors.New("redis: dial tcp 127.0.0.1:6379: connection refused")
	mu.Unlock()
	if code, body := get(t, base+"/readyz"); code != 503 || body != fail.Error()+"\n" {
		t.Errorf("/readyz = %d %q, want 503 with the error", code, body)
	}
}

func TestReadyzNilIsReady(t *testing.T) {
	base := start(t, &Server{})
	if code, _ := get(t, base+"/readyz"); code != 200 {
		t.Errorf("/readyz = %d, want 200", code)
	}
	// No Metrics and no UI: 404.
	for _, p := range []string{"/metrics", "/monitoring/", "/"} {
		if code, _ := get(t, base+p); code != 404 {
			t.Errorf("%s = %d, want 404", p, code)
		}
	}
}

// A Ready that ignores its context still answers 503 after the 2s timeout.
func TestReadyzHung(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	base := start(t, &Server{Ready: func(ctx context.Context) error { <-release; return nil }})
	begin := time.Now()
	code, body := get(t, base+"/readyz")
	if code != 503 || !strings.Contains(body, "deadline exceeded") {
		t.Errorf("/readyz = %d %q, want 503 deadline exceeded", code, body)
	}
	if d := time.Since(begin); d < readyTimeout || d > readyTimeout+3*time.Second {
		t.Errorf("/readyz took %v, want about %v", d, readyTimeout)
	}
}

func TestReadyzPanics(t *testing.T) {
	base := start(t, &Server{Ready: func(ctx context.Context) error { panic("boom") }})
	if code, body := get(t, base+"/readyz"); code != 503 || !strings.Contains(body, "boom") {
		t.Errorf("/readyz = %d %q, want 503 mentioning the panic", code, body)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "watukuy_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Add(3)
	base := start(t, &Server{Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})})
	code, body := get(t, base+"/metrics")
	if code != 200 || !strings.Contains(body, "watukuy_test_total 3") {
		t.Errorf("/metrics = %d %q, want 200 with watukuy_test_total 3", code, body)
	}
}

func TestUIMounted(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		paths = append(paths, r.Method+" "+r.URL.Path)
		io.WriteString(w, "asynqmon")
	})
	base := start(t, &Server{UI: ui})
	if code, body := get(t, base+"/monitoring/"); code != 200 || body != "asynqmon" {
		t.Errorf("/monitoring/ = %d %q, want 200 from the UI", code, body)
	}
	if code, _ := get(t, base+"/monitoring/api/queues"); code != 200 {
		t.Errorf("/monitoring/api/queues = %d, want 200", code)
	}
	// /monitoring redirects to /monitoring/ (http.Get follows it).
	if code, _ := get(t, base+"/monitoring"); code != 200 {
		t.Errorf("/monitoring = %d, want 200 after the redirect", code)
	}
	// The UI's actions are POSTs and DELETEs.
	resp, err := http.Post(base+"/monitoring/api/queues/default:pause", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	want := "GET /monitoring/ GET /monitoring/api/queues GET /monitoring/ POST /monitoring/api/queues/default:pause"
	if got := strings.Join(paths, " "); got != want {
		t.Errorf("UI saw %q, want %q (full paths, not stripped)", got, want)
	}
	if code, _ := get(t, base+"/monitoringx"); code != 404 {
		t.Errorf("/monitoringx = %d, want 404", code)
	}
}

func TestOff(t *testing.T) {
	s := &Server{Listen: "off", Logger: zerolog.Nop()}
	addr, err := s.Start(context.Background())
	if addr != "" || err != nil {
		t.Errorf("Start(off) = %q, %v; want \"\", nil", addr, err)
	}
	select {
	case <-s.Done():
	default:
		t.Error("Done is not closed for a disabled server")
	}
}

func TestListenErrors(t *testing.T) {
	if _, err := (&Server{Logger: zerolog.Nop()}).Start(context.Background()); err == nil {
		t.Error("empty Listen: no error")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := (&Server{Listen: ln.Addr().String(), Logger: zerolog.Nop()}).Start(context.Background()); err == nil {
		t.Error("address in use: no error")
	}
}

// Cancelling the context stops the server: the port is released and in-flight requests finish.
func TestGracefulShutdown(t *testing.T) {
	entered := make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		time.Sleep(300 * time.Millisecond)
		io.WriteString(w, "done")
	})
	s := &Server{Listen: "127.0.0.1:0", Metrics: slow, Logger: zerolog.New(zerolog.NewTestWriter(t))}
	ctx, cancel := context.WithCancel(context.Background())
	addr, err := s.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		code int
		body string
	}
	res := make(chan result, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			res <- result{body: err.Error()}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		res <- result{resp.StatusCode, string(b)}
	}()
	<-entered
	cancel()
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("server did not stop")
	}
	if r := <-res; r.code != 200 || r.body != "done" {
		t.Errorf("in-flight request = %d %q, want 200 done", r.code, r.body)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Error("the port still accepts connections after shutdown")
	}
}
